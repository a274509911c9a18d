"""The static preflight: sides -> geometry -> plan -> checks -> report.

Pure and fast: never imports SGLang, torch or nixl unless ``kernel="runtime"`` (or
``"auto"`` with SGLang importable) asks for SGLang's own decision code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvcheck.checks import REGISTRY, CheckContext, Finding, PairFacts, Severity
from kvcheck.report.model import Report, SideSummary, verdict_of
from kvcheck.sglang import plan as builtin
from kvcheck.sglang.geometry import SideGeometry, derive_geometry
from kvcheck.sglang.kernel import DecisionKernel, choose_kernel, runs_for
from kvcheck.sglang.pd_release import behaviour as pd_behaviour
from kvcheck.sglang.plan import PairInfo, Plan, RuntimeErrorPrediction
from kvcheck.sglang.pools import NOT_MODELED
from kvcheck.sglang.resolved import decide_kv_dtype_over_gpus
from kvcheck.sides import Side


def resolved_kv_dtype_str(side: Side) -> str:
    """``model_runner.kv_cache_dtype_str``, as the side's release resolves it on its GPU
    (``kvcheck.sglang.resolved``: the DSA rewrite, then the FP8 KV quant config)."""
    from kvcheck.sglang.resolved import resolved_kv_dtype_str as resolved

    return resolved(side)


def _server_args_kv_dtype(side: Side) -> str:
    """``server_args.kv_cache_dtype`` after the release's post-processing (compared up to 0.5.16)."""
    from kvcheck.sglang.resolved import server_args_dtype

    return server_args_dtype(side)[0]


def pair_info(side: Side, geometry: SideGeometry) -> PairInfo:
    """The scalars the bootstrap server reports (prefill) or the decode compares.

    State components, the DSV4 KV layout, the DSpark layout and hybrid-MLA come from the
    geometry when its pool carries them (``state_types``, ``kv_layout``,
    ``dsv41_spec_layout``, ``is_hybrid_mla``); a pool without them has none."""
    return PairInfo(
        page_size=geometry.page_size,
        kv_cache_dtype_str=resolved_kv_dtype_str(side),
        kv_cache_dtype_flag=_server_args_kv_dtype(side),
        attn_tp_size=side.args.attn_tp_size,
        attn_cp_size=side.args.attn_cp_size,
        pp_size=side.args.pp_size,
        dcp_size=side.args.dcp_size,
        is_mla=geometry.is_mla,
        # ``kv_args.is_hybrid_mla_backend = is_mla_backend(pool.full_kv_pool)`` for a
        # ``HybridLinearKVPool`` (disaggregation/utils.py, 0.5.16+): an MLA linear hybrid.
        is_hybrid_mla=side.model.hybrid == "linear" and side.model.is_mla,
        enable_kv_cache_sharding=side.args.enable_kv_cache_sharding,
        state_types=[str(getattr(t, "value", t)) for t in (getattr(geometry, "state_types", None) or [])],
        kv_layout=getattr(geometry, "kv_layout", None),
        dsv41_spec_layout=getattr(geometry, "dsv41_spec_layout", None),
        hisparse=side.args.enable_hisparse,
    )


def _summary(side: Side, g: SideGeometry | None) -> SideSummary:
    s = SideSummary(
        role=side.role,
        origin=side.origin,
        model=side.model.architecture,
        pool=g.pool if g else side.model.attention,
        sglang_version=side.sglang_version,
        version_source=side.version_source,
    )
    if g is not None:
        s.attn_tp_size, s.pp_size, s.page_size = g.attn_tp_size, g.pp_size, g.page_size
        s.kv_cache_dtype, s.n_regions = g.kv_cache_dtype, g.n
        s.kinds = {k: g.kinds.count(k) for k in ("VRAM", "DRAM") if g.kinds.count(k)}
        s.item_lens = sorted(set(g.item_lens))
        s.num_draft_regions = g.num_draft_regions
    return s


def run_preflight(prefill: Side, decode: Side, *, kernel: str = "builtin", ignore: Iterable[str] = ()) -> Report:
    """Check one prefill/decode pair.

    Returns a ``Report``; raises ``InputError`` for inputs that cannot be checked
    (exit 2). ``ignore``: check or finding ids to accept; a finding that predicts a
    runtime error stays visible (marked ignored) and still counts as ignored only.
    """
    kernel_name, k = choose_kernel(kernel)
    from kvcheck.checks.ids import validate_ignore

    ignore = set(ignore)
    validate_ignore(ignore)
    pg = dg = None
    plan: Plan | None = None
    from kvcheck.sglang.releases import side_release

    # A side on a release kvcheck does not model is never judged with another release's
    # code: only the unknown-release check runs (verdict unchecked, exit 4).
    releases_known = side_release(prefill)[1] and side_release(decode)[1]
    b_p, b_d = pd_behaviour(prefill.sglang_version), pd_behaviour(decode.sglang_version)
    extra = PairFacts(pd_behaviour=(b_p, b_d), timeouts=disaggregation_timeouts(prefill, decode))
    modeled = releases_known and prefill.model.attention != "not_modeled" and decode.model.attention != "not_modeled"
    if modeled:
        pg = derive_geometry(prefill)
        dg = derive_geometry(decode)
        # A pool the model reads but the args make unmodeled (FP4 KV): no plan, unchecked.
        modeled = pg.pool != NOT_MODELED and dg.pool != NOT_MODELED
    if modeled and pg is not None and dg is not None:
        p_info, d_info = pair_info(prefill, pg), pair_info(decode, dg)
        extra["pair_info"] = (p_info, d_info)
        if b_d.bootstrap_modeled:
            kb = k if _kernel_runs(k, kernel_name, b_d) else builtin
            found = builtin.bootstrap_checks(p_info, d_info, b_d)
            first = kb.bootstrap_error(p_info, d_info, b_d)
            if first is not None:
                # The runtime raises the first; the builtin restatement finds the others.
                rest = [(fid, rt) for fid, rt in found if rt.message != first.message]
                fid = next((f for f, rt in found if rt.message == first.message), _bootstrap_id(first.message))
                found = [(fid, first)] + rest
            extra["bootstrap_errors"] = [
                (fid, rt, _bootstrap_detail(fid, rt.message, prefill, decode, p_info, d_info)) for fid, rt in found
            ]
            decide_kv_dtype_over_gpus(prefill, decode, b_d, extra)  # resolved strings; never on an assumed GPU
        # -- backend hook (mooncake branch, issue 18): a prefill that does not run NIXL is
        # decided by its own backend (kvcheck.checks.mooncake); the NIXL-only checks skip.
        from kvcheck.checks.mooncake import decide_transfer_for_backend

        extra["kernel"] = kernel_name  # --kernel runtime drives SGLang's own Mooncake worker

        backend_plan = decide_transfer_for_backend(prefill, decode, pg, dg, extra)
        if backend_plan is not None:
            plan = backend_plan
        elif "skip_checks" in extra:
            pass  # an unmodeled backend: no plan (backend-unchecked says so)
        elif b_p.decision_modeled:
            kd = k if _kernel_runs(k, kernel_name, b_p) else builtin
            plan, stages = _decide_all_stages(kd, prefill, decode, pg, dg, b_p)
            plan.kernel = kernel_name
            extra["pp_stages"] = stages
        if (
            "skip_checks" not in extra
            and b_p.states_modeled
            and b_d.states_modeled
            and (pg.state_types or dg.state_types)
        ):
            runs = kernel_name == "runtime" and _kernel_runs(k, kernel_name, b_p) and _kernel_runs(k, kernel_name, b_d)
            prepared = b_p.decision_variant == "0.5.23" and b_d.decision_variant == "0.5.23"
            _decide_states(k if runs else builtin, prefill, decode, pg, dg, extra, prepared)
        if "skip_checks" not in extra and b_p.per_request_decision and pg.pool == dg.pool == "DSA":
            from kvcheck.sglang.dsa_pd import legacy_dsa_states  # the DSA index-K before 0.5.13

            decisions = legacy_dsa_states(pg, dg, b_p, b_d)
            if decisions is not None:
                extra["state_decisions"] = decisions
                extra["states_decided"] = all(d.unchecked is None for d in decisions)
    _order_runtime_errors(plan, extra)
    ctx = CheckContext(prefill=prefill, decode=decode, prefill_geometry=pg, decode_geometry=dg, plan=plan, extra=extra)
    findings: list[Finding] = []
    for chk in REGISTRY.values():
        if not releases_known and chk.id != "unknown-release":
            continue
        if chk.id in extra.get("skip_checks", ()):  # backend hook (see above)
            continue
        findings.extend(chk.run(ctx))
    from kvcheck.checks.ids import apply_ignore

    apply_ignore(findings, ignore)
    order = {Severity.ERROR: 0, Severity.UNCHECKED: 1, Severity.WARNING: 2, Severity.INFO: 3}
    findings.sort(key=lambda f: (f.ignored, order[f.severity]))
    _mark_first(findings, extra)
    report_extra: dict[str, Any] = {"releases": {"prefill": b_p.version, "decode": b_d.version}}
    if extra.get("state_decisions") is not None:
        report_extra["state_components"] = [
            {
                "index": d.index,
                "state_type": d.state_type,
                "entries": d.n_entries,
                "path": d.path,
                "error": d.error.message if d.error else None,
                "corruption": d.corruption,
                "unchecked": d.unchecked,
            }
            for d in extra["state_decisions"]
        ]
    if extra.get("pp_stages") and len(extra["pp_stages"]) > 1:
        report_extra["pp_stages"] = [
            {key: v for key, v in st.items() if not key.startswith("_")} for st in extra["pp_stages"]
        ]
    return Report(
        verdict=verdict_of(findings),
        plan=plan,
        findings=findings,
        sides=[_summary(prefill, pg), _summary(decode, dg)],
        kernel=kernel_name,
        runtime=runtime_label(prefill, decode),
        extra=report_extra,
    )


def _decide_states(
    k: DecisionKernel,
    prefill: Side,
    decode: Side,
    pg: SideGeometry,
    dg: SideGeometry,
    extra: PairFacts,
    prepared: bool = True,
) -> None:
    """The state components' transfer (SGLang 0.5.22/0.5.23 on both sides; ``prepared``:
    both 0.5.23, the prepared state plan applies): ``extra["state_decisions"]``
    (``kvcheck.sglang.states.StateDecision`` per prefill component) and
    ``extra["states_decided"]`` (True when none is left undecided). The runtime kernel
    drives ``maybe_send_extra`` itself; the builtin kernel restates it."""
    from kvcheck.sglang import states, states_pp

    inp = states.state_inputs(prefill, decode, prepared)

    def dims(side: Side, g: SideGeometry):
        return states.mamba_dims(side.model, g.attn_tp_size) if "mamba" in g.state_types else None

    pp_p, pp_d = max(1, prefill.args.pp_size), max(1, decode.args.pp_size)
    why = states_pp.unpaired_pp(pp_p, pp_d)
    per_stage = []
    # Each prefill PP stage sends its own entries: to the decode's stage of the same rank
    # (decode PP = prefill PP) or to the whole model (decode PP 1).
    for rank in range(pp_p):
        sp = pg if rank == 0 else derive_geometry(prefill, pp_rank=rank)
        sd = dg if rank == 0 or pp_d != pp_p else derive_geometry(decode, pp_rank=rank)
        stage = k.decide_states(sp, sd, inp, prefill_dims=dims(prefill, sp), decode_dims=dims(decode, sd), pp_rank=rank)
        per_stage.append(stage)
        if why:
            break
    decisions = states_pp.merge_stages(per_stage)
    if why:
        for d in decisions:
            d.path, d.error, d.corruption, d.unchecked = None, None, None, why
    extra["state_decisions"] = decisions
    extra["states_decided"] = pg.state_types == dg.state_types and all(d.unchecked is None for d in decisions)


def runtime_label(prefill: Side, decode: Side) -> str:
    """The report's ``runtime``: ``"sglang 0.5.8"`` when both sides run one release, else
    ``"sglang 0.5.8 (prefill) / 0.5.23 (decode)"`` (``unknown`` for a side kvcheck
    cannot tell)."""
    from kvcheck.sglang.releases import side_release

    p, d = side_release(prefill)[0] or "unknown", side_release(decode)[0] or "unknown"
    return f"sglang {p}" if p == d else f"sglang {p} (prefill) / {d} (decode)"


def _kernel_runs(k: DecisionKernel, kernel_name: str, b) -> bool:
    """Whether kernel ``k`` answers for a side of release ``b`` (``kernel.runs_for``)."""
    return runs_for(k, kernel_name, b)


# The order in which the runtime reaches each phase on a pair's first request.
_PHASES = (
    ("start-up", 0),
    ("decode: scheduler, first contact", 1),
    ("prefill: NIXL bootstrap thread", 2),
)


def _phase(rt: RuntimeErrorPrediction) -> int:
    if rt.when == "start-up":
        return 0
    for prefix, rank in _PHASES[1:]:
        if rt.raised_by.startswith(prefix):
            return rank
    return 2 if rt.when == "decode registration" else 3


def _order_runtime_errors(plan: Plan | None, extra: PairFacts) -> None:
    """Put the operator-visible timeouts (from each side's environment) into the
    predictions of a dying prefill bootstrap thread."""
    text = hang_text(extra["timeouts"])
    if plan is not None and plan.error is not None and plan.error.operator_sees == builtin.HANG_300S:
        plan.error.operator_sees = text
    for st in extra.get("pp_stages") or []:
        if st.get("error") and st["error"].get("operator_sees") == builtin.HANG_300S:
            st["error"]["operator_sees"] = text


def _mark_first(findings: list[Finding], extra: PairFacts) -> None:
    """Number the predicted runtime errors in the order the runtime reaches them
    (``runtime_error.order``, 1-based) and mark the one it hits first (``first``): it stops
    there; the others are independent and show up as each is fixed."""
    text = hang_text(extra["timeouts"])
    predicted = [f.runtime_error for f in findings if f.runtime_error is not None and not f.ignored]
    for e in predicted:
        if e.operator_sees == builtin.HANG_300S:
            e.operator_sees = text
    ranked = sorted(enumerate(predicted), key=lambda t: (_phase(t[1]), t[0]))
    for n, (_, e) in enumerate(ranked, start=1):
        e.order = n
        e.first = n == 1


def disaggregation_timeouts(prefill: Side, decode: Side) -> dict[str, float]:
    """The PD timeouts each side reads from its environment (``sglang.srt.environ``;
    the same names and defaults from 0.5.8 through 0.5.23): the prefill fails a request
    still in ``KVPoll.Bootstrapping`` after ``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT``
    (300 s), the decode one waiting for the prefill after
    ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` (300 s); the decode's heartbeat declares a
    prefill lost after ``..._HEARTBEAT_INTERVAL`` (5 s) x ``..._HEARTBEAT_MAX_FAILURE`` (2).
    Unparsable values are taken as the default."""

    def read(side: Side, name: str, default: float) -> float:
        try:
            return float(side.env.get(name, default))
        except (TypeError, ValueError):
            return default

    return {
        "bootstrap_timeout_s": read(prefill, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300),
        "waiting_timeout_s": read(decode, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300),
        "heartbeat_s": read(decode, "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0)
        * read(decode, "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2),
    }


def hang_text(t: dict[str, float]) -> str:
    """What the operator sees when the prefill's bootstrap thread dies (timeouts from the
    environment, see ``disaggregation_timeouts``)."""
    return (
        "the prefill's bootstrap thread dies with this traceback in the prefill log ('prefill bootstrap_thread died on "
        "engine_rank=...'); requests to that rank stay in KVPoll.Bootstrapping: the prefill fails each after "
        f"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT={t['bootstrap_timeout_s']:g} s ('Request <room> timed out after "
        "<t>s in "
        "KVPoll.Bootstrapping'), and the decode gives up waiting after "
        f"SGLANG_DISAGGREGATION_WAITING_TIMEOUT={t['waiting_timeout_s']:g} s ('Timed out waiting for prefill "
        "completion')"
    )


def _decide_all_stages(
    k, prefill: Side, decode: Side, pg: SideGeometry, dg: SideGeometry, b_p=None
) -> tuple[Plan, list[dict]]:
    """The prefill's decision for every PP stage: each prefill stage handles the decode's
    registration on its own (a decode at PP 1 registers with every stage; a decode at the
    prefill's PP size pairs stage by stage). Returns (the plan shown: stage 0's, or the
    first stage's that raises, with its own region counts), and one summary per stage
    (``pp_rank``, layers, path, region counts and kinds, segments, error)."""
    heads = prefill.model.num_key_value_heads if prefill.model.attention == "MHA" else None
    kw = dict(decode_dcp_size=decode.args.dcp_size, total_kv_heads=heads, behaviour=b_p)
    same_pp = decode.args.pp_size == prefill.args.pp_size
    stages: list[dict] = []
    shown: Plan | None = None
    for rank in range(max(1, prefill.args.pp_size)):
        stage_src = pg if rank == 0 else derive_geometry(prefill, pp_rank=rank)
        stage_dst = dg if rank == 0 or not same_pp else derive_geometry(decode, pp_rank=rank)
        stage_plan = k.decide_transfer(stage_src, stage_dst, pp_rank=rank, **kw)
        if stage_plan.error is not None and rank > 0:
            stage_plan.error.raised_by += f" on prefill PP stage {rank}"
        layers = stage_src.stage_layers[rank] if rank < len(stage_src.stage_layers) else (0, 0)
        stages.append(
            {
                "pp_rank": rank,
                "layers": list(layers),
                "path": stage_plan.path,
                "n_src": stage_plan.n_src,
                "n_dst": stage_plan.n_dst,
                "src_kinds": {x: stage_src.kinds.count(x) for x in ("VRAM", "DRAM") if x in stage_src.kinds},
                "dst_kinds": {x: stage_dst.kinds.count(x) for x in ("VRAM", "DRAM") if x in stage_dst.kinds},
                "segments": [seg.as_list() for seg in stage_plan.segments],
                "dst_indices": list(stage_plan.dst_indices),
                "error": stage_plan.error.model_dump() if stage_plan.error else None,
                "_geometry": (stage_src, stage_dst),
            }
        )
        if shown is None and (rank == 0 or stage_plan.error is not None):
            shown = stage_plan
        elif shown is not None and shown.error is None and stage_plan.error is not None:
            shown = stage_plan
    clean = [{key: v for key, v in st.items() if not key.startswith("_")} for st in stages]
    for st, c in zip(stages, clean, strict=True):
        c["_geometry"] = st["_geometry"]
    assert shown is not None  # stage 0 always runs and sets it
    return shown, clean


def _bootstrap_id(message: str) -> str:
    from kvcheck.checks.transfer import bootstrap_id

    return bootstrap_id(message)


def _bootstrap_detail(fid: str, message: str, prefill: Side, decode: Side, p: PairInfo, d: PairInfo) -> str:
    if fid == "page-size-mismatch":
        return f"page size differs: prefill --page-size={p.page_size}, decode --page-size={d.page_size}"
    if fid == "kv-cache-dtype-mismatch":
        return (
            f"--kv-cache-dtype strings differ: prefill {p.kv_cache_dtype_str!r}, decode {d.kv_cache_dtype_str!r} "
            "(the runtime compares the strings)"
        )
    if fid == "pp-size-mismatch":
        return (
            f"pipeline parallel sizes: prefill --pp-size={p.pp_size}, decode --pp-size={d.pp_size} (decode must "
            "equal the prefill's or be 1)"
        )
    if fid == "decode-cp-size":
        return f"decode --attn-cp-size={d.attn_cp_size}; the decode must run attention CP 1"
    if fid in ("minimax-attn-tp", "mxfp8-attn-tp", "dsv41-attn-tp", "kv-cache-sharding-tp"):
        return f"attention TP sizes differ: prefill {p.attn_tp_size}, decode {d.attn_tp_size} ({message})"
    if fid == "kv-layout-mismatch":
        return f"DSV4 KV layouts differ: prefill {p.kv_layout}, decode {d.kv_layout}"
    return message


# The finding ids of every check live in ``kvcheck.checks.ids`` (one registry for pair,
# start-up, cluster, live-agent and probe findings); re-exported for old callers.
from kvcheck.checks.ids import FINDING_IDS, all_finding_ids  # noqa: E402,F401
