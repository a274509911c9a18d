"""``kvcheck fabric``: read the deployment, plan the fabric, then plan only (``--plan``),
emit the cluster's workers (``--emit``), or run: start the workers (``--local``,
``--hosts``) or wait for them (already started by ``--emit``'d manifests), probe, report."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from kvcheck.errors import InputError


def run_command(
    *,
    files: list[Path],
    etcd: str | None,
    start_etcd: str | None,
    local: bool,
    hosts: Path | None,
    emit: str | None,
    plan_only: bool,
    fmt: str,
    pages: int,
    timeout: float,
    join_timeout: float,
    deadline: float,
    min_fraction: float,
    bw_tolerance: float,
    lat_tolerance: float,
    retests: int,
    run: str | None,
    image: str | None,
    variant: int,
    cluster_options,
    output: Path | None = None,
) -> int:
    """Returns the exit status (see ``kvcheck.fabric.report``)."""
    from kvcheck.fabric.topology import build_plan
    from kvcheck.sources.deployments import read_deployments

    if fmt not in ("terminal", "json", "junit"):
        raise InputError(f"unknown format {fmt!r}; choose terminal, json or junit", field="--format")
    if emit not in (None, "k8s", "slurm"):
        raise InputError(f"unknown --emit {emit!r}; choose k8s or slurm", field="--emit")
    if not 0 < min_fraction < 1 or not 0 < bw_tolerance <= 1 or lat_tolerance < 1 or not 0 <= retests <= 10:
        raise InputError(
            "--min-fraction and --bw-tolerance must be in (0, 1), --lat-tolerance at least 1, --retests 0..10",
            field="--min-fraction",
        )
    if not 1 <= pages <= 4096:
        raise InputError("--pages must be between 1 and 4096", field="--pages")
    if local and hosts:
        raise InputError("give --local or --hosts, not both", field="--hosts")
    if not files:
        raise InputError("give the deployment with -f FILE", field="-f")
    deployments = read_deployments(list(files))
    plan = build_plan(deployments, pages=pages, timeout=timeout, options=cluster_options, deployment_index=variant)
    if not plan.prefill_nodes or not plan.decode_nodes:
        raise InputError("the deployment has no prefill or no decode node: nothing to probe", source=str(files[0]))
    run = run or f"run-{uuid.uuid4().hex[:10]}"
    if plan_only:
        if fmt == "junit":
            raise InputError("--plan prints a table (-o terminal) or JSON (-o json), not junit", field="--format")
        contract = plan.contract()
        _write(json.dumps(contract, indent=2) + "\n" if fmt == "json" else render_plan(contract), output)
        return 0
    if emit:
        from kvcheck.fabric.emit import emit_k8s, emit_slurm

        instances = [i for d in deployments for i in d.instances]
        text = (
            emit_k8s(plan, instances, etcd=etcd, run=run, image=image, start_etcd=bool(start_etcd))
            if emit == "k8s"
            else emit_slurm(plan, instances, etcd=etcd, run=run)
        )
        _write(text, output)
        return 0
    from kvcheck.fabric.coordinator import FabricOptions, run_fabric
    from kvcheck.fabric.launch import Launcher, SmallEtcd, read_hosts
    from kvcheck.fabric.report import build_report, render_junit, render_terminal

    small = None
    if start_etcd:
        host, _, port = start_etcd.rpartition(":")
        try:
            small = SmallEtcd(host or "127.0.0.1", int(port or 0))
        except ValueError:
            raise InputError("--start-etcd takes HOST:PORT (PORT 0 picks one)", field="--start-etcd") from None
        etcd = small.url
    if not etcd:
        raise InputError(
            "give --etcd http://HOST:PORT (the etcd the workers join) or --start-etcd HOST:PORT", field="--etcd"
        )
    if not etcd.startswith("http://"):
        raise InputError("--etcd must be http://HOST:PORT", field="--etcd")
    launcher = Launcher(read_hosts(hosts)) if hosts else (Launcher() if local else None)
    if hosts and launcher is not None:
        missing = [n for n in plan.nodes if n not in launcher.hosts]
        if missing:
            raise InputError(f"the hosts file has no entry for node(s) {', '.join(missing)}", source=str(hosts))
    try:
        opts = FabricOptions(
            etcd=etcd,
            run=run,
            join_timeout=join_timeout,
            deadline=deadline,
            timeout=timeout,
            bw_tolerance=bw_tolerance,
            lat_tolerance=lat_tolerance,
            retests=retests,
        )
        result = run_fabric(
            plan, opts, launcher, on_event=_progress if fmt == "terminal" and sys.stderr.isatty() else None
        )
    finally:
        if small is not None:
            small.close()
    report = build_report(result, plan, min_fraction=min_fraction)
    if fmt == "json":
        _write(json.dumps(report, indent=2) + "\n", output)
    elif fmt == "junit":
        _write(render_junit(report) + "\n", output)
    else:
        from kvcheck.report.terminal import PipeSafeConsole

        render_terminal(report, PipeSafeConsole())
    return report["exit_code"]


def _progress(kind: str, data: dict) -> None:
    if kind == "round":
        sys.stderr.write(f"kvcheck fabric: {data['kind']} round {data['index'] + 1}: {len(data['pairs'])} pair(s)\n")


def render_plan(contract: dict) -> str:
    """``kvcheck fabric --plan``'s table (the default format, as every command's): the
    nodes, the required prefill -> decode pairs by round, the class pairs not probed and
    the notes; ``contract`` is ``FabricPlan.contract()`` (what ``-o json`` prints)."""
    nodes, pairs, rounds = contract["nodes"], contract["pairs"], contract["rounds"]
    out = [
        f"fabric plan of {contract['deployment']}: {len(nodes)} node(s), {len(pairs)} required pair(s), "
        f"{len(rounds)} round(s)",
        "nodes",
    ]
    rows = [("node", "role", "instance", "replica", "node rank", "host", "asked devices")]
    for n in nodes:
        asked = ",".join(n["asked_devices"]) + (f" ({n['asked_source']})" if n["asked_source"] else "")
        rows.append(
            (
                n["name"],
                n["role"],
                n["instance"],
                str(n["replica"]),
                str(n["node_rank"]),
                n["host"] or "-",
                asked or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.append("pairs by round (prefill -> decode; no node is in two probes of a round)")
    for i, rnd in enumerate(rounds, start=1):
        out.append(f"  round {i}: " + ", ".join(f"{p} -> {d}" for p, d in rnd))
    for sk in contract["skipped"]:
        out.append(f"not probed: {sk['prefill_class']} x {sk['decode_class']}: {sk['why']}")
    out += [f"note: {n}" for n in contract["notes"]]
    return "\n".join(out) + "\n"


def _write(text: str, output: Path | None) -> None:
    if output and str(output) != "-":
        Path(output).write_text(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
