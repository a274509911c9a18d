"""The terminal report (rich): verdict line first, then findings, then the plan."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvcheck.checks.base import Severity
from kvcheck.report.model import Report

VERDICT_STYLE = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red"}
SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render_terminal(report: Report, console: Console) -> None:
    """Print ``report`` for a person: verdict, findings (with fix and predicted runtime
    error), the sides, and the plan with its segments."""
    counts = {s: sum(1 for f in report.findings if f.severity == s and not f.ignored) for s in Severity}
    head = Text(f"{report.verdict.upper()}", style=VERDICT_STYLE[report.verdict])
    head.append(f"  {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s)", style="default")
    ignored = sum(1 for f in report.findings if f.ignored)
    if ignored:
        head.append(f", {ignored} ignored")
    head.append(f"  [{report.runtime}, {report.kernel} kernel]", style="dim")
    console.print(head)

    for f in report.findings:
        style = SEVERITY_STYLE[f.severity]
        line = Text()
        line.append(f"{f.severity.value.upper():7} ", style="dim" if f.ignored else style)
        line.append(f"{f.id}", style="bold" if not f.ignored else "dim")
        if f.ignored:
            line.append(" (ignored)", style="dim")
        line.append(f"  {f.message}")
        console.print(line)
        if f.runtime_error is not None:
            rt = f.runtime_error
            note = " -- ignored, but the runtime will still raise it" if f.ignored else ""
            console.print(Text(f"        runtime: {rt.type}: {rt.message}{note}", style="magenta"))
            console.print(Text(f"        raised by {rt.raised_by}, at {rt.when}; {rt.operator_sees}", style="dim"))
        if f.severity != Severity.INFO:
            console.print(Text(f"        fix: {f.fix}", style="green"))

    sides = Table(title="KV regions", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("side", "model", "pool", "attn TP", "PP", "page", "kv dtype", "regions", "kinds", "item bytes/page"):
        sides.add_column(col)
    for s in report.sides:
        kinds = ", ".join(f"{n} {k}" for k, n in s.kinds.items())
        if s.num_draft_regions:
            kinds += f" ({s.num_draft_regions} draft)"
        sides.add_row(
            s.role, s.model, s.pool, str(s.attn_tp_size or "-"), str(s.pp_size or "-"), str(s.page_size or "-"),
            s.kv_cache_dtype or "-", str(s.n_regions if s.n_regions is not None else "-"), kinds or "-",
            ", ".join(str(i) for i in s.item_lens) or "-",
        )
    console.print()
    console.print(sides)

    plan = report.plan
    console.print()
    if plan is None:
        console.print("plan: none (a side is not modeled)")
        return
    path = plan.path if plan.error is None else None
    console.print(Text(f"plan: path={path or '-'}  regions: prefill {plan.n_src} -> decode {plan.n_dst}"))
    if plan.error is not None:
        console.print(Text(f"      the prefill raises {plan.error.type} instead of transferring", style="red"))
    for i, seg in enumerate(plan.segments):
        console.print(Text(f"      segment {i}: regions [{seg.start}, {seg.end})  {seg.src_kind} -> {seg.dst_kind}"))
