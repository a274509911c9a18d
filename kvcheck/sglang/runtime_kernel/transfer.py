"""Transfer (prefill, 0.5.13 on): the prefill's decision when the decode registers, driven
on a prefill ``NixlKVManager`` (``_add_remote_peer`` -> ``_prepare_payload_xfer``).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan import (
    HANG_300S,
    PREFILL_BOOTSTRAP_THREAD,
    PREFILL_FAILS_TO_START,
    PREFILL_STARTUP,
    Plan,
    Segment,
)
from kvcheck.sglang.runtime_kernel.driver import (
    _PEER_NAME,
    _PTR_BASE_DST,
    _PTR_BASE_SRC,
    NUM_SLOTS,
    KernelSetupError,
    _fake_ptrs,
    _RecordingAgent,
    _sglang,
    raised,
)
from kvcheck.sglang.runtime_kernel.per_request import _decide_per_request


def _kv_args(sg: SimpleNamespace, g: SideGeometry, ptr_base: int):
    """SGLang's own ``KVArgs`` with what both sides' ``NixlKVManager`` set alike: one
    stand-in pointer per KV region from ``ptr_base``, item lengths (bytes per page), data
    lengths (``NUM_SLOTS`` items a region), no layer ids or aux buffers, GPU 0, engine
    rank 0, the side's page size."""
    kv_args = sg.KVArgs()
    kv_args.kv_data_ptrs = _fake_ptrs(ptr_base, g.n)
    kv_args.kv_item_lens = list(g.item_lens)
    kv_args.kv_data_lens = [item * NUM_SLOTS for item in g.item_lens]
    kv_args.kv_layer_ids = []
    kv_args.aux_data_ptrs = []
    kv_args.gpu_id = 0
    kv_args.engine_rank = 0
    kv_args.page_size = g.page_size
    return kv_args


def _registration(sg: SimpleNamespace, decode: SideGeometry, decode_dcp_size: int):
    """The decode's registration frames, built by its own ``build_receiver_registration_message``
    and parsed by the prefill's ``KVArgsRegisterInfo.from_zmq``."""
    kv_args = _kv_args(sg, decode, _PTR_BASE_DST)
    kv_args.kv_data_mem_kinds = list(decode.kinds)
    kv_args.state_data_ptrs = []
    kv_args.state_item_lens = []
    kv_args.state_data_lens = []
    kv_args.state_dim_per_tensor = []
    kv_args.state_layer_ids = []
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
    pack = getattr(sg.nixl, "pack_int_lists", None) or sg.common.pack_int_lists
    item = a.kv_item_lens[0] if a.kv_item_lens else 0
    slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
    return [
        sg.nixl.GUARD,
        b"None",
        mgr.local_ip.encode(),
        str(mgr.rank_port).encode(),
        mgr.agent.name.encode(),
        mgr.agent.get_agent_metadata(),
        b"".join(struct.pack("Q", p) for p in a.kv_data_ptrs),
        b"",
        pack([], "Q"),
        str(a.gpu_id).encode(),
        str(mgr.attn_tp_size).encode(),
        str(a.engine_rank).encode(),
        str(item).encode(),
        pack([], "I"),
        pack([], "I"),
        b"",
        b"",
        str(slots).encode(),
    ]


def _registration_frames_0_5_17(sg: SimpleNamespace, mgr) -> list:
    """The 23 frames (after ``GUARD``) a 0.5.17 .. 0.5.22 decode's
    ``NixlKVReceiver._register_kv_args`` sends, restated from its ``send_multipart`` call
    (those releases build them inline, not in ``build_receiver_registration_message``);
    parsed below by the release's own ``KVArgsRegisterInfo.from_zmq``."""
    import struct

    a = mgr.kv_args
    pack = getattr(sg.nixl, "pack_int_lists", None) or sg.common.pack_int_lists
    if "dst_dcp_size" not in {f.name for f in dataclasses.fields(sg.nixl.KVArgsRegisterInfo)}:
        # 0.5.15 .. 0.5.16: 19 frames (memory kinds and item lengths appended to 0.5.13's)
        slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
        return _registration_frames_0_5_13(sg, mgr)[:-1] + [
            str(slots).encode(),
            sg.nixl._pack_kv_mem_kinds(a.kv_data_mem_kinds),
            b"".join(struct.pack("Q", x) for x in a.kv_item_lens),
        ]
    if hasattr(sg.nixl, "num_kv_slots"):  # 0.5.22
        slots = sg.nixl.num_kv_slots(a.kv_data_lens, a.kv_item_lens) if a.kv_item_lens else 0
    else:  # 0.5.17 .. 0.5.21: region 0's data length over its item length
        slots = a.kv_data_lens[0] // a.kv_item_lens[0] if a.kv_item_lens else 0
    return _registration_frames_0_5_13(sg, mgr)[:-1] + [
        str(slots).encode(),
        sg.nixl._pack_kv_mem_kinds(a.kv_data_mem_kinds),
        b"".join(struct.pack("Q", x) for x in a.kv_item_lens),
        pack([], "I"),
        b"".join(struct.pack("I", x) for x in a.kv_layer_ids),
        str(mgr.dcp_size).encode(),
        str(mgr.dcp_rank).encode(),
    ]


def _prefill_manager(sg: SimpleNamespace, prefill: SideGeometry, pp_rank: int):
    """A prefill manager with what ``NixlKVManager.__init__`` sets for a prefill. May raise
    the runtime's start-up error (mixed source kinds)."""
    n = prefill.n
    kv_args = _kv_args(sg, prefill, _PTR_BASE_SRC)
    kv_args.state_types = []
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
    mgr.agent = _RecordingAgent(
        "kvcheck-prefill", regions=list(zip(kv_args.kv_data_ptrs, kv_args.kv_data_lens, strict=False))
    )
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
    mgr.src_mem_kind = (
        sg.nixl._homogeneous_kv_mem_kind(kv_args.kv_data_mem_kinds, "source")
        if kv_args.kv_data_mem_kinds or not guarded
        else None
    )
    if hasattr(sg.nixl, "num_kv_slots"):
        mgr._num_slots_src = (
            sg.nixl.num_kv_slots(kv_args.kv_data_lens, kv_args.kv_item_lens) if kv_args.kv_item_lens else 0
        )
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
        record.update(
            peer=peer_name,
            src_kind=src_mem_kind,
            dst_kind=dst_mem_kind,
            dst_ptrs=list(dst_k[:layers]) + list(dst_v[:layers]),
        )
        if total_kv_heads:
            mgr.kv_args.total_kv_head_num = total_kv_heads
            mgr.kv_args.kv_head_num = max(1, total_kv_heads // mgr.attn_tp_size)
            if "src_mem_kind" in inspect.signature(real).parameters:
                real(peer_name, decode_kv_args, src_mem_kind, dst_mem_kind)
            else:  # 0.5.13 .. 0.5.14: no memory kinds
                real(peer_name, decode_kv_args)

    return stand_in


def decide_transfer(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    decode_dcp_size: int = 1,
    pp_rank: int = 0,
    total_kv_heads: int | None = None,
    behaviour: Any = None,
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
    if not hasattr(sg.nixl.NixlKVManager, "_prepare_payload_xfer") and hasattr(
        sg.nixl.NixlKVManager, "send_kvcache_slice"
    ):
        return _decide_per_request(sg, prefill, decode, pp_rank, total_kv_heads)  # 0.5.5 .. 0.5.12.post1
    if not hasattr(sg.nixl.NixlKVManager, "_prepare_payload_xfer"):
        raise KernelSetupError(
            "the runtime kernel drives the prefill decision of releases with _prepare_payload_xfer (0.5.13 and "
            f"later); SGLang {sg.version} differs"
        )
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst, kernel="runtime")

    def fail(exc: BaseException) -> Plan:
        plan.error = raised(exc, PREFILL_BOOTSTRAP_THREAD, "decode registration", HANG_300S)
        return plan

    peer_info = _registration(sg, decode, decode_dcp_size)
    mgr = _prefill_manager(sg, prefill, pp_rank)
    try:
        _init_prefill(sg, mgr, prefill.kinds)
    except AttributeError as exc:
        raise KernelSetupError(f"the stand-in prefill manager lacks what SGLang reads: {exc}") from exc
    except Exception as exc:  # NixlKVManager.__init__ raises this at start-up
        plan.error = raised(exc, PREFILL_STARTUP, "start-up", PREFILL_FAILS_TO_START)
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
            plan.segments.append(
                Segment(
                    start=seg.start,
                    end=seg.end,
                    src_kind=agent.kind_of(seg.src_handle),
                    dst_kind=agent.kind_of(seg.dst_handle),
                )
            )
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
