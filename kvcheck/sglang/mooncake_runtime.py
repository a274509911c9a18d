"""The Mooncake decision by SGLang's own code, on CPU (the runtime kernel for Mooncake).

Builds a prefill ``MooncakeKVManager`` with ``object.__new__`` (no transfer engine, no GPU)
holding what ``__init__`` sets for a prefill, stores the decode's registration the way the
bootstrap thread does (0.5.23: the decode manager's own
``build_receiver_registration_message`` parsed by ``KVArgsRegisterInfo.from_zmq``; older
releases build the dataclass from the same fields), and runs the release's own
``transfer_worker`` on a one-chunk queue for a one-page request (prefill page 1 to decode
page 2). Stubbed, because they need hardware or other threads: the transfer engine
(``batch_transfer_sync`` records the writes and returns 0), ``conclude_failure`` /
``conclude_transfer`` / ``update_status`` (recorded), ``send_aux`` and ``maybe_send_extra``
(no aux or state buffers here). The worker's own exception handler wraps what the send
path raises, as on a server.

Used by the conformance tests (``tests/test_mooncake_conformance.py``), which compare the
writes and the verdict with ``kvcheck.sglang.mooncake``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
from collections import defaultdict
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from kvcheck.sglang import mooncake as mc
from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.runtime_kernel.driver import OneItemQueue, StopWorker


class KernelSetupError(RuntimeError):
    """The stand-in manager lacks something the release reads (not a runtime verdict)."""


@lru_cache(maxsize=1)
def _sg() -> SimpleNamespace:
    import warnings

    from kvcheck.sglang.runtime_kernel import _tolerate_reregistered_configs

    _tolerate_reregistered_configs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang
        from sglang.srt.disaggregation.base import conn as base_conn
        from sglang.srt.disaggregation.mooncake import conn as mconn

        try:
            from sglang.srt.disaggregation.common.utils import TransferKVChunk
        except ImportError:  # 0.5.10 .. 0.5.12: defined in mooncake/conn.py
            TransferKVChunk = mconn.TransferKVChunk
        from sglang.srt.disaggregation.utils import DisaggregationMode
    # The server publishes its config namespaces at start-up; the send paths read two
    # flags from them (unified memory, the speculative algorithm): off here.
    if hasattr(mconn, "get_memory"):
        mconn.get_memory = lambda: SimpleNamespace(enable_unified_memory=False)
    if hasattr(mconn, "get_spec"):
        mconn.get_spec = lambda: SimpleNamespace(speculative_algorithm=None)
    for name in ("sglang.srt.disaggregation.mooncake.conn", "sglang.srt.disaggregation.common.conn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return SimpleNamespace(
        version=getattr(sglang, "__version__", "?"),
        KVArgs=base_conn.KVArgs,
        KVPoll=base_conn.KVPoll,
        m=mconn,
        Chunk=TransferKVChunk,
        PREFILL=DisaggregationMode.PREFILL,
        DECODE=DisaggregationMode.DECODE,
    )


def runtime_version() -> str:
    return _sg().version


class _Engine:
    def __init__(self):
        self.writes: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()

    def batch_transfer_sync(self, session, srcs, dsts, lens):
        with self.lock:
            self.writes += [(int(s), int(d), int(n)) for s, d, n in zip(srcs, dsts, lens, strict=False)]
        return 0

    def get_session_id(self):
        return mc.SESSION


def _kv_args(sg, g: SideGeometry, base: int, ids: list[int], pp_rank: int, total_kv_heads: int | None, rank: int):
    a = sg.KVArgs()
    a.kv_data_ptrs = [base + i * mc.STRIDE for i in range(g.n)]
    a.kv_item_lens = list(g.item_lens)
    a.kv_data_lens = [x * mc.NUM_SLOTS for x in g.item_lens]
    a.kv_layer_ids = list(ids)
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [], [], []
    a.state_data_ptrs, a.state_data_lens, a.state_item_lens, a.state_types = [], [], [], []
    a.state_dim_per_tensor, a.state_layer_ids = [], []
    a.page_size = g.page_size
    a.engine_rank = rank
    a.gpu_id = 0
    a.num_draft_entries = g.num_draft_regions
    a.mla_compression_ratios = None
    stages = g.stage_layers or [(0, g.n)]
    a.prefill_start_layer, a.prefill_end_layer = stages[min(pp_rank, len(stages) - 1)]
    a.pp_rank = pp_rank
    a.total_kv_head_num = total_kv_heads or 0
    a.kv_head_num = max(1, (total_kv_heads or 1) // max(1, g.attn_tp_size))
    a.swa_kv_cache_layout = "nhd"
    return a


def _registration(sg, decode: SideGeometry, ids: list[int], dst_rank: int, total_kv_heads: int | None):
    """What the prefill's bootstrap thread stores for this decode rank."""
    m = sg.m
    kv_args = _kv_args(sg, decode, mc.DST_BASE, ids, 0, total_kv_heads, dst_rank)
    if hasattr(m.MooncakeKVManager, "build_receiver_registration_message"):  # 0.5.23
        d = object.__new__(m.MooncakeKVManager)
        d.kv_args, d.enable_staging, d.local_ip, d.rank_port = (
            kv_args,
            False,
            mc.DECODE_ENDPOINT[0],
            mc.DECODE_ENDPOINT[1],
        )
        d.attn_tp_size, d.dcp_size, d.dcp_rank = decode.attn_tp_size, 1, 0
        d.engine = _Engine()
        d.get_session_id = lambda: mc.SESSION
        return m.KVArgsRegisterInfo.from_zmq(d.build_receiver_registration_message())
    names = {f.name for f in dataclasses.fields(m.KVArgsRegisterInfo)}
    values = dict(
        room="None",
        endpoint=mc.DECODE_ENDPOINT[0],
        dst_port=mc.DECODE_ENDPOINT[1],
        mooncake_session_id=mc.SESSION,
        dst_kv_ptrs=kv_args.kv_data_ptrs,
        dst_aux_ptrs=[],
        dst_state_data_ptrs=[],
        dst_tp_rank=dst_rank,
        dst_attn_tp_size=decode.attn_tp_size,
        dst_kv_item_len=decode.item_lens[0] if decode.n else 0,
        dst_state_item_lens=[],
        dst_state_dim_per_tensor=[],
        dst_kv_layer_ids=list(ids),
        dst_state_layer_ids=[],
    )
    return m.KVArgsRegisterInfo(**{k: v for k, v in values.items() if k in names})


def run_request(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    pp_rank: int = 0,
    total_kv_heads: int | None = None,
    src_rank: int = 0,
    dst_rank: int = 0,
    publish_ids: tuple[bool, bool] = (False, False),
    bootstrap_port: int = 8998,
) -> dict:
    """One request through the release's own ``transfer_worker``. Returns ``{"writes": [...],
    "failure": reason or None, "worker_error": str or None, "logged": [...]}``."""
    import numpy as np

    sg = _sg()
    m = sg.m
    ids_p = [r.layer_id for r in prefill.regions] if publish_ids[0] else []
    ids_d = [r.layer_id for r in decode.regions] if publish_ids[1] else []
    mgr = object.__new__(m.MooncakeKVManager)
    mgr.kv_args = _kv_args(sg, prefill, mc.SRC_BASE, ids_p, pp_rank, total_kv_heads, src_rank)
    engine = _Engine()
    failures: list[str] = []
    mgr.engine = engine
    mgr.disaggregation_mode = sg.PREFILL
    mgr.is_mla_backend = prefill.is_mla
    mgr.is_hybrid_mla_backend = False
    mgr.attn_tp_size, mgr.pp_size, mgr.pp_rank = prefill.attn_tp_size, prefill.pp_size, pp_rank
    mgr.attn_tp_rank, mgr.attn_dp_rank = src_rank, 0
    mgr.dcp_size, mgr.dcp_rank = 1, 0
    mgr.attn_cp_size, mgr.attn_cp_rank = 1, 0
    # 0.5.5 .. 0.5.6: the last PP stage sends the aux data (get_pp_group())
    mgr.pp_group = SimpleNamespace(
        is_last_rank=pp_rank == prefill.pp_size - 1, rank_in_group=pp_rank, world_size=prefill.pp_size
    )
    mgr.bootstrap_port = bootstrap_port
    mgr.enable_trace = mgr.enable_staging = mgr.enable_custom_mem_pool = False
    mgr.custom_mem_pool_type = None
    mgr.enable_deferred_decode_kv_release = False
    mgr.max_transfer_batch_indices = 0
    mgr._staging_outstanding = defaultdict(int)
    mgr.session_lock = threading.Lock()
    mgr.session_failures = defaultdict(int)
    mgr.failed_sessions, mgr.failed_session_probes, mgr.state_layout_rejections = set(), {}, {}
    mgr.state_strides_validated = set()
    mgr.req_to_decode_prefix_len = {}
    mgr.request_status = {mc.ROOM: sg.KVPoll.WaitingForInput}
    mgr.kv_shard_size, mgr.kv_shard_rank = 1, 0
    mgr.enable_kv_cache_sharding = False
    mgr._dcp_pack_buffers = ()
    mgr.check_status = lambda room: mgr.request_status[room]
    mgr.update_status = lambda room, status: mgr.request_status.__setitem__(room, status)

    def conclude_failure(bootstrap_room=None, failure_reason=None, **kw):
        failures.append(failure_reason)
        mgr.request_status[bootstrap_room] = sg.KVPoll.Failed

    mgr.conclude_failure = conclude_failure
    mgr.record_failure = lambda room, reason: failures.append(reason)
    mgr.conclude_transfer = lambda **kw: None
    mgr.sync_status_to_decode_endpoint = lambda *a, **k: None
    mgr.send_aux = lambda *a, **k: 0
    mgr.maybe_send_extra = lambda *a, **k: 0
    mgr._should_skip_cp_replicated_state_transfer = lambda: False
    mgr.poison_deferred_ack_room = lambda room: None
    mgr._maybe_ack_drained_abort = lambda room: None
    info = _registration(sg, decode, ids_d, dst_rank, total_kv_heads)
    mgr.decode_kv_args_table = {mc.SESSION: info}
    tnames = {f.name for f in dataclasses.fields(m.TransferInfo)}
    tvals = dict(
        room=mc.ROOM,
        endpoint=mc.DECODE_ENDPOINT[0],
        dst_port=mc.DECODE_ENDPOINT[1],
        mooncake_session_id=mc.SESSION,
        dst_kv_indices=np.array([mc.DST_PAGE], dtype=np.int32),
        dst_aux_index=0,
        dst_state_indices=[],
        required_dst_info_num=1,
        is_dummy=False,
    )
    mgr.transfer_infos = {mc.ROOM: {mc.SESSION: m.TransferInfo(**{k: v for k, v in tvals.items() if k in tnames})}}
    cnames = {f.name for f in dataclasses.fields(sg.Chunk)}
    cvals = dict(
        room=mc.ROOM,
        prefill_kv_indices=np.array([mc.SRC_PAGE], dtype=np.int32),
        index_slice=slice(0, 1),
        is_last_chunk=True,
        is_last=True,
        prefill_aux_index=0,
        state_indices=None,
    )
    chunk = sg.Chunk(**{k: v for k, v in cvals.items() if k in cnames})

    out: dict[str, Any] = {"writes": [], "failure": None, "worker_error": None}
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        try:
            mgr.transfer_worker(OneItemQueue(chunk), ex)  # (queue, executor[, staging buffer, worker index])
        except StopWorker:
            pass
        except AttributeError as exc:
            raise KernelSetupError(
                f"the stand-in Mooncake manager lacks what SGLang {sg.version} reads: {exc}"
            ) from exc
        except RuntimeError as exc:
            out["worker_error"] = str(exc)
    out["writes"] = sorted(engine.writes)
    out["failure"] = failures[0] if failures else None
    if out["worker_error"] and "has no attribute" in out["worker_error"]:
        raise KernelSetupError(
            f"the stand-in Mooncake manager lacks what SGLang {sg.version} reads: {out['worker_error']}"
        )
    return out


def runtime_writes(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    pp_rank: int,
    total_kv_heads: int | None,
    src_rank: int,
    dst_rank: int,
    b,
) -> mc.Writes:
    """``mooncake.simulate_writes``' contract answered by the release's own
    ``transfer_worker`` (``run_request``): its writes, or ``SendFailed`` for the -1 path
    (``conclude_failure``), or ``WorkerDied`` with the text the worker raised. The
    writes are judged by ``mooncake.misplaced_write`` as the builtin's are."""
    ids = (mc.publishes_layer_ids(prefill, b), mc.publishes_layer_ids(decode, b))
    got = run_request(
        prefill,
        decode,
        pp_rank=pp_rank,
        total_kv_heads=total_kv_heads,
        src_rank=src_rank,
        dst_rank=dst_rank,
        publish_ids=ids,
    )
    if got["worker_error"]:
        raise mc.WorkerDied(got["worker_error"])
    if got["failure"]:
        raise mc.SendFailed(got["failure"])
    flat = prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size
    path = ("mla" if prefill.attn_tp_size != decode.attn_tp_size else "equal_tp") if flat else "hetero_tp_slice"
    pairs = sorted({((s - mc.SRC_BASE) // mc.STRIDE, (d - mc.DST_BASE) // mc.STRIDE) for s, d, _ in got["writes"]})
    return mc.Writes(
        path=path, fn="send_kvcache" if flat else "send_kvcache_slice", writes=list(got["writes"]), pairs=pairs
    )
