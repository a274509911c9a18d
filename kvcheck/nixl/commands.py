"""The live commands behind the CLI: ``kvcheck agent``, ``kvcheck inspect``, and the
``--prefill-agent/--decode-agent/--probe`` additions to ``preflight``.

Kept out of ``kvcheck.cli`` so the CLI stays thin and the static path never imports it.
"""

from __future__ import annotations

import json
import sys
from typing import Literal, cast

from kvcheck.checks.base import Finding, Severity
from kvcheck.errors import InputError, UnreachableError


def parse_listen(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); port 0 picks a free one. ``InputError`` otherwise."""
    from kvcheck.nixl.transport import _split_hostport

    if spec.endswith(":0"):
        return spec[:-2].strip("[]") or "127.0.0.1", 0
    return _split_hostport(spec, spec)


def load_agent_side(
    config: str,
    role: str,
    *,
    env_file=None,
    model_config=None,
    draft_model_config=None,
    sglang_version: str | None = None,
):
    """The ``Side`` an agent of ``role`` serves for ``config``, and its geometry (both agents:
    NIXL's here, Mooncake's in ``kvcheck.mooncake.agent``). ``InputError`` when the geometry
    has no KV regions to register."""
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sources import load_side

    side = load_side(
        config,
        cast(Literal["prefill", "decode"], role),
        env_file=env_file,
        model_config=model_config,
        draft_model_config=draft_model_config,
        sglang_version=sglang_version,
    )
    geometry = derive_geometry(side)
    if not geometry.regions:
        raise InputError(
            f"the {role} config gives no KV regions to register ({geometry.not_modeled_reason or 'nothing modeled'})",
            source=config,
        )
    return side, geometry


def check_agent_args(role: str, name: str | None, pages: int, max_memory_gib: float, *, max_pages: int) -> None:
    """The arguments every kvcheck agent (NIXL and Mooncake) refuses before loading anything:
    ``role`` other than prefill/decode, ``max_memory_gib`` not a finite number of GiB in
    (0, 4096], ``pages`` outside [1, ``max_pages``], and a ``name`` that does not start with
    ``kvcheck-`` (the probe only writes into kvcheck agents), holds ``/`` (agent names are
    etcd key parts) or is over 200 printable characters. Raises ``InputError`` (exit 2)."""
    import math

    if role not in ("prefill", "decode"):
        raise InputError("--role must be prefill or decode", field="--role")
    if not (isinstance(max_memory_gib, (int, float)) and math.isfinite(max_memory_gib) and 0 < max_memory_gib <= 4096):
        raise InputError(
            f"--max-memory must be a number of GiB in (0, 4096], got {max_memory_gib!r}", field="--max-memory"
        )
    if name is not None and (
        not name.startswith("kvcheck-") or len(name) > 200 or not name.isprintable() or "/" in name
    ):
        raise InputError(
            "--name must start with 'kvcheck-' (the probe only writes into kvcheck agents), have no '/', and be at "
            "most 200 printable characters",
            field="--name",
        )
    if not 1 <= pages <= max_pages:
        raise InputError(f"--pages must be between 1 and {max_pages}, got {pages}", field="--pages")


def run_agent(
    *,
    role: str,
    config: str,
    ttl: str | float | None,
    pages: int,
    listen: str | None,
    etcd: str | None,
    backend: str,
    gpu: str,
    env_file=None,
    model_config=None,
    draft_model_config=None,
    out=None,
    name: str | None = None,
    max_memory_gib: float = 4.0,
    sglang_version: str | None = None,
) -> int:
    """Start a ``role`` agent with the geometry of ``config`` and serve until ``ttl`` (seconds).

    Prints one JSON line ``{"event": "ready", ...}`` (name, pid, listen address, regions,
    guard zones, issues, timings) once published, one per notification received, and
    ``{"event": "stopped", "reason": ...}`` at the end. The JSON lines are the only thing
    on stdout: NIXL's and UCX's own logging is sent to stderr at the file-descriptor
    level (``runtime.json_channel``) when ``out`` is None. Refuses (``InputError``,
    exit 2) a TTL that is not finite and within (0, 7 days], a layout over
    ``max_memory_gib`` GiB (checked before allocating), or a ``name`` not starting with
    ``kvcheck-``. Returns the exit status: 1 when a memory kind failed to register, else 0.
    """
    from kvcheck.nixl.agent import KvAgent, Layout, check_memory_cap, check_ttl

    ttl = check_ttl(ttl)
    check_agent_args(role, name, pages, max_memory_gib, max_pages=1 << 20)
    if gpu not in ("auto", "off"):
        raise InputError("--gpu must be auto or off", field="--gpu")
    _, geometry = load_agent_side(
        config,
        role,
        env_file=env_file,
        model_config=model_config,
        draft_model_config=draft_model_config,
        sglang_version=sglang_version,
    )
    listen_addr = parse_listen(listen) if listen else None
    if listen_addr is None:  # always served: probes confirm regions over it, even when published in etcd
        listen_addr = ("127.0.0.1", 0)
    layout = Layout.from_geometry(geometry, pages)
    max_bytes = int(max_memory_gib * 2**30)
    check_memory_cap(layout, max_bytes)  # before NIXL is even loaded
    if out is None:
        from kvcheck.nixl.runtime import json_channel

        out = json_channel()
    agent = KvAgent(layout, listen=listen_addr, etcd=etcd, backend=backend, gpu=gpu, name=name, max_bytes=max_bytes)
    reason = "error"
    try:
        agent.start()
        ready = {"event": "ready", **agent.summary()}
        out.write(json.dumps(ready) + "\n")
        out.flush()

        def on_notif(peer, msg):
            out.write(
                json.dumps({"event": "notification", "peer": peer, "message": msg.decode(errors="replace")}) + "\n"
            )
            out.flush()

        reason = agent.serve(ttl, on_notif=on_notif)
    finally:
        intact = agent.guards_intact() if agent.guards else None
        agent.close()
    out.write(json.dumps({"event": "stopped", "reason": reason, "name": agent.name, "guards_intact": intact}) + "\n")
    out.flush()
    failed = [i for i in agent.issues if i.finding_id in ("agent-register-failed", "agent-alloc-failed")]
    return 1 if failed else 0


def run_inspect(target: str, *, timeout: float, fmt: str, save: str | None, console=None) -> int:
    """Read and print the metadata of the agent(s) ``target`` names (see ``transport.read_agents``).

    ``fmt``: ``table`` or ``json``. ``save``: write the (single) blob to this file.
    Raises ``InputError``/``UnreachableError``; returns 0.
    """
    from kvcheck.nixl.live import remote_regions
    from kvcheck.nixl.transport import read_agents

    fetched = read_agents(target, timeout=timeout)
    if save:
        if len(fetched) != 1:
            raise InputError(f"--save needs exactly one agent; {target} names {len(fetched)}", field="--save")
        with open(save, "wb") as fh:
            fh.write(fetched[0].blob)
    if fmt == "json":
        out = []
        for f in fetched:
            d = f.meta.as_dict()
            d["source"] = f.source
            d["seconds"] = f.seconds
            d["regions_in_order"] = [r.__dict__ for r in remote_regions(f.meta)] if "UCX" in f.meta.backends else []
            out.append(d)
        from kvcheck.nixl.transport import parse_target

        t = parse_target(target)
        listing = t.kind == "etcd" and not t.name
        sys.stdout.write(json.dumps(out if listing else out[0], indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if not fetched:
        console.print(f"no NIXL agents under {target}")
    for f in fetched:
        m = f.meta
        console.print(f"[bold]{m.name}[/bold]  from {f.source}  ({m.size} bytes, read in {f.seconds * 1000:.1f} ms)")
        console.print("  backends: " + ", ".join(f"{b} ({n} bytes of connection info)" for b, n in m.backends.items()))
        for s in m.sections:
            table = Table(
                title=f"{s.backend} {s.kind}: {len(s.regions)} region(s)", title_justify="left", show_edge=False
            )
            for col in ("address", "length (bytes)", "device id", "key bytes"):
                table.add_column(col, justify="right")
            for r in s.regions:
                table.add_row(
                    hex(r.addr), str(r.length), hex(r.dev_id) if r.dev_id > 0xFFFF else str(r.dev_id), str(r.key_len)
                )
            console.print(table)
    return 0


def augment_preflight(
    report,
    prefill_side,
    decode_side,
    *,
    prefill_agent: str | None,
    decode_agent: str | None,
    probe: bool,
    timeout: float,
    pages: int,
    show_progress: bool,
) -> None:
    """Add live-agent comparisons and the probe to ``report`` (in place).

    Live summaries go to ``report.extra["agents"]``, probe results to
    ``report.extra["probe"]``; their findings join ``report.findings`` and the verdict is
    recomputed. An agent that cannot be read in time raises ``UnreachableError`` (exit 3),
    and so does a probe whose peer stops answering (``probe-timeout``) at any step: a
    frozen peer gives exit 3 whatever the timing. A peer that dies or restarts mid-probe is
    a finding (``probe-peer-lost``/``probe-peer-restarted``, exit 1).
    """
    from kvcheck.nixl.live import compare_geometry
    from kvcheck.nixl.transport import read_agents
    from kvcheck.report.model import verdict_of
    from kvcheck.sglang.geometry import derive_geometry

    pg = derive_geometry(prefill_side) if prefill_side.model.attention != "not_modeled" else None
    dg = derive_geometry(decode_side) if decode_side.model.attention != "not_modeled" else None
    agents = []
    new: list[Finding] = []
    live_pages = None
    for role, spec, geom in (("prefill", prefill_agent, pg), ("decode", decode_agent, dg)):
        if not spec:
            continue
        fetched = read_agents(spec, timeout=timeout)
        if len(fetched) != 1:
            raise InputError(
                f"{spec} names {len(fetched)} agents; give one (etcd://HOST:PORT/NAME)", field=f"--{role}-agent"
            )
        f = fetched[0]
        findings, summary = compare_geometry(f.meta, geom, role, f.source)
        summary["fetch_s"] = f.seconds
        agents.append(summary)
        new.extend(findings)
        if role == "decode":
            live_pages = summary.get("pages")
    if agents:
        report.extra["agents"] = agents
    if probe:
        if not decode_agent:
            raise InputError(
                "--probe needs --decode-agent TARGET (a running kvcheck agent --role decode)", field="--probe"
            )
        plan = report.plan
        blocking = [f for f in new if f.severity == Severity.ERROR]
        if (
            plan is None
            or plan.error is not None
            or plan.path not in ("equal_tp", "direct_to_host", "mixed_segments")
            or blocking
        ):
            why = (
                "the static plan raises"
                if plan is not None and plan.error is not None
                else (f"path {plan.path!r} is not probed" if plan is not None and plan.path else "no plan")
                if not blocking
                else "the live agents disagree with the args"
            )
            new.append(
                Finding(
                    id="probe-skipped",
                    severity=Severity.WARNING,
                    message=f"probe not run: {why}",
                    fix="fix the errors above first; the probe follows the plan the runtime would take",
                )
            )
        else:
            from kvcheck.nixl.probe import build_job

            job = build_job(plan, pg, dg, decode_agent, pages=min(pages, live_pages or pages), timeout=timeout)
            result = _probe_with_progress(job, show_progress)
            if result.notes or any(
                s.get("registered_as")
                and "VRAM" not in s["registered_as"]
                and ("VRAM" in (s["src_kind"], s["dst_kind"]))
                for s in result.segments
            ):
                result.notes.append(
                    "no GPU here: VRAM segments were moved between DRAM stand-ins; segment boundaries and "
                    "notifications follow the plan"
                )
            report.extra["probe"] = result.as_dict()
            frozen = [f for f in result.findings if f.id == "probe-timeout"]
            if frozen:
                # One fault, one status: a peer (or etcd) that stops answering is a live
                # source not reached in time, exit 3, whether it froze before the first
                # read or mid-probe.
                raise UnreachableError(f"probe-timeout: {frozen[0].message}", source=decode_agent)
            new.extend(result.findings)
    report.findings.extend(new)
    order = {Severity.ERROR: 0, Severity.UNCHECKED: 1, Severity.WARNING: 2, Severity.INFO: 3}
    report.findings.sort(key=lambda f: (f.ignored, order[f.severity]))
    report.verdict = verdict_of(report.findings)


def _probe_with_progress(job: dict, show: bool):
    from kvcheck.nixl.probe import run_probe

    if not show:
        return run_probe(job)
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("probe: starting the prefill-role agent", total=None)

        def on_event(ev):
            if ev.get("type") == "step":
                progress.update(task, description=f"probe: {ev['step']}")
            elif ev.get("type") == "segment":
                s = ev["segment"]
                progress.console.print(
                    f"  segment {s['index']} [{s['start']}, {s['end']}) {s['bytes']} bytes "
                    f"{'verified' if s['verified'] else 'MISMATCH'} in {s['latency_s'] * 1000:.2f} ms"
                )

        return run_probe(job, on_event=on_event)
