"""``kvcheck preflight``: a whole deployment (``-f``) or one prefill/decode pair, through
one pipeline (``kvcheck.cluster``), rendered as a table, JSON, JUnit or GitHub annotations.

Exit statuses: 0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing
checked), 3 a live source could not be reached in time, 4 unchecked (0 with
``--allow-unchecked``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from kvcheck.cli.output import State, write_report
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
    "holding the launch command line, or a JSON object of args. The model's config.json is read from "
    "the model-path directory, or from --model-config FILE when model-path is a hub id."
)


@dataclass(frozen=True)
class Opt:
    """One option of ``kvcheck preflight``: the parameter ``name`` of ``run``, its flags,
    its ``kind`` (``str``, ``path``, ``int``, ``float``, ``bool``; ``strs``/``paths``:
    repeatable), its default, help and typer display settings; ``seconds``: a duration
    validated by ``kvcheck.cli.options.seconds`` (finite, above 0, at most a day).

    Declared here without typer so that ``parse_fast`` can read a plain command line
    without importing the CLI framework; ``kvcheck.cli.options.typer_command`` builds the
    typer command (help, errors, every other form) from the same table."""

    name: str
    decls: tuple[str, ...]
    kind: str
    default: Any
    help: str
    metavar: str | None = None
    envvar: str | None = None
    show_default: bool = True
    seconds: bool = False


OPTIONS: tuple[Opt, ...] = (
    Opt(
        "files",
        ("--file", "-f"),
        "paths",
        [],
        "A deployment as published (repeatable, kubectl style): a Kubernetes manifest (multi-document, "
        "List; Deployment, StatefulSet, Job, LeaderWorkerSet, DynamoGraphDeployment, RoleBasedGroup, OME "
        "runtimes, llm-d, AIBrix), an srt-slurm recipe, or a shell script / docs block of launch lines. "
        "Every prefill and decode instance is checked, grouped into classes. Not with --prefill/--decode.",
        metavar="FILE",
    ),
    Opt(
        "prefill",
        ("--prefill", "-p"),
        "str",
        None,
        "Prefill server args: --config YAML, command-line file, JSON args, or a live server URL (one "
        "pair; not with -f).",
        metavar="FILE|URL",
    ),
    Opt(
        "decode",
        ("--decode", "-d"),
        "str",
        None,
        "Decode server args, in any of the same forms.",
        metavar="FILE|URL",
    ),
    Opt(
        "format",
        ("--format", "-o"),
        "str",
        "table",
        "Output: table (for people), json (the documented contract), junit (JUnit XML), github (GitHub "
        "Actions annotations). The exit status is the same for every format.",
        metavar="table|json|junit|github",
    ),
    Opt(
        "env_file",
        ("--env",),
        "path",
        None,
        "VAR=value file: values for the $VAR / ${VAR} / $(VAR) variables of the -f files.",
        metavar="FILE",
    ),
    Opt(
        "inherit_env",
        ("--inherit-env",),
        "bool",
        False,
        "Fill a -f script's $VAR that the file, its container and --env leave unset from kvcheck's own "
        "environment, as the shell that runs it would. Off by default: a verdict never rests on what the "
        "machine running kvcheck happens to export (an unset variable is reported as "
        "unresolved-variable).",
    ),
    Opt(
        "values",
        ("--values",),
        "paths",
        [],
        "A values file for a Helm chart directory given to -f (helm template -f FILE; repeatable, in order).",
        metavar="FILE",
    ),
    Opt(
        "config_file",
        ("--config-file",),
        "strs",
        [],
        "A local copy of a config file that a -f launch line names inside the image (--config "
        "/etc/sglang/decode.yaml): read LOCAL_PATH for IMAGE_PATH (repeatable). Without it such a server "
        "is unchecked.",
        metavar="IMAGE_PATH=LOCAL_PATH",
    ),
    Opt(
        "models_dir",
        ("--models",),
        "path",
        None,
        "A Hugging Face cache (models--ORG--NAME/snapshots/*/config.json) to find model configs by hub "
        "id; HF_HUB_CACHE / HF_HOME are also read.",
        metavar="DIR",
    ),
    Opt(
        "allow_unchecked",
        ("--allow-unchecked",),
        "bool",
        False,
        "An 'unchecked' verdict (a pair kvcheck cannot decide: unknown model, unmodeled pool or backend, "
        "unresolved variable) exits 0 instead of 4; the output still says unchecked.",
    ),
    Opt(
        "kernel",
        ("--kernel",),
        "str",
        "builtin",
        "Decision code: builtin (kvcheck's restatement of each modeled SGLang release's decisions; no "
        "torch), runtime (the installed SGLang's own code driven on CPU; imports torch, seconds), auto "
        "(runtime when SGLang is importable, else builtin).",
        metavar="builtin|runtime|auto",
    ),
    Opt(
        "ignore",
        ("--ignore",),
        "strs",
        [],
        "Accept a finding by check id (repeatable). Findings that predict a runtime error stay in the "
        "output, marked ignored.",
        metavar="ID",
    ),
    Opt(
        "prefill_env",
        ("--prefill-env",),
        "path",
        None,
        "VAR=value file with the prefill's environment (SGLANG_DISAGGREGATION_NIXL_BACKEND, "
        "SGLANG_PP_LAYER_PARTITION, UCX_NET_DEVICES, ...).",
    ),
    Opt(
        "decode_env",
        ("--decode-env",),
        "path",
        None,
        "VAR=value file with the decode's environment.",
    ),
    Opt(
        "model_config",
        ("--model-config",),
        "path",
        None,
        "The model's config.json, for both sides, when model-path is a hub id.",
    ),
    Opt(
        "prefill_model_config",
        ("--prefill-model-config",),
        "path",
        None,
        "The prefill's model config.json (overrides --model-config).",
    ),
    Opt(
        "decode_model_config",
        ("--decode-model-config",),
        "path",
        None,
        "The decode's model config.json (overrides --model-config).",
    ),
    Opt(
        "draft_model_config",
        ("--draft-model-config",),
        "path",
        None,
        "The draft model's config.json when speculative-draft-model-path is a hub id.",
    ),
    Opt(
        "api_key",
        ("--api-key",),
        "str",
        None,
        "Bearer token for live servers' HTTP APIs (prefer the KVCHECK_API_KEY variable: a flag shows in ps).",
        envvar="KVCHECK_API_KEY",
        show_default=False,
    ),
    Opt(
        "bootstrap",
        ("--bootstrap",),
        "str",
        None,
        "A live prefill's bootstrap server URL (default: http://PREFILL-HOST:disaggregation_bootstrap_port).",
    ),
    Opt(
        "connect_timeout",
        ("--connect-timeout",),
        "float",
        3.0,
        "Seconds to wait for each TCP/TLS connect to a live server.",
        seconds=True,
    ),
    Opt(
        "deadline",
        ("--deadline",),
        "float",
        10.0,
        "Seconds a live source may take in all, retries included (a prefill not fully registered answers "
        "503 until then); two live sides are read side by side. Past it: exit 3.",
        seconds=True,
    ),
    Opt(
        "prefill_agent",
        ("--prefill-agent",),
        "str",
        None,
        "A kvcheck NIXL agent of the prefill role: HOST:PORT (listener), etcd://HOST:PORT/NAME, or a "
        "saved blob. Its live regions are compared with the args.",
    ),
    Opt(
        "decode_agent",
        ("--decode-agent",),
        "str",
        None,
        "A kvcheck NIXL agent of the decode role (same forms). Needed by --probe.",
    ),
    Opt(
        "probe",
        ("--probe",),
        "bool",
        False,
        "Move real bytes along each segment of the plan from a prefill-role agent started here to "
        "--decode-agent, and verify them.",
    ),
    Opt(
        "timeout",
        ("--timeout",),
        "float",
        5.0,
        "Seconds each agent read and each probe wait may take; on expiry the step is named in a finding.",
        seconds=True,
    ),
    Opt(
        "probe_pages",
        ("--probe-pages",),
        "int",
        4,
        "Pages per region the probe writes (capped by what the decode agent registered).",
    ),
    Opt(
        "gpu",
        ("--gpu",),
        "str",
        None,
        "The GPU both sides run on (h100, h200, b200, gb200, gb300, ... or sm90/sm100). Page sizes, "
        "attention/DSA backends and KV dtypes depend on it. Default: Hopper, said in the output.",
        metavar="GPU",
    ),
    Opt(
        "prefill_gpu",
        ("--prefill-gpu",),
        "str",
        None,
        "The prefill's GPU (overrides --gpu).",
        metavar="GPU",
    ),
    Opt(
        "decode_gpu",
        ("--decode-gpu",),
        "str",
        None,
        "The decode's GPU (overrides --gpu).",
        metavar="GPU",
    ),
    Opt(
        "sglang_version",
        ("--sglang-version",),
        "str",
        None,
        "The SGLang release both sides run (0.5.0rc2 ... 0.5.23); it wins over what the input says (an "
        "image tag, /server_info's version). Default: the releases the input and its flags allow; the "
        "pair is decided on each (the output names the window).",
        metavar="VERSION",
    ),
    Opt(
        "prefill_sglang_version",
        ("--prefill-sglang-version",),
        "str",
        None,
        "The prefill's SGLang release (overrides --sglang-version).",
        metavar="VERSION",
    ),
    Opt(
        "decode_sglang_version",
        ("--decode-sglang-version",),
        "str",
        None,
        "The decode's SGLang release (overrides --sglang-version).",
        metavar="VERSION",
    ),
    Opt(
        "root",
        ("--root",),
        "path",
        None,
        "The directory files named inside the inputs (a --config in a launch line, a model-path "
        "directory) may be read from; default: each input file's own directory. Nothing outside it is "
        "read, by '..' or symlink.",
        metavar="DIR",
    ),
    Opt(
        "max_instances",
        ("--max-instances",),
        "int",
        None,
        "Most server instances (replicas and nodes included) one deployment may expand to before it is "
        "refused (default 4096).",
        metavar="N",
    ),
    Opt(
        "max_nodes",
        ("--max-nodes",),
        "int",
        None,
        "Most nodes one deployment (or one multi-node instance) may span before it is refused (default 4096).",
        metavar="N",
    ),
    Opt(
        "max_variants",
        ("--max-variants",),
        "int",
        None,
        "Most sweep/override variants one srt-slurm recipe may expand to (default 256).",
        metavar="N",
    ),
    Opt(
        "max_containers",
        ("--max-containers",),
        "int",
        None,
        "Most SGLang containers (launch lines) read from one deployment file (default 2048).",
        metavar="N",
    ),
    Opt(
        "max_classes",
        ("--max-classes",),
        "int",
        None,
        "Most instance classes (distinct KV-relevant arg sets) checked per deployment (default 64).",
        metavar="N",
    ),
)


# The command's help (typer shows it under the usage line).
DOC = (
    "Check a whole deployment (-f: every prefill and decode instance, grouped into classes, each class pair decided\n"
    "once, plus cluster-wide checks) or one prefill/decode pair: KV regions, transfer path, and the exact runtime\n"
    "errors."
)

_BY_FLAG = {d: o for o in OPTIONS for d in o.decls}
_INT = re.compile(r"0|-?[1-9][0-9]*")
_FLOAT = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_fast(argv: list[str], environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """``run``'s keyword arguments for ``kvcheck preflight ARGV`` when ARGV is plainly
    well formed, else None (then typer parses it: help, usage errors and every unusual
    form keep typer's own handling). Plain: every token is a known flag of ``OPTIONS``
    (``--flag VALUE``, ``--flag=VALUE``, ``-f VALUE``, ``-fVALUE``, bare boolean flags),
    no value is empty or starts with ``-`` (``-`` alone, standard input, is a value),
    integers and numbers of seconds are plain decimals and the seconds are in range.
    Values are converted as typer converts them (``Path(text)``, ``int``, ``float``);
    an option given twice keeps the last value, a repeatable one keeps them all, and
    ``--api-key`` falls back to ``KVCHECK_API_KEY``. ``tests/test_cli_input.py`` holds
    this parse equal to typer's over every option."""
    values: dict[str, Any] = {o.name: list(o.default) if isinstance(o.default, list) else o.default for o in OPTIONS}
    given: set[str] = set()
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok.startswith("--"):
            flag, eq, attached = tok.partition("=")
            has_value = bool(eq)
        elif tok.startswith("-") and len(tok) > 1:
            flag, attached = tok[:2], tok[2:]
            has_value = bool(attached)
        else:
            return None  # a positional word, or '-' where a flag belongs
        opt = _BY_FLAG.get(flag)
        if opt is None or tok == "--":
            return None
        if opt.kind == "bool":
            if has_value:
                return None
            values[opt.name] = True
            given.add(opt.name)
            continue
        if not has_value:
            if i >= len(argv):
                return None
            attached = argv[i]
            i += 1
        value = _convert(opt, attached)
        if value is None:
            return None
        if isinstance(values[opt.name], list):
            values[opt.name].append(value)
        else:
            values[opt.name] = value
        given.add(opt.name)
    for opt in OPTIONS:
        if opt.envvar and opt.name not in given and opt.envvar in environ:
            value = _convert(opt, environ[opt.envvar])
            if value is None:
                return None
            values[opt.name] = value
    for opt in OPTIONS:
        if opt.seconds and not 0 < values[opt.name] <= 86400:
            return None
    return values


def _convert(opt: Opt, text: str) -> Any:
    """``text`` as ``opt``'s value, or None where typer might read it otherwise."""
    if not text or (text.startswith("-") and text != "-") or text.startswith("="):
        return None
    if opt.kind in ("str", "strs"):
        return text
    if opt.kind in ("path", "paths"):
        return Path(text)
    if opt.kind == "int":
        return int(text) if _INT.fullmatch(text) else None
    if opt.kind == "float":
        return float(text) if _FLOAT.fullmatch(text) else None
    return None


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
    """``kvcheck preflight`` with its options (``OPTIONS``): typer's command and
    ``parse_fast`` both call this. Ends with ``SystemExit`` (the exit status); raises
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
            **extra,
            **live,
        )

    opts = ClusterOptions(
        **common,
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


def _render_deployments(report, format: str) -> None:
    """The ``-f`` report on stdout in ``format`` (rich is imported for the table only)."""
    if format == "json":
        import json

        sys.stdout.write(json.dumps(report.contract(), indent=2) + "\n")
    elif format == "junit":
        from kvcheck.report.junit import render_cluster_junit

        sys.stdout.write(render_cluster_junit(report) + "\n")
    elif format == "github":
        from kvcheck.report.github import render_cluster_github

        sys.stdout.write(render_cluster_github(report) + "\n")
    else:
        from kvcheck.report.terminal import PipeSafeConsole, render_cluster_terminal

        render_cluster_terminal(report, PipeSafeConsole())
