"""The transfer plan: SGLang's own PD decisions, restated as pure functions, per release.

Release-dependent branches read a ``PDBehaviour`` (``kvcheck.sglang.pd_release``); each
names the release that introduced it. Unmodeled releases raise ``ValueError`` here and
the preflight reports ``unchecked``.

Two decision points, in the order the runtime reaches them:

1. ``bootstrap_checks`` / ``bootstrap_error``: the decode's first contact with the prefill bootstrap server
   (``CommonKVManager.try_ensure_parallel_info`` and ``_resolve_rank_mapping`` in
   ``disaggregation/common/conn.py``), raised in the decode's scheduler on the first request.
2. ``decide_transfer``: the prefill's handling of the decode's registration
   (``NixlKVManager._add_remote_peer`` -> ``_prepare_payload_xfer``,
   ``_build_transfer_dst_indices``, ``_prep_equal_tp_dlist`` and ``_kv_xfer_mem_segments``
   in ``disaggregation/nixl/conn.py``, plus ``build_transfer_entry_pairs`` in
   ``disaggregation/utils.py``), raised in the prefill's bootstrap thread.

Exception texts are ``str(exception)`` byte for byte; asserts whose message is a
one-element tuple keep the tuple's repr, as the runtime prints it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pd_release import at_least

When = Literal["start-up", "first request", "decode registration"]

PREFILL_BOOTSTRAP_THREAD = "prefill: NIXL bootstrap thread (NixlKVManager._prepare_payload_xfer)"
DECODE_SCHEDULER = "decode: scheduler, first contact with the prefill bootstrap server (CommonKVManager.try_ensure_parallel_info)"
HANG_300S = (
    "the prefill's bootstrap thread dies with this traceback in the prefill log; "
    "requests to that rank stay in KVPoll.Bootstrapping and time out after 300 s on the decode"
)
# nixl/conn.py: GUARD = b"NixlMsgGuard"; the bootstrap thread asserts it on every message.
GUARD_ASSERT = "First message should be b'NixlMsgGuard'. Foreign traffic?"
# DecodePreallocQueue.pop_preallocated -> _ensure_prefill_info -> try_ensure_parallel_info
# runs in the scheduler loop; nothing catches it, so the scheduler's exception handler
# logs "Scheduler hit an exception" and sends SIGQUIT to the server process.
DECODE_FIRST_REQUEST = (
    "the decode's scheduler raises this on the first request routed to that prefill; it is not caught: "
    "the decode logs 'Scheduler hit an exception' with this traceback and the decode server exits"
)
PREFILL_STARTUP = "prefill: NixlKVManager.__init__ (start-up)"
# 0.5.5 .. 0.5.9: the decode checks the prefill's v1 /route reply in CommonKVReceiver.__init__,
# which DecodePreallocQueue.add runs in the scheduler loop (nothing catches it).
DECODE_RECEIVER_V1 = "decode: scheduler, first contact with the prefill bootstrap server (CommonKVReceiver.__init__, v1 /route)"
# 0.5.5 .. 0.5.11: NixlKVSender.send -> add_transfer_request builds the request's descriptor
# lists in the prefill's scheduler (PrefillBootstrapQueue/send_kv_chunk; nothing catches it).
PREFILL_SEND = "prefill: scheduler, first KV chunk sent to this decode (NixlKVSender.send -> NixlKVManager.add_transfer_request -> {fn})"
PREFILL_SCHEDULER_DIES = (
    "the prefill's scheduler raises this on the first request routed to this decode; it is not caught: the prefill logs "
    "'Scheduler hit an exception' with this traceback and the prefill server exits; the decode's heartbeat then declares "
    "the prefill lost and fails the requests waiting on it"
)
# 0.5.12 .. 0.5.12.post1: add_transfer_request queues the chunk; transfer_worker builds the
# lists and catches every exception, failing the request.
PREFILL_WORKER = "prefill: NIXL transfer worker thread (NixlKVManager.transfer_worker -> {fn})"
PREFILL_REQUEST_FAILS = (
    "the prefill's transfer worker logs 'Unexpected transfer worker error for room <room>' with this traceback and marks the "
    "request failed; every request routed to this decode fails the same way while both servers stay up"
)
PREFILL_FAILS_TO_START = "the prefill fails to start with this traceback"


class RuntimeErrorPrediction(BaseModel):
    """An exception the runtime will raise: its class, ``str()`` text, the process and
    thread that raise it, when, and what the operator actually sees.

    ``order``: this error's place (1-based) among all the errors predicted for the pair,
    in the order the runtime reaches them (start-up, the decode's bootstrap checks, the
    prefill's registration decision, the first transfer); ``first``: the runtime stops
    at this one (set by the preflight)."""

    type: str
    message: str
    raised_by: str
    when: When
    operator_sees: str = ""
    order: int | None = None
    first: bool = False


class Segment(BaseModel):
    """A run of consecutive regions [start, end) with one (source kind, destination kind)
    pair: one prepared descriptor-list pair and one transfer in the runtime."""

    start: int
    end: int
    src_kind: str
    dst_kind: str

    def as_list(self) -> list:
        return [self.start, self.end, self.src_kind, self.dst_kind]


class Plan(BaseModel):
    """What the prefill prepares for this decode.

    ``path``: ``equal_tp`` (one prepared descriptor list per side, VRAM destination),
    ``direct_to_host`` (uniform DRAM destination), ``mixed_segments`` (one list pair per
    segment), ``hetero_tp_slice`` (head-slice transfer), ``dcp_relayout``, ``not_modeled``
    (an older release whose outcome for this pair kvcheck cannot state:
    ``not_modeled_reason``; reported ``unchecked``); ``None`` when
    the runtime raises instead (``error``). ``dst_indices[i]`` is the decode region that
    source region ``i`` writes into.
    """

    path: str | None
    n_src: int
    n_dst: int
    segments: list[Segment] = Field(default_factory=list)
    dst_indices: list[int] = Field(default_factory=list)
    error: RuntimeErrorPrediction | None = None
    kernel: str = "builtin"
    # 0.5.5 .. 0.5.12.post1 (per-request lists): bytes of source region i's first descriptor
    # for a one-page request (equal TP/MLA: the item length the runtime strides by; head
    # slices: the head bytes per token). Compared by the conformance runs; not serialised.
    write_lens: list[int] = Field(default_factory=list, exclude=True)
    # path "not_modeled": why kvcheck cannot state what the release does (not serialised).
    not_modeled_reason: str | None = Field(default=None, exclude=True)

    def contract(self) -> dict:
        return {
            "path": self.path,
            "n_src": self.n_src,
            "n_dst": self.n_dst,
            "segments": [s.as_list() for s in self.segments],
        }


class PairInfo(BaseModel):
    """The scalar facts each side exchanges besides regions: what ``/route`` reports for
    the prefill and what the decode compares it with (resolved values).

    ``kv_cache_dtype_str`` is ``model_runner.kv_cache_dtype_str`` (compared from 0.5.17),
    ``kv_cache_dtype_flag`` the ``--kv-cache-dtype`` string (compared up to 0.5.16);
    ``state_types``: the ``StateType`` values of the side's state components
    ("block_scale", "block_scale_swa", "minimax_index_k", ...); ``kv_layout``: the DSV4 KV
    layout string (None when the pool has none); ``dsv41_spec_layout``: DeepSeek-V4.1
    DSpark layout (None when DSpark is off); ``hisparse``: --enable-hisparse.
    """

    page_size: int
    kv_cache_dtype_str: str
    attn_tp_size: int
    attn_cp_size: int
    pp_size: int
    dcp_size: int = 1
    is_mla: bool = False
    is_hybrid_mla: bool = False
    enable_kv_cache_sharding: bool = False
    kv_cache_dtype_flag: str | None = None
    state_types: list[str] = Field(default_factory=list)
    kv_layout: str | None = None
    dsv41_spec_layout: dict | None = None
    hisparse: bool = False

    @property
    def flag_dtype(self) -> str:
        return self.kv_cache_dtype_flag if self.kv_cache_dtype_flag is not None else self.kv_cache_dtype_str


def _assert_text(message: str) -> str:
    """``str(AssertionError((message,)))``: the runtime's asserts carry a 1-tuple."""
    return str(AssertionError((message,)))


# Finding ids of the decode's bootstrap checks, in the runtime's order.
BOOTSTRAP_CHECK_IDS = (
    "page-size-mismatch", "kv-cache-dtype-mismatch", "minimax-attn-tp", "kv-layout-mismatch", "dsv41-layout-mismatch",
    "dsv41-attn-tp", "mxfp8-attn-tp", "decode-dcp", "kv-cache-sharding-tp", "decode-cp-size", "pp-size-mismatch",
)


def bootstrap_checks(prefill: PairInfo, decode: PairInfo, behaviour=None) -> list[tuple[str, RuntimeErrorPrediction]]:
    """Every check the decode's ``try_ensure_parallel_info`` (and ``_resolve_rank_mapping``)
    of the decode's release fails on this pair, each evaluated on its own, in the order the
    runtime runs them: ``[(finding id, prediction), ...]``. The runtime raises only the
    first; the others surface one by one as each is fixed.

    ``behaviour``: the decode's ``PDBehaviour`` (None: 0.5.23); each branch names the
    release that introduced it. Raises ``ValueError`` when that release's bootstrap checks
    are not modeled (the caller reports ``unchecked``).
    """
    from kvcheck.sglang.pd_release import behaviour as _behaviour

    b = behaviour or _behaviour(None)
    if not b.bootstrap_modeled:
        raise ValueError(f"the decode bootstrap checks of SGLang {b.version} are not modeled")
    out: list[tuple[str, RuntimeErrorPrediction]] = []
    raised_by = DECODE_RECEIVER_V1 if b.route == "v1" else DECODE_SCHEDULER

    def err(fid: str, type_: str, message: str) -> None:
        out.append((fid, RuntimeErrorPrediction(type=type_, message=message, raised_by=raised_by, when="first request", operator_sees=DECODE_FIRST_REQUEST)))

    if b.route == "v1":
        # 0.5.5 .. 0.5.9 (CommonKVReceiver.__init__ on the v1 /route reply): the page-size
        # check (0.5.8, with prefill_page_size in the reply), then the PP assert
        # (0.5.6.post1). No kv-cache-dtype, CP or DCP check exists before 0.5.10; what a
        # pair the missing checks let through then does: ``bootstrap_unchecked``.
        if at_least(b.bootstrap_variant, "0.5.8") and prefill.page_size != decode.page_size:
            err(
                "page-size-mismatch", "RuntimeError",
                f"Page size mismatch: prefill server has page_size={prefill.page_size}, "
                f"but decode server has page_size={decode.page_size}. "
                f"Both servers must use the same --page-size value.",
            )
        if at_least(b.bootstrap_variant, "0.5.6.post1") and not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
            err("pp-size-mismatch", "AssertionError",
                _assert_text(f"Decode pp size ({decode.pp_size}) should be equal to prefill pp size ({prefill.pp_size}) or 1"))
        return out

    # 0.5.10: page size (0.5.10 .. 0.5.12.post1: a HiSparse decode only logs it).
    if prefill.page_size != decode.page_size and not (b.hisparse_skips_page_size and decode.hisparse):
        err(
            "page-size-mismatch", "RuntimeError",
            f"Page size mismatch: prefill server has page_size={prefill.page_size}, "
            f"but decode server has page_size={decode.page_size}. "
            f"Both servers must use the same --page-size value.",
        )
    # 0.5.10: the --kv-cache-dtype strings; 0.5.17: the resolved kv_cache_dtype_str.
    resolved = at_least(b.bootstrap_variant, "0.5.17")
    p_dtype = prefill.kv_cache_dtype_str if resolved else prefill.flag_dtype
    d_dtype = decode.kv_cache_dtype_str if resolved else decode.flag_dtype
    if p_dtype != d_dtype:
        err(
            "kv-cache-dtype-mismatch", "RuntimeError",
            f"KV cache dtype mismatch: prefill server has kv_cache_dtype={p_dtype}, "
            f"but decode server has kv_cache_dtype={d_dtype}. "
            f"Both servers must use the same --kv-cache-dtype value.",
        )
    if b.newest_bootstrap:  # 0.5.23: MiniMax sparse TP, then the DSV4 KV layout
        if "minimax_index_k" in decode.state_types and prefill.attn_tp_size != decode.attn_tp_size:
            err("minimax-attn-tp", "RuntimeError",
                "MiniMax sparse PD requires matching attention TP sizes: "
                f"prefill={prefill.attn_tp_size}, decode={decode.attn_tp_size}.")
        if prefill.kv_layout is not None and decode.kv_layout is not None and prefill.kv_layout != decode.kv_layout:
            err("kv-layout-mismatch", "RuntimeError",
                f"KV layout mismatch: prefill server has kv_layout={prefill.kv_layout}, "
                f"but decode server has kv_layout={decode.kv_layout}. Both servers "
                f"must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT.")
    dsv41 = b.dsv41_checks  # 0.5.21
    if dsv41 and (decode.dsv41_spec_layout is not None or prefill.dsv41_spec_layout is not None):
        mine, theirs = decode.dsv41_spec_layout or {}, prefill.dsv41_spec_layout or {}
        if decode.dsv41_spec_layout != prefill.dsv41_spec_layout:
            fields = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            err("dsv41-layout-mismatch", "RuntimeError",
                "DeepSeek-V4.1 DSpark PD layout mismatch "
                f"({', '.join(fields)}): both servers must "
                "enable DSpark with the same block size and target/draft KV "
                "layout. Upgrade both servers together.")
        if dsv41 == "same_tp":
            if prefill.attn_tp_size != decode.attn_tp_size:
                err("dsv41-attn-tp", "RuntimeError", "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers")
        else:  # 0.5.22: a MLA decode whose TP equals the prefill's TP x CP is admitted
            aligns = (
                prefill.attn_cp_size > 1 and (decode.is_mla or decode.is_hybrid_mla) and decode.attn_cp_size == 1
                and prefill.attn_tp_size * prefill.attn_cp_size == decode.attn_tp_size
            )
            if prefill.attn_tp_size != decode.attn_tp_size and not aligns:
                err("dsv41-attn-tp", "RuntimeError",
                    "DeepSeek-V4.1 DSpark PD requires the same TP size on both "
                    "servers (including prefill CP ranks for MLA)")
    # 0.5.22: MXFP8 block scales cannot be resliced across attention TP sizes.
    if b.mxfp8_tp_check and prefill.attn_tp_size != decode.attn_tp_size and not decode.is_mla and not decode.is_hybrid_mla:
        scales = [st for st in decode.state_types if st in ("block_scale", "block_scale_swa")]
        if scales:
            err("mxfp8-attn-tp", "RuntimeError",
                "PD Disaggregation does NOT support different attention TP "
                "sizes with MXFP8 KV cache: prefill attn_tp_size="
                f"{prefill.attn_tp_size}, decode attn_tp_size={decode.attn_tp_size}, "
                f"state types {scales}.")
    # 0.5.17: decode DCP; 0.5.23: and a prefill with --enable-kv-cache-sharding.
    if b.decode_dcp_checks and decode.dcp_size > 1:
        if not (decode.is_mla or decode.is_hybrid_mla):
            err("decode-dcp", "RuntimeError", "PD decode DCP requires an MLA or hybrid-MLA KV pool.")
        elif prefill.attn_cp_size != 1:
            err("decode-dcp", "RuntimeError", f"PD decode DCP currently requires prefill attention CP=1, got {prefill.attn_cp_size}.")
        elif b.newest_bootstrap and prefill.enable_kv_cache_sharding:
            err("decode-dcp", "RuntimeError", "PD decode DCP does not support a prefill with --enable-kv-cache-sharding.")
    # _resolve_rank_mapping. 0.5.23: MLA KV sharding needs equal attention TP.
    if b.newest_bootstrap and decode.is_mla and prefill.enable_kv_cache_sharding and prefill.attn_cp_size == 1 and decode.attn_tp_size != prefill.attn_tp_size:
        err("kv-cache-sharding-tp", "AssertionError",
            "MLA KV cache sharding requires equal prefill/decode attn TP "
            f"sizes, got prefill={prefill.attn_tp_size} decode={decode.attn_tp_size}")
    # 0.5.10: decode attention CP must be 1; decode PP equal to the prefill's or 1.
    if decode.attn_cp_size != 1:
        err("decode-cp-size", "AssertionError", _assert_text(f"Decode cp size ({decode.attn_cp_size}) should be equal to 1"))
    if not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
        err("pp-size-mismatch", "AssertionError",
            _assert_text(f"Decode pp size ({decode.pp_size}) should be equal to prefill pp size ({prefill.pp_size}) or 1"))
    return out


def bootstrap_unchecked(prefill: PairInfo, decode: PairInfo, behaviour) -> list[str]:
    """What the decode of ``behaviour``'s release lets through unchecked and kvcheck does
    not model (each reported ``unchecked``): before 0.5.8 the v1 ``/route`` reply has no
    page size and the decode never compares it; before 0.5.6.post1 nothing checks the PP
    sizes (the receiver fetches every prefill PP rank's bootstrap info)."""
    b = behaviour
    out: list[str] = []
    if not b.bootstrap_modeled or b.route != "v1":
        return out
    if not at_least(b.bootstrap_variant, "0.5.8") and prefill.page_size != decode.page_size:
        out.append(
            f"the decode of SGLang {b.version} does not compare page sizes (the check came in 0.5.8) and they differ "
            f"(prefill {prefill.page_size}, decode {decode.page_size}): the page indices of the two sides disagree"
        )
    if not at_least(b.bootstrap_variant, "0.5.6.post1") and not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
        out.append(
            f"the decode of SGLang {b.version} does not check PP sizes (the assert came in 0.5.6.post1) and they differ "
            f"(prefill {prefill.pp_size}, decode {decode.pp_size})"
        )
    return out


def bootstrap_error(prefill: PairInfo, decode: PairInfo, behaviour=None) -> RuntimeErrorPrediction | None:
    """The exception the decode raises on the prefill's ``/route`` reply (the first of
    ``bootstrap_checks``, which is what the runtime hits), or None when it accepts it."""
    found = bootstrap_checks(prefill, decode, behaviour)
    return found[0][1] if found else None


def mem_segments(src_kinds: list[str], dst_kinds: list[str]) -> list[Segment]:
    """Maximal runs of equal (source kind, destination kind) pairs (``_kv_xfer_mem_segments``)."""
    if len(src_kinds) != len(dst_kinds):
        raise ValueError(f"KV source/destination memory kind length mismatch: src={len(src_kinds)}, dst={len(dst_kinds)}")
    segments: list[Segment] = []
    if not src_kinds:
        return segments
    start, cur = 0, (src_kinds[0], dst_kinds[0])
    for i, pair in enumerate(zip(src_kinds, dst_kinds)):
        if pair != cur:
            segments.append(Segment(start=start, end=i, src_kind=cur[0], dst_kind=cur[1]))
            start, cur = i, pair
    segments.append(Segment(start=start, end=len(src_kinds), src_kind=cur[0], dst_kind=cur[1]))
    return segments


def _item_stride_error(src_lens: list[int], dst_lens: list[int], kind: str) -> str | None:
    """``_prep_equal_tp_dlist``: a destination item shorter than the bytes written into it."""
    for xfer_len, item_len in zip(src_lens, dst_lens):
        if xfer_len > item_len:
            return f"NIXL prepared dlist transfer length exceeds item stride: xfer_len={xfer_len}, item_len={item_len}, mem_kind={kind}"
    return None


def _dst_indices(prefill: SideGeometry, decode: SideGeometry, pp_rank: int, pp_mla_offsets: bool = True) -> tuple[list[int] | None, str | None]:
    """``_build_transfer_dst_indices`` (0.5.21 on): (indices, RuntimeError text).
    ``pp_mla_offsets`` False: 0.5.17 .. 0.5.20, which call ``build_transfer_entry_pairs``
    directly (no layer span for a plain-MLA prefill PP stage)."""
    n_src, n_dst = prefill.n, decode.n
    use_pp_mla_offsets = pp_mla_offsets and prefill.pp_size > 1 and n_src != n_dst and prefill.is_mla
    if use_pp_mla_offsets:
        start = prefill.stage_layers[pp_rank][0]
        end = start + n_src
        if end <= n_dst:
            src_lens = prefill.item_lens
            dst_lens = [decode.regions[j].item_len for j in range(start, end)]
            if src_lens != dst_lens:
                return None, (
                    "PP-heterogeneous MLA transfer: decode KV cell geometry differs from "
                    f"prefill over layers [{start}, {end}): prefill item_lens="
                    f"{src_lens}, decode item_lens={dst_lens}"
                )
            return list(range(start, end)), None
    allow_positional = prefill.pp_size == 1 and not use_pp_mla_offsets
    if n_src == 0:
        return [], None
    if n_dst < n_src or (n_src != n_dst and not allow_positional):
        return None, f"PP-heterogeneous transfer requires layer ids on both peers; got src={n_src} dst={n_dst} entries"
    return list(range(n_src)), None


def _mha_slice_dst_indices(prefill: SideGeometry, n_dst: int, pp_rank: int) -> list[int]:
    """``get_mha_kv_ptrs_with_pp``: the decode regions the head slices of this prefill
    stage's K then V regions go to (``[K target, V target, K draft, V draft]`` on the
    decode; a draft pool whose layer count is a multiple of this stage's is mistaken
    for PP stages by the runtime, and kvcheck says what it does)."""
    start = prefill.stage_layers[pp_rank][0] if prefill.stage_layers else 0
    layers, dst_layers = prefill.n // 2, n_dst // 2
    end = start + layers
    dst = list(range(n_dst))
    if layers == dst_layers:
        k, v = dst[:dst_layers], dst[dst_layers:]
    elif layers < dst_layers and dst_layers % layers != 0:
        v_offset = layers * (dst_layers // layers)
        k, v = dst[start:end], dst[v_offset + start : v_offset + end]
    else:
        k, v = dst[start:end], dst[dst_layers + start : dst_layers + end]
    return k[:layers] + v[:layers]


def head_slice_error(prefill: SideGeometry, decode: SideGeometry, total_kv_heads: int) -> str | None:
    """The asserts of ``NixlKVManager._init_hetero_tp_prep_handle`` (0.5.22, 0.5.23) on
    rank 0 of each side, with ``compute_head_slice_params``
    (``disaggregation/common/staging_buffer.py``): the head slices (and, when the prefill
    TP is smaller, the head groups interleaved for the decode ranks) must tile the
    source item exactly. With KV heads replicated on both sides (``total_kv_heads`` below
    both TP sizes) the group count ``decode_tp // prefill_tp // replication`` can be 0.
    Returns ``str(AssertionError())`` (the asserts carry no message: ``""``) or None.
    """
    page = prefill.page_size
    p_tp, d_tp = prefill.attn_tp_size, decode.attn_tp_size
    if not prefill.regions or not decode.regions or page <= 0:
        return None
    dst_item = decode.regions[0].item_len  # frame 11: dst_kv_item_len = kv_item_lens[0]
    dst_heads = max(1, total_kv_heads // d_tp)
    bytes_per_head_slice = dst_item // page // dst_heads
    if p_tp > d_tp:
        heads_to_send, groups = max(1, total_kv_heads // p_tp), 1
    else:
        heads_to_send = dst_heads
        groups = d_tp // p_tp // max(1, d_tp // total_kv_heads)
    if page * groups * heads_to_send * bytes_per_head_slice != prefill.regions[0].item_len:
        return str(AssertionError())
    if page * (dst_item // page) != dst_item:
        return str(AssertionError())
    return None


def _src_dlist_overrun_0_5_13(prefill: SideGeometry, p_tp: int, d_tp: int, groups: int, bytes_per_token_to_send: int) -> RuntimeErrorPrediction | None:
    """The source descriptor list ``_init_hetero_tp_prep_handle`` prepares (0.5.13 ..
    0.5.16) when the prefill's attention TP is smaller than the decode's: for every
    region, slot and token it lists ``groups = decode_tp // prefill_tp`` head groups of
    ``bytes_per_token_to_send`` bytes each, back to back from the token's start, and
    prepares them with ``agent.prep_xfer_dlist("", src_array, ...)`` in the bootstrap
    thread. When the decode replicates KV heads (decode attention TP > the model's KV
    heads), each decode rank still counts as one group, so the groups of one token span
    more bytes than the token holds (``groups * bytes_per_token_to_send >
    item_len / page_size``): the last token of the last slot addresses past the end of
    the registered KV region and NIXL raises ``nixlNotFoundError: NIXL_ERR_NOT_FOUND``
    (logged by NIXL as ``prepXferDlist: failed to prepare the descriptors ... for agent
    ''``). 0.5.17 divides the group count by the replication factor
    (``dst_replication``) and the list fits. Returns the prediction, or None when the
    list stays inside every region (or the prefill TP is not the smaller).
    Source: sgl-project/sglang#31295 (Qwen3.5, prefill attention TP 1 -> decode TP 4).
    """
    page = prefill.page_size
    if p_tp >= d_tp or page <= 0 or not prefill.regions:
        return None
    item = prefill.regions[0].item_len
    if groups * bytes_per_token_to_send <= item // page:
        return None
    return RuntimeErrorPrediction(
        type="nixlNotFoundError", message="NIXL_ERR_NOT_FOUND",
        raised_by="prefill: NIXL bootstrap thread (NixlKVManager._init_hetero_tp_prep_handle -> prep_xfer_dlist)",
        when="decode registration", operator_sees=HANG_300S,
    )


def _decide_0_5_13(prefill: SideGeometry, decode: SideGeometry, plan: Plan, *, decode_dcp_size: int, total_kv_heads: int | None, release: str = "0.5.13") -> Plan:
    """The 0.5.13 .. 0.5.14 prefill decision (``NixlKVManager._add_remote_peer`` ->
    ``_prepare_payload_xfer``, ``_init_equal_tp_prep_handle`` and
    ``_init_hetero_tp_prep_handle`` of ``disaggregation/nixl/conn.py``, 0.5.13, unchanged
    in 0.5.14), restated for the pairs whose outcome kvcheck can state.

    What differs from 0.5.22/0.5.23 (each added later): no memory kinds or segments (every
    descriptor list is prepared as VRAM; kinds and ``_kv_xfer_mem_segments`` come in
    0.5.15), no region-count, item-stride or PP-offset guard (0.5.15 .. 0.5.22), no DCP
    relayout (0.5.17), and no head-slice asserts (0.5.22). The equal-TP/MLA lists zip the
    decode's pointers with the prefill's item lengths, so the decode regions are paired
    positionally and strided by the prefill's item length; the heterogeneous-TP lists
    interleave ``decode_tp // prefill_tp`` head groups (no replication divisor): with KV
    heads replicated on the decode that list runs past the registered KV region and
    ``prep_xfer_dlist`` raises ``NIXL_ERR_NOT_FOUND`` (``_src_dlist_overrun_0_5_13``).
    Nothing else raises at registration. A pair whose transfer then depends on code kvcheck has not
    restated for these releases (fewer decode regions than prefill regions, unequal item
    lengths, prefill PP > 1, host or mixed memory kinds, decode DCP, head slices that do
    not tile the source item, unknown KV head count) gets ``path="not_modeled"``: the
    preflight reports ``unchecked`` for it, never a pass.

    ``release="0.5.15"``: a conservative all-VRAM subset of 0.5.15 .. 0.5.16 plus their
    region-count guard (``ValueError`` 'decode registered fewer KV regions'), kept for
    callers; ``decide_transfer`` no longer uses it: it decides 0.5.15 .. 0.5.16 with its own
    release branches (memory kinds, mixed segments, item-stride guard included).
    """
    n_src, n_dst = plan.n_src, plan.n_dst

    def unmodeled(why: str) -> Plan:
        return _not_modeled(plan, why)

    if any(k != "VRAM" for k in prefill.kinds + decode.kinds):
        return unmodeled("host (DRAM) or mixed memory kinds: SGLang 0.5.13/0.5.14 prepare every list as VRAM")
    if decode_dcp_size != 1:
        return unmodeled("decode DCP: SGLang 0.5.13/0.5.14 have no DCP relayout")
    if prefill.pp_size > 1:
        return unmodeled("prefill PP > 1: the prepared lists pair regions positionally from decode layer 0")
    if n_src == 0:
        return unmodeled("no KV regions on the prefill")
    if n_dst < n_src:
        if release == "0.5.15":  # 0.5.15: _prepare_payload_xfer checks the region counts first
            plan.error = RuntimeErrorPrediction(
                type="ValueError", message=f"NIXL PD transfer: decode registered fewer KV regions ({n_dst}) than prefill ({n_src}); unexpected geometry",
                raised_by=PREFILL_BOOTSTRAP_THREAD, when="decode registration", operator_sees=HANG_300S)
            return plan
        return unmodeled("the decode registers fewer KV regions than the prefill (no guard at registration; fails or corrupts at transfer)")
    if prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size:
        if decode.item_lens[:n_src] != prefill.item_lens:
            return unmodeled("decode item lengths differ: the decode list is strided by the prefill's item lengths")
        plan.path = "equal_tp"
        plan.dst_indices = list(range(n_src))
        plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
        return plan
    if not total_kv_heads or n_dst != n_src or len(set(decode.item_lens)) != 1 or len(set(prefill.item_lens)) != 1:
        return unmodeled("heterogeneous-TP head slices whose geometry kvcheck cannot state")
    page, p_tp, d_tp = prefill.page_size, prefill.attn_tp_size, decode.attn_tp_size
    dst_item = decode.regions[0].item_len
    dst_heads = max(1, total_kv_heads // d_tp)
    per_head = dst_item // page // dst_heads if page > 0 else 0
    if p_tp > d_tp:
        heads_to_send, groups = max(1, total_kv_heads // p_tp), 1
    else:
        heads_to_send, groups = dst_heads, d_tp // p_tp
    overrun = _src_dlist_overrun_0_5_13(prefill, p_tp, d_tp, groups, heads_to_send * per_head)
    if overrun is not None:
        plan.error = overrun
        return plan
    if page <= 0 or page * groups * heads_to_send * per_head != prefill.regions[0].item_len or page * (dst_item // page) != dst_item:
        return unmodeled("heterogeneous-TP head slices that do not tile the source item (0.5.13/0.5.14 have no assert for it)")
    plan.path = "hetero_tp_slice"
    plan.dst_indices = _mha_slice_dst_indices(prefill, n_dst, 0)
    plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
    return plan


def _mha_pairs_per_request(variant: str, n_src: int, n_dst: int, start: int) -> tuple[list[int], list[int], int]:
    """``CommonKVManager.get_mha_kv_ptrs_with_pp`` of 0.5.5 .. 0.5.12.post1 on region
    indices: (decode regions of the K half, of the V half, layers of this stage).

    0.5.5: K from ``start_layer``, V from ``D + start_layer`` (D: half the decode's
    regions); 0.5.6.post1: equal halves pair whole; 0.5.8: a decode whose half is not a
    multiple of the stage's (a decode-only draft) takes V from ``L * (D // L) + start``."""
    layers, half = n_src // 2, n_dst // 2
    dst = list(range(n_dst))
    end = start + layers
    if variant != "0.5.5" and layers == half:
        return dst[:half], dst[half:], layers
    if at_least(variant, "0.5.8") and layers < half and half % layers != 0:
        off = layers * (half // layers)
        return dst[start:end], dst[off + start : off + end], layers
    return dst[start:end], dst[half + start : half + end], layers


def _index_error(variant: str, index: int, size: int) -> tuple[str, str]:
    """The IndexError of reading pointer ``index`` of a ``size``-long list (0.5.12 converts
    the pointer lists to numpy arrays, whose message differs)."""
    if at_least(variant, "0.5.12"):
        return "IndexError", f"index {index} is out of bounds for axis 0 with size {size}"
    return "IndexError", "list index out of range"


def _decide_per_request(
    prefill: SideGeometry, decode: SideGeometry, plan: Plan, *, variant: str, release: str, decode_dcp_size: int,
    pp_rank: int, total_kv_heads: int | None,
) -> Plan:
    """The prefill's transfer of SGLang 0.5.5 .. 0.5.12.post1, restated: nothing is checked
    or prepared when the decode registers (``_add_remote_peer`` only stores the peer); each
    request's descriptor lists are built by ``NixlKVManager.add_transfer_request`` (0.5.12:
    ``transfer_worker``) -> ``send_kvcache`` (MLA or equal attention TP) or
    ``send_kvcache_slice`` (MHA, unequal TP), pairing regions with
    ``CommonKVManager.get_mla_kv_ptrs_with_pp`` / ``get_mha_kv_ptrs_with_pp``
    (``disaggregation/nixl/conn.py`` and ``common/conn.py`` of each release).

    ``variant`` is the first release of the prefill's code variant
    (``pd_release.DECISION_VARIANTS``). What the branches restate, by release:

    - every list is VRAM on both sides (``get_xfer_descs(..., "VRAM")``): memory kinds come
      in 0.5.15; a host (DRAM) region on either side is ``not_modeled``;
    - MLA / equal TP: source region i is written into decode region ``dst[i]`` (MLA: the
      whole list when both sides register as many regions, 0.5.6.post1; else the slice
      from the stage's start layer; MHA: the K and V halves of ``get_mha_kv_ptrs_with_pp``),
      at offset page x item length, with the prefill's item length on both sides
      (0.5.5 .. 0.5.6: ``kv_item_lens[0]`` for every layer; 0.5.6.post1: layer i's, also
      for its V region). A decode region longer or shorter than that item is written at
      the wrong stride and nothing checks it (silent corruption, reported by
      ``item-length-larger``; a shorter one's last pages also run past the region); a
      source region strided by another region's item length is ``not_modeled``;
    - MHA unequal TP (``send_kvcache_slice``): per token, ``heads_to_send x
      bytes_per_head`` bytes from region i into decode region ``dst[i]``; up to 0.5.10 the
      decode's heads per rank are ``kv_head_num * prefill_tp // decode_tp``, 0 when the
      decode replicates KV heads -> ``ZeroDivisionError``; from 0.5.11
      ``max(1, total_kv_head_num // tp)`` each. Modeled (for every rank, not only rank 0)
      when one TP size divides the other, the heads split evenly over both and the
      slices tile both sides' tokens; else ``not_modeled``;
    - a pointer list shorter than the stage's layers raises ``IndexError`` when the list
      is read (0.5.12: numpy's text);
    - prefill PP > 1 is modeled from 0.5.7 (KV notifications carry the PP rank);
    - raised where: 0.5.5 .. 0.5.11 in the prefill's scheduler (the prefill server exits);
      0.5.12 .. 0.5.12.post1 in the transfer worker (the request fails). Always at the
      first request (``when="first request"``), never at registration.

    Pools other than plain MHA/MLA, state components, decode DCP, unknown KV head counts
    for unequal TP, and no source regions are ``not_modeled`` (``unchecked``).
    """
    n_src, n_dst = plan.n_src, plan.n_dst
    worker = at_least(variant, "0.5.12")

    def unmodeled(why: str) -> Plan:
        plan.path, plan.error, plan.segments, plan.dst_indices, plan.write_lens = "not_modeled", None, [], [], []
        plan.not_modeled_reason = f"{why} (SGLang {release} builds the transfer per request)"
        return plan

    def fail(type_: str, message: str, fn: str) -> Plan:
        plan.error = RuntimeErrorPrediction(
            type=type_, message=message, raised_by=(PREFILL_WORKER if worker else PREFILL_SEND).format(fn=fn), when="first request",
            operator_sees=PREFILL_REQUEST_FAILS if worker else PREFILL_SCHEDULER_DIES,
        )
        return plan

    if any(k != "VRAM" for k in prefill.kinds + decode.kinds):
        return unmodeled("host (DRAM) or mixed memory kinds: every descriptor list is VRAM before 0.5.15")
    # A DSA pool (NSATokenToKVPool) is an MLA pool for the KV regions: send_kvcache's MLA
    # branch; its index-K ("nsa" state) is decided by states.legacy_dsa_state_decisions.
    dsa = prefill.pool == decode.pool == "DSA" and prefill.is_mla and decode.is_mla
    if not dsa and (prefill.pool not in ("MHA", "MLA") or decode.pool not in ("MHA", "MLA") or prefill.is_mla != decode.is_mla):
        return unmodeled(f"a {prefill.pool} prefill pool with a {decode.pool} decode pool")
    dsa_states_only = dsa and set(prefill.state_types) <= {"dsa"} and set(decode.state_types) <= {"dsa"}
    if ((prefill.state_types or decode.state_types) and not dsa_states_only) or getattr(prefill, "kv_layout", None) or getattr(decode, "kv_layout", None):
        return unmodeled("state components or a DSV4 KV layout")
    if dsa and (why := _dsa_layout_gap(prefill, decode)):
        return unmodeled(why)
    if decode_dcp_size != 1:
        return unmodeled("decode DCP")
    if n_src == 0 or n_dst == 0:
        return unmodeled("no KV regions on one side")
    if prefill.pp_size > 1 and not at_least(variant, "0.5.7"):
        return unmodeled("prefill PP > 1 before 0.5.7 (KV notifications without the PP rank)")
    stages = prefill.stage_layers or [(0, n_src)]
    start = stages[min(pp_rank, len(stages) - 1)][0] if prefill.pp_size > 1 else stages[0][0]
    src_items = prefill.item_lens

    if prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size:
        fn = "send_kvcache"
        if prefill.is_mla:  # get_mla_kv_ptrs_with_pp
            dst = list(range(n_dst)) if variant != "0.5.5" and n_src == n_dst else list(range(n_dst))[start : start + n_src]
            if len(dst) < n_src:
                return fail(*_index_error(variant, len(dst), len(dst)), fn)
            pairs = [(i, dst[i], src_items[0] if variant == "0.5.5" else src_items[i]) for i in range(n_src)]
        else:
            if n_src % 2:
                return unmodeled("an odd number of MHA regions")
            k, v, layers = _mha_pairs_per_request(variant, n_src, n_dst, start)
            if len(k) < layers:
                return fail(*_index_error(variant, len(k), len(k)), fn)
            if len(v) < layers:
                return fail(*_index_error(variant, len(v), len(v)), fn)
            used = [src_items[0] if variant == "0.5.5" else src_items[i] for i in range(layers)]
            pairs = [(i, k[i], used[i]) for i in range(layers)] + [(layers + i, v[i], used[i]) for i in range(layers)]
        for i, j, item in pairs:
            if item != src_items[i]:
                return unmodeled(f"prefill region {i} ({src_items[i]} bytes per page) is strided by {item} bytes")
        plan.path = "equal_tp"
        plan.dst_indices = [j for _, j, _ in pairs]
        plan.write_lens = [item for _, _, item in pairs]
        plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
        return plan

    fn = "send_kvcache_slice"
    if not total_kv_heads:
        return unmodeled("heterogeneous-TP head slices of a model whose KV head count kvcheck does not know")
    if n_src % 2:
        return unmodeled("an odd number of MHA regions")
    p_tp, d_tp, page = prefill.attn_tp_size, decode.attn_tp_size, prefill.page_size
    src_item, dst_item = src_items[0], decode.item_lens[0]  # kv_item_lens[0]; frame 10/11: dst_kv_item_len
    if at_least(variant, "0.5.11"):  # total_kv_head_num (0.5.11), replication aware
        src_heads, dst_heads = max(1, total_kv_heads // p_tp), max(1, total_kv_heads // d_tp)
    else:  # kv_head_num = the prefill pool's heads per rank
        src_heads = max(1, total_kv_heads // p_tp)
        dst_heads = src_heads * p_tp // d_tp
        if dst_heads == 0:
            return fail("ZeroDivisionError", "integer division or modulo by zero", fn)
    if page <= 0:
        return unmodeled("page size 0")
    per_head = dst_item // page // dst_heads
    k, v, layers = _mha_pairs_per_request(variant, n_src, n_dst, start)
    if len(k) < layers:
        return fail(*_index_error(variant, len(k), len(k)), fn)
    if len(v) < layers:
        return fail(*_index_error(variant, len(v), len(v)), fn)
    tiles = (
        max(p_tp, d_tp) % min(p_tp, d_tp) == 0  # CommonKVReceiver maps decode ranks to prefill ranks by the TP ratio
        and total_kv_heads % p_tp == 0 and total_kv_heads % d_tp == 0
        and src_item % page == 0 and dst_item % page == 0
        and per_head * src_heads == src_item // page and per_head * dst_heads == dst_item // page
        and len(set(src_items)) == 1 and len(set(decode.item_lens)) == 1
    )
    if not tiles:
        return unmodeled("heterogeneous-TP head slices with replicated KV heads or slices that do not tile both sides' tokens")
    heads_to_send = src_heads if p_tp > d_tp else dst_heads
    plan.path = "hetero_tp_slice"
    plan.dst_indices = k[:layers] + v[:layers]
    plan.write_lens = [heads_to_send * per_head] * (2 * layers)
    plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
    return plan


def _dsa_layout_gap(prefill: SideGeometry, decode: SideGeometry) -> str | None:
    """Why kvcheck cannot tell whether two DSA pools' fp8 KV rows have one layout on a
    release before 0.5.13, or None. Each release resolves the rows from the GPU, the KV dtype,
    HiSparse and the DSA backend flags by its own rule (0.5.9 .. 0.5.12.post1
    ``ModelRunner.calculate_mla_kv_cache_dim``: raw 576-byte rows when either NSA backend of
    the server is trtllm, after ``ServerArgs._set_default_nsa_backends`` defaults them per
    GPU; 0.5.5 .. 0.5.8 ``NSATokenToKVPool``: always the scaled 656-byte rows for fp8), which
    kvcheck restates only for 0.5.23. Two sides with the same inputs on the same named GPU
    resolve the same rows (decided); bf16 rows have one layout; differing dtypes differ in
    bytes whatever the rule (the item-length checks decide them)."""
    if prefill.bytes_per_element != 1 or decode.bytes_per_element != 1:  # not fp8 on both (the resolved dtype)
        return None
    if prefill.gpu_assumed or decode.gpu_assumed or prefill.gpu != decode.gpu:
        return "fp8 DSA KV rows on GPUs kvcheck was not given (their layout follows the GPU, by each release's own rule)"
    if prefill.dsa_resolution != decode.dsa_resolution:
        return ("fp8 DSA KV rows whose sides set different DSA backends / HiSparse / KV dtype flags (the row layout "
                "follows them by each release's own rule, restated for 0.5.23 only)")
    return None


def _not_modeled(plan: Plan, why: str) -> Plan:
    """Mark ``plan`` as a pair whose outcome kvcheck cannot state (reported unchecked)."""
    plan.path = "not_modeled"
    plan.error = None
    plan.segments = []
    plan.dst_indices = []
    plan.not_modeled_reason = why
    return plan


def _layer_pairing_gap(prefill: SideGeometry, decode: SideGeometry, b) -> str | None:
    """Why kvcheck cannot state which decode region each prefill region goes to, or None.

    - A hybrid linear-attention pool (``HybridLinearKVPool``) registers a global layer id
      per KV region (``build_kv_layer_ids``: its full-attention layers, K then V), and from
      0.5.17 the prefill pairs regions by those ids (``build_transfer_entry_pairs``).
      kvcheck restates positional pairing only, which is the same where both sides list
      the same target layers in the same order (PP 1, or the same PP layout; a draft's ids
      sit in a band above the target's). A PP>1 prefill stage against a decode of another
      PP layout is paired by id: not restated.
    - A PP>1 prefill stage of a sliding-window or hybrid linear pool with unequal attention
      TP slices heads from ``_transfer_start_layer`` (0 for ``SWAKVPool``, a
      full-attention-relative count for ``HybridLinearKVPool``; ``disaggregation/prefill.py``,
      0.5.23), not from the stage's first model layer: not restated.
    """
    hybrid_ids = "HYBRID_LINEAR" in (prefill.pool, decode.pool)
    # At PP 1, or stage by stage at the same PP layout, both sides list the same target
    # layers in the same order (a decode-only draft's ids sit in a band above them): the
    # ids pair positionally.
    same_layers = prefill.pp_size == decode.pp_size and prefill.stage_layers == decode.stage_layers
    if hybrid_ids and b.layer_id_pairing and prefill.pp_size > 1 and not same_layers:
        return ("the hybrid linear-attention pool registers a layer id per KV region and SGLang "
                f"{b.version} pairs a PP>1 prefill stage with a decode of another PP layout by those ids "
                "(build_transfer_entry_pairs), which kvcheck does not restate")
    if prefill.pool in ("SWA", "HYBRID_LINEAR") and prefill.pp_size > 1 and not prefill.is_mla and prefill.attn_tp_size != decode.attn_tp_size:
        return (f"a PP>1 prefill stage of a {prefill.pool} pool with unequal attention TP slices heads from the pool's transfer "
                "start layer (_transfer_start_layer), which kvcheck does not restate")
    return None


def _older_release_gap(prefill: SideGeometry, decode: SideGeometry, b, *, decode_dcp_size: int, total_kv_heads: int | None) -> str | None:
    """Why ``decide_transfer`` cannot state what release ``b``'s prefill does with this
    pair, or None. Only releases before a behaviour was introduced have gaps:

    - 0.5.15 .. 0.5.16 (no ``dcp_relayout``): a decode DCP > 1 is not sent in their 19
      registration frames (the transfer then ignores it). (A prefill PP stage
      with fewer regions than the decode, paired with the decode's first regions, is a
      gap of the equal-TP branch of ``decide_transfer``.)
    """
    if not b.dcp_relayout:
        v = f"SGLang {b.version}"
        if decode_dcp_size != 1:
            return f"decode DCP {decode_dcp_size}: {v} does not read the decode's DCP size (its registration has no DCP frames) and has no DCP relayout"
    return None


def _unasserted_head_slice_gap(prefill: SideGeometry, decode: SideGeometry, b, total_kv_heads: int | None) -> str | None:
    """Releases before 0.5.22 prepare heterogeneous-TP head slices without asserting that
    they tile the items (``_init_hetero_tp_prep_handle``): kvcheck states the outcome only
    where the slices tile region 0 and every region has region 0's item length (the
    runtime strides every region by them). Head groups: ``decode_tp // prefill_tp``,
    divided by the decode's KV-head replication from 0.5.17. Returns why not, or None."""
    v = f"SGLang {b.version}"
    if not total_kv_heads:
        return f"heterogeneous-TP head slices with an unknown KV head count ({v} has no head-slice asserts)"
    if len(set(prefill.item_lens)) != 1 or len(set(decode.item_lens)) != 1:
        return f"heterogeneous-TP head slices over regions of unequal item lengths ({v} strides every region by region 0's)"
    page, p_tp, d_tp = prefill.page_size, prefill.attn_tp_size, decode.attn_tp_size
    if b.head_group_replication:
        fits = head_slice_error(prefill, decode, total_kv_heads) is None
    else:
        dst_item = decode.regions[0].item_len
        dst_heads = max(1, total_kv_heads // d_tp)
        per_head = dst_item // page // dst_heads if page > 0 else 0
        heads, groups = (max(1, total_kv_heads // p_tp), 1) if p_tp > d_tp else (dst_heads, d_tp // p_tp)
        fits = page > 0 and page * groups * heads * per_head == prefill.regions[0].item_len and page * (dst_item // page) == dst_item
    if not fits:
        return f"heterogeneous-TP head slices that do not tile the items ({v} has no assert for it; the transfer is prepared as is)"
    return None


def decide_transfer(
    prefill: SideGeometry, decode: SideGeometry, *, decode_dcp_size: int = 1, pp_rank: int = 0,
    total_kv_heads: int | None = None, behaviour=None,
) -> Plan:
    """The prefill's decision when the decode registers (``_add_remote_peer`` ->
    ``_prepare_payload_xfer``), 0.5.15 .. 0.5.23 as one restatement whose branches follow
    the prefill's release (``PDBehaviour`` features, each naming the release that
    introduced it): memory kinds, mixed segments and the region-count/item-stride guards
    (0.5.15), DCP relayout and layer-id pairing (0.5.17), per-entry DCP geometry (0.5.20),
    PP-MLA layer offsets (0.5.21), head-slice asserts (0.5.22). 0.5.13 .. 0.5.14 go to
    ``_decide_0_5_13``. Pairs whose outcome a release leaves unguarded get
    ``path="not_modeled"`` (reported unchecked): decode DCP on 0.5.15 .. 0.5.16
    (``_older_release_gap``), a prefill PP stage paired positionally with a longer decode
    list on 0.5.15 .. 0.5.16, and head slices that do not tile the items before 0.5.22
    (``_unasserted_head_slice_gap``). 0.5.5 .. 0.5.12.post1, which decide nothing at
    registration and build each request's lists: ``_decide_per_request``.

    ``prefill`` is the geometry of prefill PP stage ``pp_rank``; ``decode`` the geometry
    the decode registers with it; ``total_kv_heads``: the model's KV heads (MHA; enables
    the head-slice asserts); ``behaviour``: the prefill's ``PDBehaviour``. Returns a
    ``Plan``: a path with segments, or the exception the runtime raises in the prefill's
    bootstrap thread. Raises ``ValueError`` when the release's decision is not modeled.
    """
    if behaviour is not None and not behaviour.decision_modeled:
        raise ValueError(f"the prefill registration decision of SGLang {behaviour.version} is not modeled")
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst)
    if behaviour is not None and behaviour.per_request_decision:  # 0.5.5 .. 0.5.12.post1
        return _decide_per_request(prefill, decode, plan, variant=behaviour.decision_variant, release=behaviour.version,
                                   decode_dcp_size=decode_dcp_size, pp_rank=pp_rank, total_kv_heads=total_kv_heads)
    if behaviour is not None and behaviour.decision_variant == "0.5.13":
        return _decide_0_5_13(prefill, decode, plan, decode_dcp_size=decode_dcp_size, total_kv_heads=total_kv_heads, release=behaviour.decision_variant)
    from kvcheck.sglang.pd_release import behaviour as _behaviour

    b = behaviour or _behaviour(None)

    def fail(type_: str, message: str) -> Plan:
        plan.error = RuntimeErrorPrediction(type=type_, message=message, raised_by=PREFILL_BOOTSTRAP_THREAD, when="decode registration", operator_sees=HANG_300S)
        return plan

    src_kinds = prefill.kinds
    # NixlKVManager.__init__: a prefill's source kinds must be uniform (before any peer);
    # 0.5.15 .. 0.5.16 also refuse a prefill with no KV regions (_homogeneous_kv_mem_kind([])),
    # 0.5.17 skips the check for it.
    if len(set(src_kinds)) > 1 or (not src_kinds and not b.dcp_relayout):
        plan.error = RuntimeErrorPrediction(
            type="NotImplementedError",
            message=f"NIXL source mixed KV memory kinds are not implemented safely yet: {sorted(set(src_kinds))}",
            raised_by=PREFILL_STARTUP, when="start-up", operator_sees=PREFILL_FAILS_TO_START,
        )
        return plan
    gap = _older_release_gap(prefill, decode, b, decode_dcp_size=decode_dcp_size, total_kv_heads=total_kv_heads)
    if gap is not None:
        return _not_modeled(plan, gap)
    # _add_remote_peer -> requires_dcp_relayout (prefill DCP size 1), before the payload (0.5.17).
    if decode_dcp_size != 1 and not prefill.is_mla:
        return fail("RuntimeError", f"Unsupported PD DCP topology: 1 -> {decode_dcp_size}")
    # 0.5.15: the region-count guard.
    if n_dst < n_src:
        return fail("ValueError", f"NIXL PD transfer: decode registered fewer KV regions ({n_dst}) than prefill ({n_src}); unexpected geometry")
    if n_src == 0:  # 0.5.17: returns before the source-kind assert
        plan.path = "nothing_to_transfer"
        return plan
    gap = _layer_pairing_gap(prefill, decode, b)
    if gap is not None:
        return _not_modeled(plan, gap)
    src_kind = src_kinds[0]
    dst_kinds = decode.kinds
    dst_unique = sorted(set(dst_kinds))
    decode_only_spec = n_dst > n_src

    if decode_dcp_size > 1:
        # requires_dcp_relayout: the destination kinds of the paired regions must be uniform.
        paired = dst_kinds[:n_src]
        if len(set(paired)) != 1:
            return fail("NotImplementedError", f"NIXL PD DCP destination mixed KV memory kinds are not implemented safely yet: {sorted(set(paired))}")
        # prepare_dcp_token_item_lens: per-token bytes must match; from 0.5.20 entry by
        # entry, draft entries' decode pages holding page_size * dcp_size tokens.
        page, num_draft = prefill.page_size, prefill.num_draft_regions
        if not b.dcp_geometry_per_entry:  # 0.5.17 .. 0.5.19: the whole lists, pages unscaled
            src_tokens = [item // page for item in prefill.item_lens]
            dst_tokens = [decode.regions[i].item_len // page for i in range(n_src)]
            if src_tokens != dst_tokens:
                return fail("RuntimeError", f"PD DCP source/destination KV geometry differs: src={src_tokens}, dst={dst_tokens}")
        for i in range(n_src if b.dcp_geometry_per_entry else 0):
            src_token = prefill.regions[i].item_len // page
            dst_item = decode.regions[i].item_len
            scale = page * (decode_dcp_size if i >= n_src - num_draft else 1)
            if dst_item // scale != src_token:
                return fail(
                    "RuntimeError",
                    "PD DCP source/destination KV geometry differs at entry "
                    f"{i}: src token bytes={src_token}, "
                    f"dst token bytes={dst_item // scale} "
                    f"(dst item_len={dst_item}, page scale={scale})",
                )
        plan.path = "dcp_relayout"
        plan.dst_indices = list(range(n_src))
        plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=paired[0])]
        return plan

    equal = prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size
    if equal:
        if len(dst_unique) != 1:
            if decode_only_spec:
                return fail("NotImplementedError", "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding.")
            segments = mem_segments(src_kinds, dst_kinds)
            for seg in segments:
                msg = _item_stride_error(prefill.item_lens[seg.start:seg.end], decode.item_lens[seg.start:seg.end], seg.dst_kind)
                if msg:
                    return fail("ValueError", msg)
            plan.path = "mixed_segments"
            plan.segments = segments
            plan.dst_indices = list(range(n_src))
            return plan
        dst_kind = dst_unique[0]
        if decode_only_spec and dst_kind != "VRAM":
            return fail("NotImplementedError", "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding.")
        if b.layer_id_pairing:  # 0.5.17: build_transfer_entry_pairs (0.5.21: PP-MLA offsets)
            indices, error = _dst_indices(prefill, decode, pp_rank, pp_mla_offsets=b.pp_mla_offsets)
        else:  # 0.5.15 .. 0.5.16: the decode's first n_src regions, whatever the PP size
            if prefill.pp_size > 1 and n_dst != n_src:
                return _not_modeled(plan, f"prefill PP > 1: SGLang {b.version} pairs this stage's {n_src} regions with the decode's first {n_src} of {n_dst}")
            indices, error = list(range(n_src)), None
        if error:
            return fail("RuntimeError", error)
        msg = _item_stride_error(prefill.item_lens, [decode.regions[j].item_len for j in indices], dst_kind)
        if msg:
            return fail("ValueError", msg)
        plan.path = "direct_to_host" if dst_kind == "DRAM" else "equal_tp"
        plan.dst_indices = indices
        plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=dst_kind)]
        return plan

    if len(dst_unique) != 1:
        return fail("NotImplementedError", f"NIXL destination mixed KV memory kinds are not implemented safely yet: {dst_unique}")
    if dst_unique[0] != "VRAM":
        return fail("NotImplementedError", "NIXL heterogeneous-TP direct-to-host KV transfer is not implemented safely yet")
    if not b.head_slice_asserts:
        # 0.5.15 .. 0.5.16 (no replication divisor): a source list past the registered
        # region makes prep_xfer_dlist raise (sgl-project/sglang#31295).
        if not b.head_group_replication and total_kv_heads and prefill.page_size > 0 and prefill.regions and decode.regions:
            p_tp, d_tp = prefill.attn_tp_size, decode.attn_tp_size
            dst_heads = max(1, total_kv_heads // d_tp)
            per_head = decode.regions[0].item_len // prefill.page_size // dst_heads
            overrun = _src_dlist_overrun_0_5_13(prefill, p_tp, d_tp, d_tp // max(1, p_tp), dst_heads * per_head)
            if overrun is not None:
                plan.error = overrun
                return plan
        # 0.5.15 .. 0.5.21: no asserts; a misfit is prepared silently (not modeled).
        why = _unasserted_head_slice_gap(prefill, decode, b, total_kv_heads)
        if why is not None:
            return _not_modeled(plan, why)
    elif total_kv_heads:  # 0.5.22
        msg = head_slice_error(prefill, decode, total_kv_heads)
        if msg is not None:
            return fail("AssertionError", msg)
    plan.path = "hetero_tp_slice"
    plan.dst_indices = _mha_slice_dst_indices(prefill, n_dst, pp_rank)
    plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind="VRAM")]
    return plan
