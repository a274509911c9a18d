"""The writes ``transfer_worker`` issues for a one-page request (``simulate_writes``) and
the judgement of each write against what the decode's regions hold (``misplaced_write``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.mooncake.common import (
    DST_BASE,
    DST_PAGE,
    SESSION,
    SRC_BASE,
    SRC_PAGE,
    STRIDE,
    MooncakeBehaviour,
    layer_ids,
    publishes_layer_ids,
)
from kvcheck.sglang.mooncake.pairing import entry_pairs, head_slice_params, mha_halves, mla_span


class SendFailed(Exception):
    """A send path returned -1 (``message``: what it logged)."""


class WorkerDied(Exception):
    """The release's own transfer worker raised: ``message`` is the text it raised."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass
class Writes:
    """The outcome of one one-page request from prefill rank ``src_rank`` to decode rank ``dst_rank``."""

    path: str
    fn: str
    writes: list[tuple[int, int, int]] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)


def _src(i: int) -> int:
    return SRC_BASE + i * STRIDE


def _dst(j: int) -> int:
    return DST_BASE + j * STRIDE


def simulate_writes(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    pp_rank: int,
    total_kv_heads: int | None,
    src_rank: int,
    dst_rank: int,
    b: MooncakeBehaviour,
) -> Writes:
    """The writes ``transfer_worker`` issues for one request of one page (prefill page 1
    to decode page 2) on the send path it picks. Raises what the runtime raises inside
    the worker (``RuntimeError``/``IndexError``...), or ``SendFailed`` for a -1."""
    n_src, n_dst = prefill.n, decode.n
    start = prefill.stage_layers[pp_rank][0] if prefill.stage_layers else 0
    src_items, dst_all = prefill.item_lens, list(range(n_dst))
    ids = publishes_layer_ids(prefill, b) or publishes_layer_ids(decode, b)
    src_ids = layer_ids(prefill) if publishes_layer_ids(prefill, b) else []
    dst_ids = layer_ids(decode) if publishes_layer_ids(decode, b) else []
    flat = prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size
    if flat:
        out = Writes(
            path="equal_tp" if not prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size else "mla",
            fn="send_kvcache",
        )
        if prefill.is_mla or (ids and b.mha_layer_ids):
            if ids:
                pairs = entry_pairs(src_ids, dst_ids, n_src, n_dst, allow_positional_fallback=prefill.pp_size == 1)
                params = [(i, j, src_items[i]) for i, j in pairs if src_items[i] != 0]
            else:
                sliced = mla_span(n_src, dst_all, start, prefill.num_draft_regions if b.mla_draft_tail else 0, b)
                params = [(i, sliced[i], src_items[i]) for i in range(n_src)]
        else:
            k, v, layers = mha_halves(n_src, dst_all, start, b.pp_branches, b.draft_branch)
            if layers > len(k) and b.pp_branches:
                raise SendFailed(
                    "Prefill transfer kvcache error, layers_current_pp_stage is out of range: "
                    f"layers_current_pp_stage={layers}, len(dst_k_ptrs)={len(k)}"
                )
            # 0.5.5 .. 0.5.6 write V with the K item length of the same layer
            params = [(i, k[i], src_items[i]) for i in range(layers)] + [
                (layers + i, v[i], src_items[layers + i if b.pp_branches else i]) for i in range(layers)
            ]
        for i, j, item in params:
            out.pairs.append((i, j))
            out.writes.append((_src(i) + SRC_PAGE * item, _dst(j) + DST_PAGE * item, item))
        return out

    out = Writes(path="hetero_tp_slice", fn="send_kvcache_slice")
    if not total_kv_heads:
        raise ValueError("the model's KV head count is unknown")
    page = prefill.page_size
    src_item = src_items[0]
    dst_item = decode.regions[0].item_len if decode.regions else 0
    src_tp, dst_tp = prefill.attn_tp_size, decode.attn_tp_size
    hs, nh, hd, dst_heads = head_slice_params(src_tp, dst_tp, src_rank, dst_rank, total_kv_heads, b)
    bph = dst_item // page // dst_heads
    if b.slice_layer_ids and ids:
        if any(x != src_item for x in src_items):
            raise SendFailed(
                f"[{SESSION}] head-sliced transfer assumes one item length for every KV entry, got {set(src_items)}"
            )
        pairs = entry_pairs(src_ids, dst_ids, n_src, n_dst, allow_positional_fallback=prefill.pp_size == 1)
    else:
        k, v, layers = mha_halves(n_src, dst_all, start, b.pp_branches, b.draft_branch)
        pairs = [(i, k[i]) for i in range(layers)] + [(layers + i, v[i]) for i in range(layers)]
    nbytes = nh * bph
    if nbytes > dst_item // page:
        raise SendFailed(f"[{SESSION}] slice size ({nbytes}) exceeds target token slot size ({dst_item // page})")
    src_bpt, dst_bpt = src_item // page, dst_item // page
    for i, j in pairs:
        out.pairs.append((i, j))
        for t in range(page):
            out.writes.append(
                (
                    _src(i) + SRC_PAGE * src_item + t * src_bpt + hs * bph,
                    _dst(j) + DST_PAGE * dst_item + t * dst_bpt + hd * bph,
                    nbytes,
                )
            )
    return out


def _heads_of(rank: int, tp: int, total: int) -> list[int]:
    """The global KV heads rank ``rank`` of attention TP ``tp`` holds (replicated when
    the model has fewer KV heads than ranks)."""
    if total >= tp:
        per = total // tp
        return list(range(rank * per, (rank + 1) * per))
    return [rank // (tp // total)]


def _describe(g: SideGeometry, j: int) -> str:
    r = g.regions[j]
    return f"{g.role} region {j} (layer {r.layer_id} {r.part}{', draft' if r.pool == 'draft' else ''})"


def misplaced_write(
    prefill: SideGeometry, decode: SideGeometry, w: Writes, *, total_kv_heads: int | None, src_rank: int, dst_rank: int
) -> str | None:
    """The first write that lands anywhere but where the decode keeps the same bytes, as
    a sentence; None when every write is where it belongs. Judged from the regions'
    meaning (layer id, K/V part, pool), item lengths and head ownership, not from how
    the runtime computed the addresses."""
    page = prefill.page_size
    for s, d, n in w.writes:
        i, soff = divmod(s - SRC_BASE, STRIDE)
        j, doff = divmod(d - DST_BASE, STRIDE)
        if not (0 <= i < prefill.n) or not (0 <= j < decode.n):
            return f"a write addresses no registered region (source {i}, destination {j})"
        a, c = prefill.regions[i], decode.regions[j]
        if (a.layer_id, a.part, a.pool) != (c.layer_id, c.part, c.pool):
            return f"{_describe(prefill, i)} is written into {_describe(decode, j)}"
        si, di = a.item_len, c.item_len
        spage, sin = divmod(soff, si) if si else (0, 0)
        dpage, din = divmod(doff, di) if di else (0, 0)
        if w.path != "hetero_tp_slice":
            if (spage, sin, n) != (SRC_PAGE, 0, si) or (dpage, din) != (DST_PAGE, 0) or n != di:
                return (
                    f"{_describe(prefill, i)} (item length {si}) is written into {_describe(decode, j)} at stride "
                    f"{si}, "
                    f"but the decode's item length there is {di}: pages land at the wrong offsets"
                )
            continue
        if not total_kv_heads:
            return "head slices with an unknown KV head count"
        sh, dh = (
            _heads_of(src_rank, prefill.attn_tp_size, total_kv_heads),
            _heads_of(dst_rank, decode.attn_tp_size, total_kv_heads),
        )
        s_bph, d_bph = si // page // len(sh), di // page // len(dh)
        if s_bph != d_bph or s_bph * page * len(sh) != si or d_bph * page * len(dh) != di:
            return (
                f"{_describe(prefill, i)} and {_describe(decode, j)} hold heads of different sizes ({si} vs {di} "
                "bytes per page)"
            )
        ts, hs0 = divmod(sin, si // page)
        td, hd0 = divmod(din, di // page)
        if (spage, dpage, ts) != (SRC_PAGE, DST_PAGE, td) or hs0 % s_bph or hd0 % d_bph or n % s_bph:
            return (
                f"{_describe(prefill, i)}: a head slice is written at another token or a split head of "
                f"{_describe(decode, j)}"
            )
        k, ks, kd = n // s_bph, hs0 // s_bph, hd0 // d_bph
        if ks + k > len(sh) or kd + k > len(dh):
            return f"{_describe(prefill, i)}: a head slice runs past the token's heads into the next token"
        if sh[ks : ks + k] != dh[kd : kd + k]:
            return (
                f"{_describe(prefill, i)}: prefill rank {src_rank} sends KV heads {sh[ks : ks + k]} where decode "
                f"rank {dst_rank} "
                f"keeps heads {dh[kd : kd + k]}"
            )
    return None
