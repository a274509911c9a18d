"""Seeded generators of prefill/decode KV geometries for the conformance runs.

``transfer_pair(rng)`` returns (prefill stage geometry, decode geometry, decode DCP size,
prefill PP rank, total KV heads or None): MLA and MHA pools, equal and unequal attention
TP (MHA item lengths follow the KV heads each rank holds, replicated when the model has
fewer KV heads than ranks), PP stages, prefill-only / decode-only / shared drafts,
VRAM / DRAM / HiSparse / mixed destination kinds, shorter and longer destination items.
Expected values come from the runtime (``runtime_kernel``), never from here.
"""

from __future__ import annotations

import random

from kvcheck.sglang.geometry import Region, SideGeometry


def side(role, *, is_mla, tp, pp, stages, page, kinds, items, n_draft=0):
    rpl = 1 if is_mla else 2
    n = len(kinds)
    regions = [
        Region(index=i, kind=k, item_len=l, layer_id=i if is_mla else i % max(1, (n - n_draft) // 2),
               part="KV" if is_mla else ("K" if i < n // 2 else "V"), pool="draft" if i >= n - n_draft else "target")
        for i, (k, l) in enumerate(zip(kinds, items))
    ]
    return SideGeometry(
        role=role, pool="MLA" if is_mla else "MHA", is_mla=is_mla, attn_tp_size=tp, pp_size=pp, page_size=page,
        page_size_pinned=True, kv_cache_dtype="auto", bytes_per_element=2, regions=regions, num_draft_regions=n_draft,
        stage_layers=stages,
    )


def _kinds(rng, n, mode, n_draft):
    if mode == "vram":
        return ["VRAM"] * n
    if mode == "dram":
        return ["DRAM"] * n
    if mode == "hisparse":
        return ["DRAM"] * (n - n_draft) + ["VRAM"] * n_draft
    return [rng.choice(["VRAM", "DRAM"]) for _ in range(n)]


def transfer_pair(rng: random.Random, vram_only: bool = False, dcp: bool = True):
    """One seeded pair (see the module docstring). ``vram_only``: every region VRAM and
    decode DCP 1 (the releases before memory kinds and DCP, 0.5.13 .. 0.5.14); ``dcp``
    False: decode DCP 1 (the releases before DCP relayout, 0.5.15 .. 0.5.16)."""
    is_mla = rng.random() < 0.5
    rpl = 1 if is_mla else 2
    page = rng.choice([1, 16, 64])
    p_tp = rng.choice([1, 2, 4, 8])
    d_tp = p_tp if rng.random() < 0.5 else rng.choice([1, 2, 4, 8, 16])
    p_pp = rng.choice([1, 1, 2, 3])
    layers = rng.choice([1, 2, 3, 4, 5, 0])
    pp_rank = rng.randrange(p_pp)
    stages = [(r * layers, (r + 1) * layers) for r in range(p_pp)]
    heads = None
    if is_mla:
        p_token = d_token = rng.choice([576, 656, 1152])
    else:
        heads = rng.choice([1, 2, 4, 8])
        head_bytes = rng.choice([128, 256])
        p_token = max(1, heads // p_tp) * head_bytes
        d_token = max(1, heads // d_tp) * head_bytes
    p_draft = rpl * rng.choice([0, 0, 1]) if layers else 0
    n_src = layers * rpl + p_draft
    d_layers = rng.choice([layers, layers, layers * p_pp, max(0, layers - 1)])
    d_draft = rng.choice([p_draft, p_draft, 0, rpl, 2 * rpl])
    n_dst = d_layers * rpl + d_draft
    p_items = [page * p_token] * n_src
    d_items = [page * d_token] * n_dst
    if n_dst and rng.random() < 0.3:
        j = rng.randrange(n_dst)
        d_items[j] = rng.choice([d_items[j] // 2 or 1, d_items[j] * 2, d_items[j] * 4])
    p_mode = "vram" if vram_only else rng.choice(["vram"] * 10 + ["dram", "mixed"])
    d_mode = "vram" if vram_only else rng.choice(["vram", "vram", "dram", "hisparse", "mixed"])
    prefill = side("prefill", is_mla=is_mla, tp=p_tp, pp=p_pp, stages=stages, page=page,
                   kinds=_kinds(rng, n_src, p_mode, p_draft), items=p_items, n_draft=p_draft)
    d_pp = 1 if d_layers != layers else p_pp
    decode = side("decode", is_mla=is_mla, tp=d_tp, pp=d_pp, stages=[(0, d_layers)], page=page,
                  kinds=_kinds(rng, n_dst, d_mode, d_draft), items=d_items, n_draft=d_draft)
    dcp = 1 if vram_only or not dcp else rng.choice([1] * 6 + [2, 4])
    return prefill, decode, dcp, pp_rank, heads
