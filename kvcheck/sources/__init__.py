"""Where server args are read: files, command lines, JSON, live servers -> ``Side``.

``load_side(spec, role)`` picks the reader from the spec: an ``http(s)://`` URL is a
live server (``kvcheck.sources.live``); a ``.yaml``/``.yml`` file a SGLang ``--config``
file; a ``.json`` file JSON args (or a saved ``kvcheck snapshot``); any other file a
launch command line.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcheck.errors import InputError

if TYPE_CHECKING:
    from kvcheck.sglang.model import ModelConfig
    from kvcheck.sides import Role, Side

# The readers and the runtime model are imported where they are used: importing this
# package (which ``kvcheck.sources.redact``/``limits`` do, for the CLI's output scrub and
# ``explain``) stays light. The names it used to re-export still resolve (``__getattr__``).
_LAZY = {
    "build_server_args": "kvcheck.sglang.args",
    "ModelConfig": "kvcheck.sglang.model",
    "parse_model_config": "kvcheck.sglang.model",
    "RELEVANT_ENV": "kvcheck.sides",
    "Role": "kvcheck.sides",
    "Side": "kvcheck.sides",
    "read_command_line": "kvcheck.sources.files",
    "read_env_file": "kvcheck.sources.files",
    "read_json_args": "kvcheck.sources.files",
    "read_text": "kvcheck.sources.files",
    "read_yaml_config": "kvcheck.sources.files",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvcheck.sources' has no attribute {name!r}")


# ``host:port`` (or ``[v6]:port``, optional path) without a scheme: a live server.
_HOST_PORT = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5}(?:/\S*)?$")


def read_model_file(path: Path, field: str = "--model-config", override_args: Any = None) -> ModelConfig:
    """Parse a model ``config.json`` file, or the ``config.json`` of a model directory
    (what ``--model-path`` names, as SGLang takes it), with ``--json-model-override-args``
    (``override_args``) applied first; ``InputError`` naming the file otherwise
    (missing, too large, not JSON, nested too deep, values out of range)."""
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sources.files import load_json, read_text

    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                f"the directory {path} holds no config.json (give the model's directory or its config.json)",
                source=str(path),
                field=field,
            )
        path = path / "config.json"
    if not path.exists():
        raise InputError("model config file not found", source=str(path), field=field)
    raw = load_json(read_text(path), str(path), "a model config")
    return parse_model_config(raw, source=str(path), override_args=override_args)


def resolve_model(
    model_path: str | None,
    override: Path | None,
    source: str,
    *,
    flag: str = "--model-path",
    base: Path | None = None,
    override_flag: str = "--model-config",
    override_args: Any = None,
) -> ModelConfig:
    """The model config: ``override`` (``--model-config FILE`` or a model directory)
    when given, else ``config.json`` inside the ``model_path`` directory. A hub id
    without a local directory needs ``override_flag`` (``--model-config``, or
    ``--draft-model-config`` for a draft): kvcheck never downloads."""
    from kvcheck.sources.limits import clip

    if override is not None:
        return read_model_file(override, field=override_flag, override_args=override_args)
    if not model_path:
        raise InputError(
            f"no {flag} given, so there is no model config.json to read; add {flag} or pass {override_flag} FILE",
            source=source,
            field=flag,
        )
    model_path = str(model_path)
    if len(model_path) > 4096 or "\x00" in model_path:
        raise InputError(
            f"{flag} {clip(repr(model_path))} is not a path or hub id; pass {override_flag} FILE",
            source=source,
            field=flag,
        )
    p = Path(os.path.expanduser(model_path))
    if not p.is_absolute() and base is not None and not p.exists():
        p = base / p
    from kvcheck.sources.files import explicit_read_root, within_root

    if explicit_read_root() is not None and base is not None and p.exists() and not within_root(p, base):
        raise InputError(
            f"{flag} names a directory outside --root {explicit_read_root()}; kvcheck reads files named inside an "
            "input only under it",
            source=source,
            field=flag,
        )
    target = p / "config.json" if p.is_dir() else p
    if p.is_dir() and not target.exists():
        raise InputError(
            f"the {flag} directory {p} holds no config.json; pass {override_flag} FILE", source=source, field=flag
        )
    if p.is_dir() or (p.is_file() and p.name.endswith(".json")):
        if base is None or within_root(target, base):
            return read_model_file(target, field=flag, override_args=override_args)
        # Outside the input's directory (a pair's model-path, read as named without
        # --root): read, but a refusal never shows what the file holds.
        try:
            return read_model_file(target, field=flag, override_args=override_args)
        except InputError as exc:
            raise InputError(
                f"{flag} {clip(str(target))} is outside the input file's directory and is not a model config.json "
                "kvcheck can read "
                f"(its content is not shown); pass {override_flag} FILE, or --root DIR to read model directories "
                "under DIR only",
                source=source,
                field=flag,
            ) from exc
    raise InputError(
        f"{flag} {clip(repr(model_path))} is not a local directory (a hub id?); kvcheck never downloads: pass "
        f"{override_flag} FILE with the model's config.json",
        source=source,
        field=flag,
    )


def build_side(
    role: Role,
    args: dict[str, Any],
    env: dict[str, str],
    origin: str,
    *,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    base: Path | None = None,
    live: dict[str, Any] | None = None,
    gpu: str | None = None,
    sglang_version: str | None = None,
    image: str | None = None,
    release: Any = None,
    model: ModelConfig | None = None,
    draft_model: ModelConfig | None = None,
) -> Side:
    """Type the args, read the model (and draft model) config, and build a ``Side``.

    ``model``/``draft_model``: an already-resolved config (the cluster pipeline's
    catalog or Hugging Face cache lookup); when given, no file is read for it.

    ``gpu``: the GPU named on the command line (``--gpu``/``--prefill-gpu``...); it wins
    over a ``kvcheck-gpu`` key in the file. Neither -> Hopper, marked ``default`` in
    ``gpu_source`` (the pipeline then decides the side on Hopper and on Blackwell:
    ``kvcheck.cluster.decide._assumed_gpus``).

    The side's SGLang release (``Side.sglang_version``/``version_source``): ``release``
    (a ``kvcheck.sglang.releases.ReleaseChoice`` the caller already made), else the
    input's own (``image``: a container image reference read with
    ``release_from_image``; a ``kvcheck-sglang-version`` key), else ``sglang_version``
    (``--sglang-version``/``--prefill-sglang-version``...), else the installed SGLang,
    else the newest modeled release. ``args`` must have been read with that release's
    flags. The typed ``ServerArgs`` take that release's defaults where they differ from
    0.5.23's (e.g. ``--disaggregation-transfer-backend``).
    """
    from kvcheck.sglang.args import build_server_args, mooncake_tcp_as_run
    from kvcheck.sglang.gpu import DEFAULT_GPU, resolve_gpu
    from kvcheck.sglang.releases import choose_release, release_from_image
    from kvcheck.sides import Side, kv_relevant_env
    from kvcheck.sources.files import GPU_ENV, VERSION_ENV, VERSION_KEY

    env = dict(env)
    args, env = mooncake_tcp_as_run(args, env)
    file_release = env.pop(VERSION_ENV, None)
    if release is None:
        if image:
            img_release, reason = release_from_image(image)
            release = choose_release(img_release, reason, sglang_version, input_unknown=None if img_release else reason)
        else:
            release = choose_release(file_release, VERSION_KEY, sglang_version)
    file_gpu = env.pop(GPU_ENV, None)
    if gpu is not None:
        gpu_name, gpu_source = resolve_gpu(gpu, source=origin, field=f"--{role}-gpu").name, "--gpu"
    elif file_gpu is not None:
        gpu_name, gpu_source = resolve_gpu(file_gpu, source=origin, field="kvcheck-gpu").name, "kvcheck-gpu"
    else:
        gpu_name, gpu_source = DEFAULT_GPU, "default (Hopper assumed)"
    # Secret values given with the args (api-key, hf tokens, URL passwords, JSON in
    # strings) are scrubbed from every output of this process.
    from kvcheck.sources.redact import collect_secrets, register_secrets

    register_secrets(collect_secrets(args) | collect_secrets(env))
    typed = build_server_args(release_defaults(args, release.table), origin)
    # SGLang applies --json-model-override-args to the target's and the draft's config
    # (ModelConfig.from_server_args -> get_config), before anything reads them.
    overrides = args.get("json_model_override_args")
    model = (
        model
        if model is not None
        else resolve_model(typed.model_path, model_config, origin, base=base, override_args=overrides)
    )
    draft = draft_model
    if draft is None and typed.has_draft_worker and (typed.speculative_draft_model_path or draft_model_config):
        if draft_model_config is None and typed.speculative_draft_model_path == typed.model_path:
            draft = None  # the target's own MTP layers
        else:
            draft = resolve_model(
                typed.speculative_draft_model_path,
                draft_model_config,
                origin,
                flag="--speculative-draft-model-path",
                base=base,
                override_flag="--draft-model-config",
                override_args=overrides,
            )
    return Side(
        role=role,
        args=typed,
        raw_args=args,
        env={k: v for k, v in env.items() if kv_relevant_env(k)},
        model=model,
        draft_model=draft,
        origin=origin,
        live=live,
        gpu=gpu_name,
        gpu_source=gpu_source,
        sglang_version=release.release or "unknown",  # an image whose release cannot be told
        version_source=release.source,
        image=image,
    )


def release_defaults(args: dict[str, Any], version: str) -> dict[str, Any]:
    """``args`` (dests renamed to ServerArgs fields as that release's ``from_cli_args``
    does) plus SGLang ``version``'s own defaults for every ``ServerArgs`` field the
    args leave unset whose default differs from 0.5.23's (the model's defaults). A
    field whose flag that release lacks keeps the model's default (the feature is off).
    Mirrors ``argparse`` defaults of that release's parser (the flag table)."""
    from kvcheck.sglang.flags import DEFAULT_VERSION, FlagTable

    if version == DEFAULT_VERSION:
        return args
    table = FlagTable.load(version)
    args = table.to_fields(args)  # ServerArgs.from_cli_args renames (tp_size ...) before 0.5.14
    out = dict(args)
    for name, value in _changed_defaults(version):
        if name not in args:
            out[name] = copy.deepcopy(value) if isinstance(value, (list, dict)) else value
    return out


@functools.cache
def _changed_defaults(version: str) -> tuple[tuple[str, Any], ...]:
    """The ``ServerArgs`` fields whose default in release ``version``'s parser differs from
    the model's (0.5.23's), with that release's default; once per release and process (a
    window builds each side once per release)."""
    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.flags import DEFAULT_VERSION, FlagTable

    table = FlagTable.load(version)
    own = table.to_fields(table.defaults())
    base = FlagTable.load(DEFAULT_VERSION).defaults()
    return tuple(
        (name, own[name])
        for name in ServerArgs.model_fields
        if name in own and name in base and own[name] != base[name]
    )


def is_live_spec(spec: str) -> bool:
    """Whether ``load_side`` reads ``spec`` from a live server (an ``http(s)://`` URL, or
    ``HOST:PORT`` that is not an existing file) rather than from a file."""
    if spec.startswith(("http://", "https://")):
        return True
    return not Path(spec).exists() and bool(_HOST_PORT.match(spec))


def load_side(
    spec: str,
    role: Role,
    *,
    env_file: Path | None = None,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    gpu: str | None = None,
    sglang_version: str | None = None,
    models_dir: Path | None = None,
    **live_options: Any,
) -> Side:
    """Read one side from ``spec`` (a file path or a live server URL).

    ``sglang_version``: the release named on kvcheck's command line for this side
    (``--sglang-version``/``--prefill-sglang-version``...); the input's own release wins
    when kvcheck models it (``kvcheck.sglang.releases.choose_release``).

    Raises ``InputError`` (exit 2) for bad input, ``UnreachableError`` (exit 3) when a
    live server does not answer in time.
    """
    from kvcheck.sources.files import read_command_line, read_env_file, read_json_args, read_yaml_config

    if not spec.startswith(("http://", "https://")) and is_live_spec(spec):
        spec = "http://" + spec  # host:port of a live server, as SGLang prints it
    if spec.startswith(("http://", "https://")):
        from kvcheck.sources import live

        return live.load_live_side(
            spec,
            role,
            model_config=model_config,
            draft_model_config=draft_model_config,
            env_file=env_file,
            gpu=gpu,
            sglang_version=sglang_version,
            models_dir=models_dir,
            **live_options,
        )
    path = Path(spec)
    if not path.exists():
        from kvcheck.sources.limits import clip, spec_hint

        raise InputError(f"file not found{spec_hint(spec)}", source=clip(spec))
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        args, env = read_yaml_config(path, sglang_version)
    elif suffix == ".json":
        data, text = read_json_input(path, spec)
        if isinstance(data, dict) and "server_info" in data:
            from kvcheck.sources import live

            return live.load_snapshot_side(
                path,
                data,
                role,
                model_config=model_config,
                draft_model_config=draft_model_config,
                env_file=env_file,
                gpu=gpu,
                sglang_version=sglang_version,
                models_dir=models_dir,
            )
        args, env = read_json_args(path, data, sglang_version)
    else:
        args, env = read_command_line(path, version=sglang_version)
    if env_file is not None:
        env = {**env, **read_env_file(env_file)}
    return build_side(
        role,
        args,
        env,
        spec,
        model_config=model_config,
        draft_model_config=draft_model_config,
        base=path.parent,
        gpu=gpu,
        sglang_version=sglang_version,
    )


def read_json_input(path, spec: str):
    """(parsed JSON, its text) of a side given as a ``.json`` file (server args or a
    snapshot). Raises ``InputError`` (exit 2) naming ``spec`` for a syntax error or a
    document nested deeper than ``kvcheck.sources.limits.MAX_DEPTH``."""
    from kvcheck.sources.files import read_text
    from kvcheck.sources.limits import MAX_DEPTH, json_depth_ok

    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=spec
        ) from None
    except RecursionError:
        data = None
    if data is None and text.strip() != "null" or not json_depth_ok(data):
        raise InputError(f"JSON nested deeper than {MAX_DEPTH} levels; not server args or a snapshot", source=spec)
    return data, text
