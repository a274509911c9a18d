"""The static preflight: sides -> geometry -> plan -> checks -> report.

Pure and fast: never imports SGLang, torch or nixl unless ``kernel="runtime"`` (or
``"auto"`` with SGLang importable) asks for SGLang's own decision code.
"""

from __future__ import annotations

import importlib.util
from typing import Iterable

from kvcheck.checks import REGISTRY, CheckContext, Finding, Severity
from kvcheck.errors import InputError
from kvcheck.report.model import Report, SideSummary, verdict_of
from kvcheck.sglang import plan as builtin
from kvcheck.sglang.geometry import SideGeometry, derive_geometry, kv_dtype_bytes
from kvcheck.sglang.plan import PairInfo, Plan
from kvcheck.sglang.startup import REFUSAL_IDS as STARTUP_REFUSAL_IDS
from kvcheck.sides import Side

KERNELS = ("auto", "builtin", "runtime")


def resolved_kv_dtype_str(side: Side) -> str:
    """``model_runner.kv_cache_dtype_str``: the flag string, except that ``auto`` on a
    checkpoint with an FP8 KV quant config resolves to ``fp8_e4m3`` (0.5.23)."""
    flag = side.args.kv_cache_dtype
    if flag == "auto" and side.model.attention != "not_modeled":
        resolved, _ = kv_dtype_bytes(side, side.model)
        return "fp8_e4m3" if resolved == "fp8_e4m3" else "auto"
    return flag


def pair_info(side: Side, geometry: SideGeometry) -> PairInfo:
    """The scalars the bootstrap server reports (prefill) or the decode compares."""
    return PairInfo(
        page_size=geometry.page_size,
        kv_cache_dtype_str=resolved_kv_dtype_str(side),
        attn_tp_size=side.args.attn_tp_size,
        attn_cp_size=side.args.attn_cp_size,
        pp_size=side.args.pp_size,
        dcp_size=side.args.dcp_size,
        is_mla=geometry.is_mla,
        enable_kv_cache_sharding=side.args.enable_kv_cache_sharding,
    )


def choose_kernel(kernel: str):
    """The decision kernel: kvcheck's ``builtin`` restatement or the installed SGLang's
    own code (``runtime``). ``auto`` prefers the runtime when SGLang is importable.

    Raises ``InputError`` when ``runtime`` is asked for and SGLang is not installed.
    """
    if kernel not in KERNELS:
        raise InputError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}", field="--kernel")
    if kernel == "builtin":
        return "builtin", builtin
    available = importlib.util.find_spec("sglang") is not None
    if kernel == "runtime" and not available:
        raise InputError("--kernel runtime needs SGLang installed in this Python (pip install sglang==0.5.23 --no-deps, plus torch)", field="--kernel")
    if not available:
        return "builtin", builtin
    from kvcheck.sglang import runtime_kernel

    return "runtime", runtime_kernel


def _summary(side: Side, g: SideGeometry | None) -> SideSummary:
    s = SideSummary(role=side.role, origin=side.origin, model=side.model.architecture, pool=g.pool if g else side.model.attention,
                    sglang_version=side.sglang_version, version_source=side.version_source)
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
    ignore = set(ignore)
    unknown = ignore - set(REGISTRY) - set(all_finding_ids())
    if unknown:
        import difflib

        known = sorted(set(REGISTRY) | set(all_finding_ids()))
        hints = [f"{u} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(u, known, n=1)) else u for u in sorted(unknown)]
        raise InputError(f"unknown check id(s) for --ignore: {', '.join(hints)}; 'kvcheck checks' lists them", field="--ignore")
    pg = dg = None
    plan: Plan | None = None
    extra: dict = {}
    from kvcheck.sglang.releases import side_release

    # A side on a release kvcheck does not model is never judged with another release's
    # code: only the unknown-release check runs (verdict unchecked, exit 4).
    releases_known = side_release(prefill)[1] and side_release(decode)[1]
    modeled = releases_known and prefill.model.attention != "not_modeled" and decode.model.attention != "not_modeled"
    if modeled:
        pg = derive_geometry(prefill)
        dg = derive_geometry(decode)
        # A pool the model reads but the args make unmodeled (FP4 KV): no plan, unchecked.
        modeled = pg.pool != "not_modeled" and dg.pool != "not_modeled"
    if modeled:
        p_info, d_info = pair_info(prefill, pg), pair_info(decode, dg)
        bootstrap = k.bootstrap_error(p_info, d_info)
        if bootstrap is not None:
            extra["bootstrap_error"] = bootstrap
            extra["bootstrap_detail"] = _bootstrap_detail(bootstrap.message, prefill, decode, p_info, d_info)
        plan = _decide_all_stages(k, prefill, decode, pg, dg)
        plan.kernel = kernel_name
    ctx = CheckContext(prefill=prefill, decode=decode, prefill_geometry=pg, decode_geometry=dg, plan=plan, extra=extra)
    findings: list[Finding] = []
    for chk in REGISTRY.values():
        if not releases_known and chk.id != "unknown-release":
            continue
        findings.extend(chk.run(ctx))
    for f in findings:
        if f.id in ignore or _check_of(f.id) in ignore:
            f.ignored = True
    order = {Severity.ERROR: 0, Severity.UNCHECKED: 1, Severity.WARNING: 2, Severity.INFO: 3}
    findings.sort(key=lambda f: (f.ignored, order[f.severity]))
    return Report(
        verdict=verdict_of(findings),
        plan=plan,
        findings=findings,
        sides=[_summary(prefill, pg), _summary(decode, dg)],
        kernel=kernel_name,
        runtime=runtime_label(prefill, decode),
    )


def runtime_label(prefill: Side, decode: Side) -> str:
    """The report's ``runtime``: ``"sglang 0.5.8"`` when both sides run one release, else
    ``"prefill sglang 0.5.8, decode sglang 0.5.23"`` (``unknown`` for a side kvcheck
    cannot tell)."""
    from kvcheck.sglang.releases import side_release

    p, d = side_release(prefill)[0] or "unknown", side_release(decode)[0] or "unknown"
    return f"sglang {p}" if p == d else f"prefill sglang {p}, decode sglang {d}"


def _decide_all_stages(k, prefill: Side, decode: Side, pg: SideGeometry, dg: SideGeometry) -> Plan:
    """The prefill's decision for every PP stage: each prefill stage handles the decode's
    registration on its own (a decode at PP 1 registers with every stage; a decode at the
    prefill's PP size pairs stage by stage). Returns stage 0's plan, or the first stage's
    plan that raises."""
    plan = k.decide_transfer(pg, dg, decode_dcp_size=decode.args.dcp_size)
    if plan.error is not None or prefill.args.pp_size <= 1:
        return plan
    same_pp = decode.args.pp_size == prefill.args.pp_size
    for rank in range(1, prefill.args.pp_size):
        stage_src = derive_geometry(prefill, pp_rank=rank)
        stage_dst = derive_geometry(decode, pp_rank=rank) if same_pp else dg
        stage_plan = k.decide_transfer(stage_src, stage_dst, decode_dcp_size=decode.args.dcp_size, pp_rank=rank)
        if stage_plan.error is not None:
            stage_plan.error.raised_by += f" on prefill PP stage {rank}"
            return stage_plan
    return plan


def _bootstrap_detail(message: str, prefill: Side, decode: Side, p: PairInfo, d: PairInfo) -> str:
    if message.startswith("Page size"):
        return f"page size differs: prefill --page-size={p.page_size}, decode --page-size={d.page_size}"
    if message.startswith("KV cache dtype"):
        return f"--kv-cache-dtype strings differ: prefill {p.kv_cache_dtype_str!r}, decode {d.kv_cache_dtype_str!r} (the runtime compares the strings)"
    if "pp size" in message:
        return f"pipeline parallel sizes: prefill --pp-size={p.pp_size}, decode --pp-size={d.pp_size} (decode must equal the prefill's or be 1)"
    if "cp size" in message:
        return f"decode --attn-cp-size={d.attn_cp_size}; the decode must run attention CP 1"
    return message


# Finding ids that a check may emit beside its own id (for --ignore and the docs).
FINDING_IDS = {
    "bootstrap": ["page-size-mismatch", "kv-cache-dtype-mismatch", "decode-dcp", "kv-cache-sharding-tp", "decode-cp-size", "pp-size-mismatch"],
    "startup": list(STARTUP_REFUSAL_IDS),
    "transfer-decision": ["region-count", "hisparse-decode-only-spec", "hetero-tp-direct-to-host", "hetero-tp-mixed-kinds", "dcp-mixed-kinds", "dcp-topology", "dcp-geometry", "item-stride", "pp-layer-pairing", "source-mixed-kinds", "runtime-error"],
    "agents": ["agent-geometry", "agent-no-common-backend", "agent-register-failed", "agent-alloc-failed", "agent-vram-untested", "agent-publish-failed"],
    "probe": [
        "probe-unreachable", "probe-timeout", "probe-peer-lost", "probe-no-common-backend", "probe-remote-unregistered",
        "probe-remote-kind", "probe-data-mismatch", "probe-registration-failed", "probe-tcp-fallback", "probe-error",
        "probe-not-kvcheck", "probe-skipped", "probe-peer-restarted", "probe-unconfirmed", "probe-unconfirmed-region",
    ],
}


def all_finding_ids() -> list[str]:
    return [i for ids in FINDING_IDS.values() for i in ids]


def _check_of(finding_id: str) -> str:
    for chk, ids in FINDING_IDS.items():
        if finding_id in ids:
            return chk
    return finding_id
