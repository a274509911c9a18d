"""GitHub Actions workflow commands: one annotation per finding, then the verdict.

Unignored errors print ``::error title=kvcheck ID::MESSAGE``, warnings ``::warning``, info
and ignored findings ``::notice``. The message carries the finding, the runtime error
it predicts and the fix, on separate lines (newlines escaped as %0A, as GitHub requires).
The last line is a ``::notice`` (pass/warn) or ``::error`` (fail) with the verdict.
"""

from __future__ import annotations

from kvcheck.checks.base import Finding, Severity
from kvcheck.report.model import Report

_LEVEL = {Severity.ERROR: "error", Severity.UNCHECKED: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow command's message (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (also ``:`` and ``,``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **props: str) -> str:
    """One workflow command line: ``::level k=v,k=v::message``."""
    head = ",".join(f"{k}={escape_property(v)}" for k, v in props.items() if v)
    return f"::{level}{' ' + head if head else ''}::{escape_data(message)}"


def _parts(f: Finding, tag: str = "") -> tuple[str, str, str]:
    """A finding's annotation level, title (``tag`` after the id) and message body."""
    level = "notice" if f.ignored else _LEVEL[f.severity]
    title = f"kvcheck {f.id}{tag}" + (" (ignored)" if f.ignored else "")
    body = [f.message]
    if f.runtime_error is not None:
        body.append(f"runtime: {f.runtime_error.type}: {f.runtime_error.message}")
    if f.severity != Severity.INFO:
        body.append(f"fix: {f.fix}")
    return level, title, "\n".join(body)


def _annotation(f: Finding) -> str:
    level, title, body = _parts(f)
    return command(level, body, title=title)


def render_github(report: Report) -> str:
    """``report`` as GitHub workflow annotation lines (one per finding, then the verdict)."""
    lines = [_annotation(f) for f in report.findings]
    errors = sum(1 for f in report.findings if f.severity == Severity.ERROR and not f.ignored)
    warnings = sum(1 for f in report.findings if f.severity == Severity.WARNING and not f.ignored)
    level = "error" if report.verdict == "fail" else "notice"
    lines.append(
        command(
            level,
            f"{report.verdict.upper()}: {errors} error(s), {warnings} warning(s) [{report.runtime}, {report.kernel} "
            "kernel]",
            title="kvcheck verdict",
        )
    )
    return "\n".join(lines)


def _cluster_annotation(scope: str, located, loc=None) -> str:
    """One annotation for a cluster report finding, with ``file=``/``line=`` of the
    manifest line that set the flag (so it attaches to the pull request diff)."""
    level, title, body = _parts(located.finding, f" [{scope}]")
    loc = loc or located.location
    props = {"file": loc.file if loc else "", "line": str(loc.line) if loc and loc.line else "", "title": title}
    return command(level, body, **props)


def render_cluster_github(report) -> str:
    """A ``kvcheck.cluster.ClusterReport`` as annotations: one per finding and manifest
    line it is about (a mismatch is annotated on both sides' lines, the decode's first),
    each with ``file=`` and ``line=``; a finding shared by several pairs is written once.
    Then the verdict with the pair counts."""
    lines, seen = [], set()
    for scope, x in report.all_findings():
        for loc in x.locations or [None]:
            sig = (x.finding.id, x.finding.message, loc.file if loc else None, loc.line if loc else None)
            if sig in seen:
                continue
            seen.add(sig)
            lines.append(_cluster_annotation(scope, x, loc))
    pairs = [p for d in report.deployments for p in d.pairs]
    counts = {v: sum(1 for p in pairs if p.verdict == v) for v in ("fail", "unchecked", "warn", "pass")}
    level = "error" if report.exit_code else "notice"
    note = " (accepted with --allow-unchecked)" if report.verdict == "unchecked" and report.allow_unchecked else ""
    lines.append(
        command(
            level,
            f"{report.verdict.upper()}{note}: {len(pairs)} pair(s)"
            + "".join(
                f"{', ' if i else ': '}{n} {v}" for i, (v, n) in enumerate((v, n) for v, n in counts.items() if n)
            )
            + f" [{report.runtime}, {report.kernel} kernel]",
            title="kvcheck verdict",
        )
    )
    return "\n".join(lines)
