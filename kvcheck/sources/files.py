"""Server args from files: a SGLang ``--config`` YAML, a launch command line, JSON args.

Each reader returns ``(args, env)``: ``args`` maps SGLang dest names to typed values,
validated against the flag table of the side's SGLang release (``kvcheck.sglang.flags``;
``version``: the release named on kvcheck's command line, else see
``kvcheck.sglang.releases.choose_release``); ``env`` holds environment variables given
with the args, plus kvcheck's own ``kvcheck-gpu``/``kvcheck-sglang-version`` keys under
``GPU_ENV``/``VERSION_ENV`` for ``build_side``. Nothing is ever written to the inputs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from kvcheck.errors import ArgparseRefusal, InputError
from kvcheck.sglang.flags import FlagTable, config_path

# A documented key kvcheck strips from a --config YAML before reading flags: per-side
# environment variables (SGLang itself does not accept it; keep it in a kvcheck copy
# or use --prefill-env/--decode-env).
ENV_KEY = "kvcheck-env"
# Likewise the GPU the side runs on (``h100``, ``b200``, ``sm90``...): kvcheck.sglang.gpu.
GPU_KEY = "kvcheck-gpu"
# Likewise the SGLang release the side runs (``0.5.8``); it wins over --sglang-version.
VERSION_KEY = "kvcheck-sglang-version"
VERSION_ENV = "kvcheck-sglang-version"

LAUNCHERS = (
    ("python", "-m", "sglang.launch_server"),
    ("python3", "-m", "sglang.launch_server"),
    ("sglang", "serve"),
    ("sglang.launch_server",),
)


def read_text(path: Path) -> str:
    """The file's text; ``InputError`` (exit 2) when it is missing, unreadable, or
    larger than ``kvcheck.sources.limits.MAX_FILE_BYTES`` (checked before reading, and
    at most that many bytes are ever read: a FIFO or an endless device too)."""
    from kvcheck.sources.limits import MAX_FILE_BYTES, file_size_ok

    file_size_ok(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise InputError(f"file is larger than {MAX_FILE_BYTES} bytes; kvcheck reads files up to that size", source=str(path))
        return data.decode("utf-8")
    except FileNotFoundError:
        raise InputError("file not found", source=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", source=str(path)) from None


def release_choice(file_release: str | None, version: str | None):
    """The ``ReleaseChoice`` for a file input: its ``kvcheck-sglang-version`` key, else
    ``version`` (kvcheck's command line), else installed/newest."""
    from kvcheck.sglang.releases import choose_release

    return choose_release(file_release, VERSION_KEY, version)


def parse_for_release(parse, choice, source: str):
    """``parse(table_version)`` under the side's release. A release kvcheck does not model
    reads its flags with the newest table, then with older ones (the side is ``unchecked``
    anyway); when none reads them: ``UncheckedError`` (exit 4) naming the release."""
    if choice.modeled:
        try:
            return parse(choice.table)
        except ArgparseRefusal as exc:
            exc.release, exc.version_source = choice.release, choice.source
            raise
    from kvcheck.errors import UncheckedError
    from kvcheck.sglang.releases import modeled

    first: InputError | None = None
    for v in reversed(modeled()):
        try:
            return parse(v)
        except InputError as exc:
            first = first or exc
    raise UncheckedError(
        f"{choice.problem}, and no modeled release's flags read this input ({first}); give the side's release with --sglang-version",
        source=source,
    )


def args_from_mapping(mapping: dict[str, Any], source: str, version: str | None = None) -> dict[str, Any]:
    """Flag name (dash or underscore form, unambiguous prefixes as SGLang allows) ->
    value, to dest -> typed value, with the flags of SGLang ``version`` (default: the
    newest modeled). Raises ``InputError`` for unknown flags (with the nearest valid
    name) and for values of the wrong type."""
    table = FlagTable.load(version) if version else FlagTable.load()
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise InputError(f"flag names must be strings, got {key!r}", source=source)
        flag = table.resolve(key, source=source)
        if flag.dest in out:
            raise InputError(f"--{flag.name} is given twice (as {key!r} and under another spelling)", source=source, field=f"--{flag.name}")
        out[flag.dest] = table.coerce(flag, value, source, origin="json")
    return out


def read_yaml_config(path: Path, version: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """A SGLang ``--config`` YAML: a mapping of flag names (dash keys) to values, read as
    that release's ``ConfigArgumentMerger`` would (``version``: see the module doc)."""
    text = read_text(path)
    data = _load_yaml(text, path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"a SGLang --config file must hold a mapping of flags, got {type(data).__name__}", source=str(path))
    env = _env_mapping(data.pop(ENV_KEY, None), str(path))
    _take_gpu_key(data, env, str(path))
    choice = release_choice(_take_version_key(data, env, str(path)), version)
    # Exactly as SGLang's ConfigArgumentMerger: each key becomes --key (abbreviations
    # allowed, underscores refused), values as strings, then argparse.
    return parse_for_release(lambda v: FlagTable.load(v).parse_config(data, str(path)), choice, str(path)), env


def _load_yaml(text: str, path: Path) -> Any:
    """``yaml.safe_load`` with limits on aliases, expanded size and nesting
    (``kvcheck.sources.limits.load_yaml_limited``); ``InputError`` naming the file."""
    from kvcheck.sources.limits import YamlLimitError, load_yaml_limited

    try:
        return load_yaml_limited(text)
    except YamlLimitError as exc:
        raise InputError(f"YAML refused: {exc}", source=str(path)) from None
    except RecursionError:
        raise InputError("YAML refused: nested too deep", source=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"YAML syntax error{where}: {problem}", source=str(path)) from None


def read_json_args(path: Path, data: Any | None = None, version: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """A JSON object of args (flag names or dest names as keys)."""
    if data is None:
        text = read_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=str(path)) from None
        except RecursionError:
            raise InputError("JSON nested too deep to be server args", source=str(path)) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object of server args, got {type(data).__name__}", source=str(path))
    env = _env_mapping(data.pop(ENV_KEY, None), str(path))
    _take_gpu_key(data, env, str(path))
    choice = release_choice(_take_version_key(data, env, str(path)), version)
    return parse_for_release(lambda v: args_from_mapping(data, str(path), v), choice, str(path)), env


def split_command_line(text: str, source: str) -> tuple[list[str], dict[str, str]]:
    """A launch command (``[VAR=value ...] python -m sglang.launch_server --flag ...``,
    backslash continuations and comments allowed) -> (flag argv, env assignments)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    try:
        tokens = shlex.split("\n".join(lines).replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise InputError(f"cannot split the command line: {exc}", source=source) from None
    env: dict[str, str] = {}
    i = 0
    while i < len(tokens) and tokens[i] in ("env", "exec"):
        i += 1
    # VAR=value prefixes and "export VAR=value" statements before the command.
    while i < len(tokens) and (tokens[i] in ("export", ";", "&&") or ("=" in tokens[i] and not tokens[i].startswith("-"))):
        if "=" in tokens[i]:
            name, _, value = tokens[i].partition("=")
            env[name] = value
        i += 1
    rest = tokens[i:]
    for launcher in LAUNCHERS:
        n = len(launcher)
        if tuple(t.rsplit("/", 1)[-1] for t in rest[:n]) == launcher:
            return rest[n:], env
    if rest and rest[0].startswith("-"):
        return rest, env
    got = " ".join(rest[:3]) if rest else "nothing"
    raise InputError(
        f"not a SGLang launch command: expected '[VAR=value ...] python -m sglang.launch_server --flag ...' (or 'sglang serve ...'), found {got!r}",
        source=source,
    )


def read_command_line(path: Path, text: str | None = None, version: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """A file holding a launch command line (``version``: see the module doc; a
    ``--config`` file's ``kvcheck-sglang-version`` key names the release too)."""
    text = read_text(path) if text is None else text
    argv, env = split_command_line(text, str(path))
    from kvcheck.sources.redact import collect_secrets, register_secrets, secrets_from_argv

    register_secrets(secrets_from_argv(argv) | collect_secrets(dict(env)))  # before any error can quote one
    cfg = config_path(argv, str(path))
    config = None
    if cfg:
        # --config FILE inside a command: SGLang puts the file's flags before the
        # command line's, so the command line wins (ConfigArgumentMerger).
        cfg_path = Path(cfg)
        if not cfg_path.is_absolute() and not cfg_path.exists():
            cfg_path = path.parent / cfg_path
        config = _load_yaml(read_text(cfg_path), cfg_path) or {}
        if not isinstance(config, dict):
            raise InputError("a SGLang --config file must hold a mapping of flags", source=str(cfg_path))
        env = {**_env_mapping(config.pop(ENV_KEY, None), str(cfg_path)), **env}
        _take_gpu_key(config, env, str(cfg_path))
        _take_version_key(config, env, str(cfg_path))
    choice = release_choice(env.get(VERSION_ENV), version)
    args = parse_for_release(lambda v: FlagTable.load(v).parse_argv(argv, str(path), config=config), choice, str(path))
    args.pop("config", None)
    return args, env


# ``env`` carries the kvcheck-gpu key's value under this name to ``build_side`` (never a
# real variable name: it has a dash).
GPU_ENV = "kvcheck-gpu"


def _take_gpu_key(data: dict, env: dict[str, str], source: str) -> None:
    """Move a ``kvcheck-gpu:`` key out of a YAML/JSON mapping into ``env[GPU_ENV]``."""
    if GPU_KEY in data:
        value = data.pop(GPU_KEY)
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{GPU_KEY} must be a GPU name such as h100, b200 or sm90", source=source, field=GPU_KEY)
        env[GPU_ENV] = value


def _take_version_key(data: dict, env: dict[str, str], source: str) -> str | None:
    """Move a ``kvcheck-sglang-version:`` key out of a YAML/JSON mapping into
    ``env[VERSION_ENV]``; returns it (None when absent)."""
    if VERSION_KEY in data:
        value = data.pop(VERSION_KEY)
        if isinstance(value, (int, float)) or not isinstance(value, str) or not value.strip():
            raise InputError(f"{VERSION_KEY} must be an SGLang release written as a string, such as '0.5.8'", source=source, field=VERSION_KEY)
        env[VERSION_ENV] = value.strip()
        return value.strip()
    return None


def _env_mapping(value: Any, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InputError(f"{ENV_KEY} must be a mapping of variable names to values", source=source, field=ENV_KEY)
    return {k: "" if v is None else str(v) for k, v in value.items()}


def read_env_file(path: Path) -> dict[str, str]:
    """A ``VAR=value`` file (``export`` prefixes, quotes and comments allowed), or YAML/JSON mapping."""
    text = read_text(path)
    if path.suffix in (".yaml", ".yml", ".json"):
        if path.suffix == ".json":
            try:
                data = json.loads(text) or {}
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InputError(f"JSON syntax error: {exc}", source=str(path)) from None
        else:
            data = _load_yaml(text, path) or {}
        return _env_mapping(data, str(path))
    env: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        name, eq, value = line.partition("=")
        if not eq or not name.strip().isidentifier():
            raise InputError(f"line {lineno}: expected VAR=value", source=str(path))
        env[name.strip()] = _env_value(value, lineno, str(path))
    return env


def _env_value(value: str, lineno: int, source: str) -> str:
    """One ``VAR=value`` line's value: a quoted value as the shell reads it; an
    unquoted JSON object or list (``SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS={"a": 1}``)
    kept exactly; any other unquoted value kept as written, less a trailing
    `` # comment`` (docker's env-file rule)."""
    value = value.strip()
    if value[:1] in "{[":
        try:
            json.loads(value)
            return value
        except (ValueError, RecursionError):
            pass
    if value[:1] in ("'", '"'):
        try:
            parts = shlex.split(value, comments=True)
        except ValueError as exc:
            raise InputError(f"line {lineno}: {exc}", source=source) from None
        return " ".join(parts)
    if " #" in value:
        value = value.split(" #", 1)[0].rstrip()
    return value
