"""Pair decisions: one prefill class x one decode class, decided over the releases both
sides may run (``kvcheck.release.window``), once per distinct behaviour.

``decide(p, d, opts, ignore)`` -> ``PairResult``. A pair whose sides are pinned to one
release each is decided once (``decide_one``: ``kvcheck.preflight.run_preflight`` plus the
backend-independent rules of the pipeline). A pair with a window is decided once per
group of releases whose PD behaviour (``PDBehaviour``), start-up findings, known issues and
parsed flags are equal; the groups' answers are combined: all agree -> that answer, and the
output names the window; they differ -> ``unchecked`` with a per-release table.

Both input paths (``--prefill/--decode`` and ``-f``) reach this module through
``kvcheck.cluster.pipeline.check_deployments``: one pipeline, one answer.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kvcheck.checks.base import Finding, Severity
from kvcheck.cluster.model import ClassResult, Located, PairResult, finding
from kvcheck.errors import InputError
from kvcheck.release.version import version_key
from kvcheck.report.model import Report, verdict_of
from kvcheck.sources.deployments.instance import Instance, Location

_FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*")
_RELEASE_RE = re.compile(r"\b\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?\b")


def decide(p: ClassResult, d: ClassResult, opts: Any, ignore: tuple[str, ...]) -> PairResult:
    """The pair's ``PairResult`` (see the module docstring)."""
    from kvcheck.release.window import pair_candidates

    class_findings = p.findings + d.findings
    if p.side is None or d.side is None:
        # The pair is unchecked, but what does not depend on the model still fails it:
        # --allow-unchecked must never let a certain failure through.
        certain = _model_independent_failures(p, d) + _refused_pair_findings(p, d)
        findings = certain + list(class_findings)
        # The runtime stops at the first error it reaches: start-up refusals come first.
        predicted = sorted(
            (
                x.finding.runtime_error
                for x in findings
                if x.finding.runtime_error is not None and not x.finding.ignored
            ),
            key=lambda e: e.when != "start-up",
        )
        for n, e in enumerate(predicted, start=1):
            e.order, e.first = n, n == 1
        return PairResult(p, d, verdict_of([x.finding for x in findings]), None, findings)
    from kvcheck.release.window import refusal_pairs

    pw, dw = p.window, d.window
    cands = pair_candidates(pw, dw) if pw is not None and dw is not None and pw.releases and dw.releases else []
    refusing = refusal_pairs(pw, dw) if cands else []
    gpus = _assumed_gpus(p, d) if cands else None
    if len(cands) <= 1 and gpus is None and not refusing:
        if cands:
            rp, rd = cands[0]
            ps, ds = p.side_for(rp), d.side_for(rd)
        else:
            ps, ds = p.side, d.side
        report, located = decide_one(ps, ds, p, d, opts, ignore)
        pr = PairResult(
            p, d, verdict_of([x.finding for x in located + class_findings]), report, located + list(class_findings)
        )
        pr.releases = _releases_contract(p, d, cands, None)
        return _open_above(pr, p, d)
    return _open_above(_decide_window(p, d, cands, opts, ignore, class_findings, gpus or (None,), refusing), p, d)


def _open_above(pr: PairResult, p: ClassResult, d: ClassResult) -> PairResult:
    """A pair that passes on every modeled release it may run, where a side's clue also
    allows releases newer than the newest modeled one (``SideRelease.beyond_newest``: an
    open pip range): those releases are not decided, so the pair is ``unchecked`` (a
    ``release-window`` finding says so and what to pin). A fail stays a fail: it fails on
    every release kvcheck decides (``combine_verdicts``)."""
    from kvcheck.release import manifest

    open_sides = [(c, c.window.beyond_newest) for c in (p, d) if c.window is not None and c.window.beyond_newest]
    if not open_sides or pr.verdict not in ("pass", "warn"):
        return pr
    by_text: dict[str, list[str]] = {}
    for c, text in open_sides:
        by_text.setdefault(text, []).append(c.role)
    said = "; ".join(f"{text} (the {' and '.join(roles)})" for text, roles in by_text.items())
    f = finding(
        "release-window",
        Severity.UNCHECKED,
        f"{p.id} x {d.id}: passes on every modeled release the sides may run, but {said} also allows SGLang "
        f"releases newer than {manifest.NEWEST}, which kvcheck does not model: the pair is not judged there",
        "Pin the release (sglang==X, an image tag lmsysorg/sglang:vX.Y.Z) or pass --sglang-version (or "
        "--prefill-/--decode-sglang-version) with the release the servers run.",
        open_sides[0][0].first.instance.location,
    )
    pr.findings.append(f)
    pr.verdict = verdict_of([x.finding for x in pr.findings])
    if pr.report is not None:
        pr.report.findings.append(f.finding)
        pr.report.verdict = pr.verdict
    return pr


def _refusal_group(p: ClassResult, d: ClassResult, pairs: list[tuple[str, str]]) -> Any:
    """The window's group of releases on which a side's own parser refuses a flag's value
    (``SideRelease.value_refused``): that server exits at start-up (``prepare_server_args``
    -> argparse, status 2), so the pair fails there, whatever its KV layout. Its findings:
    each refusing side's ``startup-argparse`` error (the newest refusing release's parser
    text) at the refused flag's line."""
    from types import SimpleNamespace

    from kvcheck.cluster.refusals import refusal_finding, refused_option
    from kvcheck.release.window import Group

    located: list[Located] = []
    for c, i in ((p, 0), (d, 1)):
        rels = sorted({pr[i] for pr in pairs if pr[i] in c.window.value_refused}, key=version_key)
        if not rels:
            continue
        inst = c.first.instance
        exc = c.window.value_refused[rels[-1]]
        sr = SimpleNamespace(refused_on=tuple(rels), how=c.window.how, problem=None)
        f = refusal_finding(inst.role, inst.name, str(inst.location), sr, exc)
        option = getattr(exc, "option", None) or refused_option(exc)
        located.append(Located(f, inst.arg_locations.get(option or "") or inst.location))
    g = Group(pairs=sorted(pairs, key=lambda t: (version_key(t[0]), version_key(t[1]))))
    g.result = (None, located)
    g.outcome = _outcome(located)
    g.text = _headline(located)
    return g


def _refused_pair_findings(p: ClassResult, d: ClassResult) -> list[Located]:
    """A pair with a server that refuses its flags while parsing: the side that was read
    gets its own start-up findings, and an info finding says the pair's KV checks did not
    run (a server that never starts has no KV to transfer)."""
    refused = [c for c in (p, d) if isinstance(c.key, tuple) and c.key[:1] == ("argparse-refused",)]
    if not refused:
        return []
    from kvcheck.checks import REGISTRY
    from kvcheck.checks.startup import side_findings

    out: list[Located] = []
    for c in (p, d):
        if c.side is not None:
            out += [Located(f, c.first.instance.location) for f in side_findings(REGISTRY["startup"], c.side)]
    who = " and ".join(f"the {c.role}" for c in refused)
    out.append(
        finding(
            "pair-not-checked",
            Severity.INFO,
            f"{p.id} x {d.id}: the pair's KV checks did not run: {who} server never starts (its flags are refused "
            "while parsing)",
            "Fix the refused flag and run kvcheck again to check the pair.",
            refused[0].first.instance.location,
        )
    )
    return out


def _assumed_gpus(p: ClassResult, d: ClassResult) -> tuple[str, ...] | None:
    """The GPUs to decide the pair on when a side's GPU is not given (``--gpu`` or the
    per-side option, the manifest, a ``kvcheck-gpu`` key): Hopper and Blackwell
    (``ASSUMED_GPUS``), whatever the flags pin, since the attention backend, the page size
    it picks, the DSA KV dtype, the FP4/MXFP8 KV rules and start-up refusals all follow
    the GPU (a verdict never rests on an assumed GPU). A side whose GPU is given keeps it
    (``ClassResult.side_for`` ignores the assumed GPU for it); with neither given both are
    taken on the same GPU. Releases and GPUs that decide alike are still decided once.
    None when every GPU is given or a class cannot build a side per GPU."""
    from kvcheck.release.window import ASSUMED_GPUS

    if p.build_for is None or d.build_for is None:
        return None
    if not (_gpu_assumed(p) or _gpu_assumed(d)):
        return None
    return ASSUMED_GPUS


def _gpu_assumed(c: ClassResult) -> bool:
    return str(c.side.gpu_source).startswith("default")


def decide_one(
    ps: Any, ds: Any, p: ClassResult, d: ClassResult, opts: Any, ignore: tuple[str, ...]
) -> tuple[Report, list[Located]]:
    """One decision of the pair on the sides ``ps``/``ds`` (one release each)."""
    from kvcheck.preflight import run_preflight

    report = run_preflight(ps, ds, kernel=opts.kernel, ignore=ignore)
    # Every backend is decided by run_preflight itself (NIXL's and Mooncake's transfer
    # decisions; MORI, Ascend and fake pairs: backend-unchecked), the same on every path.
    extra: list[Located] = []
    located = []
    for f in report.findings:
        locs = _locate(f, p, d)
        located.append(Located(f, locs[0], locs[1:]))
    return report, located + extra


def signature(ps: Any, ds: Any) -> tuple:
    """What a pair's decision depends on per release: each side's ``PDBehaviour`` (its
    variants, not its name), its epoch (which of ``manifest.boundaries()`` it is at or
    after: every release bound named in kvcheck's code), the subsystems verified for it,
    its start-up and connector outcomes, the known issues its range matches, and the typed
    args its parser gives. Releases with equal signatures decide
    alike, so the pair is decided once for all of them."""
    return (_side_signature(ps), _side_signature(ds))


def _side_signature(side: Any) -> tuple:
    from kvcheck.checks import REGISTRY
    from kvcheck.checks.releases import load_known_issues, match_entry
    from kvcheck.checks.startup import side_findings
    from kvcheck.release import manifest
    from kvcheck.sglang.pd_release import behaviour

    v = side.sglang_version
    pd = _behaviour_signature(behaviour(v))
    subsystems = tuple(manifest.verified(s, v) for s in manifest.SUBSYSTEMS)
    from kvcheck.sglang.startup import connector_outcome

    startup = tuple(
        (f.id, f.severity.value, f.runtime_error.message if f.runtime_error else None)
        for f in side_findings(REGISTRY["startup"], side)
    )
    connector = repr(connector_outcome(side))
    issues = tuple(e.get("id") for e in load_known_issues() if match_entry(e, side)[0])
    return (pd, manifest.epoch(v), subsystems, startup, connector, issues, repr(sorted(side.args.model_dump().items())))


@functools.cache
def _behaviour_signature(b: Any) -> tuple:
    """A ``PDBehaviour``'s variants (not its name), as the signature compares them."""
    import dataclasses

    # its fields are scalars and tuples (the signature is a dict key): shallow is asdict
    return tuple((f.name, getattr(b, f.name)) for f in dataclasses.fields(b) if f.name != "version") + (
        ("stateless_hang", b.nixl_stateless_hang),
    )


def _outcome(located: list[Located]) -> tuple[str, tuple[str, ...]]:
    live = [x.finding for x in located if not x.finding.ignored]
    return verdict_of([x.finding for x in located]), tuple(sorted({f.id for f in live if f.severity != Severity.INFO}))


def _headline(located: list[Located]) -> str:
    """The first error's runtime text (else its message), for the per-release table."""
    order = {Severity.ERROR: 0, Severity.UNCHECKED: 1, Severity.WARNING: 2, Severity.INFO: 3}
    live = sorted((x.finding for x in located if not x.finding.ignored), key=lambda f: order[f.severity])
    if not live or live[0].severity == Severity.INFO:
        return ""
    f = live[0]
    text = f"{f.id}: " + (
        f.runtime_error.message if f.runtime_error is not None and f.runtime_error.message else f.message
    )
    return text if len(text) <= 240 else text[:237] + "..."


def _decide_window(
    p: ClassResult,
    d: ClassResult,
    cands: list[tuple[str, str]],
    opts: Any,
    ignore: tuple[str, ...],
    class_findings: list[Located],
    gpus: tuple[str | None, ...] = (None,),
    refusing: list[tuple[str, str]] | None = None,
) -> PairResult:
    from kvcheck.release.window import group_by, merge_outcomes, releases_label, window_table

    groups = []
    for gpu in gpus:
        for g in group_by(cands, lambda rp, rd: signature(p.side_for(rp, gpu), d.side_for(rd, gpu))):  # noqa: B023  (group_by calls it in this iteration)
            g.gpu = gpu
            groups.append(g)
    decided = []
    for g in groups:
        rp, rd = g.pairs[0]  # the newest of the group decides for it
        decided.append(decide_one(p.side_for(rp, g.gpu), d.side_for(rd, g.gpu), p, d, opts, ignore))
    advisories = _split_advisories(groups, decided) if len(cands) > 1 else []
    for g, (report, located) in zip(groups, decided, strict=True):
        g.result = (report, located)
        g.outcome = _outcome(located)
        g.text = _headline(located) if g.outcome[0] in ("fail", "unchecked") else ""
    final = combine_verdicts([g.outcome[0] for g in groups])
    if refusing:
        # The releases on which a side refuses to start: a fail there, decided after the
        # others (the newest group that starts keeps the plan). The pair fails only if it
        # fails on the releases that start it too; otherwise (it passes there, or they are
        # unchecked: a MORI pair, 0.5.5-0.5.8 refuse 'mori', 0.5.9+ start it and its transfer
        # is unchecked) the release that runs decides: unchecked.
        groups.append(_refusal_group(p, d, refusing))
        final = "fail" if final == "fail" else "unchecked"
    from kvcheck.release.window import gpu_label

    merged = merge_outcomes(groups)
    newest_report, _ = groups[0].result
    multi_gpu = len(gpus) > 1
    findings = _merge_group_findings(merged, final, multi_gpu) + advisories
    unnamed = " and ".join(c.role for c in (p, d) if _gpu_assumed(c))
    every = cands + list(refusing or [])
    window = releases_label(every) + (
        f"; {'no GPU' if ' and ' in unnamed else f'the {unnamed} GPU not'} given: decided on "
        f"{' and '.join(gpu_label(g) for g in gpus)}"
        if multi_gpu
        else ""
    )
    what = "release and GPU" if multi_gpu else "release"
    if len(merged) == 1:
        pass  # one answer everywhere: the output's runtime and GPU labels name the window
    else:
        sev = Severity.UNCHECKED if final == "unchecked" else Severity.INFO
        lead = (
            f"the answer depends on the SGLang {what}, which the deployment does not "
            f"{'pin or give' if multi_gpu else 'pin'}"
            if final == "unchecked"
            else f"fails on every {what} kvcheck decides (it cannot tell on the others)"
            if final == "fail"
            else f"passes on every {what} the sides may run"
        )
        findings.append(
            finding(
                "release-window",
                sev,
                f"{p.id} x {d.id}: {lead} ({window}; {len(groups)} distinct behaviour(s)): "
                f"{window_table(_table_groups(groups))}",
                "Pin the image tag (lmsysorg/sglang:vX.Y.Z) or pass --sglang-version (or "
                "--prefill-/--decode-sglang-version) with the release the servers run"
                + (
                    f", and --gpu (or --{unnamed}-gpu) with the GPU they run on."
                    if multi_gpu and " and " not in unnamed
                    else ", and --gpu with the GPU they run on."
                    if multi_gpu
                    else "."
                ),
                d.first.instance.location,
            )
        )
    verdict = verdict_of([x.finding for x in findings + class_findings])
    report = Report(
        verdict=verdict,
        plan=newest_report.plan,
        findings=[x.finding for x in findings],
        sides=newest_report.sides,
        kernel=newest_report.kernel,
        runtime=f"sglang {releases_label(every)}" + (" (window)" if len(every) > 1 else ""),
        extra=dict(newest_report.extra),
    )
    pr = PairResult(p, d, verdict, report, findings + list(class_findings))
    pr.releases = _releases_contract(p, d, every, merged, len(groups))
    pr.releases["gpus_decided"] = [g for g in gpus if g]
    report.extra["release_window"] = pr.releases
    return pr


# Checks that report a known defect of a release (kvcheck/sglang/known_issues.yaml and the
# 0.5.12 stateless hang), whatever the two sides' configuration: release advisories.
ADVISORY_CHECKS = ("known-issue", "nixl-stateless-hang")


def _split_advisories(groups: list, decided: list) -> list[Located]:
    """Release advisories of an unpinned window, taken out of the groups' outcomes.

    A known defect that only some releases of the window carry (SGLang 0.5.12's hang on
    every dense-model NIXL request, the data race fixed in 0.5.15) says nothing about
    whether these two sides fit together: it is the release's, and it hits every
    deployment on it. With the release unknown it is reported once as an ``info``
    finding naming the releases that carry it and the releases to pin, and the window is
    decided on the rest (the runtime's own decisions). Pinned to an affected release, the
    known issue keeps its severity (the window has one release, nothing is split). A
    defect that every release of the window carries stays in the outcome as it is.
    ``decided``: per group, (report, located findings); edited in place."""
    from kvcheck.release.window import gpu_label, releases_label

    def key(x: Located) -> tuple[str, str]:
        return x.finding.id, _RELEASE_RE.sub("X", x.finding.message)

    per_group = [{key(x) for x in located if x.finding.id in ADVISORY_CHECKS} for _, located in decided]
    everywhere = set.intersection(*per_group) if per_group else set()
    seen: dict[tuple[str, str], tuple[Located, list]] = {}
    for i, (g, (report, located)) in enumerate(zip(groups, decided, strict=True)):
        keep = []
        for x in located:
            k = key(x)
            if x.finding.id in ADVISORY_CHECKS and k not in everywhere:
                seen.setdefault(k, (x, []))[1].append(g)
            else:
                keep.append(x)
        decided[i] = (report, keep)
    out: list[Located] = []
    for x, gs in seen.values():
        f = x.finding.model_copy(deep=True)
        pairs = sorted({pr for g in gs for pr in g.pairs})
        gpus = sorted({g.gpu for g in gs if g.gpu})
        where = f" on {gpu_label(gpus[0])}" if len(gpus) == 1 and len({g.gpu for g in groups}) > 1 else ""
        was = f.severity.value if hasattr(f.severity, "value") else str(f.severity)
        f.message = (
            f"release advisory ({was} if the servers run SGLang {releases_label(pairs)}{where}; "
            f"the deployment does not pin its release): {f.message}"
        )
        f.severity = Severity.INFO
        f.runtime_error = None
        out.append(Located(f, x.location, list(x.also)))
    return out


def _table_groups(groups: list) -> list:
    """The per-release table's rows: releases with the same verdict and the same first
    finding (a pass row joins every passing release)."""
    from kvcheck.release.window import Group

    rows: dict[tuple, Group] = {}
    for g in groups:
        key = (g.gpu, g.outcome[0], g.text.split(":", 1)[0] if g.outcome[0] in ("fail", "unchecked") else "")
        row = rows.get(key)
        if row is None:
            rows[key] = Group(pairs=list(g.pairs), outcome=g.outcome, text=g.text, gpu=g.gpu)
        else:
            row.pairs += g.pairs
    for row in rows.values():
        row.pairs.sort(key=lambda t: (version_key(t[0]), version_key(t[1])))
    return list(rows.values())


def combine_verdicts(verdicts: list[str]) -> str:
    """The pair's verdict from its verdict on each group of releases: one verdict -> it;
    only pass and warn -> warn (it passes on every release); fail on every release kvcheck
    decides and unchecked on the rest -> fail; anything else (it fails on some release it
    may run and passes on another, or passes where decided and is unchecked elsewhere) ->
    unchecked: only the release decides."""
    seen = set(verdicts)
    if len(seen) == 1:
        return verdicts[0]
    if seen <= {"pass", "warn"}:
        return "warn"
    if seen == {"fail", "unchecked"}:
        # It fails on every release kvcheck decides; where kvcheck cannot tell, nothing says
        # it works: the gate closes either way, and the error names the runtime's text
        # (the unchecked releases are said in the release-window finding).
        return "fail"
    return "unchecked"


def _merge_group_findings(merged: list, final: str, multi_gpu: bool = False) -> list[Located]:
    """The findings of every outcome group, once each: a finding that every group has keeps
    its severity; one that only some groups have says on which releases; an error there
    becomes ``unchecked`` when the pair is unchecked (it fails only where the release is
    one of those), and stays an error when the pair fails on every release kvcheck decides."""
    members = [m for g in merged for m in (g.members or [g])]
    seen: dict[tuple[str, str], tuple[Located, list]] = {}
    for g in members:
        _, located = g.result
        for x in located:
            # The same finding on several releases differs only in the release it names.
            key = (x.finding.id, _RELEASE_RE.sub("X", x.finding.message))
            if key not in seen:
                seen[key] = (x, [])
            seen[key][1].append(g)
    out: list[Located] = []
    for (_fid, _), (x, gs) in seen.items():
        if len(gs) == len(members):
            out.append(x)
            continue
        from kvcheck.release.window import releases_label

        pairs = [pr for g in gs for pr in g.pairs]
        f = x.finding.model_copy(deep=True)
        gpus = sorted({g.gpu for g in gs if g.gpu})
        from kvcheck.release.window import gpu_label

        where = "" if not multi_gpu or len(gpus) != 1 else f" on {gpu_label(gpus[0])}"
        f.message = f"on SGLang {releases_label(list(set(pairs)))}{where} only: {f.message}"
        if f.severity == Severity.ERROR and final == "unchecked":
            f.severity = Severity.UNCHECKED
        out.append(Located(f, x.location, list(x.also)))
    return out


def _releases_contract(
    p: ClassResult, d: ClassResult, cands: list[tuple[str, str]], merged: list | None, n_groups: int = 1
) -> dict[str, Any]:
    """How each side's release was found, which releases were decided, and their groups."""
    out: dict[str, Any] = {
        "prefill": p.window.contract() if p.window is not None else None,
        "decode": d.window.contract() if d.window is not None else None,
        "decided": [{"prefill": a, "decode": b} for a, b in cands],
    }
    if merged is not None:
        out["distinct_behaviours"] = n_groups
        out["outcomes"] = [
            {
                "releases": [
                    {"prefill": a, "decode": b, **({"gpu": m.gpu} if m.gpu else {})}
                    for m in (g.members or [g])
                    for a, b in m.pairs
                ],
                "verdict": g.outcome[0],
                "finding_ids": list(g.outcome[1]),
                "headline": g.text,
            }
            for g in merged
        ]
    return out


def _model_independent_failures(p: ClassResult, d: ClassResult) -> list[Located]:
    """Failures of a pair that hold whatever the model is, for a class kvcheck cannot
    build a side for (unknown model, unresolved variable in another flag): transfer
    backends that differ with NIXL on the prefill (the decode's first ZMQ message kills
    the prefill's NIXL bootstrap thread: ``transfer-backend``) or with another backend on
    it (``backend-mismatch``), and a decode PP size that
    is neither the prefill's nor 1 (``_resolve_rank_mapping``'s assert, 0.5.23)."""
    from kvcheck.checks.transfer import _BOOTSTRAP_FIX, backend_mismatch_error, backend_mismatch_message
    from kvcheck.preflight import hang_text
    from kvcheck.sglang.pd_release import behaviour
    from kvcheck.sglang.plan import PairInfo, bootstrap_checks

    pa, da = p.first.args, d.first.args
    if pa is None or da is None:
        return []
    out: list[Located] = []
    # a side whose --config file kvcheck could not take knows only its line's flags: an
    # absent one is unknown (``known_arg``), never SGLang's default
    from kvcheck.sglang.args import effective_transfer_backend

    (pk, pb), (dk, db) = (
        p.first.known_arg("disaggregation_transfer_backend", "mooncake"),
        d.first.known_arg("disaggregation_transfer_backend", "mooncake"),
    )
    pb, db = effective_transfer_backend(pb), effective_transfer_backend(db)  # mooncake_tcp runs mooncake
    if pk and dk and pb != db and pb == "nixl":
        rt = backend_mismatch_error(pb, db, hang_text({"bootstrap_timeout_s": 300, "waiting_timeout_s": 300}))
        f = Finding(
            id="transfer-backend",
            severity=Severity.ERROR,
            runtime_error=rt,
            message=backend_mismatch_message(pb, db) + " (whatever the model)",
            fix="Set --disaggregation-transfer-backend nixl on both servers.",
        )
        out.append(Located(f, _flag_location("--disaggregation-transfer-backend", d) or d.first.instance.location, []))
    elif pk and dk and pb != db:
        from kvcheck.checks.mooncake import backend_mismatch_text

        f = Finding(
            id="backend-mismatch",
            severity=Severity.ERROR,
            message=backend_mismatch_text(str(pb), str(db)) + " (whatever the model)",
            fix="Set the same --disaggregation-transfer-backend on both servers (SGLang's default is mooncake).",
        )
        out.append(Located(f, _flag_location("--disaggregation-transfer-backend", d) or d.first.instance.location, []))
    (ppk, pp), (dpk, dp) = p.first.known_arg("pp_size", 1), d.first.known_arg("pp_size", 1)
    pp, dp = int(pp or 1), int(dp or 1)
    if ppk and dpk and dp not in (pp, 1):
        # The decode's own PP check (plan.bootstrap_checks), on sides that agree in
        # everything else it compares, so that only the PP assert can fire.
        same: dict[str, Any] = dict(page_size=1, kv_cache_dtype_str="auto", attn_tp_size=1, attn_cp_size=1)
        try:
            failures = bootstrap_checks(
                PairInfo(**same, pp_size=pp), PairInfo(**same, pp_size=dp), behaviour(d.first.release)
            )
        except ValueError:  # the decode's release: bootstrap checks not modeled (the pair is unchecked)
            failures = []
        for fid, rt in failures:
            if fid == "pp-size-mismatch":
                f = Finding(
                    id=fid,
                    severity=Severity.ERROR,
                    runtime_error=rt,
                    message=f"pipeline parallel sizes: prefill --pp-size={pp}, decode --pp-size={dp} (decode must "
                    "equal the prefill's or be 1, whatever the model)",
                    fix=_BOOTSTRAP_FIX[fid],
                )
                out.append(Located(f, _flag_location("--pp-size", d) or d.first.instance.location, []))
    return out


def _dest_locations(inst: Instance) -> dict[str, Location]:
    cached = getattr(inst, "_dest_locs", None)
    if cached is not None:
        return cached
    from kvcheck.sglang.flags import FlagTable

    table = FlagTable.load()
    out: dict[str, Location] = {}
    for opt, loc in inst.arg_locations.items():
        try:
            out.setdefault(table.resolve(opt).dest, loc)
        except InputError:
            continue
    try:
        inst._dest_locs = out  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return out


def _flag_location(flag: str, cls: ClassResult) -> Location | None:
    from kvcheck.sglang.flags import FlagTable

    f = FlagTable.load().get(flag)
    if f is None:
        return None
    return _dest_locations(cls.first.instance).get(f.dest)


def _locate(f: Finding, p: ClassResult, d: ClassResult) -> list[Location]:
    """The manifest lines a pair finding is about, primary first: every ``--flag`` named
    in its message that a side's manifest sets (the side whose role is named just before
    the flag, else the decode then the prefill). When both sides are named (a mismatch),
    the decode's line comes first: the decode is the side that raises the bootstrap
    checks; a message about one side (``prefill: ...``, ``the prefill server ...``) points at that side's lines first.
    Else the decode's (or, for a prefill-only message, the prefill's) instance line."""
    found: list[tuple[str, Location]] = []
    text = f.message
    # A finding about one side ("prefill: ...", "decode: ...") points at that side's lines.
    side = re.match(r"(?:the )?(prefill|decode)(?![-\w])", text)  # "prefill: ...", "the prefill runs ..."
    owner = (p if side.group(1) == "prefill" else d) if side else None
    default = (owner, d if owner is p else p) if owner is not None else (d, p)
    for m in _FLAG_RE.finditer(text):
        before = text[max(0, m.start() - 12) : m.start()]
        order = (p,) if "prefill" in before else (d,) if "decode" in before else default
        for cls in order:
            loc = _flag_location(m.group(0), cls)
            if loc is not None and loc not in [x for _, x in found]:
                found.append((cls.role, loc))
                break
    if not found:
        # a flag named only in the fix: the side the finding is about, never the other
        # side's line (a prefill without --page-size is not at the decode's --page-size)
        for m in _FLAG_RE.finditer(f.fix):
            for cls in (owner,) if owner is not None else default:
                loc = _flag_location(m.group(0), cls)
                if loc is not None:
                    return [loc]
    if found:
        first = owner.role if owner is not None else "decode"
        found.sort(key=lambda rl: rl[0] != first)
        return [loc for _, loc in found]
    if owner is not None:
        return [owner.first.instance.location]
    if f.message.startswith("prefill") or " the prefill " in f.message[:60]:
        return [p.first.instance.location]
    return [d.first.instance.location]
