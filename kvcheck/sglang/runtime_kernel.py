"""The ``runtime`` decision kernel: the installed SGLang's own decision code, run on CPU.

Same interface as the ``builtin`` kernel (``kvcheck.sglang.plan``): ``bootstrap_error``
and ``decide_transfer``. Instead of kvcheck's restatement, each drives the runtime's own
functions, written against SGLang 0.5.23 (``sglang.srt.disaggregation``), on managers
made with ``object.__new__`` so that no GPU, NIXL agent, ZMQ socket, thread or
``torch.distributed`` group is created:

``bootstrap_error`` drives, on a decode ``NixlKVManager``:
  ``CommonKVManager.try_ensure_parallel_info`` (page size, kv-cache dtype string, DCP
  checks) and through it ``_resolve_rank_mapping`` (KV-sharding, CP and PP asserts).
  The ``/route`` reply is built the way the prefill's bootstrap server builds it
  (``dataclasses.asdict`` of the runtime's ``PrefillServerInfo``) and handed to the
  decode through a stand-in for the one ``requests.get`` call; nothing touches a network.

``decide_transfer`` drives, on a prefill ``NixlKVManager``:
  ``_normalize_kv_mem_kinds``, ``_homogeneous_kv_mem_kind(..., "source")`` and
  ``num_kv_slots`` (what ``NixlKVManager.__init__`` computes for a prefill), then
  ``_add_remote_peer`` -> ``requires_dcp_relayout`` -> ``_prepare_payload_xfer`` (with
  ``_build_transfer_dst_indices``, ``build_transfer_entry_pairs``,
  ``resolve_dcp_dst_entry_indices``, ``prepare_dcp_token_item_lens``,
  ``_kv_xfer_mem_segments``, ``_init_equal_tp_prep_handle``,
  ``_init_mixed_equal_tp_prep_handles``, ``_prep_equal_tp_dlist``, ``_prep_xfer_dlist``)
  and ``_prepare_state_xfer``. The decode's registration is the real ZMQ frame list:
  ``NixlKVManager.build_receiver_registration_message`` on a decode manager, parsed by
  ``KVArgsRegisterInfo.from_zmq`` (the frames after ``GUARD``, as the bootstrap thread
  does). The NIXL agent is a recording stand-in: ``prep_xfer_dlist`` records the peer,
  the Nx5 strided descriptor runs and the memory kind, and returns a handle.
  Region pointers are fake, distinct integers; every region holds ``NUM_SLOTS`` pages.

The heterogeneous-TP head-slice setup ``_init_hetero_tp_prep_handle`` runs for real
(its asserts, ``compute_head_slice_params``, the strided descriptor runs) when the
caller passes the model's ``total_kv_heads``; a wrapper records which decode regions
the runtime's ``get_mha_kv_ptrs_with_pp`` pairs the slices with (``dst_indices``).
Without ``total_kv_heads`` only the pairing is recorded.

Releases: the bootstrap checks are driven on any release with
``try_ensure_parallel_info`` (0.5.10 on; 0.5.10 .. 0.5.16 read ``server_args``, which
the stand-in provides) and, before 0.5.10, through ``CommonKVReceiver.__init__`` on the
v1 ``/route`` reply (``_bootstrap_error_v1``). The prefill decision is driven on 0.5.5 ..
0.5.11 (one request through ``add_transfer_request``, whose ``send_kvcache`` /
``send_kvcache_slice`` descriptor lists are recorded by a stand-in agent and read back:
``_decide_per_request``; 0.5.12 .. 0.5.12.post1: one chunk through the release's own
``transfer_worker``), 0.5.13 .. 0.5.14 (17 registration
frames, no memory kinds), 0.5.15 .. 0.5.16 (19 frames: kinds and item lengths), 0.5.17 ..
0.5.22 (23 frames, DCP size and rank last; those decodes build them inline, the kernel
restates each list and the release's own ``from_zmq`` parses it) and 0.5.23
(``build_receiver_registration_message``); elsewhere ``KernelSetupError``.
0.5.15 .. 0.5.21 prepare one descriptor per slot (no strided runs): the destination
regions are read back from each region's slot-0 descriptor.

Not driven (said here, and handled honestly):
- DCP pack buffers (``_init_dcp_pack_buffers_once`` allocates device staging memory):
  marked as already allocated; the DCP decision and geometry checks run for real.
- The NIXL agent itself (no ``add_remote_agent`` metadata parsing, no registration).

SGLang is imported lazily, on first use; the static path never imports it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan import (
    DECODE_FIRST_REQUEST,
    DECODE_RECEIVER_V1,
    DECODE_SCHEDULER,
    HANG_300S,
    PREFILL_BOOTSTRAP_THREAD,
    PREFILL_FAILS_TO_START,
    PREFILL_REQUEST_FAILS,
    PREFILL_SCHEDULER_DIES,
    PREFILL_SEND,
    PREFILL_STARTUP,
    PREFILL_WORKER,
    PairInfo,
    Plan,
    RuntimeErrorPrediction,
    Segment,
)

from kvcheck.release.manifest import NEWEST as SGLANG_VERSION  # noqa: E402  (written once, in the manifest)
# Pages per region in the fake pools: small, since the dlists are built as numpy arrays.
NUM_SLOTS = 4
_PTR_BASE_SRC = 0x7F00_0000_0000
_PTR_BASE_DST = 0x7E00_0000_0000
_PTR_STRIDE = 1 << 32
_PEER_NAME = "kvcheck-decode"
_BOOTSTRAP_ADDR = "kvcheck.invalid:8998"

_lock = threading.Lock()


class KernelSetupError(RuntimeError):
    """The runtime kernel could not drive SGLang's code (not a predicted runtime error)."""


@lru_cache(maxsize=1)
def _sglang() -> SimpleNamespace:
    """Import the runtime's disaggregation modules once (slow: pulls torch)."""
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # pragma: no cover - transformers is optional for the import
        pass
    import warnings

    _tolerate_reregistered_configs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sglang
        from sglang.srt.disaggregation.base import conn as base_conn
        from sglang.srt.disaggregation.common import conn as common_conn
        from sglang.srt.disaggregation.nixl import conn as nixl_conn
        from sglang.srt.disaggregation.utils import DisaggregationMode

    for name in ("sglang.srt.disaggregation.common.conn", "sglang.srt.disaggregation.nixl.conn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return SimpleNamespace(
        version=getattr(sglang, "__version__", "unknown"),
        KVArgs=base_conn.KVArgs,
        base_conn=base_conn,
        common=common_conn,
        nixl=nixl_conn,
        PREFILL=DisaggregationMode.PREFILL,
        DECODE=DisaggregationMode.DECODE,
    )


def _tolerate_reregistered_configs() -> None:
    """Releases 0.5.12 .. 0.5.20 register Hugging Face configs (``qwen3_asr``, ...) that
    newer ``transformers`` ship themselves, and ``AutoConfig.register`` then refuses the
    import. Registering with ``exist_ok=True`` keeps transformers' own class; the PD code
    kvcheck drives never reads these configs."""
    try:
        from transformers import AutoConfig
    except Exception:  # pragma: no cover - transformers is optional for the import
        return
    register = AutoConfig.register
    if getattr(register, "_kvcheck_exist_ok", False):
        return

    def tolerant(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    tolerant._kvcheck_exist_ok = True
    AutoConfig.register = staticmethod(tolerant)


def runtime_version() -> str:
    """The installed SGLang's version (the kernel is written against ``SGLANG_VERSION``)."""
    return _sglang().version


# ---------------------------------------------------------------- bootstrap (decode) --


class _RouteResponse:
    status_code = 200

    def __init__(self, payload: dict):
        self._payload = payload
        self.text = ""

    def json(self) -> dict:
        return dict(self._payload)


def _route_payload(sg: SimpleNamespace, prefill: PairInfo) -> dict:
    """The ``/route`` reply, as the installed release's ``_handle_route_get`` builds it
    (``dataclasses.asdict`` of its ``PrefillServerInfo``, minus the layout keys it drops
    when unset). Fields the release does not have are not passed."""
    fields = {f.name for f in dataclasses.fields(sg.common.PrefillServerInfo)}
    wanted = dict(
        attn_tp_size=prefill.attn_tp_size,
        attn_cp_size=prefill.attn_cp_size,
        dp_size=1,
        pp_size=prefill.pp_size,
        page_size=prefill.page_size,
        kv_cache_dtype=prefill.kv_cache_dtype_str if _resolved_dtype(sg) else prefill.flag_dtype,
        follow_bootstrap_room=True,
        enable_dsa_cache_layer_split=False,
        enable_kv_cache_sharding=prefill.enable_kv_cache_sharding,
        kv_layout=prefill.kv_layout,
        dsv41_spec_layout=prefill.dsv41_spec_layout,
    )
    info = sg.common.PrefillServerInfo(**{k: v for k, v in wanted.items() if k in fields})
    payload = dataclasses.asdict(info)
    for key in ("dsv41_spec_layout", "kv_layout"):
        if payload.get(key) is None:
            payload.pop(key, None)
    return payload


def _resolved_dtype(sg: SimpleNamespace) -> bool:
    """True when the installed release compares ``kv_cache_dtype_str`` (0.5.17 on), False
    when it compares ``server_args.kv_cache_dtype`` (0.5.10 .. 0.5.16)."""
    import inspect

    return "self.kv_cache_dtype_str" in inspect.getsource(sg.common.CommonKVManager.try_ensure_parallel_info)


def _state_types(sg: SimpleNamespace, values: list[str]) -> list:
    StateType = getattr(sg.base_conn, "StateType", None)
    if StateType is None:
        if values:
            raise KernelSetupError("this SGLang release has no StateType; state components cannot be driven")
        return []
    return [StateType(v) for v in values]


def _decode_manager(sg: SimpleNamespace, decode: PairInfo):
    kv_args = sg.KVArgs()
    kv_args.page_size = decode.page_size
    kv_args.engine_rank = 0
    kv_args.state_types = _state_types(sg, decode.state_types)
    kv_args.kv_cache_dtype_str = decode.kv_cache_dtype_str
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.kv_cache_dtype_str = decode.kv_cache_dtype_str
    # 0.5.10 .. 0.5.16 read the flag and --enable-hisparse from server_args.
    mgr.server_args = SimpleNamespace(kv_cache_dtype=decode.flag_dtype, enable_hisparse=decode.hisparse)
    mgr.kv_layout = decode.kv_layout
    mgr.dsv41_spec_layout = decode.dsv41_spec_layout
    mgr.prefill_info_table = {}
    mgr.is_mla_backend = decode.is_mla
    mgr.is_hybrid_mla_backend = decode.is_hybrid_mla
    mgr.attn_tp_size = decode.attn_tp_size
    mgr.attn_cp_size = decode.attn_cp_size
    mgr.attn_cp_rank = 0
    mgr.dcp_size = decode.dcp_size
    mgr.dcp_rank = 0
    mgr.pp_size = decode.pp_size
    mgr.pp_rank = 0
    mgr.enable_all_cp_ranks_for_transfer = False
    return mgr


def bootstrap_error(prefill: PairInfo, decode: PairInfo, behaviour: Any = None) -> RuntimeErrorPrediction | None:
    """The decode's checks on the prefill's ``/route`` reply, by the runtime itself.

    Drives the installed release's ``CommonKVManager.try_ensure_parallel_info`` (and
    through it ``_resolve_rank_mapping``) on a decode ``NixlKVManager`` made with
    ``object.__new__``; the reply comes from a stand-in for ``requests.get``. Returns the
    exception it raises (class name, ``str()``), or ``None`` when the decode accepts the
    prefill. ``behaviour`` is accepted for interface parity and ignored: the installed
    release decides. Raises ``KernelSetupError`` when the release has no
    ``try_ensure_parallel_info`` (before 0.5.10) or the stand-in lacks what it reads.
    """
    sg = _sglang()
    if not hasattr(sg.common.CommonKVManager, "try_ensure_parallel_info") and hasattr(sg.common.CommonKVReceiver, "_get_prefill_parallel_info_from_server"):
        return _bootstrap_error_v1(sg, prefill, decode)  # 0.5.5 .. 0.5.9
    if not hasattr(sg.common.CommonKVManager, "try_ensure_parallel_info"):
        raise KernelSetupError(f"SGLang {sg.version} has no try_ensure_parallel_info (its decode checks the prefill in CommonKVReceiver)")
    mgr = _decode_manager(sg, decode)
    payload = _route_payload(sg, prefill)
    calls: list[str] = []

    def fake_get(url: str, timeout: Any = None) -> _RouteResponse:
        calls.append(url)
        return _RouteResponse(payload)

    with _lock:
        real_requests = sg.common.requests
        sg.common.requests = SimpleNamespace(get=fake_get)
        try:
            ok = mgr.try_ensure_parallel_info(_BOOTSTRAP_ADDR)
        except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
            raise KernelSetupError(f"the stand-in decode manager lacks what SGLang reads: {exc}") from exc
        except Exception as exc:  # the runtime's own verdict
            return RuntimeErrorPrediction(
                type=type(exc).__name__, message=str(exc), raised_by=DECODE_SCHEDULER, when="first request", operator_sees=DECODE_FIRST_REQUEST
            )
        finally:
            sg.common.requests = real_requests
    if not ok or not calls or "/route?" not in calls[0]:
        raise KernelSetupError("SGLang's try_ensure_parallel_info did not take the stand-in /route reply")
    return None


def _bootstrap_error_v1(sg: SimpleNamespace, prefill: PairInfo, decode: PairInfo) -> RuntimeErrorPrediction | None:
    """The decode's checks before 0.5.10, by the runtime itself: the release's
    ``CommonKVReceiver.__init__`` (which fetches the v1 ``/route?engine_rank=-1&...`` reply
    through ``_get_prefill_parallel_info_from_server``, checks it, and fetches each target
    rank's bootstrap info) on a receiver and a decode ``NixlKVManager`` made with
    ``object.__new__``. The v1 reply is what ``CommonKVBootstrapServer._handle_route_get``
    returns (``prefill_attn_tp_size``, ``prefill_dp_size``, ``prefill_pp_size``, and from
    0.5.8 ``prefill_page_size``), handed through a stand-in for ``requests.get``; each
    rank's info is a loopback address (``CommonKVReceiver._register_kv_args`` sends
    nothing). Returns the exception it raises, or None."""
    kv_args = sg.KVArgs()
    kv_args.page_size = decode.page_size
    kv_args.engine_rank = 0
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.request_status = {}
    mgr.is_mla_backend = decode.is_mla
    mgr.attn_tp_size = decode.attn_tp_size
    mgr.pp_size, mgr.pp_rank = decode.pp_size, 0
    mgr.connection_pool, mgr.required_prefill_response_num_table = {}, {}
    mgr.prefill_attn_tp_size_table, mgr.prefill_dp_size_table, mgr.prefill_pp_size_table, mgr.prefill_page_size_table = {}, {}, {}, {}
    payload = {"prefill_attn_tp_size": prefill.attn_tp_size, "prefill_dp_size": 1, "prefill_pp_size": prefill.pp_size, "prefill_page_size": prefill.page_size}
    calls: list[str] = []

    def fake_get(url: str, timeout: Any = None) -> _RouteResponse:
        calls.append(url)
        return _RouteResponse(payload if "engine_rank=-1" in url else {"rank_ip": "127.0.0.1", "rank_port": 1})

    # CommonKVReceiver is abstract (init, poll); a bare subclass keeps its own
    # _register_kv_args (which sends nothing) and __init__.
    receiver_cls = type("KvcheckReceiver", (sg.common.CommonKVReceiver,), {"init": lambda self, *a, **k: None, "poll": lambda self: None})
    receiver = object.__new__(receiver_cls)
    with _lock:
        real_requests = sg.common.requests
        sg.common.requests = SimpleNamespace(get=fake_get)
        try:
            sg.common.CommonKVReceiver.__init__(receiver, mgr, _BOOTSTRAP_ADDR, 0, 0)
        except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
            raise KernelSetupError(f"the stand-in decode manager lacks what SGLang reads: {exc}") from exc
        except Exception as exc:  # the runtime's own verdict
            return RuntimeErrorPrediction(
                type=type(exc).__name__, message=str(exc), raised_by=DECODE_RECEIVER_V1, when="first request", operator_sees=DECODE_FIRST_REQUEST
            )
        finally:
            sg.common.requests = real_requests
    if not calls or "engine_rank=-1" not in calls[0] or receiver.bootstrap_infos is None:
        raise KernelSetupError("SGLang's CommonKVReceiver did not take the stand-in v1 /route reply")
    return None


# ---------------------------------------------------------------- transfer (prefill) --


class nixlNotFoundError(Exception):  # noqa: N801  (NIXL's own class name, nixl._bindings)
    """What NIXL's ``prep_xfer_dlist`` raises (``str``: ``NIXL_ERR_NOT_FOUND``) when a
    descriptor of a local list lies in no memory region the agent registered."""


class _RecordingAgent:
    """Stand-in for ``nixl_agent``: records every prepared descriptor list.

    ``regions``: the (address, length) pairs this agent registered (the prefill's KV
    regions, ``register_buffer_to_engine``). A local list (``peer_name == ""``) given as
    plain ``(address, length, device)`` rows is checked the way NIXL's
    ``prepXferDlist`` checks it: every descriptor must lie inside one registered region,
    else ``nixlNotFoundError('NIXL_ERR_NOT_FOUND')`` (verified against nixl-cu12 1.5.1 in
    tests/test_incidents.py). Strided Nx5 runs (0.5.22 on) are recorded unchecked.
    """

    def __init__(self, name: str, regions: list[tuple[int, int]] | None = None):
        self.name = name
        self.prepared: list[tuple[str, Any, str, int]] = []  # (peer, Nx5 runs, kind, handle)
        self.remote_agents: list[bytes] = []
        self.regions = sorted(regions or [])

    def _check_local(self, descs) -> None:
        import bisect

        import numpy as np

        if not self.regions or not isinstance(descs, np.ndarray) or descs.ndim != 2 or descs.shape[1] != 3:
            return
        starts = [r[0] for r in self.regions]
        for addr, length in descs[:, :2].tolist():
            i = bisect.bisect_right(starts, addr) - 1
            if i < 0 or addr + length > self.regions[i][0] + self.regions[i][1]:
                raise nixlNotFoundError("NIXL_ERR_NOT_FOUND")

    def get_agent_metadata(self) -> bytes:
        return b"kvcheck-stand-in-agent-metadata:" + self.name.encode()

    def add_remote_agent(self, metadata: bytes) -> str:
        self.remote_agents.append(metadata)
        return _PEER_NAME

    def get_xfer_descs(self, descs, mem_kind: str):
        return descs

    def prep_xfer_dlist(self, peer_name: str, descs, mem_kind: str) -> int:
        if peer_name == "":
            self._check_local(descs)
        handle = len(self.prepared) + 1
        self.prepared.append((peer_name, descs, mem_kind, handle))
        return handle

    def kind_of(self, handle: int) -> str:
        return self.prepared[handle - 1][2]

    def runs_of(self, handle: int) -> list[list[int]]:
        return [list(map(int, r)) for r in self.prepared[handle - 1][1].tolist()]


def _fake_ptrs(base: int, n: int) -> list[int]:
    return [base + i * _PTR_STRIDE for i in range(n)]


def _registration(sg: SimpleNamespace, decode: SideGeometry, decode_dcp_size: int):
    """The decode's registration frames, built by its own ``build_receiver_registration_message``
    and parsed by the prefill's ``KVArgsRegisterInfo.from_zmq``."""
    kv_args = sg.KVArgs()
    kv_args.kv_data_ptrs = _fake_ptrs(_PTR_BASE_DST, decode.n)
    kv_args.kv_item_lens = list(decode.item_lens)
    kv_args.kv_data_lens = [item * NUM_SLOTS for item in decode.item_lens]
    kv_args.kv_data_mem_kinds = list(decode.kinds)
    kv_args.kv_layer_ids = []
    kv_args.aux_data_ptrs = []
    kv_args.state_data_ptrs = []
    kv_args.state_item_lens = []
    kv_args.state_data_lens = []
    kv_args.state_dim_per_tensor = []
    kv_args.state_layer_ids = []
    kv_args.gpu_id = 0
    kv_args.engine_rank = 0
    kv_args.page_size = decode.page_size
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.agent = _RecordingAgent(_PEER_NAME)
    mgr.enable_staging = False
    mgr.local_ip = "127.0.0.1"
    mgr.rank_port = 0
    mgr.attn_tp_size = decode.attn_tp_size
    mgr.dcp_size = decode_dcp_size
    mgr.dcp_rank = 0
    if hasattr(mgr, "build_receiver_registration_message"):
        frames = mgr.build_receiver_registration_message()
    elif not hasattr(sg.nixl, "_pack_kv_mem_kinds"):
        frames = _registration_frames_0_5_13(sg, mgr)
    else:
        frames = _registration_frames_0_5_17(sg, mgr)
    if frames[0] != sg.nixl.GUARD:
        raise KernelSetupError("SGLang's registration message does not start with its GUARD frame")
    return sg.nixl.KVArgsRegisterInfo.from_zmq(frames[1:])


def _registration_frames_0_5_13(sg: SimpleNamespace, mgr) -> list:
    """The 17 frames (after ``GUARD``) a 0.5.13 .. 0.5.14 decode's
    ``NixlKVReceiver._register_kv_args`` sends (no memory kinds, item lengths or layer
    ids; staging off), restated from its ``send_multipart`` call; parsed by the release's
    own ``KVArgsRegisterInfo.from_zmq``."""
    import struct

    a = mgr.kv_args
    pack = getattr(sg.nixl, "pack_int_lists", None) or getattr(sg.common, "pack_int_lists")
    item = a.kv_item_lens[0] if a.kv_item_lens else 0
    slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
    return [
        sg.nixl.GUARD, b"None", mgr.local_ip.encode(), str(mgr.rank_port).encode(), mgr.agent.name.encode(), mgr.agent.get_agent_metadata(),
        b"".join(struct.pack("Q", p) for p in a.kv_data_ptrs), b"", pack([], "Q"), str(a.gpu_id).encode(), str(mgr.attn_tp_size).encode(),
        str(a.engine_rank).encode(), str(item).encode(), pack([], "I"), pack([], "I"), b"", b"", str(slots).encode(),
    ]


def _registration_frames_0_5_17(sg: SimpleNamespace, mgr) -> list:
    """The 23 frames (after ``GUARD``) a 0.5.17 .. 0.5.22 decode's
    ``NixlKVReceiver._register_kv_args`` sends, restated from its ``send_multipart`` call
    (those releases build them inline, not in ``build_receiver_registration_message``);
    parsed below by the release's own ``KVArgsRegisterInfo.from_zmq``."""
    import struct

    a = mgr.kv_args
    pack = getattr(sg.nixl, "pack_int_lists", None) or getattr(sg.common, "pack_int_lists")
    item = a.kv_item_lens[0] if a.kv_item_lens else 0
    if "dst_dcp_size" not in {f.name for f in dataclasses.fields(sg.nixl.KVArgsRegisterInfo)}:
        # 0.5.15 .. 0.5.16: 19 frames (memory kinds and item lengths appended to 0.5.13's)
        slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
        return _registration_frames_0_5_13(sg, mgr)[:-1] + [
            str(slots).encode(), sg.nixl._pack_kv_mem_kinds(a.kv_data_mem_kinds), b"".join(struct.pack("Q", x) for x in a.kv_item_lens),
        ]
    if hasattr(sg.nixl, "num_kv_slots"):  # 0.5.22
        slots = sg.nixl.num_kv_slots(a.kv_data_lens, a.kv_item_lens) if a.kv_item_lens else 0
    else:  # 0.5.17 .. 0.5.21: region 0's data length over its item length
        slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
    return [
        sg.nixl.GUARD, b"None", mgr.local_ip.encode(), str(mgr.rank_port).encode(), mgr.agent.name.encode(), mgr.agent.get_agent_metadata(),
        b"".join(struct.pack("Q", p) for p in a.kv_data_ptrs), b"", pack([], "Q"), str(a.gpu_id).encode(), str(mgr.attn_tp_size).encode(),
        str(a.engine_rank).encode(), str(item).encode(), pack([], "I"), pack([], "I"), b"", b"", str(slots).encode(),
        sg.nixl._pack_kv_mem_kinds(a.kv_data_mem_kinds), b"".join(struct.pack("Q", x) for x in a.kv_item_lens), pack([], "I"),
        b"".join(struct.pack("I", x) for x in a.kv_layer_ids), str(mgr.dcp_size).encode(), str(mgr.dcp_rank).encode(),
    ]


def _prefill_manager(sg: SimpleNamespace, prefill: SideGeometry, pp_rank: int):
    """A prefill manager with what ``NixlKVManager.__init__`` sets for a prefill. May raise
    the runtime's start-up error (mixed source kinds)."""
    n = prefill.n
    kv_args = sg.KVArgs()
    kv_args.kv_data_ptrs = _fake_ptrs(_PTR_BASE_SRC, n)
    kv_args.kv_item_lens = list(prefill.item_lens)
    kv_args.kv_data_lens = [item * NUM_SLOTS for item in prefill.item_lens]
    kv_args.kv_layer_ids = []
    kv_args.aux_data_ptrs = []
    kv_args.state_types = []
    kv_args.gpu_id = 0
    kv_args.engine_rank = 0
    kv_args.page_size = prefill.page_size
    kv_args.num_draft_entries = prefill.num_draft_regions
    kv_args.mla_compression_ratios = None
    stages = prefill.stage_layers or [(0, n)]
    start, end = stages[min(pp_rank, len(stages) - 1)]
    kv_args.prefill_start_layer = start
    kv_args.prefill_end_layer = end
    kv_args.pp_rank = pp_rank
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.disaggregation_mode = sg.PREFILL
    mgr.is_mla_backend = prefill.is_mla
    mgr.is_hybrid_mla_backend = False
    mgr.attn_tp_size = prefill.attn_tp_size
    mgr.pp_size = prefill.pp_size
    mgr.pp_rank = pp_rank
    mgr.dcp_size = 1
    mgr.dcp_rank = 0
    mgr.agent = _RecordingAgent("kvcheck-prefill", regions=list(zip(kv_args.kv_data_ptrs, kv_args.kv_data_lens)))
    mgr.decode_kv_args_table = {}
    mgr.prep_handles = {}
    mgr.prep_handle_slice_src = None
    mgr.prep_handles_slice_dst = {}
    mgr.prep_handles_segment_src = {}
    mgr._use_strided_descs = True
    mgr._prepared_state_plans = {}
    mgr._state_layout_rejections = {}
    mgr._prepared_state_components = frozenset()
    mgr._dcp_pack_buffers = ()  # device staging not allocated on CPU (see module docstring)
    return mgr


def _init_prefill(sg: SimpleNamespace, mgr, kinds: list[str]) -> None:
    """What ``NixlKVManager.__init__`` computes for a prefill from its regions; raises the
    runtime's start-up error for mixed source kinds."""
    kv_args = mgr.kv_args
    if not hasattr(sg.nixl, "_normalize_kv_mem_kinds"):
        # 0.5.13 .. 0.5.14: no memory kinds; __init__ sets _num_slots_src from region 0.
        mgr.src_mem_kind = "VRAM"
        mgr._num_slots_src = kv_args.kv_data_lens[0] // kv_args.kv_item_lens[0] if kv_args.kv_item_lens else 0
        return
    kv_args.kv_data_mem_kinds = sg.nixl._normalize_kv_mem_kinds(list(kinds), len(kv_args.kv_data_ptrs))
    # 0.5.17 on: __init__ checks the source kinds only when there are regions; 0.5.15 ..
    # 0.5.16 check them always (read from the release's own __init__, which cannot run on CPU).
    guarded = _source_check_skips_empty(sg.nixl.NixlKVManager)
    mgr.src_mem_kind = sg.nixl._homogeneous_kv_mem_kind(kv_args.kv_data_mem_kinds, "source") if kv_args.kv_data_mem_kinds or not guarded else None
    if hasattr(sg.nixl, "num_kv_slots"):
        mgr._num_slots_src = sg.nixl.num_kv_slots(kv_args.kv_data_lens, kv_args.kv_item_lens) if kv_args.kv_item_lens else 0
    else:  # 0.5.15 .. 0.5.21: NixlKVManager.__init__ divides region 0's lengths
        mgr._num_slots_src = kv_args.kv_data_lens[0] // kv_args.kv_item_lens[0] if kv_args.kv_item_lens else 0


@lru_cache(maxsize=4)
def _source_check_skips_empty(manager_cls) -> bool:
    """True when the release's ``NixlKVManager.__init__`` skips the source-kind check for
    a prefill without KV regions (``... and self.kv_args.kv_data_mem_kinds``, 0.5.17 on)."""
    import inspect

    return "and self.kv_args.kv_data_mem_kinds" in inspect.getsource(manager_cls.__init__)


def _hetero_stand_in(mgr, record: dict, total_kv_heads: int | None):
    """Wraps ``_init_hetero_tp_prep_handle`` on one manager: records the call and the
    decode regions the runtime's ``get_mha_kv_ptrs_with_pp`` pairs the slices with, then
    (when the model's KV head count is known) runs the runtime's own head-slice setup,
    whose asserts are the runtime's verdict."""
    import inspect

    real = mgr._init_hetero_tp_prep_handle

    def stand_in(peer_name, decode_kv_args, src_mem_kind="VRAM", dst_mem_kind="VRAM"):
        _, _, dst_k, dst_v, layers = mgr.get_mha_kv_ptrs_with_pp(mgr.kv_args.kv_data_ptrs, decode_kv_args.dst_kv_ptrs)
        record.update(peer=peer_name, src_kind=src_mem_kind, dst_kind=dst_mem_kind, dst_ptrs=list(dst_k[:layers]) + list(dst_v[:layers]))
        if total_kv_heads:
            mgr.kv_args.total_kv_head_num = total_kv_heads
            mgr.kv_args.kv_head_num = max(1, total_kv_heads // mgr.attn_tp_size)
            if "src_mem_kind" in inspect.signature(real).parameters:
                real(peer_name, decode_kv_args, src_mem_kind, dst_mem_kind)
            else:  # 0.5.13 .. 0.5.14: no memory kinds
                real(peer_name, decode_kv_args)

    return stand_in


def decide_transfer(
    prefill: SideGeometry, decode: SideGeometry, *, decode_dcp_size: int = 1, pp_rank: int = 0,
    total_kv_heads: int | None = None, behaviour: Any = None,
) -> Plan:
    """The prefill's decision when the decode registers, by the runtime itself.

    Drives SGLang 0.5.23's ``NixlKVManager._add_remote_peer`` -> ``_prepare_payload_xfer``
    on a prefill manager made with ``object.__new__`` (see the module docstring for every
    function reached, and for the heterogeneous-TP head-slice setup, which is stood in).
    ``prefill`` is the geometry of prefill PP stage ``pp_rank``; ``decode`` what the decode
    registers. Returns a ``Plan`` read back from what the runtime prepared (descriptor
    lists, ``kv_xfer_segments``, destination kinds), or the exception it raised.
    """
    sg = _sglang()
    if not hasattr(sg.nixl.NixlKVManager, "_prepare_payload_xfer") and hasattr(sg.nixl.NixlKVManager, "send_kvcache_slice"):
        return _decide_per_request(sg, prefill, decode, pp_rank, total_kv_heads)  # 0.5.5 .. 0.5.12.post1
    if not hasattr(sg.nixl.NixlKVManager, "_prepare_payload_xfer"):
        raise KernelSetupError(f"the runtime kernel drives the prefill decision of releases with _prepare_payload_xfer (0.5.13 and later); SGLang {sg.version} differs")
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst, kernel="runtime")

    def fail(exc: BaseException) -> Plan:
        plan.error = RuntimeErrorPrediction(
            type=type(exc).__name__, message=str(exc), raised_by=PREFILL_BOOTSTRAP_THREAD, when="decode registration", operator_sees=HANG_300S
        )
        return plan

    peer_info = _registration(sg, decode, decode_dcp_size)
    mgr = _prefill_manager(sg, prefill, pp_rank)
    try:
        _init_prefill(sg, mgr, prefill.kinds)
    except AttributeError as exc:
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    except Exception as exc:  # NixlKVManager.__init__ raises this at start-up
        plan.error = RuntimeErrorPrediction(
            type=type(exc).__name__, message=str(exc), raised_by=PREFILL_STARTUP, when="start-up", operator_sees=PREFILL_FAILS_TO_START
        )
        return plan
    hetero: dict = {}
    mgr._init_hetero_tp_prep_handle = _hetero_stand_in(mgr, hetero, total_kv_heads)
    try:
        mgr._add_remote_peer(peer_info)
    except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    except Exception as exc:
        return fail(exc)

    agent: _RecordingAgent = mgr.agent
    dst_index = {ptr: j for j, ptr in enumerate(peer_info.dst_kv_ptrs)}
    if n_src == 0:
        plan.path = "nothing_to_transfer"
        return plan
    src_kind = mgr.src_mem_kind
    if getattr(peer_info, "requires_dcp_relayout", False):  # 0.5.17
        plan.path = "dcp_relayout"
        plan.dst_indices = list(peer_info.dcp_dst_region_indices)
        plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=peer_info.dst_homogeneous_mem_kind)]
        return plan
    if getattr(peer_info, "kv_xfer_segments", None) is not None:  # 0.5.15
        plan.path = "mixed_segments"
        indices: list[int] = []
        for seg in peer_info.kv_xfer_segments:
            plan.segments.append(Segment(start=seg.start, end=seg.end, src_kind=agent.kind_of(seg.src_handle), dst_kind=agent.kind_of(seg.dst_handle)))
            # one strided run per region (0.5.22 on) or one descriptor per slot (0.5.15 .. 0.5.21; slot 0 at the base)
            indices += [dst_index[run[0]] for run in agent.runs_of(seg.dst_handle) if run[0] in dst_index]
        plan.dst_indices = indices
        return plan
    if hetero:
        plan.path = "hetero_tp_slice"
        plan.dst_indices = [dst_index[p] for p in hetero["dst_ptrs"]]
        plan.segments = [Segment(start=0, end=n_src, src_kind=hetero["src_kind"], dst_kind=hetero["dst_kind"])]
        return plan
    if peer_info.agent_name in mgr.prep_handles and "" in mgr.prep_handles:
        src_handle, dst_handle = mgr.prep_handles[""], mgr.prep_handles[peer_info.agent_name]
        dst_kind = agent.kind_of(dst_handle)
        plan.path = "direct_to_host" if dst_kind == "DRAM" else "equal_tp"
        # 0.5.22 on: one strided descriptor per region; 0.5.13 .. 0.5.21: one per slot
        # (slot 0 at the region's base pointer).
        plan.dst_indices = [dst_index[run[0]] for run in agent.runs_of(dst_handle) if run[0] in dst_index]
        plan.segments = [Segment(start=0, end=n_src, src_kind=agent.kind_of(src_handle), dst_kind=dst_kind)]
        return plan
    raise KernelSetupError("SGLang's _prepare_payload_xfer returned without preparing a transfer kvcheck recognises")


class _StateRecordingAgent(_RecordingAgent):
    """The recording stand-in, extended for ``maybe_send_extra``: ``initialize_xfer`` and
    ``make_prepped_xfer`` record the transfer (descriptors or prepared selectors) and
    return a handle; ``transfer`` posts nothing and answers "PROC"."""

    def __init__(self, name: str):
        super().__init__(name)
        self.xfers: list[tuple[str, Any, Any]] = []

    def initialize_xfer(self, op, src_descs, dst_descs, peer_name, *args, **kwargs):
        self.xfers.append(("generic", src_descs, dst_descs))
        return 1000 + len(self.xfers)

    def make_prepped_xfer(self, op, src_handle, src_sel, dst_handle, dst_sel, *args, **kwargs):
        self.xfers.append(("prepared", src_sel, dst_sel))
        return 1000 + len(self.xfers)

    def transfer(self, handle, *args, **kwargs) -> str:
        return "PROC"


def _state_lists(g: SideGeometry, base: int, dims: dict[str, list[int]] | None):
    """(ptrs, data_lens, item_lens, dims, layer_ids) per component of ``g``, as
    ``append_state_component`` fills ``kv_args.state_*``; pointers are fake."""
    ptrs, lens, items, dpt, lids = [], [], [], [], []
    n = 0
    for i, t in enumerate(g.state_types):
        regs = g.component_regions(i)  # by component index (DeepSeek V4 registers "swa" twice)
        ptrs.append([base + (n + k) * _PTR_STRIDE for k in range(len(regs))])
        n += len(regs)
        items.append([r.item_len for r in regs])
        lens.append([r.item_len * NUM_SLOTS for r in regs])
        dpt.append([dims[r.part] for r in regs] if t == "mamba" and dims else [])
        lids.append([r.layer_id for r in regs] if t in ("mamba",) else [])
    return ptrs, lens, items, dpt, lids


def decide_states(
    prefill: SideGeometry, decode: SideGeometry, inp: Any, *, prefill_dims: dict | None = None, decode_dims: dict | None = None, pp_rank: int = 0,
) -> list:
    """The state components' transfer, by the runtime itself (SGLang 0.5.23).

    ``prefill`` is the geometry of prefill PP stage ``pp_rank`` (its manager gets that
    stage's ``pp_rank`` and the ``prefill_start_layer`` the runtime's
    ``_transfer_start_layer`` gives its pool: ``kvcheck.sglang.states.transfer_start_layer``);
    ``decode`` what the decode rank paired with that stage registers.

    Drives, on a prefill manager made like ``decide_transfer``'s: ``_prepare_state_xfer``
    (with the prepared components ``_prepared_state_component_indices`` selects on CUDA
    when ``kvcheck.sglang.states.prepared_path`` holds; CPU would select none), then
    ``maybe_send_extra`` for one request (state slot / page 1 on both sides) with the
    decode's registration parsed by ``KVArgsRegisterInfo.from_zmq``. ``inp`` is a
    ``kvcheck.sglang.states.StateInputs``; ``*_dims``: ``kvcheck.sglang.states.mamba_dims`` of each side.
    Returns ``StateDecision``s: the path each component took (which sender ran), the
    exception ``maybe_send_extra`` raised (it stops at the first; the components after it
    are left undecided, ``unchecked``), or corruption read back from the recorded
    descriptors (a write whose bytes per destination slot differ from what fills it)."""
    from kvcheck.sglang.states import _EMPTY_STAGE, PEER, StateDecision, _err, prepared_path, transfer_start_layer

    sg = _sglang()
    mgr = _prefill_manager(sg, prefill, pp_rank)
    mgr.kv_args.prefill_start_layer = transfer_start_layer(prefill, pp_rank)
    _init_prefill(sg, mgr, prefill.kinds)
    agent = _StateRecordingAgent("kvcheck-prefill")
    mgr.agent = agent
    mgr.pp_size = inp.prefill_pp
    mgr.attn_cp_size = inp.prefill_cp
    mgr.state_tp_size = prefill.attn_tp_size
    a = mgr.kv_args
    a.state_types = _state_types(sg, prefill.state_types)
    (a.state_data_ptrs, a.state_data_lens, a.state_item_lens, a.state_dim_per_tensor, a.state_layer_ids) = _state_lists(prefill, _PTR_BASE_SRC + (1 << 40), prefill_dims)
    # The conv sub-blocks the prefill registers (get_state_conv_shard_groups: conv
    # entries only; None where the runtime slices the axis as one).
    a.state_conv_shard_groups = [
        [(prefill_dims or {}).get("conv_shard_groups") if r.part == "conv" else None for r in prefill.state_regions if r.state_type == t]
        if t == "mamba" else []
        for t in prefill.state_types
    ]
    a.state_slice_outer_counts = [
        [(prefill_dims or {}).get(f"{r.part}_outer", 1) for r in prefill.state_regions if r.state_type == t] if t == "mamba" else []
        for t in prefill.state_types
    ]
    a.swa_kv_cache_layout = inp.swa_layout if "swa" in prefill.state_types else None
    if inp.total_kv_heads:
        a.total_kv_head_num = inp.total_kv_heads
        a.kv_head_num = max(1, inp.total_kv_heads // prefill.attn_tp_size)
    mgr._prepared_state_components = (
        frozenset(i for i, t in enumerate(a.state_types) if t in sg.nixl._PREPARED_STATE_TYPES) if prepared_path(prefill, decode, inp) else frozenset()
    )

    # The decode's registration with its state components.
    dst = _state_lists(decode, _PTR_BASE_DST + (1 << 40), decode_dims)
    peer_info = _registration(sg, decode, inp.decode_dcp)
    peer_info.dst_state_data_ptrs, peer_info.dst_state_data_lens, peer_info.dst_state_item_lens = dst[0], dst[1], dst[2]
    peer_info.dst_state_dim_per_tensor, peer_info.dst_state_layer_ids = dst[3], dst[4]
    peer_info.decode_tp_size = decode.attn_tp_size
    mgr.decode_kv_args_table = {peer_info.agent_name: peer_info}

    calls: list[str] = []

    def wrap(name: str, path: str):
        real = getattr(mgr, name)

        def stand_in(*args, **kwargs):
            calls.append(path)
            return real(*args, **kwargs)

        setattr(mgr, name, stand_in)

    for name, path in (("_send_mamba_state", "whole_generic"), ("_send_mamba_state_slice", "mamba_slice"), ("_send_swa_state_slice", "swa_head_slice"), ("_send_kvcache_generic", "whole_generic")):
        wrap(name, path)

    out = [StateDecision(index=i, state_type=t, pp_rank=pp_rank, n_entries=len(a.state_item_lens[i])) for i, t in enumerate(prefill.state_types)]
    try:
        mgr._prepare_state_xfer(peer_info)
    except AttributeError as exc:
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    plan = mgr._prepared_state_plans.get(peer_info.agent_name)
    prepared = set(plan.components) if plan is not None else set()
    for i, d in enumerate(out):
        # One request whose only state is component i (slot/page 1 on both sides): the
        # runtime skips components with no indices, so what it does is component i's.
        src_idx = [[1] if k == i else [] for k in range(len(out))]
        dst_idx = [[1] if k == i else [] for k in range(len(decode.state_types))]
        calls.clear()
        n0 = len(agent.xfers)
        try:
            for _ in mgr.maybe_send_extra(
                peer_info.agent_name, src_idx, peer_info.dst_state_data_ptrs, dst_idx, 0, decode.attn_tp_size, decode_tp_rank=0,
                dst_state_item_lens=peer_info.dst_state_item_lens, dst_state_dim_per_tensor=peer_info.dst_state_dim_per_tensor,
                dst_state_layer_ids=peer_info.dst_state_layer_ids,
            ):
                pass
        except AttributeError as exc:
            raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
        except Exception as exc:
            d.error = _err(str(exc).replace(peer_info.agent_name, PEER), type(exc).__name__)
            continue
        if i in prepared:
            d.path = "whole_prepared"
        elif calls:
            d.path = calls[0]
            recorded = agent.xfers[n0:]
            if d.state_type == "mamba" and recorded and all(len(_rows(dst)) == 0 for _, _, dst in recorded):
                # An empty NIXL transfer (a PP stage without Mamba layers): NIXL's call.
                d.path, d.unchecked = None, _EMPTY_STAGE.format(rank=pp_rank, t="mamba")
                continue
            bad = _corrupt_writes(recorded, d.path, i, peer_info, prefill.attn_tp_size, decode.attn_tp_size)
            bad = bad or _misplaced_writes(recorded, i, a.state_data_ptrs[i], peer_info, prefill, decode, pp_rank)
            if not bad and d.path == "mamba_slice":
                bad = _misplaced_channels(recorded, i, a, peer_info, prefill, decode, prefill_dims or {}, decode_dims or {})
            if bad:
                d.path, d.corruption = None, bad
        elif d.state_type == "dsa":
            d.path = "with_kv_regions"
    return out


def _corrupt_writes(xfers: list, path: str, i: int, peer_info: Any, tp_p: int, tp_d: int) -> str | None:
    """Read the recorded generic writes of component ``i`` back against the decode's slot 1
    of each entry: a write outside the slot, or a slot filled with other than its item
    length (x decode/prefill TP when a prefill rank fills part of it), is corruption."""
    if path == "swa_head_slice":
        return None
    ptrs = list(peer_info.dst_state_data_ptrs[i])
    lens = list(peer_info.dst_state_item_lens[i]) if i < len(peer_info.dst_state_item_lens) else []
    filled = [0] * len(ptrs)
    for kind, _src, dst in xfers:
        if kind != "generic":
            continue
        for row in (dst.tolist() if hasattr(dst, "tolist") else dst):
            addr, length = int(row[0]), int(row[1])
            j = next((k for k, p in enumerate(ptrs) if p <= addr < p + _PTR_STRIDE), None)
            if j is None or j >= len(lens):
                continue
            off = addr - ptrs[j]
            if off < lens[j] or off + length > 2 * lens[j]:
                return f"decode state entry {j}: a {length}-byte write at offset {off} leaves slot 1 ({lens[j]} bytes at {lens[j]})"
            filled[j] += length
    for j, got in enumerate(filled):
        want = lens[j] if path == "whole_generic" or tp_p <= tp_d else lens[j] * tp_d // tp_p
        if lens[j] and got and got != want:
            return f"decode state entry {j}: {got} bytes written into a {lens[j]}-byte slot (expected {want})"
    return None


def _rows(descs) -> list:
    return descs.tolist() if hasattr(descs, "tolist") else list(descs)


def _entry_at(ptrs: list[int], addr: int) -> int | None:
    return next((k for k, p in enumerate(ptrs) if p <= addr < p + _PTR_STRIDE), None)


def _misplaced_writes(xfers: list, i: int, src_ptrs: list[int], peer_info: Any, prefill: SideGeometry, decode: SideGeometry, pp_rank: int) -> str | None:
    """Read the recorded generic writes of component ``i`` back against the entries'
    layers: each descriptor's source entry (by address in the prefill's fake pointers) and
    destination entry must be the same model layer and part (K/V, conv/temporal); a
    write into another layer's or part's buffer is corruption (the layer the decode reads
    is never written, the one written is overwritten)."""
    t = prefill.state_types[i]
    src_regs = prefill.component_regions(i)
    dst_regs = decode.component_regions(i)
    dst_ptrs = list(peer_info.dst_state_data_ptrs[i])
    for kind, src, dst in xfers:
        if kind != "generic":
            continue
        for srow, drow in zip(_rows(src), _rows(dst)):
            s, j = _entry_at(list(src_ptrs), int(srow[0])), _entry_at(dst_ptrs, int(drow[0]))
            if s is None or j is None or s >= len(src_regs) or j >= len(dst_regs):
                continue
            a, b = src_regs[s], dst_regs[j]
            if (a.layer_id, a.part) != (b.layer_id, b.part):
                return (
                    f"prefill PP stage {pp_rank}: {t} entry {s} (layer {a.layer_id} {a.part}) is written into decode entry {j} "
                    f"(layer {b.layer_id} {b.part})"
                )
    return None


def _channel_ids(layout: list[int], tp: int, rank: int):
    """Identity of every local channel of a TP-sharded axis made of independently
    sharded sub-blocks (full dims ``layout``) on TP rank ``rank``: sub-block index x 2^32 +
    the channel's index within the whole sub-block."""
    import numpy as np

    ids = []
    for k, full in enumerate(layout):
        n = full // tp
        ids.append(k * (1 << 32) + rank * n + np.arange(n, dtype=np.int64))
    return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)


def _misplaced_channels(xfers: list, i: int, a: Any, peer_info: Any, prefill: SideGeometry, decode: SideGeometry, p_dims: dict, d_dims: dict) -> str | None:
    """Read the recorded Mamba slice writes of component ``i`` (prefill TP rank 0 into
    decode TP rank 0, as the stand-in manager runs) back as channels: each byte block's
    source channels (row, channel of the prefill rank's slot) must be the same channels
    of the model (sub-block and index within it) as its destination's. Layouts:
    ``conv_layout`` of each side's ``mamba_dims`` for conv entries; temporal entries are
    one head axis. Blocks whose element sizes differ between the sides are left to
    ``_corrupt_writes``."""
    import numpy as np

    t = prefill.state_types[i]
    src_regs = prefill.component_regions(i)
    dst_regs = decode.component_regions(i)
    src_ptrs, dst_ptrs = list(a.state_data_ptrs[i]), list(peer_info.dst_state_data_ptrs[i])
    src_lens, dst_lens = list(a.state_item_lens[i]), list(peer_info.dst_state_item_lens[i])
    tp_p, tp_d = prefill.attn_tp_size, decode.attn_tp_size

    def layout(dims: dict, tp: int, part: str) -> list[int]:
        return list(dims.get("conv_layout") or [dims["conv"] * tp]) if part == "conv" else [dims["temporal"] * tp]

    for kind, src, dst in xfers:
        if kind != "generic":
            continue
        for srow, drow in zip(_rows(src), _rows(dst)):
            s, j = _entry_at(src_ptrs, int(srow[0])), _entry_at(dst_ptrs, int(drow[0]))
            if s is None or j is None or s >= len(src_regs) or j >= len(dst_regs):
                continue
            part = src_regs[s].part
            if part not in ("conv", "temporal") or part not in p_dims or part not in d_dims:
                continue
            outer = p_dims.get(f"{part}_outer", 1)
            dim_s, dim_d = p_dims[part], d_dims[part]
            bpd_s, bpd_d = src_lens[s] // (dim_s * outer), dst_lens[j] // (dim_d * outer)
            if not bpd_s or bpd_s != bpd_d:
                continue
            off_s = int(srow[0]) - src_ptrs[s] - src_lens[s]
            off_d = int(drow[0]) - dst_ptrs[j] - dst_lens[j]
            row_s, c_s = divmod(off_s // bpd_s, dim_s)
            row_d, c_d = divmod(off_d // bpd_d, dim_d)
            n = int(srow[1]) // bpd_s
            ids_s = _channel_ids(layout(p_dims, tp_p, part), tp_p, 0)[c_s : c_s + n]
            ids_d = _channel_ids(layout(d_dims, tp_d, part), tp_d, 0)[c_d : c_d + n]
            if row_s != row_d or len(ids_s) != n or len(ids_d) != n or not np.array_equal(ids_s, ids_d):
                return (
                    f"Mamba {part} entry {s} (layer {src_regs[s].layer_id}): the slice moves prefill channels {c_s}..{c_s + n - 1} "
                    f"(row {row_s}) into decode channels {c_d}..{c_d + n - 1} (row {row_d}) of another sub-block or position "
                    f"(channel axis {layout(p_dims, tp_p, part)} at TP {tp_p}, {layout(d_dims, tp_d, part)} at TP {tp_d})"
                )
    return None


# ------------------------------------------- per-request transfer (0.5.5 .. 0.5.12.post1)


class _DescRecordingAgent(_RecordingAgent):
    """The recording stand-in for the per-request releases: ``get_xfer_descs`` records
    each descriptor list (rows of address, length, device) and its memory kind;
    ``initialize_xfer`` returns a handle and ``transfer`` posts nothing."""

    def __init__(self, name: str):
        super().__init__(name)
        self.descs: list[tuple[list[tuple[int, int, int]], str]] = []

    def get_xfer_descs(self, descs, mem_kind: str):
        import numpy as np

        rows = [tuple(int(x) for x in row) for row in np.asarray(descs, dtype=object).reshape(-1, 3).tolist()] if len(descs) else []
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
    frames = [b"None", b"127.0.0.1", b"0", _PEER_NAME.encode(), b"kvcheck-decode-metadata", b"".join(struct.pack("Q", p) for p in ptrs), b""]
    if "dst_state_data_ptrs" in fields:
        frames.append(b"")
    frames += [b"0", str(decode.attn_tp_size).encode(), b"0", str(decode.item_lens[0] if decode.regions else 0).encode()]
    if "dst_state_item_lens" in fields:
        frames += [b"", b""]
    return frames


class _StopWorker(BaseException):
    """Ends the release's ``transfer_worker`` loop after one chunk (raised by the queue's
    second ``get``, outside the loop's ``except Exception``)."""


def _run_transfer_worker(sg: SimpleNamespace, mgr, room: int):
    """Run the 0.5.12 release's own ``NixlKVManager.transfer_worker`` on one non-last
    chunk (prefill page 1, no staging) from a one-item stand-in queue; returns the
    exception it caught and recorded in ``mgr.exceptions`` (it fails the request), or None."""
    import numpy as np

    mgr.enable_staging = False
    mgr.exceptions = {}
    mgr.failure_records, mgr.failure_lock = {}, threading.Lock()
    chunk = sg.nixl.TransferKVChunk(
        room=room, prefill_kv_indices=np.array([1], dtype=np.int32), index_slice=slice(0, 1), is_last=False, chunk_id=0,
        prefill_aux_index=None, state_indices=None,
    )

    class OneChunk:
        def __init__(self):
            self.items = [chunk]

        def get(self, *args, **kwargs):
            if self.items:
                return self.items.pop()
            raise _StopWorker

    try:
        mgr.transfer_worker(OneChunk())
    except _StopWorker:
        pass
    exc = mgr.exceptions.get(room)
    if isinstance(exc, AttributeError):  # a gap in the stand-in, not the runtime's verdict
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}")
    return exc


def _decide_per_request(sg: SimpleNamespace, prefill: SideGeometry, decode: SideGeometry, pp_rank: int, total_kv_heads: int | None) -> Plan:
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
    ti = sg.nixl.TransferInfo.from_zmq([str(room).encode(), b"127.0.0.1", b"0", _PEER_NAME.encode(), np.array([2], dtype=np.int32).tobytes(), b"0", b"1"])
    try:
        mgr._add_remote_peer(peer)
        mgr.transfer_infos[room] = {_PEER_NAME: ti}
        if hasattr(cls, "transfer_worker"):  # 0.5.12: the chunk goes through a transfer worker
            exc = _run_transfer_worker(sg, mgr, room)
            if exc is not None:
                fn = called[-1] if called else "transfer_worker"
                plan.error = RuntimeErrorPrediction(
                    type=type(exc).__name__, message=str(exc), raised_by=PREFILL_WORKER.format(fn=fn), when="first request", operator_sees=PREFILL_REQUEST_FAILS
                )
                return plan
        else:
            mgr.add_transfer_request(room, np.array([1], dtype=np.int32), slice(0, 1), False, 0)
    except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    except Exception as exc:
        fn = called[-1] if called else "add_transfer_request"
        plan.error = RuntimeErrorPrediction(
            type=type(exc).__name__, message=str(exc), raised_by=PREFILL_SEND.format(fn=fn), when="first request", operator_sees=PREFILL_SCHEDULER_DIES
        )
        return plan
    if len(agent.descs) != 2 or not called:
        raise KernelSetupError("SGLang's add_transfer_request did not build one pair of descriptor lists")
    (src_rows, src_kind), (dst_rows, dst_kind) = agent.descs
    first: dict[int, tuple[int, int]] = {}
    for (s_addr, s_len, _), (d_addr, _, _) in zip(src_rows, dst_rows):
        i = (s_addr - _PTR_BASE_SRC) // _PTR_STRIDE
        first.setdefault(i, ((d_addr - _PTR_BASE_DST) // _PTR_STRIDE, s_len))
    plan.path = "equal_tp" if called[0] == "send_kvcache" else "hetero_tp_slice"
    plan.dst_indices = [first[i][0] if i in first else -1 for i in range(n_src)]
    plan.write_lens = [first[i][1] if i in first else 0 for i in range(n_src)]
    plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=dst_kind)]
    return plan
