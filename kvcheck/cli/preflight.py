"""``kvcheck preflight``: a whole deployment (``-f``) or one prefill/decode pair, through
one pipeline (``kvcheck.cluster``), rendered as a table, JSON, JUnit or GitHub annotations.

Exit statuses: 0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing
checked), 3 a live source could not be reached in time, 4 unchecked (0 with
``--allow-unchecked``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from kvcheck.cli.output import State, write_report
from kvcheck.cli.preflight_options import DOC, OPTIONS  # noqa: F401  (the command's table)
from kvcheck.errors import KvcheckError

if TYPE_CHECKING:
    from kvcheck.sides import Role

EPILOG = (
    "Examples:\n\n"
    "  kvcheck preflight -f configs/deployments/llama-nixl-1p2d.yaml\n\n"
    "  kvcheck preflight -f prefill.yaml -f decode.yaml -o json --env prod.env --models ~/.cache/huggingface/hub\n\n"
    "  kvcheck preflight --prefill configs/aligned/prefill.yaml --decode configs/aligned/decode.yaml\n\n"
    "  kvcheck preflight --prefill p.yaml --decode d.yaml --format json --ignore page-size-unpinned\n\n"
    "PREFILL/DECODE: a SGLang --config YAML (dash keys, as sglang.launch_server takes them), a file "
    "holding the launch command line, or a JSON file holding an object of args. The model's config.json: "
    "--model-config FILE, else the model-path directory, a Hugging Face cache (--models DIR) or kvcheck's "
    "catalog of public configs (a hub id needs no option)."
)


def _say(text: str) -> None:
    """One line on stderr beside the output."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run(
    *,
    files: list[Path],
    prefill: str | None,
    decode: str | None,
    format: str,
    env_file: Path | None,
    inherit_env: bool,
    values: list[Path],
    config_file: list[str],
    models_dir: Path | None,
    allow_unchecked: bool,
    kernel: str,
    ignore: list[str],
    prefill_env: Path | None,
    decode_env: Path | None,
    model_config: Path | None,
    prefill_model_config: Path | None,
    decode_model_config: Path | None,
    draft_model_config: Path | None,
    api_key: str | None,
    bootstrap: str | None,
    connect_timeout: float,
    deadline: float,
    prefill_agent: str | None,
    decode_agent: str | None,
    probe: bool,
    timeout: float,
    probe_pages: int,
    gpu: str | None,
    prefill_gpu: str | None,
    decode_gpu: str | None,
    sglang_version: str | None,
    prefill_sglang_version: str | None,
    decode_sglang_version: str | None,
    root: Path | None,
    max_instances: int | None,
    max_nodes: int | None,
    max_variants: int | None,
    max_containers: int | None,
    max_classes: int | None,
) -> NoReturn:
    """``kvcheck preflight`` with its options (``OPTIONS``): typer's command calls
    this. Ends with ``SystemExit`` (the exit status); raises
    ``KvcheckError`` for bad input. The command's help is ``DOC``."""
    from kvcheck.report import FORMATS

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
    # What every input path takes alike (one pipeline: kvcheck.cluster.ClusterOptions).
    common: dict[str, Any] = dict(
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
    )
    if files:
        if prefill is not None or decode is not None:
            raise KvcheckError(
                "give -f FILE (a whole deployment) or --prefill/--decode (one pair), not both", field="-f"
            )
        # options that act on live servers only: -f reads none, so they would do nothing
        for given, option in (
            (prefill_agent, "--prefill-agent"),
            (decode_agent, "--decode-agent"),
            (probe, "--probe"),
            (bootstrap, "--bootstrap"),
        ):
            if given:
                raise KvcheckError(
                    f"{option} acts on a live pair (--prefill/--decode); -f reads deployment files, not live "
                    "servers, so it would do nothing",
                    field=option,
                )
        _preflight_deployments(
            files,
            common,
            format=format,
            env_file=env_file,
            inherit_env=inherit_env,
            config_file=config_file,
            values=values,
            prefill_env=prefill_env,
            decode_env=decode_env,
        )
    if prefill is None or decode is None:
        raise KvcheckError(
            "give -f FILE (a deployment manifest, recipe or launch script), or both --prefill and --decode",
            field="--prefill/--decode" if (prefill or decode) else "-f",
        )
    if values:
        raise KvcheckError(
            "--values is for a Helm chart directory given to -f; a pair's inputs are no chart", field="--values"
        )
    from kvcheck.cluster import ClusterOptions
    from kvcheck.cluster.pair_input import run_pair
    from kvcheck.sources import is_live_spec, load_side
    from kvcheck.sources.files import read_env_file

    live = {"api_key": api_key, "connect_timeout": connect_timeout, "deadline": deadline}

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
            models_dir=models_dir,
            **extra,
            **live,
        )

    opts = ClusterOptions(
        **common,
        prefill_env=read_env_file(prefill_env) if prefill_env is not None and not is_live_spec(prefill) else None,
        decode_env=read_env_file(decode_env) if decode_env is not None and not is_live_spec(decode) else None,
    )
    # a launch-line file's $VARs and --config read as a -f script's (one pipeline)
    from kvcheck.sources.deployments.launch_options import CONFIG_FILES

    token = CONFIG_FILES.set(_config_files(config_file))
    try:
        report, p, d = run_pair(
            prefill,
            decode,
            opts,
            load_live=load_live,
            read_pair=lambda rp, rd: _read_pair(rp, rd, both_live=is_live_spec(prefill) and is_live_spec(decode)),
            variables=(read_env_file(env_file) if env_file is not None else None, inherit_env),
        )
    finally:
        CONFIG_FILES.reset(token)
    if p is None or d is None:
        prefill_agent = decode_agent = None
        probe = False
    if prefill_agent or decode_agent or probe:
        _augment_live(
            report,
            p,
            d,
            prefill_agent=prefill_agent,
            decode_agent=decode_agent,
            probe=probe,
            timeout=timeout,
            pages=probe_pages,
            ignore=ignore,
            show_progress=format != "json" and sys.stderr.isatty(),
        )
    if allow_unchecked and report.verdict == "unchecked":
        report.extra["allow_unchecked"] = True
        _say("kvcheck: verdict unchecked, accepted with --allow-unchecked (exit 0)")
    State.decided_exit = 0 if allow_unchecked and report.verdict == "unchecked" else report.exit_code
    write_report(lambda: _render_pair(report, format))
    raise SystemExit(State.decided_exit)


def _augment_live(report, p, d, *, prefill_agent, decode_agent, probe, timeout, pages, ignore, show_progress) -> None:
    """Live agent and probe findings added to the pair's report (``--prefill-agent``,
    ``--decode-agent``, ``--probe``; Mooncake's agents and probe for a Mooncake pair),
    then ``--ignore`` applied once over every finding and the verdict taken again."""
    if (decode_agent or probe) and p.args.disaggregation_transfer_backend == "mooncake":
        from kvcheck.mooncake.probe import augment_preflight as augment_mooncake  # Mooncake agents and probe

        augment_mooncake(report, p, d, decode_agent=decode_agent, probe=probe, timeout=timeout, pages=pages)
    else:
        from kvcheck.nixl.commands import augment_preflight

        augment_preflight(
            report,
            p,
            d,
            prefill_agent=prefill_agent,
            decode_agent=decode_agent,
            probe=probe,
            timeout=timeout,
            pages=pages,
            show_progress=show_progress,
        )
    from kvcheck.checks.ids import apply_ignore
    from kvcheck.report.model import verdict_of

    apply_ignore(report.findings, ignore)  # once, over every finding (live agent and probe ones too)
    report.verdict = verdict_of(report.findings)


def _render_pair(report, format: str) -> None:
    """The pair's report on stdout in ``format`` (rich is imported for the table only)."""
    from kvcheck import report as renderers

    if format == "json":
        sys.stdout.write(renderers.render_json(report) + "\n")
    elif format in ("junit", "github"):
        render = renderers.render_junit if format == "junit" else renderers.render_github
        sys.stdout.write(render(report) + "\n")
    else:
        from kvcheck.report.terminal import PipeSafeConsole

        renderers.render_terminal(report, PipeSafeConsole())


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
    common: dict[str, Any],
    *,
    format: str,
    env_file: Path | None,
    inherit_env: bool = False,
    prefill_env: Path | None = None,
    decode_env: Path | None = None,
    config_file: list[str] | None = None,
    values: list[Path] | None = None,
) -> None:
    """``preflight -f``: read the deployments, check them (kvcheck.cluster), render, exit.
    ``common``: the ``ClusterOptions`` fields every input path takes alike."""
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

    env = read_env_file(env_file) if env_file is not None else None
    deployments = read_deployments(
        list(files),
        env=env,
        config_files=_config_files(config_file),
        helm_values=[str(v) for v in values or ()],
        inherit_env=inherit_env,
    )
    opts = ClusterOptions(
        **common,
        prefill_env=read_env_file(prefill_env) if prefill_env is not None else None,
        decode_env=read_env_file(decode_env) if decode_env is not None else None,
    )
    report = check_deployments(deployments, opts)
    State.decided_exit = report.exit_code
    write_report(lambda: _render_deployments(report, format))
    if common["allow_unchecked"] and report.verdict == "unchecked":
        _say("kvcheck: verdict unchecked, accepted with --allow-unchecked (exit 0)")
    raise SystemExit(report.exit_code)


def _config_files(config_file: list[str] | None) -> dict[str, str]:
    """``--config-file IMAGE_PATH=LOCAL_PATH`` options -> ``{IMAGE_PATH: LOCAL_PATH}``
    (the same on ``-f`` and on a pair's launch-line files)."""
    out: dict[str, str] = {}
    for item in config_file or []:
        image_path, eq, local = item.partition("=")
        if not eq or not image_path or not local:
            raise KvcheckError(
                f"{item!r}: expected IMAGE_PATH=LOCAL_PATH (the path the launch line's --config names, = a local copy)",
                field="--config-file",
            )
        out[image_path] = local
    return out


def _render_deployments(report, format: str) -> None:
    """The ``-f`` report on stdout in ``format`` (rich is imported for the table only)."""
    if format == "json":
        import json

        from kvcheck.sources.limits import escape_values

        # an input's escape sequences as visible text in every value (``jq -r`` prints them)
        sys.stdout.write(json.dumps(escape_values(report.contract()), indent=2) + "\n")
    elif format == "junit":
        from kvcheck.report.junit import render_cluster_junit

        sys.stdout.write(render_cluster_junit(report) + "\n")
    elif format == "github":
        from kvcheck.report.github import render_cluster_github

        sys.stdout.write(render_cluster_github(report) + "\n")
    else:
        from kvcheck.report.terminal import PipeSafeConsole, render_cluster_terminal

        render_cluster_terminal(report, PipeSafeConsole())
