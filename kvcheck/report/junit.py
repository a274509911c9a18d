"""The JUnit XML report (through the junit-xml library): one test case per check.

A check with an unignored error finding fails (one <failure> per such finding, typed by
the finding id, with the predicted runtime error and the fix in the body). A check whose
only errors were accepted with --ignore is skipped. A check that did not run is skipped,
with the reason: the live-* checks without a live side (a server URL or a snapshot),
``agents`` without --prefill-agent/--decode-agent, ``probe`` without --probe (or when the
probe was not run: its ``probe-skipped`` finding). Warnings and info findings leave the
case passing and are written to its system-out. Findings of checks outside the registry
(live probes) get a case of their own. Suite properties carry verdict, exit status,
runtime, kernel and plan path.
"""

from __future__ import annotations

import json
from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from kvcheck.checks.base import Finding, Severity
from kvcheck.report.model import Report

SUITE_NAME = "kvcheck preflight"
CLASSNAME = "kvcheck.preflight"


def _check_of(finding_id: str) -> str:
    from kvcheck.checks.ids import check_of

    return check_of(finding_id)


def _body(f: Finding) -> str:
    lines = [f"{f.id}: {f.message}"]
    if f.runtime_error is not None:
        rt = f.runtime_error
        lines.append(f"runtime: {rt.type}: {rt.message}")
        lines.append(f"raised by {rt.raised_by}, at {rt.when}")
        if rt.operator_sees:
            lines.append(f"operator sees: {rt.operator_sees}")
    lines.append(f"fix: {f.fix}")
    return "\n".join(lines)


LIVE_CHECKS = ("live-route", "live-role", "live-version", "live-model")
_NOT_RUN = {
    "live": "not run: no live side (give a server URL http(s)://HOST:PORT or a kvcheck snapshot as --prefill/--decode)",
    "agents": "not run: no live NIXL agent (give --prefill-agent and/or --decode-agent)",
    "probe": "not run: no probe (give --probe with --decode-agent)",
}


def _is_live(side) -> bool:
    """Whether a side was read from a running server or a saved snapshot of one: its
    origin is an http(s) URL, or a JSON file holding ``server_info`` (a snapshot)."""
    live = getattr(side, "live", None)
    if live is not None:
        return bool(live)
    origin = side.origin or ""
    if origin.startswith(("http://", "https://")):
        return True
    if not origin.lower().endswith(".json"):
        return False
    try:
        data = json.loads(Path(origin).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "server_info" in data


def not_run(report: Report) -> dict[str, str]:
    """Registered checks that did not run for ``report``, each with the reason (the
    JUnit ``<skipped>`` message). A check with any finding ran. ``report.extra`` may name
    the checks that ran (``checks_run``); otherwise: the live-* checks run when a side is
    live (``_is_live``), ``agents`` when agents were read (``extra["agents"]``), ``probe``
    when it moved bytes (``extra["probe"]``)."""
    from kvcheck.checks import REGISTRY

    with_findings = {_check_of(f.id) for f in report.findings}
    explicit = report.extra.get("checks_run")
    out: dict[str, str] = {}
    for cid in REGISTRY:
        if cid in with_findings:
            continue
        if explicit is not None:
            if cid not in explicit:
                out[cid] = "not run"
            continue
        if cid in LIVE_CHECKS and not any(_is_live(s) for s in report.sides):
            out[cid] = _NOT_RUN["live"]
        elif cid == "agents" and not report.extra.get("agents"):
            out[cid] = _NOT_RUN["agents"]
        elif cid == "probe" and not report.extra.get("probe"):
            out[cid] = _NOT_RUN["probe"]
    return out


def build_suite(report: Report) -> TestSuite:
    """The ``TestSuite`` for ``report``: one ``TestCase`` per registered check (skipped
    when it did not run, see ``not_run``)."""
    from kvcheck.checks import REGISTRY

    skipped = not_run(report)

    grouped: dict[str, list[Finding]] = {cid: [] for cid in REGISTRY}
    for f in report.findings:
        grouped.setdefault(_check_of(f.id), []).append(f)
    cases = []
    for cid, findings in grouped.items():
        case = TestCase(
            name=cid,
            classname=CLASSNAME,
            elapsed_sec=0.0,
            allow_multiple_subelements=True,
            stdout="\n".join(
                f"{f.severity.value}: {_body(f)}" for f in findings if f.severity != Severity.ERROR or f.ignored
            )
            or None,
        )
        errors = [f for f in findings if f.severity == Severity.ERROR and not f.ignored]
        ignored = [f for f in findings if f.severity == Severity.ERROR and f.ignored]
        for f in errors:
            case.add_failure_info(message=f"{f.id}: {f.message}", output=_body(f), failure_type=f.id)
        probe_skipped = [f for f in findings if f.id == "probe-skipped"]
        if not errors and ignored:
            case.add_skipped_info(
                message="ignored with --ignore: " + "; ".join(f"{f.id}: {f.message}" for f in ignored)
            )
        elif cid in skipped:
            case.add_skipped_info(message=skipped[cid])
        elif not errors and probe_skipped and len(probe_skipped) == len(findings):
            case.add_skipped_info(message="; ".join(f.message for f in probe_skipped))
        cases.append(case)
    props = {
        "verdict": report.verdict,
        "exit_code": str(report.exit_code),
        "runtime": report.runtime,
        "kernel": report.kernel,
        "plan_path": (report.plan.path if report.plan and report.plan.error is None else None) or "",
    }
    return TestSuite(SUITE_NAME, cases, properties=props)


def render_junit(report: Report) -> str:
    """``report`` as a JUnit XML document (one <testsuite>, one <testcase> per check)."""
    return to_xml_report_string([build_suite(report)], prettyprint=True, encoding="utf-8")


def render_cluster_junit(report) -> str:
    """A ``kvcheck.cluster.ClusterReport`` as JUnit XML: one <testsuite> per prefill class
    x decode class pair (named ``kvcheck pair PREFILL x DECODE``, one <testcase> per check
    as for a single pair, plus one per class-level finding) and one ``kvcheck cluster``
    suite with a <testcase> per cluster-wide check. An ``unchecked`` finding is a
    <failure> unless --allow-unchecked was given (then a <skipped>), so a CI test report
    shows what kvcheck could not decide."""
    from kvcheck.cluster.checks import CLUSTER_CHECKS

    suites = []
    multi = len(report.deployments) > 1
    for d in report.deployments:
        prefix = f"{d.deployment.variant or d.deployment.name}: " if multi else ""
        for p in d.pairs:
            cases: dict[str, TestCase] = {}
            for x in p.findings:
                f = x.finding
                cid = _check_of(f.id)
                case = cases.get(cid) or cases.setdefault(
                    cid,
                    TestCase(
                        name=cid,
                        classname=f"kvcheck.{p.prefill.id}.{p.decode.id}",
                        elapsed_sec=0.0,
                        allow_multiple_subelements=True,
                        file=x.location.file if x.location else None,
                        line=x.location.line if x.location else None,
                    ),
                )
                _add(case, f, report.allow_unchecked)
            if p.report is not None:
                for cid in _registry():
                    if cid not in cases:
                        cases[cid] = TestCase(
                            name=cid, classname=f"kvcheck.{p.prefill.id}.{p.decode.id}", elapsed_sec=0.0
                        )
                        if cid in LIVE_CHECKS or cid in ("agents", "probe"):
                            cases[cid].add_skipped_info(
                                message="not run: static check of a deployment (no live server or agent)"
                            )
            props = {
                "verdict": p.verdict,
                "prefill_class": p.prefill.id,
                "decode_class": p.decode.id,
                "plan_path": (
                    p.report.plan.path if p.report and p.report.plan and p.report.plan.error is None else None
                )
                or "",
            }
            suites.append(
                TestSuite(
                    f"{prefix}kvcheck pair {p.prefill.id} x {p.decode.id}", list(cases.values()), properties=props
                )
            )
        cases = {
            cid: TestCase(name=cid, classname="kvcheck.cluster", elapsed_sec=0.0, allow_multiple_subelements=True)
            for cid in CLUSTER_CHECKS
        }
        for x in d.findings:
            case = cases.get(x.finding.id) or cases.setdefault(
                x.finding.id,
                TestCase(
                    name=x.finding.id, classname="kvcheck.cluster", elapsed_sec=0.0, allow_multiple_subelements=True
                ),
            )
            _add(case, x.finding, report.allow_unchecked)
        suites.append(
            TestSuite(
                f"{prefix}kvcheck cluster",
                list(cases.values()),
                properties={
                    "verdict": report.verdict,
                    "exit_code": str(report.exit_code),
                    "runtime": report.runtime,
                    "kernel": report.kernel,
                },
            )
        )
    return to_xml_report_string(suites, prettyprint=True, encoding="utf-8")


def _registry():
    from kvcheck.checks import REGISTRY

    return list(REGISTRY)


def _add(case: TestCase, f: Finding, allow_unchecked: bool) -> None:
    if f.ignored:
        case.add_skipped_info(message=f"ignored with --ignore: {f.id}: {f.message}")
    elif f.severity == Severity.ERROR:
        case.add_failure_info(message=f"{f.id}: {f.message}", output=_body(f), failure_type=f.id)
    elif f.severity == Severity.UNCHECKED:
        if allow_unchecked:
            case.add_skipped_info(message=f"unchecked (accepted with --allow-unchecked): {f.id}: {f.message}")
        else:
            case.add_failure_info(message=f"unchecked: {f.id}: {f.message}", output=_body(f), failure_type=f.id)
    else:
        case.stdout = ((case.stdout + "\n") if case.stdout else "") + f"{f.severity.value}: {_body(f)}"
