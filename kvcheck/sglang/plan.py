"""The transfer plan: SGLang 0.5.23's own decisions, restated as pure functions.

Two decision points, in the order the runtime reaches them:

1. ``bootstrap_error``: the decode's first contact with the prefill bootstrap server
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
PREFILL_FAILS_TO_START = "the prefill fails to start with this traceback"


class RuntimeErrorPrediction(BaseModel):
    """An exception the runtime will raise: its class, ``str()`` text, the process and
    thread that raise it, when, and what the operator actually sees."""

    type: str
    message: str
    raised_by: str
    when: When
    operator_sees: str = ""


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
    segment), ``hetero_tp_slice`` (head-slice transfer), ``dcp_relayout``; ``None`` when
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

    def contract(self) -> dict:
        return {
            "path": self.path,
            "n_src": self.n_src,
            "n_dst": self.n_dst,
            "segments": [s.as_list() for s in self.segments],
        }


class PairInfo(BaseModel):
    """The scalar facts each side exchanges besides regions: what ``/route`` reports for
    the prefill and what the decode compares it with (resolved values)."""

    page_size: int
    kv_cache_dtype_str: str
    attn_tp_size: int
    attn_cp_size: int
    pp_size: int
    dcp_size: int = 1
    is_mla: bool = False
    enable_kv_cache_sharding: bool = False


def _assert_text(message: str) -> str:
    """``str(AssertionError((message,)))``: the runtime's asserts carry a 1-tuple."""
    return str(AssertionError((message,)))


def bootstrap_error(prefill: PairInfo, decode: PairInfo) -> RuntimeErrorPrediction | None:
    """The decode's checks on the prefill's ``/route`` reply, in the runtime's order."""

    def err(type_: str, message: str) -> RuntimeErrorPrediction:
        return RuntimeErrorPrediction(type=type_, message=message, raised_by=DECODE_SCHEDULER, when="first request", operator_sees=DECODE_FIRST_REQUEST)

    if prefill.page_size != decode.page_size:
        return err(
            "RuntimeError",
            f"Page size mismatch: prefill server has page_size={prefill.page_size}, "
            f"but decode server has page_size={decode.page_size}. "
            f"Both servers must use the same --page-size value.",
        )
    if prefill.kv_cache_dtype_str != decode.kv_cache_dtype_str:
        return err(
            "RuntimeError",
            f"KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill.kv_cache_dtype_str}, "
            f"but decode server has kv_cache_dtype={decode.kv_cache_dtype_str}. "
            f"Both servers must use the same --kv-cache-dtype value.",
        )
    if decode.dcp_size > 1:
        if not decode.is_mla:
            return err("RuntimeError", "PD decode DCP requires an MLA or hybrid-MLA KV pool.")
        if prefill.attn_cp_size != 1:
            return err("RuntimeError", f"PD decode DCP currently requires prefill attention CP=1, got {prefill.attn_cp_size}.")
        if prefill.enable_kv_cache_sharding:
            return err("RuntimeError", "PD decode DCP does not support a prefill with --enable-kv-cache-sharding.")
    # _resolve_rank_mapping
    if decode.is_mla and prefill.enable_kv_cache_sharding and prefill.attn_cp_size == 1 and decode.attn_tp_size != prefill.attn_tp_size:
        return err(
            "AssertionError",
            "MLA KV cache sharding requires equal prefill/decode attn TP "
            f"sizes, got prefill={prefill.attn_tp_size} decode={decode.attn_tp_size}",
        )
    if decode.attn_cp_size != 1:
        return err("AssertionError", _assert_text(f"Decode cp size ({decode.attn_cp_size}) should be equal to 1"))
    if not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
        return err(
            "AssertionError",
            _assert_text(f"Decode pp size ({decode.pp_size}) should be equal to prefill pp size ({prefill.pp_size}) or 1"),
        )
    return None


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


def _dst_indices(prefill: SideGeometry, decode: SideGeometry, pp_rank: int) -> tuple[list[int] | None, str | None]:
    """``_build_transfer_dst_indices``: (indices, RuntimeError text)."""
    n_src, n_dst = prefill.n, decode.n
    use_pp_mla_offsets = prefill.pp_size > 1 and n_src != n_dst and prefill.is_mla
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


def decide_transfer(prefill: SideGeometry, decode: SideGeometry, *, decode_dcp_size: int = 1, pp_rank: int = 0) -> Plan:
    """The prefill's decision when the decode registers (``_prepare_payload_xfer``, 0.5.23).

    ``prefill`` is the geometry of prefill PP stage ``pp_rank``; ``decode`` the geometry
    the decode registers with it. Returns a ``Plan``: a path with segments, or the
    exception the runtime raises in the prefill's bootstrap thread.
    """
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst)

    def fail(type_: str, message: str) -> Plan:
        plan.error = RuntimeErrorPrediction(type=type_, message=message, raised_by=PREFILL_BOOTSTRAP_THREAD, when="decode registration", operator_sees=HANG_300S)
        return plan

    src_kinds = prefill.kinds
    # NixlKVManager.__init__: a prefill's source kinds must be uniform (before any peer).
    if len(set(src_kinds)) > 1:
        plan.error = RuntimeErrorPrediction(
            type="NotImplementedError",
            message=f"NIXL source mixed KV memory kinds are not implemented safely yet: {sorted(set(src_kinds))}",
            raised_by=PREFILL_STARTUP, when="start-up", operator_sees=PREFILL_FAILS_TO_START,
        )
        return plan
    # _add_remote_peer -> requires_dcp_relayout (prefill DCP size 1), before the payload.
    if decode_dcp_size != 1 and not prefill.is_mla:
        return fail("RuntimeError", f"Unsupported PD DCP topology: 1 -> {decode_dcp_size}")
    if n_dst < n_src:
        return fail("ValueError", f"NIXL PD transfer: decode registered fewer KV regions ({n_dst}) than prefill ({n_src}); unexpected geometry")
    if n_src == 0:
        plan.path = "nothing_to_transfer"
        return plan
    src_kind = src_kinds[0]
    dst_kinds = decode.kinds
    dst_unique = sorted(set(dst_kinds))
    decode_only_spec = n_dst > n_src

    if decode_dcp_size > 1:
        # requires_dcp_relayout: the destination kinds of the paired regions must be uniform.
        paired = dst_kinds[:n_src]
        if len(set(paired)) != 1:
            return fail("NotImplementedError", f"NIXL PD DCP destination mixed KV memory kinds are not implemented safely yet: {sorted(set(paired))}")
        # prepare_dcp_token_item_lens: per-token bytes must match; draft entries' decode
        # pages hold page_size * dcp_size tokens.
        page, num_draft = prefill.page_size, prefill.num_draft_regions
        for i in range(n_src):
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
        indices, error = _dst_indices(prefill, decode, pp_rank)
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
    plan.path = "hetero_tp_slice"
    plan.dst_indices = _mha_slice_dst_indices(prefill, n_dst, pp_rank)
    plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind="VRAM")]
    return plan
