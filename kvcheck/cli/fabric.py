"""``kvcheck fabric``: probe every prefill node to every decode node it sends KV to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvcheck.cli.options import seconds_option


def fabric(
    files: list[Path] = typer.Option(
        [], "--file", "-f", metavar="FILE", help="The deployment (as preflight -f reads it)."
    ),
    etcd: str | None = typer.Option(
        None,
        "--etcd",
        help="http://HOST:PORT of the etcd the node workers join (NIXL's metadata path and kvcheck's control keys).",
    ),
    start_etcd: str | None = typer.Option(
        None,
        "--start-etcd",
        metavar="HOST:PORT",
        help="Start a small etcd here for the run (port 0 picks one); with --emit k8s, emit one.",
    ),
    local: bool = typer.Option(False, "--local", help="Start every node's worker on this host (loopback)."),
    hosts: Path | None = typer.Option(
        None,
        "--hosts",
        help="YAML: node -> {prefix: [command prefix], listen_host, env}: start each worker through its prefix (ip "
        "netns exec, ssh...).",
    ),
    emit: str | None = typer.Option(
        None,
        "--emit",
        help="k8s: write the Jobs running one worker per node; slurm: write the srun lines. Nothing is probed.",
    ),
    plan_only: bool = typer.Option(
        False,
        "--plan",
        help="Print the nodes, required pairs and rounds (a table; -o json: the plan as JSON) and exit.",
    ),
    format: str = typer.Option("terminal", "--format", "-o", help="terminal, json or junit."),
    output: Path | None = typer.Option(
        None, "--output", help="Write the report (or --emit / --plan output) to this file."
    ),
    pages: int = typer.Option(4, "--pages", help="Pages per KV region each agent registers and each probe moves."),
    timeout: Annotated[
        float, seconds_option("--timeout", "Seconds per probe step (connect, confirm, write, read back).")
    ] = 5.0,
    join_timeout: Annotated[float, seconds_option("--join-timeout", "Seconds to wait for every node to join.")] = 60.0,
    deadline: Annotated[float, seconds_option("--deadline", "Seconds the whole run may take.")] = 600.0,
    min_fraction: float = typer.Option(
        0.5,
        "--min-fraction",
        help="A link under this fraction of the median bandwidth (or over median latency / fraction) is named "
        "fabric-slow-link.",
    ),
    bw_tolerance: float = typer.Option(
        0.93, "--bw-tolerance", help="Retest a pair under this fraction of the best bandwidth (ClusterKit: 0.93)."
    ),
    lat_tolerance: float = typer.Option(
        2.1, "--lat-tolerance", help="Retest a pair over this multiple of the lowest latency (ClusterKit: 2.1)."
    ),
    retests: int = typer.Option(
        3, "--retests", help="Retest passes (each keeps the worse half of the pairs still outside tolerance)."
    ),
    run: str | None = typer.Option(
        None, "--run", help="Run id (etcd keys /kvcheck/fabric/RUN/); give the one --emit printed."
    ),
    image: str | None = typer.Option(
        None, "--image", help="--emit k8s: the worker image (default: the instance's image, kvcheck pip-installed)."
    ),
    variant: int = typer.Option(0, "--variant", help="Which deployment of a sweep (0-based)."),
    model_config: Path | None = typer.Option(
        None,
        "--model-config",
        help="config.json for every instance (when model-path is a hub id kvcheck does not ship).",
    ),
    models_dir: Path | None = typer.Option(
        None, "--models", help="A Hugging Face cache folder to find model configs in."
    ),
    sglang_version: str | None = typer.Option(
        None, "--sglang-version", metavar="VERSION", help="The SGLang release every instance runs."
    ),
) -> None:
    """Probe the fabric: every prefill node to every decode node it sends KV to (SGLang's rank
    mapping), one kvcheck agent per node, in rounds, with ClusterKit-style retests.

    Exit status: 0 every required pair moved bytes intact at a normal rate, 1 a finding
    failed the fabric, 2 bad input, 3 etcd was lost, 4 some pair could not be probed.
    """
    from kvcheck.cluster import ClusterOptions
    from kvcheck.fabric.command import run_command

    opts = ClusterOptions(model_config=model_config, models_dir=models_dir, sglang_version=sglang_version)
    raise typer.Exit(
        run_command(
            files=list(files),
            etcd=etcd,
            start_etcd=start_etcd,
            local=local,
            hosts=hosts,
            emit=emit,
            plan_only=plan_only,
            fmt=format,
            pages=pages,
            timeout=timeout,
            join_timeout=join_timeout,
            deadline=deadline,
            min_fraction=min_fraction,
            bw_tolerance=bw_tolerance,
            lat_tolerance=lat_tolerance,
            retests=retests,
            run=run,
            image=image,
            variant=variant,
            cluster_options=opts,
            output=output,
        )
    )
