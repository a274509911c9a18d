"""The state components' send (``MooncakeKVManager.maybe_send_extra``), per release."""

from __future__ import annotations

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.mooncake.common import (
    CORRUPTS,
    DST_PAGE,
    NEWEST,
    SRC_PAGE,
    STRIDE,
    TRANSFER_WORKER,
    WORKER_DIES,
    WRITES,
    at_least,
    behaviour,
)
from kvcheck.sglang.plan import RuntimeErrorPrediction

# The virtual address space of the state buffers in ``simulate_state_writes`` (and in the
# runtime kernel's ``run_state_request``): apart from the KV regions' (``SRC_BASE``/``DST_BASE``).
SRC_STATE_BASE = 0x6F00_0000_0000
DST_STATE_BASE = 0x6E00_0000_0000


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
    differ = f"; {state_cause(prefill, decode)}" if state_input_differences(prefill, decode) else ""
    return None, (
        f"Mooncake's state transfer ({', '.join(kinds)}: maybe_send_extra) between different state layouts "
        f"(attention TP {prefill.attn_tp_size} -> {decode.attn_tp_size}, PP {prefill.pp_size} -> {decode.pp_size}"
        f"{differ}) is not restated"
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
    up to 0.5.11 (``kv_args.state_type``), a list from 0.5.12 (``kv_args.state_types``,
    ``setup_state_kv_args``); Mamba buffers go i -> i at
    the source item length (``_send_mamba_state``), SWA/NSA through ``_send_kvcache_generic``
    over the state buffer lists. Restated as certain only for twin layouts at PP 1 (the
    generic path slices state lists by the stage's start layer, not restated for PP > 1):
    every buffer pairs with its twin at its own stride. DeepSeek V4 on 0.5.12 ..
    0.5.13.post1 (one ``swa`` component, an MLA pool): ``legacy_dsv4_state_send``."""

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
    if len(types) > 1 and not at_least(version, "0.5.12"):
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
    if prefill.pool == decode.pool == "DSV4" and _legacy_dsv4(version):
        return legacy_dsv4_state_send(prefill, decode, version)
    return (
        None,
        f"Mooncake's state transfer ({', '.join(kinds)}) between different state layouts on SGLang {version} is not "
        "restated",
    )


def _legacy_dsv4(version: str) -> bool:
    """0.5.12 .. 0.5.13.post1: DeepSeek V4's one ``swa`` state component (``kvcheck.sglang.dsv4``)."""
    from kvcheck.sglang.dsv4 import LEGACY_END, LEGACY_FIRST

    return at_least(version, LEGACY_FIRST) and not at_least(version, LEGACY_END)


def legacy_dsv4_state_send(
    prefill: SideGeometry, decode: SideGeometry, version: str
) -> tuple[RuntimeErrorPrediction | None, str | None]:
    """``maybe_send_extra``'s SWA branch on a DeepSeek V4 pool, 0.5.12 .. 0.5.13.post1, PP 1:
    ``_send_kvcache_generic`` over the component's buffers with the PREFILL's item lengths;
    the pool is an MLA backend, so ``get_mla_kv_ptrs_with_pp`` pairs the buffers i -> i
    when both sides register as many, and each page is written at ``dst_ptr + dst_index *
    prefill item length``. A decode buffer of another item length (the compress-state rings
    of a side that alone runs a ``--speculative-algorithm``: 16 / 256 rows against 8 / 128)
    takes the rows at the wrong offsets: nothing is raised (``SilentCorruption``); the message
    names the inputs that differ (``state_cause``: the speculative algorithm, online C128
    compression ``SGLANG_OPT_USE_ONLINE_COMPRESS`` (one row of 3 x head_dim against 128 of
    2 x head_dim), the model's head dims). Read in
    0.5.12.post1 and 0.5.13: each side sizes its rings from its own server args
    (``DeepSeekV4TokenToKVPool.get_ring_size`` -> ``get_compress_state_ring_size``, any
    ``speculative_algorithm``; no PD hook aligns the prefill's), registers ``row bytes x
    ring_size`` per item (``get_state_buf_infos``), and ``utils.is_mla_backend`` counts the V4
    pool as MLA. Unequal
    buffer counts are re-sliced by ``_mla_slice_ptrs_for_pp``: not restated (unchecked).
    Returns ``(error, unchecked reason)``."""
    if prefill.state_types != ["swa"] or decode.state_types != ["swa"]:
        return None, f"SGLang {version}'s DeepSeek V4 state components {prefill.state_types} -> {decode.state_types}"
    n_src, n_dst = len(prefill.state_regions), len(decode.state_regions)
    if n_src != n_dst:
        return None, (
            f"SGLang {version}'s DeepSeek V4 state buffers {n_src} -> {n_dst} (get_mla_kv_ptrs_with_pp re-slices "
            "unequal lists by compress ratio; not restated)"
        )
    for a, c in zip(prefill.state_regions, decode.state_regions, strict=True):
        if a.item_len != c.item_len or a.layer_id != c.layer_id:
            what = (
                f"prefill 'swa' state buffer {a.index} (layer {a.layer_id}, item length {a.item_len}) is written into "
                f"decode buffer {c.index} (layer {c.layer_id}) at stride {a.item_len}, but the decode's item length "
                f"there is {c.item_len}: rows land at the wrong offsets"
            )
            if a.item_len != c.item_len and a.layer_id == c.layer_id:
                what += f" ({state_cause(prefill, decode)})"
            return RuntimeErrorPrediction(
                type="SilentCorruption",
                message=what,
                raised_by=WRITES.format(fn="maybe_send_extra -> _send_kvcache_generic"),
                when="first request",
                operator_sees=CORRUPTS,
            ), None
    return None, None


def state_input_differences(prefill: SideGeometry, decode: SideGeometry) -> list[tuple[str, str, str]]:
    """The inputs the state buffers' item lengths derive from (``SideGeometry.state_inputs``,
    filled per release by the pool's geometry) that the two sides set to values the release
    reads differently: (input, as the prefill sets it, as the decode sets it), in the
    geometry's order."""
    out = []
    for name, (value, shown) in prefill.state_inputs.items():
        other = decode.state_inputs.get(name)
        if other is not None and other[0] != value:
            out.append((name, shown, other[1]))
    return out


def state_cause(prefill: SideGeometry, decode: SideGeometry) -> str:
    """Words for what makes the two sides' state item lengths differ: the inputs that
    differ (``state_input_differences``), or, when none of the restated ones does, that
    the sizes differ for a reason kvcheck does not name."""
    diff = state_input_differences(prefill, decode)
    if not diff:
        return "the two sides size their state buffers differently"
    said = "; ".join(f"prefill {p}, decode {d}" for _name, p, d in diff)
    return f"the state item lengths derive from inputs the two sides set differently: {said}"


def state_fix(prefill: SideGeometry, decode: SideGeometry) -> str:
    """The fix for a state item-length mismatch: make the inputs that differ equal."""
    diff = state_input_differences(prefill, decode)
    if not diff:
        return (
            "Run both servers with the same model, flags and environment that size the state buffers, so that every "
            "state buffer has the same item length on both sides."
        )
    names = ", ".join(name for name, _, _ in diff)
    return (
        f"Set {names} the same on both servers (each sizes the state buffers), so that every state buffer has the "
        "same item length on both sides."
    )


def simulate_state_writes(
    prefill: SideGeometry, decode: SideGeometry, *, src_index: int = SRC_PAGE, dst_index: int = DST_PAGE
) -> list[tuple[int, int, int]]:
    """The writes ``legacy_dsv4_state_send`` restates for one state page (prefill index
    ``src_index`` to decode index ``dst_index``), in the state address space
    (``SRC_STATE_BASE``/``DST_STATE_BASE`` + buffer x ``STRIDE``): (source, destination,
    length) per buffer, the length and both offsets by the prefill's item length."""
    out = []
    for i, a in enumerate(prefill.state_regions[: len(decode.state_regions)]):
        out.append(
            (
                SRC_STATE_BASE + i * STRIDE + src_index * a.item_len,
                DST_STATE_BASE + i * STRIDE + dst_index * a.item_len,
                a.item_len,
            )
        )
    return sorted(out)
