"""The JUnit XML report (through the junit-xml library): one test case per check.

A check with an unignored error finding fails (one <failure> per such finding, typed by
the finding id, with the predicted runtime error and the fix in the body). A check whose
only errors were accepted with --ignore is skipped. Warnings and info findings leave the
case passing and are written to its system-out. Findings of checks outside the registry
(live probes) get a case of their own. Suite properties carry verdict, exit status,
runtime, kernel and plan path.
"""

from __future__ import annotations

from junit_xml import TestCase, TestSuite, to_xml_report_string

from kvcheck.checks.base import Finding, Severity
from kvcheck.report.model import Report

SUITE_NAME = "kvcheck preflight"
CLASSNAME = "kvcheck.preflight"


def _check_of(finding_id: str) -> str:
    from kvcheck.preflight import _check_of as check_of

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


def build_suite(report: Report) -> TestSuite:
    """The ``TestSuite`` for ``report``: one ``TestCase`` per registered check."""
    from kvcheck.checks import REGISTRY

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
            stdout="\n".join(f"{f.severity.value}: {_body(f)}" for f in findings if f.severity != Severity.ERROR or f.ignored) or None,
        )
        errors = [f for f in findings if f.severity == Severity.ERROR and not f.ignored]
        ignored = [f for f in findings if f.severity == Severity.ERROR and f.ignored]
        for f in errors:
            case.add_failure_info(message=f"{f.id}: {f.message}", output=_body(f), failure_type=f.id)
        if not errors and ignored:
            case.add_skipped_info(message="ignored with --ignore: " + "; ".join(f"{f.id}: {f.message}" for f in ignored))
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
