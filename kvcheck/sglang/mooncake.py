"""Mooncake's KV transfer decision (``--disaggregation-transfer-backend mooncake``, SGLang's
default), restated per release as pure functions over the two sides' geometry.

Unlike NIXL, Mooncake prepares nothing when the decode registers: the prefill's bootstrap
thread (``MooncakeKVManager.start_prefill_thread``) stores the decode's
``KVArgsRegisterInfo`` (``build_receiver_registration_message`` on the decode: KV region
pointers, ``dst_attn_tp_size``, ``dst_kv_item_len`` = region 0's item length, layer ids
where the pool publishes them, DCP size/rank) and decides only the DCP relayout
(``requires_dcp_relayout``). Every chunk is then written by a transfer worker thread
(``transfer_worker``), which picks a send path per decode peer:

- ``send_kvcache`` (MLA / hybrid MLA, or equal attention TP): ``_send_kvcache_generic``
  pairs regions by layer id where either side publishes ids (``build_transfer_entry_pairs``;
  0.5.17 .. 0.5.18 on the MLA path only, 0.5.19 on also MHA), else by ``get_mla_kv_ptrs_with_pp`` (MLA: the stage's
  span of the decode
  list, plus the draft tail from 0.5.20) or ``get_mha_kv_ptrs_with_pp`` (MHA: K then V
  halves; decode-only drafts; the stage's start layer), and writes ``item_len`` bytes per
  page at ``dst_ptr + dst_page * item_len`` with the PREFILL's item length: a decode
  region of another item length is written at the wrong offsets (silent corruption);
- ``send_kvcache_slice`` (MHA/GQA, unequal attention TP): per token slot, the decode
  rank's heads (``compute_head_slice_params``, ``disaggregation/common/staging_buffer.py``,
  0.5.10 on; decode-side GQA replication by integer division from 0.5.16);
- the staging path (``SGLANG_DISAGG_STAGING_BUFFER``) and ``send_kvcache_dcp``: not
  restated (``not_modeled``).

An exception in the worker kills that worker thread ("Transfer thread failed because of
... is dead."): the server stays up, and the requests queued to that worker never finish;
a send that returns -1 fails the request and marks the decode's session failed, so every
later request to that decode fails too (``failed_sessions``; only
``SGLANG_ENABLE_FAILED_SESSION_PROBE`` lifts it).

``simulate_writes`` restates the writes of one one-page request (prefill page 1 -> decode
page 2) in a virtual address space shared with the runtime kernel
(``kvcheck.sglang.mooncake_runtime``), and ``misplaced_write`` judges every write against
what the regions hold (layer, K/V part, pool, heads, token): the conformance tests
compare both the writes and the verdict with SGLang's own code.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pd_release import NEWEST, at_least
from kvcheck.sglang.plan import Plan, RuntimeErrorPrediction

# The virtual address space of ``simulate_writes`` (and of the runtime kernel's stubs).
SRC_BASE = 0x7F00_0000_0000
DST_BASE = 0x7E00_0000_0000
STRIDE = 1 << 32
NUM_SLOTS = 4
SRC_PAGE, DST_PAGE = 1, 2
ROOM = 7
DECODE_ENDPOINT = ("10.0.0.2", 17001)
SESSION = "10.0.0.2:15001"

# The oldest release whose Mooncake path is restated (the variants: 0.5.5 .. 0.5.6 slice
# every list from the stage's start layer; 0.5.7 adds the equal-length and decode-only-draft
# branches; 0.5.10 counts head slices from total_kv_head_num).
OLDEST = "0.5.5"

TRANSFER_WORKER = "prefill: Mooncake transfer worker thread (MooncakeKVManager.transfer_worker -> {fn})"
BOOTSTRAP_THREAD = "prefill: Mooncake bootstrap thread (MooncakeKVManager.start_prefill_thread, decode registration)"
WRITES = "prefill: Mooncake transfer worker thread (the RDMA/TCP writes of {fn})"
WORKER_DIES = (
    "the prefill logs 'Transfer thread failed because of ...' and that transfer worker thread exits; the server "
    "stays up, "
    "the requests queued to that worker (one of SGLANG_DISAGGREGATION_QUEUE_SIZE) are never sent, and the decode fails "
    "them after SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by default)"
)
REQUEST_FAILS = (
    "the request fails (KVPoll.Failed) with this reason on both sides, and the prefill marks the decode's Mooncake "
    "session "
    "failed: every later request to that decode fails with 'Decode instance could be dead, remote mooncake session "
    "<id> is "
    "not alive' (unless SGLANG_ENABLE_FAILED_SESSION_PROBE re-admits it), while both servers stay up"
)
BOOTSTRAP_DIES = (
    "the prefill's bootstrap thread dies with this traceback; no later registration or request reaches that prefill "
    "rank: "
    "requests stay in KVPoll.Bootstrapping and the decode times them out (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, "
    "300 s)"
)
CORRUPTS = (
    "nothing is logged: the transfer succeeds and the decode decodes from KV written at the wrong place "
    "(wrong layer, K/V half, heads or token offsets): output is garbage or degrades, with no error"
)


@dataclass(frozen=True)
class MooncakeBehaviour:
    """What a release's Mooncake path does; each field names the release that introduced it."""

    version: str
    modeled: bool
    layer_id_pairing: bool  # 0.5.17: build_transfer_entry_pairs over kv_layer_ids
    mla_draft_tail: bool  # 0.5.20: get_mla_kv_ptrs_with_pp appends the draft entries
    slice_layer_ids: bool  # 0.5.19: send_kvcache_slice pairs by layer id
    mha_layer_ids: bool  # 0.5.19: published ids take the flat (by-id) path on MHA too
    gqa_dst_replication: bool  # 0.5.16: decode ranks sharing a KV head map by integer division
    dcp: bool  # 0.5.17: requires_dcp_relayout / send_kvcache_dcp
    stride_check: bool  # 0.5.20: _state_stride_mismatch (state components)
    pp_branches: bool = True  # 0.5.7: equal-length fast paths, the K-layer range check, V item lengths
    draft_branch: bool = True  # 0.5.8: get_mha_kv_ptrs_with_pp's decode-only-draft branch
    total_heads: bool = True  # 0.5.10: head slices from total_kv_head_num (before: the pool's per-rank kv_head_num)


def behaviour(version: str | None) -> MooncakeBehaviour:
    v = version or NEWEST
    try:
        modeled = at_least(v, OLDEST) and at_least(NEWEST, v)
    except Exception:
        modeled = False

    def a(first: str) -> bool:
        return modeled and at_least(v, first)

    return MooncakeBehaviour(
        version=v,
        modeled=modeled,
        layer_id_pairing=a("0.5.17"),
        mla_draft_tail=a("0.5.20"),
        slice_layer_ids=a("0.5.19"),
        mha_layer_ids=a("0.5.19"),
        gqa_dst_replication=a("0.5.16"),
        dcp=a("0.5.17"),
        stride_check=a("0.5.20"),
        pp_branches=a("0.5.7"),
        draft_branch=a("0.5.8"),
        total_heads=a("0.5.10"),
    )


def publishes_layer_ids(g: SideGeometry, b: MooncakeBehaviour) -> bool:
    """``kv_args.kv_layer_ids`` non-empty: ``build_kv_layer_ids`` returns ids for a
    ``HybridLinearKVPool`` (and MiniMax M3's NVFP4 pool) only, from 0.5.17."""
    return b.layer_id_pairing and g.pool == "HYBRID_LINEAR"


def layer_ids(g: SideGeometry) -> list[int]:
    return [r.layer_id for r in g.regions]


# -- restated pairing helpers (index lists instead of pointer lists) --------------------


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


# -- the writes of one request ---------------------------------------------------------


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


# -- the decision ----------------------------------------------------------------------


def decide(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    decode_dcp_size: int = 1,
    prefill_dcp_size: int = 1,
    pp_rank: int = 0,
    total_kv_heads: int | None = None,
    release: str | None = None,
    bootstrap_port: int = 8998,
    staging: bool = False,
    unified_memory: bool = False,
    decode_hisparse: bool = False,
    writer=None,
) -> Plan:
    """The Mooncake prefill's handling of this decode (registration, then the transfer
    worker's send path and writes for a request), for prefill PP stage ``pp_rank``.

    Returns a ``Plan``: ``path`` (``equal_tp``, ``mla``, ``hetero_tp_slice``,
    ``nothing_to_transfer``, or ``not_modeled`` with ``not_modeled_reason``),
    ``dst_indices`` (the decode region each source region is written into), or ``error``:
    what the runtime raises or logs, where, and what the operator sees; writes that land
    in the wrong place are an error too (``type`` ``SilentCorruption``).

    ``writer``: what issues the writes of one request (``simulate_writes``' signature); by
    default this restatement, with ``--kernel runtime`` the release's own
    ``MooncakeKVManager.transfer_worker`` (``mooncake_runtime.runtime_writes``)."""
    b = behaviour(release)
    plan = Plan(path=None, n_src=prefill.n, n_dst=decode.n)
    if not b.modeled:
        return _not_modeled(
            plan, f"SGLang {b.version}'s Mooncake transfer is not restated (kvcheck restates {OLDEST} .. {NEWEST})"
        )
    # Registration: requires_dcp_relayout (0.5.17), in the bootstrap thread (uncaught).
    if prefill_dcp_size != decode_dcp_size:
        if not b.dcp:
            return _not_modeled(
                plan, f"decode DCP {decode_dcp_size}: SGLang {b.version}'s Mooncake registration carries no DCP size"
            )
        if prefill_dcp_size == 1 and decode_dcp_size > 1 and prefill.is_mla:
            return _not_modeled(plan, "the Mooncake DCP relayout (send_kvcache_dcp) is not restated")
        plan.error = RuntimeErrorPrediction(
            type="RuntimeError",
            message=f"Unsupported PD DCP topology: {prefill_dcp_size} -> {decode_dcp_size}",
            raised_by=BOOTSTRAP_THREAD,
            when="decode registration",
            operator_sees=BOOTSTRAP_DIES,
        )
        return plan
    if prefill_dcp_size > 1:
        return _not_modeled(
            plan, f"DCP {prefill_dcp_size} on both sides: which DCP rank sends which pages is not restated for Mooncake"
        )
    if prefill.n == 0:
        plan.path = "nothing_to_transfer"
        return plan
    flat = prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size
    if unified_memory:
        return _not_modeled(
            plan, "--enable-unified-memory's whole-envelope KV path (_validate_envelope_kv_layout) is not restated"
        )
    if decode_hisparse and flat:
        return _not_modeled(
            plan, "a HiSparse decode's host/device destination split (dst_device_kv_indices) is not restated"
        )
    if not flat and staging:
        return _not_modeled(
            plan,
            "SGLANG_DISAGG_STAGING_BUFFER sends unequal-TP KV through staging buffers (_do_staging_transfer), which "
            "kvcheck does not restate",
        )
    if not flat and not total_kv_heads:
        return _not_modeled(plan, "head-sliced transfer with an unknown KV head count")
    if prefill.pool == "MINIMAX_SPARSE":
        return _not_modeled(
            plan,
            "the MINIMAX_SPARSE pool's KV entries (published layer ids) are not restated for Mooncake",
        )
    if (prefill.pool == "DSV4") != (decode.pool == "DSV4"):
        return _not_modeled(plan, f"a {prefill.pool} prefill pool against a {decode.pool} decode pool")
    if prefill.pool == "DSV4" and (prefill.n != decode.n or prefill.pp_size != 1 or decode.pp_size != 1):
        # get_mla_kv_ptrs_with_pp (disaggregation/common/conn.py): equal entry counts take
        # the whole lists, i -> i; otherwise kv_args.mla_compression_ratios re-slice the
        # ratio groups per stage (_mla_slice_ptrs_for_pp), which is not restated.
        return _not_modeled(
            plan,
            f"DeepSeek V4's ratio-grouped KV entries re-sliced across {prefill.n} -> {decode.n} entries "
            "(_mla_slice_ptrs_for_pp) are not restated for Mooncake",
        )
    fn = "send_kvcache" if flat else "send_kvcache_slice"
    for src_rank, dst_rank in (
        rank_pairs(prefill.attn_tp_size, decode.attn_tp_size, total_kv_heads) if not flat else [(0, 0)]
    ):
        try:
            w = (writer or simulate_writes)(
                prefill,
                decode,
                pp_rank=pp_rank,
                total_kv_heads=total_kv_heads,
                src_rank=src_rank,
                dst_rank=dst_rank,
                b=b,
            )
        except SendFailed as exc:
            plan.error = RuntimeErrorPrediction(
                type="KVTransferError",
                message=f"Failed to send kv chunk of {ROOM} to {DECODE_ENDPOINT[0]}:{DECODE_ENDPOINT[1]}",
                raised_by=TRANSFER_WORKER.format(fn=fn) + f"; it logs: {exc}",
                when="first request",
                operator_sees=REQUEST_FAILS,
            )
            return plan
        except Exception as exc:
            text = (
                exc.message
                if isinstance(exc, WorkerDied)
                else f"Transfer thread failed because of {exc}. Prefill instance with "
                f"bootstrap_port={bootstrap_port} is dead."
            )
            plan.error = RuntimeErrorPrediction(
                type="RuntimeError",
                message=text,
                raised_by=TRANSFER_WORKER.format(fn=fn),
                when="first request",
                operator_sees=WORKER_DIES,
            )
            return plan
        bad = misplaced_write(prefill, decode, w, total_kv_heads=total_kv_heads, src_rank=src_rank, dst_rank=dst_rank)
        if bad is not None:
            plan.error = RuntimeErrorPrediction(
                type="SilentCorruption",
                message=bad,
                raised_by=WRITES.format(fn=fn),
                when="first request",
                operator_sees=CORRUPTS,
            )
            return plan
        if src_rank == 0 and dst_rank == 0 or not plan.dst_indices:
            plan.path = w.path
            plan.dst_indices = [j for _, j in w.pairs]
    return plan


def _not_modeled(plan: Plan, why: str) -> Plan:
    plan.path, plan.error, plan.dst_indices, plan.not_modeled_reason = "not_modeled", None, [], why
    return plan


# -- state components (maybe_send_extra) -----------------------------------------------


def decide_states(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    release: str | None = None,
    bootstrap_port: int = 8998,
    pp_rank: int = 0,
) -> tuple[RuntimeErrorPrediction | None, str | None]:
    """The state components' send (``MooncakeKVManager.maybe_send_extra``, last chunk, in
    the transfer worker) for prefill PP stage ``pp_rank``: ``(error, unchecked reason)``.

    Restated: the refusals 0.5.23 raises (a page-indexed state other than SWA across
    unequal attention TP on a non-MLA model; MiniMax state with PP > 1 or unequal TP),
    which kill the transfer worker; and the case whose outcome is certain in every
    release from 0.5.17: both sides register the same state buffers (type, layer, part,
    item length) at the same attention TP (or MLA) and PP layout, so every entry pairs
    with its twin at its own stride. Everything else (Mamba / SWA re-slicing across TP,
    PP stages against another layout, speculative drafts on one side) is unchecked."""
    if not prefill.state_types and not decode.state_types:
        return None, None
    b = behaviour(release)
    kinds = sorted(set(prefill.state_types) | set(decode.state_types))
    hetero = prefill.attn_tp_size != decode.attn_tp_size and not prefill.is_mla
    if b.version == NEWEST:
        for st in prefill.state_types:
            msg = None
            if st in ("dsa", "block_scale", "block_scale_swa") and hetero:
                msg = (
                    f"PD Disaggregation does NOT support PD different TP sizes for non-MLA {st.upper()} hybrid "
                    "models yet."
                )
            elif st in ("minimax_index_k", "minimax_dense_kv") and prefill.pp_size > 1:
                msg = "PD disagg: PP>1 not supported for MiniMax state yet."
            elif st in ("minimax_index_k", "minimax_dense_kv") and prefill.attn_tp_size != decode.attn_tp_size:
                msg = "PD disagg: heterogeneous TP not supported for MiniMax state yet."
            if msg:
                return RuntimeErrorPrediction(
                    type="RuntimeError",
                    message=f"Transfer thread failed because of {msg} Prefill instance with "
                    f"bootstrap_port={bootstrap_port} is dead.",
                    raised_by=TRANSFER_WORKER.format(fn="maybe_send_extra"),
                    when="first request",
                    operator_sees=WORKER_DIES,
                ), None
    if not at_least(b.version, "0.5.17"):
        return _decide_states_before_0517(prefill, decode, b.version, kinds, hetero, bootstrap_port)

    def sig(g: SideGeometry):
        return [(r.state_type, r.layer_id, r.part, r.item_len, r.component) for r in g.state_regions]

    same_layout = (
        prefill.pp_size == decode.pp_size and prefill.stage_layers == decode.stage_layers
    ) or prefill.pp_size == decode.pp_size == 1
    if prefill.state_types != decode.state_types:
        return (
            None,
            f"the two sides register different state components (prefill {prefill.state_types}, decode "
            f"{decode.state_types})",
        )
    if (prefill.attn_tp_size == decode.attn_tp_size or prefill.is_mla) and same_layout and sig(prefill) == sig(decode):
        return None, None
    return None, (
        f"Mooncake's state transfer ({', '.join(kinds)}: maybe_send_extra) between different state layouts "
        f"(attention TP {prefill.attn_tp_size} -> {decode.attn_tp_size}, PP {prefill.pp_size} -> {decode.pp_size}) "
        "is not restated"
    )


def _decide_states_before_0517(
    prefill: SideGeometry, decode: SideGeometry, version: str, kinds: list[str], hetero: bool, bootstrap_port: int
) -> tuple[RuntimeErrorPrediction | None, str | None]:
    """``maybe_send_extra`` of 0.5.5 .. 0.5.16 (and the worker's check around it).

    0.5.5 .. 0.5.8: on the last chunk of a hybrid pool, the transfer worker raises "PD
    Disaggregation does NOT support PD different TP sizes for non-MLA hybrid models yet."
    for a non-MLA pool across unequal attention TP (any state type). 0.5.9 .. 0.5.16: the
    same refusal moved into ``maybe_send_extra`` for SWA/NSA (0.5.13: DSA) states only, named
    by type ("... for non-MLA SWA hybrid models yet."); Mamba across TP is sliced
    (``_send_mamba_state_slice``, not restated). The send itself: one state type per pool
    up to 0.5.12 (``kv_args.state_type``), a list from 0.5.13; Mamba buffers go i -> i at
    the source item length (``_send_mamba_state``), SWA/NSA through ``_send_kvcache_generic``
    over the state buffer lists. Restated as certain only for twin layouts at PP 1 (the
    generic path slices state lists by the stage's start layer, not restated for PP > 1):
    every buffer pairs with its twin at its own stride."""

    def worker_dies(msg: str) -> RuntimeErrorPrediction:
        return RuntimeErrorPrediction(
            type="RuntimeError",
            message=f"Transfer thread failed because of {msg}. Prefill instance with bootstrap_port={bootstrap_port} "
            "is dead.",
            raised_by=TRANSFER_WORKER.format(
                fn="maybe_send_extra" if at_least(version, "0.5.9") else "transfer_worker"
            ),
            when="first request",
            operator_sees=WORKER_DIES,
        )

    types = list(prefill.state_types)
    if types != list(decode.state_types):
        return (
            None,
            f"the two sides register different state components (prefill {prefill.state_types}, decode "
            f"{decode.state_types})",
        )
    if len(types) > 1 and not at_least(version, "0.5.13"):
        return None, f"SGLang {version} sends one state type per pool; kvcheck's layout has {types}"
    handled = {"mamba", "swa", "dsa"}
    if any(t not in handled for t in types):
        return None, f"SGLang {version}'s Mooncake state transfer ({', '.join(kinds)}) is not restated"
    if hetero:
        if not at_least(version, "0.5.9"):
            return worker_dies(
                "PD Disaggregation does NOT support PD different TP sizes for non-MLA hybrid models yet."
            ), None
        for t in types:
            if t in ("swa", "dsa"):
                name = "DSA" if t == "dsa" and at_least(version, "0.5.13") else ("NSA" if t == "dsa" else "SWA")
                return worker_dies(
                    f"PD Disaggregation does NOT support PD different TP sizes for non-MLA {name} hybrid models yet."
                ), None
        return (
            None,
            f"Mooncake's Mamba state slicing across attention TP {prefill.attn_tp_size} -> {decode.attn_tp_size} "
            "(_send_mamba_state_slice) is not restated",
        )
    if prefill.pp_size != 1 or decode.pp_size != 1:
        return (
            None,
            f"SGLang {version}'s Mooncake state transfer ({', '.join(kinds)}) with PP {prefill.pp_size} -> "
            f"{decode.pp_size} is not restated",
        )
    sig = [(r.state_type, r.layer_id, r.part, r.item_len, r.component) for r in prefill.state_regions]
    if sig == [(r.state_type, r.layer_id, r.part, r.item_len, r.component) for r in decode.state_regions]:
        return None, None
    return (
        None,
        f"Mooncake's state transfer ({', '.join(kinds)}) between different state layouts on SGLang {version} is not "
        "restated",
    )
