"""The live and NIXL commands: ``snapshot`` (save a live server's args), ``agent`` (a NIXL
or Mooncake agent in the role of one side) and ``inspect`` (read any NIXL agent's
metadata)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from kvcheck.cli.options import api_key_option, seconds_option
from kvcheck.errors import KvcheckError

if TYPE_CHECKING:
    from kvcheck.sides import Role


def snapshot(
    url: str = typer.Argument(..., help="A live SGLang server's HTTP address, http(s)://HOST:PORT."),
    output: str = typer.Option(..., "--output", "-o", help="Where to save the snapshot JSON ('-' for stdout)."),
    role: str | None = typer.Option(
        None,
        "--role",
        help="prefill or decode (default: the server's disaggregation_mode). A prefill's bootstrap /route is saved "
        "too.",
    ),
    api_key: Annotated[str | None, api_key_option("Bearer token for the server's HTTP API.")] = None,
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap",
        help="The prefill's bootstrap server URL (default: http://HOST:disaggregation_bootstrap_port).",
    ),
    connect_timeout: Annotated[float, seconds_option("--connect-timeout", "Seconds to wait for each connect.")] = 3.0,
    deadline: Annotated[
        float, seconds_option("--deadline", "Seconds the capture may take in all, retries included.")
    ] = 10.0,
) -> None:
    """Save a live server's redacted /server_info (+ /model_info, + the bootstrap /route for a
    prefill) to check it later, offline: kvcheck preflight --prefill FILE ...

    Exit status: 0 saved (a /route that could not be read is saved as route_error, with a
    warning), 2 bad usage or 401/403, 3 the server could not be read in time.
    """
    from kvcheck.sources.live import capture, write_snapshot

    if role not in (None, "prefill", "decode"):
        raise KvcheckError(f"unknown role {role!r}; choose prefill or decode", field="--role")
    snap = capture(
        url,
        cast("Role | None", role),
        api_key=api_key,
        bootstrap=bootstrap,
        connect_timeout=connect_timeout,
        deadline=deadline,
        tolerate_route=True,
    )
    write_snapshot(snap, output)
    if snap.get("route_error"):
        typer.echo(f"kvcheck: warning: saved without the bootstrap /route reply: {snap['route_error']}", err=True)
    info = snap["server_info"]
    typer.echo(
        f"kvcheck: saved {snap['role'] or 'server'} snapshot of {snap['url']} (SGLang {info.get('version', '?')}) to "
        f"{output}",
        err=True,
    )


def agent(
    role: str = typer.Option(..., "--role", help="prefill or decode: whose KV regions to register."),
    config: str = typer.Option(
        ...,
        "--config",
        "-c",
        help="That side's server args, in any form preflight reads (YAML, command line, JSON, snapshot).",
    ),
    ttl: str | None = typer.Option(
        None,
        "--ttl",
        help="Seconds to live (required; finite, at most 604800 = 7 days); the agent also stops on SIGTERM/SIGINT, "
        "then deregisters and withdraws its metadata.",
    ),
    listen: str | None = typer.Option(
        None,
        "--listen",
        help="HOST:PORT to serve the metadata and region confirmations on (NIXL's listener protocol, kvcheck's "
        "read-only server; NIXL's own listener thread is never started). Default 127.0.0.1 on a free port, "
        "also with --etcd.",
    ),
    etcd: str | None = typer.Option(
        None,
        "--etcd",
        help="http://HOST:PORT of etcd: publish with NIXL's etcd support (keys under /nixl/agents/, deleted on exit).",
    ),
    pages: int = typer.Option(
        4, "--pages", help="Pages per region to allocate and register (bytes per region = item length x pages)."
    ),
    backend: str = typer.Option(
        "UCX",
        "--backend",
        help="NIXL backend (SGLANG_DISAGGREGATION_NIXL_BACKEND; the runtime's default is UCX), or mooncake: a "
        "Mooncake TransferEngine agent (--disaggregation-transfer-backend mooncake).",
    ),
    protocol: str | None = typer.Option(
        None,
        "--protocol",
        help="mooncake: the transfer protocol (MOONCAKE_PROTOCOL; default: that side's env, else rdma, which falls "
        "back to tcp on a node without RDMA devices).",
    ),
    ib_device: str | None = typer.Option(
        None,
        "--ib-device",
        help="mooncake: RDMA devices for this agent (default: that side's --disaggregation-ib-device when it is a "
        "plain list).",
    ),
    metadata_server: str | None = typer.Option(
        None,
        "--metadata-server",
        help="mooncake: the metadata exchange (default P2PHANDSHAKE, SGLang's; or an http://HOST:PORT/metadata "
        "server or etcd://HOST:PORT).",
    ),
    gpu: str = typer.Option(
        "auto",
        "--gpu",
        help="auto: VRAM regions on the GPU when torch or cupy sees one, else DRAM stand-ins (reported); off: always "
        "stand-ins.",
    ),
    env_file: Path | None = typer.Option(None, "--env", help="VAR=value file with that side's environment."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="The model's config.json when model-path is a hub id."
    ),
    draft_model_config: Path | None = typer.Option(None, "--draft-model-config", help="The draft model's config.json."),
    name: str | None = typer.Option(
        None, "--name", help="Agent name (must start with kvcheck-; default kvcheck-ROLE-HOST-PID)."
    ),
    max_memory: float = typer.Option(
        4.0,
        "--max-memory",
        help="GiB the agent may allocate in all (regions x pages x item length); more is refused before allocating.",
    ),
    sglang_version: str | None = typer.Option(
        None,
        "--sglang-version",
        metavar="VERSION",
        help="The SGLang release that side runs, when the input does not say (default: unknown; its geometry then "
        "stays unmodeled where it depends on the release).",
    ),
    prefill_sglang_version: str | None = typer.Option(
        None, "--prefill-sglang-version", metavar="VERSION", help="As --sglang-version, used when --role prefill."
    ),
    decode_sglang_version: str | None = typer.Option(
        None, "--decode-sglang-version", metavar="VERSION", help="As --sglang-version, used when --role decode."
    ),
) -> None:
    """Run a NIXL agent in the role of one side, with that side's KV geometry, until --ttl.

    Prints one JSON line when ready (name kvcheck-ROLE-HOST-PID, listen address, regions),
    one per notification received, and one when stopped. Exposure: the metadata (addresses
    and remote keys of the registered buffers) is readable by anyone who can reach the
    listener or etcd; bind to loopback or a private interface.
    """
    # What both agents take alike; the side's release: --prefill-/--decode-sglang-version
    # for that role, else --sglang-version.
    common: dict[str, Any] = dict(
        role=role,
        config=config,
        ttl=ttl,
        pages=pages,
        listen=listen,
        env_file=env_file,
        model_config=model_config,
        draft_model_config=draft_model_config,
        name=name,
        max_memory_gib=max_memory,
        sglang_version={"prefill": prefill_sglang_version, "decode": decode_sglang_version}.get(role) or sglang_version,
    )
    if backend.lower() == "mooncake":
        from kvcheck.mooncake.agent import run_agent as run_mooncake_agent

        raise typer.Exit(run_mooncake_agent(**common, protocol=protocol, device=ib_device, metadata=metadata_server))
    from kvcheck.nixl.commands import run_agent

    raise typer.Exit(run_agent(**common, etcd=etcd, backend=backend, gpu=gpu))


def inspect_agent(
    target: str = typer.Argument(
        ...,
        help="HOST:PORT (a NIXL listener), etcd://HOST:PORT/NAME (or etcd://HOST:PORT for every agent), or a saved "
        "blob file.",
    ),
    format: str = typer.Option("table", "--format", "-f", help="table or json."),
    timeout: Annotated[float, seconds_option("--timeout", "Seconds to wait for the agent or etcd.")] = 5.0,
    save: Path | None = typer.Option(None, "--save", help="Write the raw metadata blob to this file."),
) -> None:
    """Read any NIXL agent's metadata without joining it: name, backends, and per backend and
    memory kind every registered region (address, length, device id). Exit 3 if unreachable."""
    from kvcheck.nixl.commands import run_inspect

    if format not in ("table", "json"):
        raise KvcheckError(f"unknown format {format!r}; choose table or json", field="--format")
    raise typer.Exit(run_inspect(target, timeout=timeout, fmt=format, save=str(save) if save else None))
