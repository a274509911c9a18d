"""What the decision kernels return: where a runtime error is raised and what the operator
sees (the runtime's own locations and texts), the transfer ``Plan`` and its ``Segment``s,
and ``PairInfo``, the scalars the bootstrap server reports or the decode compares.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

When = Literal["start-up", "first request", "decode registration"]

PREFILL_BOOTSTRAP_THREAD = "prefill: NIXL bootstrap thread (NixlKVManager._prepare_payload_xfer)"
DECODE_SCHEDULER = (
    "decode: scheduler, first contact with the prefill bootstrap server (CommonKVManager.try_ensure_parallel_info)"
)
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
DECODE_RECEIVER_V1 = (
    "decode: scheduler, first contact with the prefill bootstrap server (CommonKVReceiver.__init__, v1 /route)"
)
# 0.5.5 .. 0.5.11: NixlKVSender.send -> add_transfer_request builds the request's descriptor
# lists in the prefill's scheduler (PrefillBootstrapQueue/send_kv_chunk; nothing catches it).
PREFILL_SEND = (
    "prefill: scheduler, first KV chunk sent to this decode (NixlKVSender.send -> "
    "NixlKVManager.add_transfer_request -> {fn})"
)
PREFILL_SCHEDULER_DIES = (
    "the prefill's scheduler raises this on the first request routed to this decode; it is not caught: the prefill "
    "logs "
    "'Scheduler hit an exception' with this traceback and the prefill server exits; the decode's heartbeat then "
    "declares "
    "the prefill lost and fails the requests waiting on it"
)
# 0.5.12 .. 0.5.12.post1: add_transfer_request queues the chunk; transfer_worker builds the
# lists and catches every exception, failing the request.
PREFILL_WORKER = "prefill: NIXL transfer worker thread (NixlKVManager.transfer_worker -> {fn})"
PREFILL_REQUEST_FAILS = (
    "the prefill's transfer worker logs 'Unexpected transfer worker error for room <room>' with this traceback and "
    "marks the "
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
