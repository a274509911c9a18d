"""The command line. Thin: parse options, call the library, render, exit.

Exit statuses: 0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing
checked), 3 a live source could not be reached in time, 4 unchecked (0 with
``--allow-unchecked``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import typer

from kvcheck.errors import EXIT_INPUT, KvcheckError

if TYPE_CHECKING:
    from kvcheck.sides import Role

app = typer.Typer(
    name="kvcheck",
    help=(
        "Will your prefill and decode servers move KV cache over NIXL? kvcheck answers in "
        "milliseconds, before anything starts, with SGLang 0.5.23's own decision logic.\n\n"
        "Exit status: 0 pass (warnings allowed), 1 fail, 2 bad input or usage, 3 a live source "
        "could not be reached in time, 4 unchecked (a pair kvcheck cannot decide; 0 with --allow-unchecked)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    """``--version``: kvcheck's version and the SGLang releases it models, then exit 0."""
    if value:
        from kvcheck import __version__
        from kvcheck.sglang.releases import describe_modeled

        releases = describe_modeled()
        typer.echo(f"kvcheck {__version__} (models SGLang {releases}; NIXL probe: nixl-cu12 1.5.1)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print kvcheck's version and the SGLang releases it models, then exit.",
    ),
) -> None:
    """Will your prefill and decode servers move KV cache over NIXL? kvcheck answers in
    milliseconds, before anything starts, with SGLang's own decision logic.

    Exit status: 0 pass (warnings allowed), 1 fail, 2 bad input or usage, 3 a live source
    could not be reached in time, 4 unchecked (kvcheck could not decide).
    """


def _seconds(value: float) -> float:
    """Validate a duration option: a finite number of seconds, above 0 and at most a day."""
    import math

    if value is not None and not (math.isfinite(value) and 0 < value <= 86400):
        raise typer.BadParameter(f"{value} is not a number of seconds between 0 (excluded) and 86400")
    return value


EPILOG = (
    "Examples:\n\n"
    "  kvcheck preflight -f configs/deployments/llama-nixl-1p2d.yaml\n\n"
    "  kvcheck preflight -f prefill.yaml -f decode.yaml -o json --env prod.env --models ~/.cache/huggingface/hub\n\n"
    "  kvcheck preflight --prefill configs/aligned/prefill.yaml --decode configs/aligned/decode.yaml\n\n"
    "  kvcheck preflight --prefill p.yaml --decode d.yaml --format json --ignore page-size-unpinned\n\n"
    "PREFILL/DECODE: a SGLang --config YAML (dash keys, as sglang.launch_server takes them), a file "
    "holding the launch command line, or a JSON object of args. The model's config.json is read from "
    "the model-path directory, or from --model-config FILE when model-path is a hub id."
)


@app.command(epilog=EPILOG)
def preflight(
    files: list[Path] = typer.Option(
        [],
        "--file",
        "-f",
        metavar="FILE",
        help="A deployment as published (repeatable, kubectl style): a Kubernetes manifest (multi-document, List; "
        "Deployment, StatefulSet, Job, LeaderWorkerSet, DynamoGraphDeployment, RoleBasedGroup, OME runtimes, "
        "llm-d, AIBrix), an srt-slurm recipe, or a shell script / docs block of launch lines. Every prefill "
        "and decode instance is checked, grouped into classes. Not with --prefill/--decode.",
    ),
    prefill: str | None = typer.Option(
        None,
        "--prefill",
        "-p",
        metavar="FILE|URL",
        help="Prefill server args: --config YAML, command-line file, JSON args, or a live server URL (one pair; not "
        "with -f).",
    ),
    decode: str | None = typer.Option(
        None, "--decode", "-d", metavar="FILE|URL", help="Decode server args, in any of the same forms."
    ),
    format: str = typer.Option(
        "table",
        "--format",
        "-o",
        metavar="table|json|junit|github",
        help="Output: table (for people), json (the documented contract), junit (JUnit XML), github (GitHub Actions "
        "annotations). The exit status is the same for every format.",
    ),
    env_file: Path | None = typer.Option(
        None,
        "--env",
        metavar="FILE",
        help="VAR=value file: values for the $VAR / ${VAR} / $(VAR) variables of the -f files.",
    ),
    inherit_env: bool = typer.Option(
        False,
        "--inherit-env",
        help="Fill a -f script's $VAR that the file, its container and --env leave unset from kvcheck's own "
        "environment, as the shell that runs it would. Off by default: a verdict never rests on what the machine "
        "running kvcheck happens to export (an unset variable is reported as unresolved-variable).",
    ),
    values: list[Path] = typer.Option(
        [],
        "--values",
        metavar="FILE",
        help="A values file for a Helm chart directory given to -f (helm template -f FILE; repeatable, in order).",
    ),
    config_file: list[str] = typer.Option(
        [],
        "--config-file",
        metavar="IMAGE_PATH=LOCAL_PATH",
        help="A local copy of a config file that a -f launch line names inside the image (--config "
        "/etc/sglang/decode.yaml): read LOCAL_PATH for IMAGE_PATH (repeatable). Without it such a server is "
        "unchecked.",
    ),
    models_dir: Path | None = typer.Option(
        None,
        "--models",
        metavar="DIR",
        help="A Hugging Face cache (models--ORG--NAME/snapshots/*/config.json) to find model configs by hub id; "
        "HF_HUB_CACHE / HF_HOME are also read.",
    ),
    allow_unchecked: bool = typer.Option(
        False,
        "--allow-unchecked",
        help="An 'unchecked' verdict (a pair kvcheck cannot decide: unknown model, unmodeled pool or backend, "
        "unresolved variable) exits 0 instead of 4; the output still says unchecked.",
    ),
    kernel: str = typer.Option(
        "builtin",
        "--kernel",
        metavar="builtin|runtime|auto",
        help="Decision code: builtin (kvcheck's restatement of SGLang 0.5.23, milliseconds), runtime (the installed "
        "SGLang's own code driven on CPU; imports torch, seconds), auto (runtime when SGLang is importable, "
        "else builtin).",
    ),
    ignore: list[str] = typer.Option(
        [],
        "--ignore",
        metavar="ID",
        help="Accept a finding by check id (repeatable). Findings that predict a runtime error stay in the output, "
        "marked ignored.",
    ),
    prefill_env: Path | None = typer.Option(
        None,
        "--prefill-env",
        help="VAR=value file with the prefill's environment (SGLANG_DISAGGREGATION_NIXL_BACKEND, "
        "SGLANG_PP_LAYER_PARTITION, UCX_NET_DEVICES, ...).",
    ),
    decode_env: Path | None = typer.Option(None, "--decode-env", help="VAR=value file with the decode's environment."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="The model's config.json, for both sides, when model-path is a hub id."
    ),
    prefill_model_config: Path | None = typer.Option(
        None, "--prefill-model-config", help="The prefill's model config.json (overrides --model-config)."
    ),
    decode_model_config: Path | None = typer.Option(
        None, "--decode-model-config", help="The decode's model config.json (overrides --model-config)."
    ),
    draft_model_config: Path | None = typer.Option(
        None,
        "--draft-model-config",
        help="The draft model's config.json when speculative-draft-model-path is a hub id.",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="KVCHECK_API_KEY",
        show_default=False,
        show_envvar=True,
        help="Bearer token for live servers' HTTP APIs (prefer the KVCHECK_API_KEY variable: a flag shows in ps).",
    ),
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap",
        help="A live prefill's bootstrap server URL (default: http://PREFILL-HOST:disaggregation_bootstrap_port).",
    ),
    connect_timeout: float = typer.Option(
        3.0, "--connect-timeout", callback=_seconds, help="Seconds to wait for each TCP/TLS connect to a live server."
    ),
    deadline: float = typer.Option(
        10.0,
        "--deadline",
        callback=_seconds,
        help="Seconds a live source may take in all, retries included (a prefill not fully registered answers 503 "
        "until then); two live sides are read side by side. Past it: exit 3.",
    ),
    prefill_agent: str | None = typer.Option(
        None,
        "--prefill-agent",
        help="A kvcheck NIXL agent of the prefill role: HOST:PORT (listener), etcd://HOST:PORT/NAME, or a saved "
        "blob. Its live regions are compared with the args.",
    ),
    decode_agent: str | None = typer.Option(
        None, "--decode-agent", help="A kvcheck NIXL agent of the decode role (same forms). Needed by --probe."
    ),
    probe: bool = typer.Option(
        False,
        "--probe",
        help="Move real bytes along each segment of the plan from a prefill-role agent started here to "
        "--decode-agent, and verify them.",
    ),
    timeout: float = typer.Option(
        5.0,
        "--timeout",
        callback=_seconds,
        help="Seconds each agent read and each probe wait may take; on expiry the step is named in a finding.",
    ),
    probe_pages: int = typer.Option(
        4, "--probe-pages", help="Pages per region the probe writes (capped by what the decode agent registered)."
    ),
    gpu: str | None = typer.Option(
        None,
        "--gpu",
        metavar="GPU",
        help="The GPU both sides run on (h100, h200, b200, gb200, gb300, ... or sm90/sm100). Page sizes, "
        "attention/DSA backends and KV dtypes depend on it. Default: Hopper, said in the output.",
    ),
    prefill_gpu: str | None = typer.Option(
        None, "--prefill-gpu", metavar="GPU", help="The prefill's GPU (overrides --gpu)."
    ),
    decode_gpu: str | None = typer.Option(
        None, "--decode-gpu", metavar="GPU", help="The decode's GPU (overrides --gpu)."
    ),
    sglang_version: str | None = typer.Option(
        None,
        "--sglang-version",
        metavar="VERSION",
        help="The SGLang release both sides run (0.5.0rc2 ... 0.5.23); it wins over what the input says (an image "
        "tag, /server_info's version). Default: the releases the input and its flags allow; the pair is "
        "decided on each (the output names the window).",
    ),
    prefill_sglang_version: str | None = typer.Option(
        None,
        "--prefill-sglang-version",
        metavar="VERSION",
        help="The prefill's SGLang release (overrides --sglang-version).",
    ),
    decode_sglang_version: str | None = typer.Option(
        None,
        "--decode-sglang-version",
        metavar="VERSION",
        help="The decode's SGLang release (overrides --sglang-version).",
    ),
    root: Path | None = typer.Option(
        None,
        "--root",
        metavar="DIR",
        help="The directory files named inside the inputs (a --config in a launch line, a model-path directory) may "
        "be read from; default: each input file's own directory. Nothing outside it is read, by '..' or "
        "symlink.",
    ),
    max_instances: int | None = typer.Option(
        None,
        "--max-instances",
        metavar="N",
        help="Most server instances (replicas and nodes included) one deployment may expand to before it is refused "
        "(default 4096).",
    ),
    max_nodes: int | None = typer.Option(
        None,
        "--max-nodes",
        metavar="N",
        help="Most nodes one deployment (or one multi-node instance) may span before it is refused (default 4096).",
    ),
    max_variants: int | None = typer.Option(
        None,
        "--max-variants",
        metavar="N",
        help="Most sweep/override variants one srt-slurm recipe may expand to (default 256).",
    ),
    max_containers: int | None = typer.Option(
        None,
        "--max-containers",
        metavar="N",
        help="Most SGLang containers (launch lines) read from one deployment file (default 2048).",
    ),
    max_classes: int | None = typer.Option(
        None,
        "--max-classes",
        metavar="N",
        help="Most instance classes (distinct KV-relevant arg sets) checked per deployment (default 64).",
    ),
) -> None:
    """Check a whole deployment (-f: every prefill and decode instance, grouped into classes, each class pair decided
    once, plus cluster-wide checks) or one prefill/decode pair: KV regions, transfer path, and the exact runtime
    errors."""
    from kvcheck import report as renderers
    from kvcheck.report import FORMATS
    from kvcheck.sources import is_live_spec, load_side

    if format not in FORMATS:
        raise KvcheckError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}", field="--format")
    from kvcheck.sources.files import set_read_root
    from kvcheck.sources.limits import set_caps

    set_read_root(root)
    set_caps(
        instances=max_instances, nodes=max_nodes, variants=max_variants, containers=max_containers, classes=max_classes
    )
    _check_release_options(
        sglang_version=sglang_version,
        prefill_sglang_version=prefill_sglang_version,
        decode_sglang_version=decode_sglang_version,
    )
    if files:
        if prefill is not None or decode is not None:
            raise KvcheckError(
                "give -f FILE (a whole deployment) or --prefill/--decode (one pair), not both", field="-f"
            )
        _preflight_deployments(
            files,
            format=format,
            env_file=env_file,
            inherit_env=inherit_env,
            models_dir=models_dir,
            allow_unchecked=allow_unchecked,
            config_file=config_file,
            values=values,
            model_config=model_config,
            kernel=kernel,
            ignore=ignore,
            gpu=gpu,
            prefill_gpu=prefill_gpu,
            decode_gpu=decode_gpu,
            sglang_version=sglang_version,
            prefill_sglang_version=prefill_sglang_version,
            decode_sglang_version=decode_sglang_version,
            prefill_env=prefill_env,
            decode_env=decode_env,
            prefill_model_config=prefill_model_config,
            decode_model_config=decode_model_config,
            draft_model_config=draft_model_config,
        )
    if prefill is None or decode is None:
        raise KvcheckError(
            "give -f FILE (a deployment manifest, recipe or launch script), or both --prefill and --decode",
            field="--prefill/--decode" if (prefill or decode) else "-f",
        )
    live = {"api_key": api_key, "connect_timeout": connect_timeout, "deadline": deadline}
    from kvcheck.cluster import ClusterOptions
    from kvcheck.cluster.pair_input import run_pair
    from kvcheck.sources.files import read_env_file

    # One pipeline: the pair is a deployment of two instances, checked by the same stages
    # as -f (releases, classes, pair decisions, cluster checks, one report).
    def load_live(spec: str, role: Role):
        per_role = {
            "prefill": (prefill_env, prefill_model_config, prefill_gpu, prefill_sglang_version),
            "decode": (decode_env, decode_model_config, decode_gpu, decode_sglang_version),
        }[role]
        extra = {"bootstrap": bootstrap} if role == "prefill" else {}
        return load_side(
            spec,
            role,
            env_file=per_role[0],
            model_config=per_role[1] or model_config,
            draft_model_config=draft_model_config,
            gpu=per_role[2] or gpu,
            sglang_version=per_role[3] or sglang_version,
            **extra,
            **live,
        )

    opts = ClusterOptions(
        model_config=model_config,
        prefill_model_config=prefill_model_config,
        decode_model_config=decode_model_config,
        draft_model_config=draft_model_config,
        models_dir=models_dir,
        sglang_version=sglang_version,
        prefill_sglang_version=prefill_sglang_version,
        decode_sglang_version=decode_sglang_version,
        gpu=gpu,
        prefill_gpu=prefill_gpu,
        decode_gpu=decode_gpu,
        kernel=kernel,
        ignore=tuple(ignore),
        allow_unchecked=allow_unchecked,
        prefill_env=read_env_file(prefill_env) if prefill_env is not None and not is_live_spec(prefill) else None,
        decode_env=read_env_file(decode_env) if decode_env is not None and not is_live_spec(decode) else None,
    )
    report, p, d = run_pair(
        prefill,
        decode,
        opts,
        load_live=load_live,
        read_pair=lambda rp, rd: _read_pair(rp, rd, both_live=is_live_spec(prefill) and is_live_spec(decode)),
    )
    if p is None or d is None:
        prefill_agent = decode_agent = None
        probe = False
    if (decode_agent or probe) and p.args.disaggregation_transfer_backend == "mooncake":
        from kvcheck.mooncake.probe import augment_preflight as augment_mooncake  # Mooncake agents and probe

        augment_mooncake(report, p, d, decode_agent=decode_agent, probe=probe, timeout=timeout, pages=probe_pages)
        from kvcheck.checks.ids import apply_ignore

        apply_ignore(report.findings, ignore)  # once, over every finding (live agent and probe ones too)
        from kvcheck.report.model import verdict_of

        report.verdict = verdict_of(report.findings)
    elif prefill_agent or decode_agent or probe:
        from kvcheck.nixl.commands import augment_preflight

        augment_preflight(
            report,
            p,
            d,
            prefill_agent=prefill_agent,
            decode_agent=decode_agent,
            probe=probe,
            timeout=timeout,
            pages=probe_pages,
            show_progress=format != "json" and sys.stderr.isatty(),
        )
        from kvcheck.checks.ids import apply_ignore

        apply_ignore(report.findings, ignore)  # once, over every finding (live agent and probe ones too)
        from kvcheck.report.model import verdict_of

        report.verdict = verdict_of(report.findings)
    global _decided_exit
    if allow_unchecked and report.verdict == "unchecked":
        report.extra["allow_unchecked"] = True
        typer.echo("kvcheck: verdict unchecked, accepted with --allow-unchecked (exit 0)", err=True)
    _decided_exit = 0 if allow_unchecked and report.verdict == "unchecked" else report.exit_code
    try:
        if format == "json":
            sys.stdout.write(renderers.render_json(report) + "\n")
        elif format in ("junit", "github"):
            render = renderers.render_junit if format == "junit" else renderers.render_github
            sys.stdout.write(render(report) + "\n")
        else:
            from kvcheck.report.terminal import PipeSafeConsole

            renderers.render_terminal(report, PipeSafeConsole())
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()  # a reader that closed the pipe early (| head) does not change the verdict
    raise typer.Exit(_decided_exit)


def _read_pair(read_prefill, read_decode, *, both_live: bool):
    """Read the prefill and the decode: one after the other from files, side by side when
    both are live servers, so that ``--deadline`` bounds the whole read (each live source
    has its own deadline, and two read in turn could take twice as long). The prefill's
    error is raised first, as in a sequential read."""
    if not both_live:
        return read_prefill(), read_decode()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="kvcheck-read") as pool:
        fp, fd = pool.submit(read_prefill), pool.submit(read_decode)
        return fp.result(), fd.result()


def _check_release_options(**options: str | None) -> None:
    """A ``--*sglang-version`` that is not a release number at all is bad usage (exit 2);
    a well-formed release kvcheck does not model is judged later (unchecked, exit 4)."""
    from kvcheck.sglang.releases import describe_modeled, parse_release

    for name, value in options.items():
        if value is not None and parse_release(value) is None:
            flag = "--" + name.replace("_", "-")
            raise KvcheckError(
                f"{value!r} is not an SGLang release number such as 0.5.8 or 0.5.8.post1 (kvcheck models "
                f"{describe_modeled()})",
                field=flag,
            )


def _preflight_deployments(
    files: list[Path],
    *,
    format: str,
    env_file: Path | None,
    models_dir: Path | None,
    inherit_env: bool = False,
    allow_unchecked: bool,
    model_config: Path | None,
    kernel: str,
    ignore: list[str],
    gpu: str | None,
    prefill_gpu: str | None,
    decode_gpu: str | None,
    sglang_version: str | None = None,
    prefill_sglang_version: str | None = None,
    decode_sglang_version: str | None = None,
    prefill_env: Path | None = None,
    decode_env: Path | None = None,
    prefill_model_config: Path | None = None,
    decode_model_config: Path | None = None,
    draft_model_config: Path | None = None,
    config_file: list[str] | None = None,
    values: list[Path] | None = None,
) -> None:
    """``preflight -f``: read the deployments, check them (kvcheck.cluster), render, exit."""
    try:
        from kvcheck.sources.deployments import read_deployments
    except ImportError:
        raise KvcheckError(
            "this kvcheck build has no deployment readers (kvcheck.sources.deployments.read_deployments); use "
            "--prefill/--decode",
            field="-f",
        ) from None
    from kvcheck.cluster import ClusterOptions, check_deployments
    from kvcheck.sources.files import read_env_file

    global _decided_exit
    env = read_env_file(env_file) if env_file is not None else None
    config_files: dict[str, str] = {}
    for item in config_file or []:
        image_path, eq, local = item.partition("=")
        if not eq or not image_path or not local:
            raise KvcheckError(
                f"{item!r}: expected IMAGE_PATH=LOCAL_PATH (the path the launch line's --config names, = a local copy)",
                field="--config-file",
            )
        config_files[image_path] = local
    deployments = read_deployments(
        list(files),
        env=env,
        config_files=config_files,
        helm_values=[str(v) for v in values or ()],
        inherit_env=inherit_env,
    )
    opts = ClusterOptions(
        model_config=model_config,
        models_dir=models_dir,
        sglang_version=sglang_version,
        prefill_sglang_version=prefill_sglang_version,
        decode_sglang_version=decode_sglang_version,
        gpu=gpu,
        prefill_gpu=prefill_gpu,
        decode_gpu=decode_gpu,
        kernel=kernel,
        ignore=tuple(ignore),
        allow_unchecked=allow_unchecked,
        prefill_env=read_env_file(prefill_env) if prefill_env is not None else None,
        decode_env=read_env_file(decode_env) if decode_env is not None else None,
        prefill_model_config=prefill_model_config,
        decode_model_config=decode_model_config,
        draft_model_config=draft_model_config,
    )
    report = check_deployments(deployments, opts)
    _decided_exit = report.exit_code
    try:
        if format == "json":
            import json as _json

            sys.stdout.write(_json.dumps(report.contract(), indent=2) + "\n")
        elif format == "junit":
            from kvcheck.report.junit import render_cluster_junit

            sys.stdout.write(render_cluster_junit(report) + "\n")
        elif format == "github":
            from kvcheck.report.github import render_cluster_github

            sys.stdout.write(render_cluster_github(report) + "\n")
        else:
            from kvcheck.report.terminal import PipeSafeConsole, render_cluster_terminal

            render_cluster_terminal(report, PipeSafeConsole())
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    if allow_unchecked and report.verdict == "unchecked":
        typer.echo("kvcheck: verdict unchecked, accepted with --allow-unchecked (exit 0)", err=True)
    raise typer.Exit(report.exit_code)


@app.command("snapshot")
def snapshot(
    url: str = typer.Argument(..., help="A live SGLang server's HTTP address, http(s)://HOST:PORT."),
    output: str = typer.Option(..., "--output", "-o", help="Where to save the snapshot JSON ('-' for stdout)."),
    role: str | None = typer.Option(
        None,
        "--role",
        help="prefill or decode (default: the server's disaggregation_mode). A prefill's bootstrap /route is saved "
        "too.",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="KVCHECK_API_KEY",
        show_default=False,
        show_envvar=True,
        help="Bearer token for the server's HTTP API.",
    ),
    bootstrap: str | None = typer.Option(
        None,
        "--bootstrap",
        help="The prefill's bootstrap server URL (default: http://HOST:disaggregation_bootstrap_port).",
    ),
    connect_timeout: float = typer.Option(
        3.0, "--connect-timeout", callback=_seconds, help="Seconds to wait for each connect."
    ),
    deadline: float = typer.Option(
        10.0, "--deadline", callback=_seconds, help="Seconds the capture may take in all, retries included."
    ),
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


@app.command("agent")
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
    if backend.lower() == "mooncake":
        from kvcheck.mooncake.agent import run_agent as run_mooncake_agent

        raise typer.Exit(
            run_mooncake_agent(
                role=role,
                config=config,
                ttl=ttl,
                pages=pages,
                listen=listen,
                protocol=protocol,
                device=ib_device,
                metadata=metadata_server,
                env_file=env_file,
                model_config=model_config,
                draft_model_config=draft_model_config,
                name=name,
                max_memory_gib=max_memory,
                sglang_version=(
                    prefill_sglang_version if role == "prefill" else decode_sglang_version if role == "decode" else None
                )
                or sglang_version,
            )
        )
    from kvcheck.nixl.commands import run_agent

    rc = run_agent(
        role=role,
        config=config,
        ttl=ttl,
        pages=pages,
        listen=listen,
        etcd=etcd,
        backend=backend,
        gpu=gpu,
        env_file=env_file,
        model_config=model_config,
        draft_model_config=draft_model_config,
        name=name,
        max_memory_gib=max_memory,
        sglang_version=(
            prefill_sglang_version if role == "prefill" else decode_sglang_version if role == "decode" else None
        )
        or sglang_version,
    )
    raise typer.Exit(rc)


@app.command("inspect")
def inspect_agent(
    target: str = typer.Argument(
        ...,
        help="HOST:PORT (a NIXL listener), etcd://HOST:PORT/NAME (or etcd://HOST:PORT for every agent), or a saved "
        "blob file.",
    ),
    format: str = typer.Option("table", "--format", "-f", help="table or json."),
    timeout: float = typer.Option(5.0, "--timeout", callback=_seconds, help="Seconds to wait for the agent or etcd."),
    save: Path | None = typer.Option(None, "--save", help="Write the raw metadata blob to this file."),
) -> None:
    """Read any NIXL agent's metadata without joining it: name, backends, and per backend and
    memory kind every registered region (address, length, device id). Exit 3 if unreachable."""
    from kvcheck.nixl.commands import run_inspect

    if format not in ("table", "json"):
        raise KvcheckError(f"unknown format {format!r}; choose table or json", field="--format")
    raise typer.Exit(run_inspect(target, timeout=timeout, fmt=format, save=str(save) if save else None))


@app.command("fabric")
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
    plan_only: bool = typer.Option(False, "--plan", help="Print the nodes, required pairs and rounds (JSON) and exit."),
    format: str = typer.Option("terminal", "--format", "-o", help="terminal, json or junit."),
    output: Path | None = typer.Option(
        None, "--output", help="Write the report (or --emit / --plan output) to this file."
    ),
    pages: int = typer.Option(4, "--pages", help="Pages per KV region each agent registers and each probe moves."),
    timeout: float = typer.Option(
        5.0, "--timeout", callback=_seconds, help="Seconds per probe step (connect, confirm, write, read back)."
    ),
    join_timeout: float = typer.Option(
        60.0, "--join-timeout", callback=_seconds, help="Seconds to wait for every node to join."
    ),
    deadline: float = typer.Option(600.0, "--deadline", callback=_seconds, help="Seconds the whole run may take."),
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


@app.command("checks")
def list_checks(check_id: str | None = typer.Argument(None, help="Show one check's documentation.")) -> None:
    """List every check (pair, start-up, cluster, live, and the pipeline's own findings): id, severity, what it
    catches, why the runtime breaks, the fix; with an ID, also an example input that makes kvcheck emit it."""
    from kvcheck.checks.ids import all_checks, find_check

    items = all_checks()
    if check_id:
        hit = find_check(check_id)
        if hit is None:
            raise KvcheckError(f"unknown check id {check_id!r}; run 'kvcheck checks' for the list")
        items = [hit]
    for chk in items:
        typer.echo(
            f"{chk['id']} [{chk['severity']}] {chk['title']}" + ("" if chk["scope"] == "pair" else f" ({chk['scope']})")
        )
        typer.echo(f"  what: {chk['what']}")
        typer.echo(f"  why:  {chk['why']}")
        if check_id:
            from kvcheck.checks.examples import example_lines

            for line in example_lines(check_id):
                typer.echo(line)
        typer.echo(f"  fix:  {chk['fix']}")
        if chk["finding_ids"]:
            typer.echo(f"  finding ids: {', '.join(chk['finding_ids'])}")


EXPLAIN_EPILOG = (
    "Examples:\n\n"
    "  kvcheck preflight -f configs/deployments/llama-nixl-1p2d.yaml\n\n"
    "  kvcheck preflight -f prefill.yaml -f decode.yaml -o json --env prod.env --models ~/.cache/huggingface/hub\n\n"
    '  kvcheck explain "ValueError: NIXL KV transfer has no KV memory segments"\n\n'
    "  kvcheck explain --log prefill.log --prefill p.yaml --decode d.yaml\n\n"
    "  kubectl logs prefill-0 | kvcheck explain -o json\n\n"
    "  kvcheck explain --log decode.log -f deploy/pd.yaml\n\n"
    "Exit status: 0 at least one known message was recognized, 1 nothing was recognized, "
    "2 bad input or usage (no message, unreadable log, configs that cannot be checked). "
    "With --prefill/--decode the exit status still says whether a message was recognized; "
    "the preflight's own verdict is in the output."
)


@app.command("explain", epilog=EXPLAIN_EPILOG)
def explain(
    message: str | None = typer.Argument(
        None,
        help="The runtime message (e.g. the 'Type: message' line of a traceback). Without it and without --log, "
        "stdin is read as a log.",
    ),
    log: Path | None = typer.Option(
        None, "--log", "-l", help="A server log to scan: every known message, with counts and first/last line numbers."
    ),
    prefill: str | None = typer.Option(
        None,
        "--prefill",
        "-p",
        help="Prefill server args (as for preflight): run the preflight and point to the finding that causes the "
        "message.",
    ),
    decode: str | None = typer.Option(None, "--decode", "-d", help="Decode server args (as for preflight)."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="The model's config.json, for both sides, when model-path is a hub id."
    ),
    format: str = typer.Option(
        "table", "--format", "-o", metavar="table|json", help="Output: table (for people) or json (as preflight's -o)."
    ),
    files: list[Path] = typer.Option(
        [],
        "--file",
        "-f",
        metavar="FILE",
        help="The deployment the log came from, as preflight -f reads it (repeatable): its preflight runs and each "
        "message points to the finding and the config line to change. (-f table|json, the old spelling of -o, "
        "still works but is deprecated.)",
    ),
    list_all: bool = typer.Option(False, "--list", help="List every message kvcheck knows, then exit 0."),
    sglang_version: str | None = typer.Option(
        None,
        "--sglang-version",
        metavar="VERSION",
        help="The SGLang release the message came from: the explanation says whether the message exists and is "
        "reachable there. Default: the version the log shows, else the newest scanned release (said as "
        "assumed; never the SGLang installed here).",
    ),
    prefill_sglang_version: str | None = typer.Option(
        None,
        "--prefill-sglang-version",
        metavar="VERSION",
        help="The prefill's SGLang release (overrides --sglang-version).",
    ),
    decode_sglang_version: str | None = typer.Option(
        None,
        "--decode-sglang-version",
        metavar="VERSION",
        help="The decode's SGLang release (overrides --sglang-version).",
    ),
) -> None:
    """Explain a SGLang 0.5.23 PD/NIXL error or warning: what it means per the runtime's code, what triggers it, what
    you see, the fix, and the preflight check that predicts it."""
    import json as _json

    from kvcheck.explain import attach_preflight, explain_text
    from kvcheck.explain.render import render_catalog, render_explanation

    deployment_files = []
    for f in files:
        if str(f) in ("table", "json") and not f.exists():
            typer.echo(
                f"kvcheck explain: -f {f} is deprecated for the output format: use -o {f} (or --format {f}); -f now "
                "names a deployment file, as for preflight",
                err=True,
            )
            format = str(f)
        else:
            deployment_files.append(f)
    if list_all:
        typer.echo(render_catalog(format))
        raise typer.Exit(0)
    if deployment_files and prefill is not None:
        raise KvcheckError("give -f FILE (the deployment) or --prefill/--decode (one pair), not both", field="-f")
    if format not in ("table", "json"):
        raise KvcheckError(f"unknown format {format!r}; choose table or json", field="--format")
    if (prefill is None) != (decode is None):
        raise KvcheckError("give both --prefill and --decode, or neither", field="--prefill/--decode")
    if message is not None and log is not None:
        raise KvcheckError("give a MESSAGE or --log FILE, not both")
    if message is not None:
        if not message.strip():
            raise KvcheckError("nothing to explain: the message is empty")
        result = explain_text(message, source="message", sglang_version=sglang_version)
    else:
        # A log is streamed line by line (linear time, bounded memory, long lines cut).
        from kvcheck.explain.matcher import VersionSniffer, annotate_release, explain_blocks, iter_log_blocks

        if log is not None:
            from kvcheck.sources.files import open_regular

            fh = open_regular(log)  # regular files only (O_NONBLOCK + fstat: a FIFO cannot block); '-' is stdin
            source = f"log {log}" if str(log) != "-" else "log <stdin>"
        else:
            if sys.stdin.isatty():
                raise KvcheckError("nothing to explain: give a MESSAGE, --log FILE, or pipe a log on stdin")
            fh, source = sys.stdin.buffer, "log <stdin>"
        sniffer = VersionSniffer(iter_log_blocks(fh))
        try:
            result = explain_blocks(sniffer, source=source)
        except OSError as exc:
            raise KvcheckError(f"cannot read log: {exc.strerror or exc}", source=source) from exc
        finally:
            if log is not None:
                fh.close()
        if result.blank:
            raise KvcheckError(f"nothing to explain: the {source} is empty")
        annotate_release(result, sglang_version, sniffer.version)
    if prefill is not None and decode is not None:  # both or neither (checked above)
        # The same pipeline as ``preflight`` (one answer for one pair, on every path).
        from kvcheck.cluster import ClusterOptions
        from kvcheck.cluster.pair_input import run_pair
        from kvcheck.sources import load_side

        def load_live(spec: str, role: Role):
            return load_side(
                spec,
                role,
                model_config=model_config,
                sglang_version=(prefill_sglang_version if role == "prefill" else decode_sglang_version)
                or sglang_version,
            )

        opts = ClusterOptions(
            model_config=model_config,
            sglang_version=sglang_version,
            prefill_sglang_version=prefill_sglang_version,
            decode_sglang_version=decode_sglang_version,
        )
        report, _, _ = run_pair(prefill, decode, opts, load_live=load_live)
        attach_preflight(result, report)
        result.configs = {"prefill": prefill, "decode": decode}
    if deployment_files:
        from kvcheck.explain.matcher import attach_deployment_preflight

        try:
            from kvcheck.cluster import ClusterOptions, check_deployments
            from kvcheck.sources.deployments import read_deployments
        except ImportError:
            raise KvcheckError(
                "this kvcheck build has no deployment readers; use --prefill/--decode", field="-f"
            ) from None
        deployments = read_deployments(list(deployment_files))
        attach_deployment_preflight(
            result,
            check_deployments(deployments, ClusterOptions(model_config=model_config, sglang_version=sglang_version)),
        )
        result.configs = {f"file {i + 1}": str(f) for i, f in enumerate(deployment_files)}
    if format == "json":
        typer.echo(_json.dumps(result.contract(), indent=2))
    else:
        typer.echo(render_explanation(result))
    raise typer.Exit(result.exit_code)


# The exit status already decided when output is being written: a reader that closes
# the pipe early (| head) must not turn a PASS into a failure.
_decided_exit: int | None = None


class _ScrubbingStream:
    """A text stream that passes every write through ``scrub_output`` (the process-wide
    secret values, URL passwords, secret flag values) before the real stream: the
    output boundary for tables, JSON, JUnit, GitHub annotations and error lines.
    Everything else is delegated to the wrapped stream (``isatty``, ``fileno``...)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        from kvcheck.sources.limits import escape_stream
        from kvcheck.sources.redact import scrub_output

        # secrets out, then every control/escape/bidi character an input carried made
        # visible (only the SGR styling kvcheck's renderer writes passes)
        return self._stream.write(escape_stream(scrub_output(text)) if isinstance(text, str) else text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _say_error(text: str) -> None:
    """One error line on stderr: secrets scrubbed, every line clipped (a 10 MB value
    prints as its first characters and its length)."""
    from kvcheck.sources.limits import clip_line, escape_terminal
    from kvcheck.sources.redact import scrub_output

    lines = [clip_line(escape_terminal(scrub_output(line))) for line in str(text).splitlines() or [""]]
    sys.stderr.write("\n".join(lines[:20]) + "\n")
    sys.stderr.flush()


def main() -> None:
    """Entry point: run the app, turning every error into one line and an exit status.

    Usage errors (unknown option, missing value) exit 2 through click's own handling;
    kvcheck's errors exit with their status (2 bad input, 3 unreachable); an unexpected
    exception is one line and exit 2 (``KVCHECK_DEBUG=1`` shows the traceback). Every
    line written to stdout and stderr passes through ``scrub_output``.
    """
    _register_own_credentials(sys.argv[1:])
    if not isinstance(sys.stdout, _ScrubbingStream):
        sys.stdout = _ScrubbingStream(sys.stdout)
    if not isinstance(sys.stderr, _ScrubbingStream):
        sys.stderr = _ScrubbingStream(sys.stderr)
    try:
        app(standalone_mode=True)
    except KvcheckError as exc:
        _say_error(f"kvcheck: error: {exc}")
        if _wants_json(sys.argv[1:]):
            _json_error(exc)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(_decided_exit if _decided_exit is not None else 0)
    except KeyboardInterrupt:
        _say_error("kvcheck: interrupted")
        sys.exit(130)
    except (OSError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        if os.environ.get("KVCHECK_DEBUG"):
            raise
        _say_error(f"kvcheck: error: {type(exc).__name__}: {exc}")
        sys.exit(EXIT_INPUT)
    except Exception as exc:
        if os.environ.get("KVCHECK_DEBUG"):
            raise
        _say_error(
            f"kvcheck: internal error, nothing was checked ({type(exc).__name__}: {exc}); rerun with KVCHECK_DEBUG=1 "
            "for the traceback"
        )
        sys.exit(EXIT_INPUT)


def _wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON on stdout (``-o json``, ``--format json``,
    ``--output=json``)."""
    for i, tok in enumerate(argv):
        if tok in ("-o", "--format", "--output") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if tok in ("--format=json", "--output=json", "-ojson"):
            return True
    return False


def _json_error(exc: KvcheckError) -> None:
    """One JSON object on stdout for an error that stopped the run, so a CI step that
    parses stdout reads why nothing was checked: ``{"error": {"message", "source",
    "field"}, "exit_code": N}`` (no ``verdict``: nothing was decided)."""
    import json

    from kvcheck.sources.limits import clip_line
    from kvcheck.sources.redact import scrub_output

    body = {
        "error": {
            "message": clip_line(scrub_output(str(exc))),
            "source": None if exc.source is None else clip_line(scrub_output(str(exc.source))),
            "field": exc.field,
        },
        "exit_code": exc.exit_code,
    }
    try:
        sys.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _register_own_credentials(argv: list[str]) -> None:
    """kvcheck's own credentials (``KVCHECK_API_KEY``, ``--api-key``) are scrubbed from
    every output from the start: a server may reflect them (a header, a reason phrase)."""
    from kvcheck.sources.redact import register_secrets, secrets_from_argv

    own = {os.environ.get("KVCHECK_API_KEY") or ""} | secrets_from_argv(argv)
    register_secrets(v for v in own if v)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
