"""State components (0.5.22/0.5.23): the prefill's ``maybe_send_extra`` driven with a
recording agent, each component's writes read back (corrupting, misplaced, channels).
"""

from __future__ import annotations

from typing import Any

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.runtime_kernel.bootstrap import _state_types
from kvcheck.sglang.runtime_kernel.driver import (
    _PTR_BASE_DST,
    _PTR_BASE_SRC,
    _PTR_STRIDE,
    NUM_SLOTS,
    KernelSetupError,
    _RecordingAgent,
    _sglang,
)
from kvcheck.sglang.runtime_kernel.transfer import (
    _init_prefill,
    _prefill_manager,
    _registration,
)


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
    prefill: SideGeometry,
    decode: SideGeometry,
    inp: Any,
    *,
    prefill_dims: dict | None = None,
    decode_dims: dict | None = None,
    pp_rank: int = 0,
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
    from kvcheck.sglang.states import (
        _EMPTY_STAGE,
        PEER,
        StateDecision,
        _err,
        prepared_path,
        transfer_start_layer,
    )

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
    (a.state_data_ptrs, a.state_data_lens, a.state_item_lens, a.state_dim_per_tensor, a.state_layer_ids) = _state_lists(
        prefill, _PTR_BASE_SRC + (1 << 40), prefill_dims
    )
    # The conv sub-blocks the prefill registers (get_state_conv_shard_groups: conv
    # entries only; None where the runtime slices the axis as one).
    a.state_conv_shard_groups = [
        [
            (prefill_dims or {}).get("conv_shard_groups") if r.part == "conv" else None
            for r in prefill.state_regions
            if r.state_type == t
        ]
        if t == "mamba"
        else []
        for t in prefill.state_types
    ]
    a.state_slice_outer_counts = [
        [(prefill_dims or {}).get(f"{r.part}_outer", 1) for r in prefill.state_regions if r.state_type == t]
        if t == "mamba"
        else []
        for t in prefill.state_types
    ]
    a.swa_kv_cache_layout = inp.swa_layout if "swa" in prefill.state_types else None
    if inp.total_kv_heads:
        a.total_kv_head_num = inp.total_kv_heads
        a.kv_head_num = max(1, inp.total_kv_heads // prefill.attn_tp_size)
    mgr._prepared_state_components = (
        frozenset(i for i, t in enumerate(a.state_types) if t in sg.nixl._PREPARED_STATE_TYPES)
        if prepared_path(prefill, decode, inp)
        else frozenset()
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

    for name, path in (
        ("_send_mamba_state", "whole_generic"),
        ("_send_mamba_state_slice", "mamba_slice"),
        ("_send_swa_state_slice", "swa_head_slice"),
        ("_send_kvcache_generic", "whole_generic"),
    ):
        wrap(name, path)

    out = [
        StateDecision(index=i, state_type=t, pp_rank=pp_rank, n_entries=len(a.state_item_lens[i]))
        for i, t in enumerate(prefill.state_types)
    ]
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
                peer_info.agent_name,
                src_idx,
                peer_info.dst_state_data_ptrs,
                dst_idx,
                0,
                decode.attn_tp_size,
                decode_tp_rank=0,
                dst_state_item_lens=peer_info.dst_state_item_lens,
                dst_state_dim_per_tensor=peer_info.dst_state_dim_per_tensor,
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
                bad = _misplaced_channels(
                    recorded, i, a, peer_info, prefill, decode, prefill_dims or {}, decode_dims or {}
                )
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
        for row in dst.tolist() if hasattr(dst, "tolist") else dst:
            addr, length = int(row[0]), int(row[1])
            j = next((k for k, p in enumerate(ptrs) if p <= addr < p + _PTR_STRIDE), None)
            if j is None or j >= len(lens):
                continue
            off = addr - ptrs[j]
            if off < lens[j] or off + length > 2 * lens[j]:
                return (
                    f"decode state entry {j}: a {length}-byte write at offset {off} leaves slot 1 ({lens[j]} "
                    f"bytes at {lens[j]})"
                )
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


def _misplaced_writes(
    xfers: list, i: int, src_ptrs: list[int], peer_info: Any, prefill: SideGeometry, decode: SideGeometry, pp_rank: int
) -> str | None:
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
        for srow, drow in zip(_rows(src), _rows(dst), strict=False):
            s, j = _entry_at(list(src_ptrs), int(srow[0])), _entry_at(dst_ptrs, int(drow[0]))
            if s is None or j is None or s >= len(src_regs) or j >= len(dst_regs):
                continue
            a, b = src_regs[s], dst_regs[j]
            if (a.layer_id, a.part) != (b.layer_id, b.part):
                return (
                    f"prefill PP stage {pp_rank}: {t} entry {s} (layer {a.layer_id} {a.part}) is written into decode "
                    f"entry {j} "
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


def _misplaced_channels(
    xfers: list, i: int, a: Any, peer_info: Any, prefill: SideGeometry, decode: SideGeometry, p_dims: dict, d_dims: dict
) -> str | None:
    """Read the recorded Mamba slice writes of component ``i`` (prefill TP rank 0 into
    decode TP rank 0, as the stand-in manager runs) back as channels: each byte block's
    source channels (row, channel of the prefill rank's slot) must be the same channels
    of the model (sub-block and index within it) as its destination's. Layouts:
    ``conv_layout`` of each side's ``mamba_dims`` for conv entries; temporal entries are
    one head axis. Blocks whose element sizes differ between the sides are left to
    ``_corrupt_writes``."""
    import numpy as np

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
        for srow, drow in zip(_rows(src), _rows(dst), strict=False):
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
                    f"Mamba {part} entry {s} (layer {src_regs[s].layer_id}): the slice moves prefill channels "
                    f"{c_s}..{c_s + n - 1} "
                    f"(row {row_s}) into decode channels {c_d}..{c_d + n - 1} (row {row_d}) of another sub-block or "
                    "position "
                    f"(channel axis {layout(p_dims, tp_p, part)} at TP {tp_p}, {layout(d_dims, tp_d, part)} at TP "
                    f"{tp_d})"
                )
    return None
