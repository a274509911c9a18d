"""``kvcheck preflight``'s options as one table.

``OPTIONS`` is the one declaration of preflight's options: ``kvcheck.cli.options.
typer_command`` builds typer's command from it, and typer parses every command line
(help, usage errors, every spelling click accepts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Opt:
    """One option of ``kvcheck preflight``: the parameter ``name`` of ``run``, its flags,
    its ``kind`` (``str``, ``path``, ``int``, ``float``, ``bool``; ``strs``/``paths``:
    repeatable), its default, help and typer display settings; ``seconds``: a duration
    validated by ``kvcheck.cli.options.seconds`` (finite, above 0, at most a day).

    ``kvcheck.cli.options.typer_command`` builds the typer command from the table."""

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
        "VAR=value file: values for the $VAR / ${VAR} / $(VAR) variables of the -f files (and of a "
        "launch-line file given to --prefill/--decode).",
        metavar="FILE",
    ),
    Opt(
        "inherit_env",
        ("--inherit-env",),
        "bool",
        False,
        "Fill a -f script's (or a pair's launch-line file's) $VAR that the file, its container and --env "
        "leave unset from kvcheck's own "
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
        "A local copy of a config file that a launch line (-f, or a pair's launch-line file) names inside "
        "the image (--config "
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
        "The model's config.json (or its directory), for both sides: over the model-path lookup (a local "
        "directory, a Hugging Face cache, kvcheck's catalog of public configs).",
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
        metavar="<redacted>",  # as kvcheck.cli.options.API_KEY_METAVAR: the scrubber leaves it, the columns align
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
        "The GPU both sides run on (h100, h200, b200, gb200, gb300, ... or sm90/sm100), on every input "
        "(files, -f, live servers, snapshots); it wins over a manifest's GPU (a disagreement is a warning). "
        "Page sizes, attention/DSA backends and KV dtypes depend on it. Default: the input's GPU, else "
        "the side is decided on Hopper and on Blackwell (unchecked when they differ).",
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
        "The SGLang release both sides run (0.5.0rc2 ... 0.5.23); it wins over what a file says (an "
        "image tag, a recipe pin, a kvcheck-sglang-version key), not over a live server's or snapshot's "
        "own /server_info version (the running code; a disagreement is a warning). Default: the releases "
        "the input and its flags allow; the pair is decided on each (the output names the window).",
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
