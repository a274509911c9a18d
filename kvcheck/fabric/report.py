"""The fabric report: a matrix of prefill nodes x decode nodes, in the terminal, as JSON
and as JUnit, plus the named findings. Exit status: 3 when etcd was lost, else 1 on an
error, 4 on ``unchecked``, 0 otherwise."""

from __future__ import annotations

from kvcheck.checks.base import Severity
from kvcheck.fabric.findings import Scoped, cell, judge
from kvcheck.report.model import verdict_of


def build_report(run, plan, *, min_fraction: float = 0.5) -> dict:
    """The JSON object ``kvcheck fabric --format json`` prints."""
    findings = judge(run, plan, min_fraction=min_fraction)
    verdict = verdict_of([s.finding for s in findings])
    cells = {p: cell(run, p) for p in run.pairs}
    for (pn, _dn), c in cells.items():  # the NIC used, beside what the deployment and the GPU-NIC topology ask for
        node = plan.nodes[pn]
        gnic = ((run.nodes.get(pn) or {}).get("facts") or {}).get("gpu_nic") or {}
        c["asked_devices"] = node.asked_devices
        c["asked_source"] = node.asked_source or "(unset: UCX picks)"
        c["gpu_nearest_nics"] = sorted({n for v in gnic.values() for n in v}) or None
    matrix = []
    for pn in plan.prefill_nodes:
        row = {"prefill": pn, "cells": []}
        for dn in plan.decode_nodes:
            shown = cells.get((pn, dn))
            row["cells"].append(shown if shown is not None else {"prefill": pn, "decode": dn, "status": "not-required"})
        matrix.append(row)
    nodes = []
    for n, node in plan.nodes.items():
        rec = run.nodes.get(n) or {}
        facts = rec.get("facts") or {}
        nodes.append(
            {
                "name": n,
                "role": node.role,
                "instance": node.instance,
                "class": node.class_id,
                "status": rec.get("status") or ("lost" if n in run.lost else "missing"),
                "agent": rec.get("agent"),
                "listen": rec.get("listen"),
                "registered_bytes": rec.get("registered_bytes"),
                "regions": rec.get("regions"),
                "gpu": rec.get("gpu"),
                "env": rec.get("env"),
                "asked_devices": node.asked_devices,
                "asked_source": node.asked_source,
                "netdevs": facts.get("netdevs"),
                "rdma": facts.get("rdma"),
                "gpus": facts.get("gpus"),
                "gpu_nic": facts.get("gpu_nic"),
                "lost": run.lost.get(n),
                "guards_intact": run.guards.get(n),
            }
        )
    exit_code = 3 if run.etcd_lost else {"fail": 1, "unchecked": 4}.get(verdict, 0)
    return {
        "verdict": verdict,
        "exit_code": exit_code,
        "deployment": plan.deployment,
        "run_seconds": run.seconds,
        "join_seconds": run.join_seconds,
        "prefill_nodes": plan.prefill_nodes,
        "decode_nodes": plan.decode_nodes,
        "required_pairs": len(plan.pairs),
        "probed_pairs": sum(1 for r in run.pairs.values() if r.attempts),
        "rounds": run.rounds,
        "planned_rounds": len(plan.rounds),
        "matrix": matrix,
        "nodes": nodes,
        "findings": [s.contract() for s in findings],
        "notes": plan.notes,
        "tolerance": {
            "bw_tolerance": run.options.bw_tolerance,
            "lat_tolerance": run.options.lat_tolerance,
            "retests": run.options.retests,
            "min_fraction": min_fraction,
        },
    }


def _fmt_bw(b) -> str:
    return f"{b / 1e9:.2f} GB/s" if b and b >= 1e9 else (f"{b / 1e6:.1f} MB/s" if b else "-")


def _fmt_lat(s) -> str:
    return f"{s * 1e6:.0f} us" if s and s < 1e-3 else (f"{s * 1e3:.1f} ms" if s else "-")


def render_terminal(report: dict, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(
        title=f"kvcheck fabric: {escape(report['deployment'])}  ({report['required_pairs']} required pairs, "
        f"{report['probed_pairs']} probed, {len(report['rounds'])} rounds in {report['run_seconds']:.1f} s)",
        title_justify="left",
    )
    t.add_column("prefill \\ decode")
    for d in report["decode_nodes"]:
        t.add_column(escape(d))
    bad_pairs = {tuple(f["pair"]) for f in report["findings"] if f["pair"] and f["severity"] in ("error", "warning")}
    for row in report["matrix"]:
        cells = []
        for c in row["cells"]:
            if c["status"] == "not-required":
                cells.append("[dim]·[/dim]")
            elif c["reached"]:
                mark = "[red]![/red] " if (c["prefill"], c["decode"]) in bad_pairs else ""
                lanes = escape(",".join(c["lanes"]) or "?")
                cells.append(
                    f"{mark}{_fmt_bw(c['bandwidth_Bps'])}\n{_fmt_lat(c['latency_s'])}\n{lanes}\n{c['bytes_checked']} "
                    "B ok"
                )
            else:
                cells.append(f"[red]{escape(c['status'])}[/red]")
        t.add_row(escape(row["prefill"]), *cells)
    console.print(t)
    for f in report["findings"]:
        colour = {"error": "red", "unchecked": "yellow", "warning": "yellow", "info": "dim"}[f["severity"]]
        console.print(f"[{colour}]{f['severity']}[/{colour}] {escape(f['id'])}: {escape(f['message'])}")
        if f["severity"] != "info":
            console.print(f"    fix: {escape(f['fix'])}")
    for n in report["notes"]:
        console.print(f"[dim]note: {escape(n)}[/dim]")
    console.print(f"verdict: [bold]{report['verdict']}[/bold]")


def render_junit(report: dict) -> str:
    """One testsuite: a testcase per required pair and per node, one per run-wide finding."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name="kvcheck fabric", tests="0", failures="0", skipped="0")
    by_pair: dict[tuple, list] = {}
    by_node: dict[str, list] = {}
    other = []
    for f in report["findings"]:
        if f["pair"]:
            by_pair.setdefault(tuple(f["pair"]), []).append(f)
        elif f["node"]:
            by_node.setdefault(f["node"], []).append(f)
        else:
            other.append(f)
    n = fails = skips = 0

    def case(classname, name, found, text="", not_probed=None):
        nonlocal n, fails, skips
        n += 1
        tc = ET.SubElement(suite, "testcase", classname=classname, name=name)
        errs = [f for f in found if f["severity"] == "error"]
        unchecked = [f for f in found if f["severity"] == "unchecked"]
        if errs:
            fails += 1
            el = ET.SubElement(tc, "failure", type=errs[0]["id"], message=errs[0]["message"][:500])
            el.text = "\n".join(f"{f['id']}: {f['message']}\nfix: {f['fix']}" for f in errs)
        elif unchecked or not_probed:
            skips += 1
            ET.SubElement(tc, "skipped", message=(unchecked[0]["message"] if unchecked else not_probed)[:500])
        if text:
            ET.SubElement(tc, "system-out").text = text

    for row in report["matrix"]:
        for c in row["cells"]:
            if c["status"] == "not-required":
                continue
            text = (
                f"reached={c['reached']} bytes_checked={c['bytes_checked']} "
                f"bandwidth={_fmt_bw(c['bandwidth_Bps'])} latency={_fmt_lat(c['latency_s'])} "
                f"lanes={','.join(c['lanes'])}"
            )
            case(
                "fabric.pairs",
                f"{c['prefill']} -> {c['decode']}",
                by_pair.get((c["prefill"], c["decode"]), []),
                text,
                not_probed=None
                if c["reached"]
                else f"not probed ({c['status']}): see the findings of {c['prefill']} and {c['decode']}",
            )
    for node in report["nodes"]:
        case("fabric.nodes", node["name"], by_node.get(node["name"], []), f"status={node['status']}")
    for f in other:
        case("fabric.run", f["id"], [f])
    suite.set("tests", str(n))
    suite.set("failures", str(fails))
    suite.set("skipped", str(skips))
    return ET.tostring(suite, encoding="unicode")


__all__ = ["Scoped", "Severity", "build_report", "render_junit", "render_terminal"]
