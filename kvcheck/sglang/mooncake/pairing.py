"""The prefill's pairing of its KV entries with the decode's, restated on index lists
(``build_transfer_entry_pairs``, ``get_mha_kv_ptrs_with_pp``, ``get_mla_kv_ptrs_with_pp``,
``compute_head_slice_params``, ``_resolve_rank_mapping``)."""

from __future__ import annotations

from collections import deque

from kvcheck.sglang.mooncake.common import MooncakeBehaviour


def entry_pairs(
    src_ids: list[int], dst_ids: list[int], n_src: int, n_dst: int, allow_positional_fallback: bool
) -> list[tuple[int, int]]:
    """``build_transfer_entry_pairs`` (``disaggregation/utils.py``, 0.5.17 .. 0.5.23)."""
    if n_src == 0:
        return []
    if bool(src_ids) != bool(dst_ids):
        if not allow_positional_fallback:
            raise RuntimeError("Layer metadata must be provided by both PD peers or neither")
        src_ids, dst_ids = [], []
    if src_ids:
        if len(src_ids) != n_src or len(dst_ids) != n_dst:
            raise RuntimeError(
                "Layer metadata length must match transfer entries: "
                f"src metadata={len(src_ids)} entries={n_src}, dst metadata={len(dst_ids)} entries={n_dst}"
            )
        pos: dict[int, deque] = {}
        for j, lid in enumerate(dst_ids):
            pos.setdefault(lid, deque()).append(j)
        out = []
        for i, lid in enumerate(src_ids):
            if not pos.get(lid):
                raise RuntimeError(f"Decode peer is missing a transfer entry for model layer {lid}")
            out.append((i, pos[lid].popleft()))
        return out
    if n_dst < n_src or (n_src != n_dst and not allow_positional_fallback):
        raise RuntimeError(
            f"PP-heterogeneous transfer requires layer ids on both peers; got src={n_src} dst={n_dst} entries"
        )
    return [(i, i) for i in range(n_src)]


def mha_halves(
    n_src: int, dst: list[int], start: int, branches: bool = True, draft: bool = True
) -> tuple[list[int], list[int], int]:
    """``CommonKVManager.get_mha_kv_ptrs_with_pp`` on index lists: (decode K regions,
    decode V regions, this stage's layer count). ``branches`` False: 0.5.5 .. 0.5.6, which
    always slice from the stage's start layer."""
    layers = n_src // 2
    end = start + layers
    dst_layers = len(dst) // 2
    if not branches:
        k, v = dst[start:end], dst[dst_layers + start : dst_layers + end]
    elif layers == dst_layers:
        k, v = dst[:dst_layers], dst[dst_layers:]
    elif draft and layers < dst_layers and dst_layers % layers != 0:
        off = layers * (dst_layers // layers)
        k, v = dst[start:end], dst[off + start : off + end]
    else:
        k, v = dst[start:end], dst[dst_layers + start : dst_layers + end]
    return k, v, layers


def mla_span(n_src: int, dst: list[int], start: int, num_draft: int, b: MooncakeBehaviour) -> list[int]:
    """``get_mla_kv_ptrs_with_pp`` without compression ratios: the whole list when the
    lengths agree, else the stage's span (and from 0.5.20 the draft tail)."""
    if n_src == len(dst) and b.pp_branches:
        return list(dst)
    if not b.mla_draft_tail:
        return dst[start : start + n_src]
    sliced = dst[start : start + n_src - num_draft]
    if num_draft:
        sliced += dst[-num_draft:]
    return sliced


def head_slice_params(
    src_tp: int, dst_tp: int, src_rank: int, dst_rank: int, total: int, b: MooncakeBehaviour
) -> tuple[int, int, int, int]:
    """``compute_head_slice_params`` (0.5.16 on; 0.5.10 .. 0.5.15: the decode's head start
    from its rank in the group, without replication; before 0.5.10: the pool's per-rank
    head count, ``kv_head_num * attn_tp // dst_attn_tp`` decode heads, no wrap-around):
    (src head start, heads to send, dst head start, decode heads per rank)."""
    local, dst_in_group = src_rank % src_tp, dst_rank % dst_tp
    if not b.total_heads:
        src_heads = max(1, total // src_tp)
        dst_heads = src_heads * src_tp // dst_tp
        if src_tp > dst_tp:
            return 0, src_heads, local * src_heads, dst_heads
        return (dst_in_group * dst_heads) % src_heads, dst_heads, 0, dst_heads
    src_heads, dst_heads = max(1, total // src_tp), max(1, total // dst_tp)
    if src_tp > dst_tp:
        unique = local // max(1, src_tp // total)
        return 0, src_heads, (unique * src_heads) % dst_heads, dst_heads
    unique = dst_in_group // max(1, dst_tp // total) if b.gqa_dst_replication else dst_in_group
    return (unique * dst_heads) % src_heads, dst_heads, 0, dst_heads


def rank_pairs(prefill_tp: int, decode_tp: int, total_kv_heads: int | None) -> list[tuple[int, int]]:
    """The (prefill attention-TP rank, decode rank) pairs that exchange KV: each decode
    rank reads the prefill rank(s) holding its heads (``_resolve_rank_mapping``); equal TP:
    rank to rank (rank 0 stands for all)."""
    if prefill_tp == decode_tp:
        return [(0, 0)]
    if prefill_tp > decode_tp:
        ratio = prefill_tp // max(1, decode_tp)
        return [(r, r // ratio) for r in range(prefill_tp)]
    ratio = decode_tp // max(1, prefill_tp)
    return [(d // ratio, d) for d in range(decode_tp)]
