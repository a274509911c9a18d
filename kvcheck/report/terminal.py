"""The terminal report (rich): verdict line first, then findings, then the plan."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvcheck.checks.base import Severity
from kvcheck.cluster.model import kv_args
from kvcheck.report.model import Report

VERDICT_STYLE = {"pass": "bold green", "warn": "bold yellow", "unchecked": "bold magenta", "fail": "bold red"}
SEVERITY_STYLE = {
    Severity.ERROR: "red",
    Severity.UNCHECKED: "magenta",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}


def render_terminal(report: Report, console: Console) -> None:
    """Print ``report`` for a person: verdict, findings (with fix and predicted runtime
    error), the sides, and the plan with its segments."""
    counts = {s: sum(1 for f in report.findings if f.severity == s and not f.ignored) for s in Severity}
    head = Text(f"{report.verdict.upper()}", style=VERDICT_STYLE[report.verdict])
    head.append(f"  {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s)", style="default")
    ignored = sum(1 for f in report.findings if f.ignored)
    if ignored:
        head.append(f", {ignored} ignored")
    head.append(f"  [{report.runtime}, {report.kernel} kernel{gpu_label(report.extra.get('gpu') or {})}]", style="dim")
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

    sides = Table(title="KV regions each side registers", title_justify="left", show_edge=False, pad_edge=False)
    sides.add_column("")
    for s in report.sides:
        sides.add_column(s.role)
    rows = [
        ("model", lambda s: s.model),
        ("KV pool", lambda s: s.pool),
        ("attention TP", lambda s: s.attn_tp_size),
        ("PP size", lambda s: s.pp_size),
        ("page size", lambda s: s.page_size),
        ("--kv-cache-dtype", lambda s: s.kv_cache_dtype),
        ("regions", lambda s: s.n_regions),
        (
            "memory kinds",
            lambda s: (
                ", ".join(f"{n} {k}" for k, n in s.kinds.items())
                + (f" ({s.num_draft_regions} draft)" if s.num_draft_regions else "")
            ),
        ),
        ("item length (bytes/page)", lambda s: ", ".join(str(i) for i in s.item_lens)),
        ("from", lambda s: s.origin),
    ]
    for label, get in rows:
        sides.add_row(label, *[str(get(s)) if get(s) not in (None, "") else "-" for s in report.sides])
    console.print()
    console.print(sides)

    _render_live(report, console)

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


def _render_live(report: Report, console: Console) -> None:
    """Live NIXL agents (``extra["agents"]``) and probe results (``extra["probe"]``)."""
    for a in report.extra.get("agents", []):
        kinds = ", ".join(f"{n} {k}" for k, n in a.get("kinds", {}).items())
        console.print(Text(f"agent {a['name']} ({a['source']}): {a['n_regions']} regions {kinds}", style="dim"))
    probe = report.extra.get("probe")
    if not probe:
        return
    console.print()
    table = Table(
        title=f"probe {probe.get('local_agent')} -> {probe.get('remote_agent')}",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for col in ("segment", "regions", "kinds", "bytes", "pages", "latency", "bandwidth", "verified"):
        table.add_column(col)
    for s in probe.get("segments", []):
        bw = s.get("bandwidth_Bps")
        table.add_row(
            str(s["index"]),
            f"[{s['start']}, {s['end']})",
            f"{s['src_kind']}->{s['dst_kind']}",
            str(s["bytes"]),
            str(s["pages"]),
            f"{s['latency_s'] * 1000:.2f} ms",
            f"{bw / 1e9:.2f} GB/s" if bw else "-",
            "yes" if s["verified"] else "NO",
        )
    console.print(table)
    t = probe.get("transport", {})
    console.print(
        Text(
            f"      transport: {t.get('backend', '?')}, UCX_TLS={t.get('UCX_TLS')}, "
            f"UCX_NET_DEVICES={t.get('UCX_NET_DEVICES')}",
            style="dim",
        )
    )
    for note in probe.get("notes", []):
        console.print(Text(f"      note: {note}", style="dim"))


class PipeSafeConsole(Console):
    """A rich ``Console`` that goes quiet when its reader closes the pipe (``| head``),
    instead of rich's default ``SystemExit(1)``: the exit status stays the verdict's.

    Written to a pipe or a file (not a terminal, whatever ``COLUMNS`` says), lines are neither
    wrapped at rich's default 80 columns nor cut: ``width`` defaults to ``PIPE_WIDTH``
    and ``soft_wrap`` to true, so paths and messages arrive whole for ``grep``/CI logs.
    """

    PIPE_WIDTH = 100_000

    def __init__(self, *args, **kwargs) -> None:
        file = kwargs.get("file") or sys.stdout
        try:
            tty = file.isatty()
        except (AttributeError, ValueError):
            tty = False
        # No highlighting: styles inserted inside a value would split a secret value
        # and hide it from the scrub at the output boundary (kvcheck.cli.output.ScrubbingStream).
        kwargs.setdefault("highlight", False)
        if not tty and "width" not in kwargs:  # COLUMNS is for terminals (test runners export 80)
            kwargs["width"] = self.PIPE_WIDTH
            kwargs.setdefault("soft_wrap", True)
        super().__init__(*args, **kwargs)

    def render(self, renderable, options=None):
        """rich's segments with every input-derived text escaped (``escape_terminal``):
        a model path, container name or image holding ESC/CSI/OSC or bidi characters is
        shown as ``\\x1b[2J``, never interpreted. rich's own control segments pass."""
        from rich.segment import Segment

        from kvcheck.sources.limits import escape_terminal

        for seg in super().render(renderable, options):
            if seg.control is None and seg.text:
                safe = escape_terminal(seg.text)
                yield seg if safe is seg.text else Segment(safe, seg.style, seg.control)
            else:
                yield seg

    def on_broken_pipe(self) -> None:
        self.quiet = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass


def gpu_label(gpus: dict) -> str:
    """``", GPU h100 (assumed: no --gpu or manifest GPU)"``: which GPU the sides were
    checked on and whether it was given or assumed (page sizes and backends depend on it)."""
    seen = {(g.get("gpu"), str(g.get("source", ""))) for g in gpus.values()}
    if not seen:
        return ""
    parts = []
    for gpu, source in sorted(seen, key=str):
        parts.append(
            f"{gpu} (assumed: no --gpu or manifest GPU)" if source.startswith("default") else f"{gpu} ({source})"
        )
    return ", GPU " + " / ".join(parts)


def render_cluster_terminal(report, console: Console) -> None:
    """Print a ``kvcheck.cluster.ClusterReport``: the verdict, then per deployment its
    instances, classes, pairs (verdict and plan) and findings (each with its manifest
    line and fix; a finding shared by several pairs is printed once)."""
    head = Text(report.verdict.upper(), style=VERDICT_STYLE[report.verdict])
    pairs = [p for d in report.deployments for p in d.pairs]
    counts = {v: sum(1 for p in pairs if p.verdict == v) for v in ("fail", "unchecked", "warn", "pass")}
    head.append(
        f"  {sum(len(d.instances) for d in report.deployments)} instance(s), {len(pairs)} pair(s)"
        + "".join(f"{', ' if i else ': '}{n} {v}" for i, (v, n) in enumerate((v, n) for v, n in counts.items() if n)),
        style="default",
    )
    gpus = {
        f"{c.role}:{c.id}": {"gpu": c.side.gpu, "source": c.side.gpu_source}
        for d in report.deployments
        for c in d.classes
        if c.side is not None
    }
    # the sides whose GPU was not given are decided on each GPU of their pair's window
    # (kvcheck.cluster.decide._assumed_gpus), never on the side's placeholder GPU: said so,
    # also when no pair was decided on a GPU (no pair, or none built)
    from kvcheck.release.window import ASSUMED_GPUS

    decided = {g for d in report.deployments for p in d.pairs for g in (p.releases or {}).get("gpus_decided") or ()}
    order = {g: i for i, g in enumerate(ASSUMED_GPUS)}
    each = (
        {
            "gpu": "/".join(sorted(decided, key=lambda g: (order.get(g, len(order)), g))),
            "source": "no GPU given: decided on each",
        }
        if decided
        else {
            "gpu": "not given",
            "source": "no pair was decided on a GPU; a pair's side without one is decided on "
            + " and ".join(ASSUMED_GPUS),
        }
    )
    gpus = {k: each if str(g["source"]).startswith("default") else g for k, g in gpus.items()}
    head.append(f"  [{report.runtime}, {report.kernel} kernel{gpu_label(gpus)}]", style="dim")
    console.print(head)
    if report.verdict == "unchecked":
        console.print(
            Text(
                "  accepted with --allow-unchecked: exit 0"
                if report.allow_unchecked
                else "  kvcheck could not decide every pair: exit 4 (pass --allow-unchecked to accept)",
                style="magenta",
            )
        )
    for d in report.deployments:
        dep = d.deployment
        console.print()
        console.print(
            Text(
                f"deployment {dep.name}"
                + (f" [{dep.variant}]" if dep.variant else "")
                + f"  ({dep.source})  {d.verdict.upper()}",
                style="bold",
            )
        )
        inst = Table(title="instances", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("role", "name", "class", "line", "replicas", "nodes", "GPUs", "release", "model"):
            inst.add_column(col, overflow="fold")
        for ir in d.instances[:50]:
            i = ir.instance
            at = (
                f"{os.path.basename(i.location.file)}:{i.location.line}"
                if i.location.line
                else os.path.basename(i.location.file)
            )
            inst.add_row(
                i.role,
                i.name,
                ir.class_id or "-",
                at,
                str(i.replicas),
                str(i.nodes),
                str(i.gpus or "-"),
                ir.release or "-",
                ir.model or "-",
            )
        console.print(inst)
        if len(d.instances) > 50:
            console.print(Text(f"  ... and {len(d.instances) - 50} more instance(s)", style="dim"))
        classes = Table(
            title="classes (instances whose KV-relevant args agree)",
            title_justify="left",
            show_edge=False,
            pad_edge=False,
        )
        for col in ("class", "instances", "model config", "TP/DP/PP", "page", "kv dtype", "backend", "checked"):
            classes.add_column(col, overflow="fold")
        for c in d.classes:
            a = kv_args(c.first.args or {})
            classes.add_row(
                c.id,
                str(len(c.members)),
                _short_source(c.first.model_source),
                f"{a.get('tp_size', 1)}/{a.get('dp_size', 1)}/{a.get('pp_size', 1)}",
                str(a.get("page_size", "-")),
                str(a.get("kv_cache_dtype", "auto")),
                str(a.get("disaggregation_transfer_backend", "mooncake")),
                "yes" if c.side is not None else "no",
            )
        console.print(classes)
        pt = Table(title="pairs (each decided once)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("prefill", "decode", "verdict", "plan"):
            pt.add_column(col)
        for p in d.pairs:
            plan = p.report.plan if p.report else None
            desc = (
                "-"
                if plan is None
                else (
                    f"raises {plan.error.type}"
                    if plan.error is not None
                    else f"{plan.path}: {plan.n_src} -> {plan.n_dst} regions, {len(plan.segments)} segment(s)"
                )
            )
            pt.add_row(p.prefill.id, p.decode.id, Text(p.verdict.upper(), style=VERDICT_STYLE[p.verdict]), desc)
        console.print(pt)
    seen = set()
    shown = False
    for scope, x in report.all_findings():
        f = x.finding
        sig = (f.id, f.message, str(x.location))
        if sig in seen or f.severity == Severity.INFO:
            continue
        if not shown:
            console.print()
            shown = True
        seen.add(sig)
        line = Text()
        line.append(f"{f.severity.value.upper():9} ", style="dim" if f.ignored else SEVERITY_STYLE[f.severity])
        line.append(f.id, style="bold")
        line.append(f" [{scope}]" + (" (ignored)" if f.ignored else ""), style="dim")
        line.append(f"  {f.message}")
        console.print(line)
        if x.location is not None:
            console.print(Text(f"          at {x.location}", style="dim"))
        if f.runtime_error is not None:
            console.print(
                Text(f"          runtime: {f.runtime_error.type}: {f.runtime_error.message}", style="magenta")
            )
        console.print(Text(f"          fix: {f.fix}", style="green"))


def _short_source(src: str) -> str:
    """A model source for a table cell: catalog, HF cache, --model-config, local, or not found."""
    for prefix, short in (
        ("kvcheck catalog", "catalog"),
        ("Hugging Face cache", "HF cache"),
        ("--model-config", "--model-config"),
        ("local", "local"),
        ("not found", "not found"),
    ):
        if src.startswith(prefix):
            return short
    return "not usable" if src else "-"
