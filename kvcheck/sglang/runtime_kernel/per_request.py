"""Per-request transfer (0.5.5 .. 0.5.12.post1): one request through
``add_transfer_request`` (or one chunk through the release's ``transfer_worker``), its
``send_kvcache`` / ``send_kvcache_slice`` descriptor lists recorded and read back.
"""

from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan import (
    PREFILL_REQUEST_FAILS,
    PREFILL_SCHEDULER_DIES,
    PREFILL_SEND,
    PREFILL_WORKER,
    Plan,
    Segment,
)
from kvcheck.sglang.runtime_kernel.driver import (
    _PEER_NAME,
    _PTR_BASE_DST,
    _PTR_BASE_SRC,
    _PTR_STRIDE,
    NUM_SLOTS,
    KernelSetupError,
    OneItemQueue,
    StopWorker,
    _fake_ptrs,
    _RecordingAgent,
    raised,
)

# ------------------------------------------- per-request transfer (0.5.5 .. 0.5.12.post1)


class _DescRecordingAgent(_RecordingAgent):
    """The recording stand-in for the per-request releases: ``get_xfer_descs`` records
    each descriptor list (rows of address, length, device) and its memory kind;
    ``initialize_xfer`` returns a handle and ``transfer`` posts nothing."""

    def __init__(self, name: str):
        super().__init__(name)
        self.descs: list[tuple[list[tuple[int, ...]], str]] = []

    def get_xfer_descs(self, descs, mem_kind: str):
        import numpy as np

        rows = (
            [tuple(int(x) for x in row) for row in np.asarray(descs, dtype=object).reshape(-1, 3).tolist()]
            if len(descs)
            else []
        )
        self.descs.append((rows, mem_kind))
        return rows

    def initialize_xfer(self, *args, **kwargs):
        return len(self.descs)

    def transfer(self, handle, *args, **kwargs) -> str:
        return "PROC"

    def check_xfer_state(self, handle) -> str:
        return "DONE"


def _v1_registration(sg: SimpleNamespace, decode: SideGeometry) -> list[bytes]:
    """The frames (after ``GUARD``) a 0.5.5 .. 0.5.12.post1 decode's
    ``NixlKVReceiver._register_kv_args`` sends, restated from its ``send_multipart`` call:
    11 up to 0.5.8; 0.5.9 inserts the state pointers at frame 7; 0.5.11 appends state item
    lengths and dims (empty here: no state). Parsed by the release's own ``from_zmq``."""
    import struct

    fields = {f.name for f in dataclasses.fields(sg.nixl.KVArgsRegisterInfo)}
    ptrs = _fake_ptrs(_PTR_BASE_DST, decode.n)
    frames = [
        b"None",
        b"127.0.0.1",
        b"0",
        _PEER_NAME.encode(),
        b"kvcheck-decode-metadata",
        b"".join(struct.pack("Q", p) for p in ptrs),
        b"",
    ]
    if "dst_state_data_ptrs" in fields:
        frames.append(b"")
    frames += [
        b"0",
        str(decode.attn_tp_size).encode(),
        b"0",
        str(decode.item_lens[0] if decode.regions else 0).encode(),
    ]
    if "dst_state_item_lens" in fields:
        frames += [b"", b""]
    return frames


def _run_transfer_worker(sg: SimpleNamespace, mgr, room: int):
    """Run the 0.5.12 release's own ``NixlKVManager.transfer_worker`` on one non-last
    chunk (prefill page 1, no staging) from a one-item stand-in queue; returns the
    exception it caught and recorded in ``mgr.exceptions`` (it fails the request), or None."""
    import numpy as np

    mgr.enable_staging = False
    mgr.exceptions = {}
    mgr.failure_records, mgr.failure_lock = {}, threading.Lock()
    chunk = sg.nixl.TransferKVChunk(
        room=room,
        prefill_kv_indices=np.array([1], dtype=np.int32),
        index_slice=slice(0, 1),
        is_last=False,
        chunk_id=0,
        prefill_aux_index=None,
        state_indices=None,
    )

    try:
        mgr.transfer_worker(OneItemQueue(chunk))
    except StopWorker:
        pass
    exc = mgr.exceptions.get(room)
    if isinstance(exc, AttributeError):  # a gap in the stand-in, not the runtime's verdict
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}")
    return exc


def _decide_per_request(
    sg: SimpleNamespace, prefill: SideGeometry, decode: SideGeometry, pp_rank: int, total_kv_heads: int | None
) -> Plan:
    """Drive one request through the release's own ``add_transfer_request`` (0.5.5 ..
    0.5.11: it builds the lists in the caller's thread) on a prefill ``NixlKVManager`` made
    with ``object.__new__``: the decode registers (``KVArgsRegisterInfo.from_zmq`` ->
    ``_add_remote_peer``), a ``TransferInfo.from_zmq`` asks for decode page 2, and page 1
    of the prefill is sent as one non-last chunk (no aux or state transfer). The
    recorded descriptor lists are read back into a ``Plan``: which ``send_kvcache*`` ran,
    the decode region each source region is written into, and the bytes of its first
    descriptor (``write_lens``); or the exception the runtime raised."""
    import numpy as np

    cls = sg.nixl.NixlKVManager
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst, kernel="runtime")
    stages = prefill.stage_layers or [(0, n_src)]
    start = stages[min(pp_rank, len(stages) - 1)][0] if prefill.pp_size > 1 else stages[0][0]
    kv_args = sg.KVArgs()
    kv_args.kv_data_ptrs = _fake_ptrs(_PTR_BASE_SRC, n_src)
    kv_args.kv_item_lens = list(prefill.item_lens)
    kv_args.kv_data_lens = [item * NUM_SLOTS for item in prefill.item_lens]
    kv_args.aux_data_ptrs, kv_args.aux_data_lens, kv_args.aux_item_lens = [], [], []
    kv_args.state_data_ptrs, kv_args.state_data_lens = [], []
    kv_args.gpu_id, kv_args.engine_rank, kv_args.pp_rank = 0, 0, pp_rank
    kv_args.page_size = prefill.page_size
    kv_args.prefill_start_layer = start
    kv_args.kv_head_num = max(1, (total_kv_heads or 1) // prefill.attn_tp_size)
    kv_args.total_kv_head_num = total_kv_heads or 0
    kv_args.mla_compression_ratios = None
    mgr = object.__new__(cls)
    mgr.kv_args = kv_args
    mgr.disaggregation_mode = sg.PREFILL
    mgr.is_mla_backend = prefill.is_mla
    mgr.attn_tp_size = prefill.attn_tp_size
    mgr.pp_size, mgr.pp_rank = prefill.pp_size, pp_rank
    mgr.agent = agent = _DescRecordingAgent("kvcheck-prefill")
    mgr.decode_kv_args_table, mgr.transfer_infos, mgr.request_status, mgr.req_to_decode_prefix_len = {}, {}, {}, {}
    called: list[str] = []
    for name in ("send_kvcache", "send_kvcache_slice"):
        real = getattr(mgr, name)

        def stand_in(*args, _real=real, _name=name, **kwargs):
            called.append(_name)
            return _real(*args, **kwargs)

        setattr(mgr, name, stand_in)
    peer = sg.nixl.KVArgsRegisterInfo.from_zmq(_v1_registration(sg, decode))
    room = 1
    ti = sg.nixl.TransferInfo.from_zmq(
        [
            str(room).encode(),
            b"127.0.0.1",
            b"0",
            _PEER_NAME.encode(),
            np.array([2], dtype=np.int32).tobytes(),
            b"0",
            b"1",
        ]
    )
    try:
        mgr._add_remote_peer(peer)
        mgr.transfer_infos[room] = {_PEER_NAME: ti}
        if hasattr(cls, "transfer_worker"):  # 0.5.12: the chunk goes through a transfer worker
            exc = _run_transfer_worker(sg, mgr, room)
            if exc is not None:
                fn = called[-1] if called else "transfer_worker"
                plan.error = raised(exc, PREFILL_WORKER.format(fn=fn), "first request", PREFILL_REQUEST_FAILS)
                return plan
        else:
            mgr.add_transfer_request(room, np.array([1], dtype=np.int32), slice(0, 1), False, 0)
    except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    except Exception as exc:
        fn = called[-1] if called else "add_transfer_request"
        plan.error = raised(exc, PREFILL_SEND.format(fn=fn), "first request", PREFILL_SCHEDULER_DIES)
        return plan
    if len(agent.descs) != 2 or not called:
        raise KernelSetupError("SGLang's add_transfer_request did not build one pair of descriptor lists")
    (src_rows, src_kind), (dst_rows, dst_kind) = agent.descs
    first: dict[int, tuple[int, int]] = {}
    for (s_addr, s_len, _), (d_addr, _, _) in zip(src_rows, dst_rows, strict=False):
        i = (s_addr - _PTR_BASE_SRC) // _PTR_STRIDE
        first.setdefault(i, ((d_addr - _PTR_BASE_DST) // _PTR_STRIDE, s_len))
    plan.path = "equal_tp" if called[0] == "send_kvcache" else "hetero_tp_slice"
    plan.dst_indices = [first[i][0] if i in first else -1 for i in range(n_src)]
    plan.write_lens = [first[i][1] if i in first else 0 for i in range(n_src)]
    plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=dst_kind)]
    return plan
