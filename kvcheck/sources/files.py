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
import re
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
# Likewise the SGLang release the side runs (``0.5.8``); --sglang-version wins over it
# (``release-clues-disagree`` says so: kvcheck.sources.release_clues).
VERSION_KEY = "kvcheck-sglang-version"
VERSION_ENV = "kvcheck-sglang-version"

LAUNCHERS = (
    ("python", "-m", "sglang.launch_server"),
    ("python3", "-m", "sglang.launch_server"),
    ("sglang", "serve"),
    ("sglang.launch_server",),
)


def read_bytes_bounded(path: Path | str, *, limit: int | None = None, what: str = "file") -> bytes:
    """The bytes of a regular file, or of stdin for ``-`` (at most ``limit`` bytes either way).

    The file is opened with ``O_NONBLOCK`` (a FIFO does not block the open) and
    ``fstat``-ed before one byte is read: anything but a regular file (a FIFO, a socket,
    ``/dev/zero``, ``/dev/urandom``, a terminal) is refused, and so is a file past
    ``limit`` (default ``kvcheck.sources.limits.MAX_FILE_BYTES``). ``InputError`` (exit 2)
    naming the file otherwise (missing, a directory, unreadable)."""
    import os
    import stat
    import sys

    from kvcheck.sources.limits import MAX_FILE_BYTES

    limit = MAX_FILE_BYTES if limit is None else limit
    name = str(path)
    if name == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise InputError(
                f"stdin holds more than {limit} bytes; kvcheck reads a {what} up to that size", source="<stdin>"
            )
        return data
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError("file not found", source=name) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", source=name) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a directory, expected a file", source=name)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(
                "is not a regular file (a device, FIFO or socket); kvcheck reads regular files only (use '-' for "
                "stdin)",
                source=name,
            )
        if st.st_size > limit:
            raise InputError(
                f"file is {st.st_size} bytes; kvcheck reads a {what} up to {limit} bytes (is this the right file?)",
                source=name,
            )
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise InputError(f"file is larger than {limit} bytes; kvcheck reads a {what} up to that size", source=name)
    return data


def open_regular(path: Path | str):
    """A binary file object for a regular file (a log read line by line), opened as
    ``read_bytes_bounded`` opens it (``O_NONBLOCK``, regular files only); ``-`` is stdin."""
    import os
    import stat
    import sys

    name = str(path)
    if name == "-":
        return sys.stdin.buffer
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(
            "is not a regular file (a directory, device, FIFO or socket); kvcheck reads regular files only (use '-' "
            "for stdin)",
            source=name,
        )
    return os.fdopen(fd, "rb")


def read_text(path: Path) -> str:
    """The file's text (UTF-8); ``InputError`` (exit 2) when it is missing, unreadable,
    not a regular file, or larger than ``kvcheck.sources.limits.MAX_FILE_BYTES``
    (``read_bytes_bounded``; ``-`` reads stdin, with the same cap)."""
    data = read_bytes_bounded(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None


# --------------------------------------------------------------------------------------
# Files named inside inputs: read only under the read root
# --------------------------------------------------------------------------------------

# ``--root DIR`` (kvcheck's command line): the one directory files named inside inputs
# (a ``--config`` in a launch line, a model-path directory) may be read from. None: the
# directory of the input file that names them.
_READ_ROOT: Path | None = None


def set_read_root(root: Path | str | None) -> None:
    """Set (or clear, with None) the process-wide read root (``--root DIR``)."""
    import os

    global _READ_ROOT
    if root is None:
        _READ_ROOT = None
        return
    real = Path(os.path.realpath(os.path.expanduser(str(root))))
    if not real.is_dir():
        raise InputError("is not a directory", source=str(root), field="--root")
    _READ_ROOT = real


def read_root(base: Path | str) -> Path:
    """The directory files named inside an input at ``base`` (its directory) may be read
    from: ``--root`` when given, else ``base`` itself (symlinks resolved)."""
    import os

    return _READ_ROOT if _READ_ROOT is not None else Path(os.path.realpath(str(base) or "."))


def explicit_read_root() -> Path | None:
    """``--root DIR`` when given, else None."""
    return _READ_ROOT


def within_root(path: Path | str, base: Path | str) -> bool:
    """Whether ``path``, with every ``..`` and symlink resolved, lies inside the read
    root for an input whose directory is ``base`` (``read_root``)."""
    import os

    root = read_root(base)
    try:
        real = Path(os.path.realpath(str(path)))
    except (OSError, ValueError):
        return False
    return real == root or root in real.parents


class OutsideRoot(InputError):
    """A file named inside an input lies outside the read root (exit 2 where raised)."""


def read_inner_text(path: Path | str, base: Path | str, *, field: str, source: str, limit: int | None = None) -> str:
    """The text of a file named inside an input (``field``: the key or flag that names it,
    e.g. ``--config``; ``source``: the input) after the read-root check (``within_root``):
    a path that leaves the root by ``..`` or a symlink is refused with ``OutsideRoot``
    naming the field and ``--root``, without one byte read. Then as ``read_text``."""
    import os

    if not within_root(path, base):
        raise OutsideRoot(
            f"{field} names a file outside the directory kvcheck may read ({read_root(base)}); "
            "kvcheck reads files named inside an input only under --root DIR (default: the input file's directory)",
            source=source,
            field=field,
        )
    real = os.path.realpath(str(path))
    return (
        read_text(Path(real))
        if limit is None
        else read_bytes_bounded(real, limit=limit).decode("utf-8-sig", errors="strict")
    )


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
        f"{choice.problem}, and no modeled release's flags read this input ({first}); give the side's release with "
        "--sglang-version",
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
            raise InputError(
                f"--{flag.name} is given twice (as {key!r} and under another spelling)",
                source=source,
                field=f"--{flag.name}",
            )
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
        raise InputError(
            f"a SGLang --config file must hold a mapping of flags, got {type(data).__name__}", source=str(path)
        )
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
        from kvcheck.sources.deployments.yamlnodes import syntax_error

        raise syntax_error(exc, str(path)) from None


def load_json(text: str, source: str, what: str) -> Any:
    """``json.loads(text)``; ``InputError`` (exit 2) naming ``source`` for a syntax error (its
    line and column) or a document nested too deep to be ``what`` (``RecursionError``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=source
        ) from None
    except RecursionError:
        raise InputError(f"JSON nested too deep to be {what}", source=source) from None


def read_json_args(
    path: Path, data: Any | None = None, version: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """A JSON object of args (flag names or dest names as keys)."""
    if data is None:
        data = load_json(read_text(path), str(path), "server args")
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object of server args, got {type(data).__name__}", source=str(path))
    env = _env_mapping(data.pop(ENV_KEY, None), str(path))
    _take_gpu_key(data, env, str(path))
    choice = release_choice(_take_version_key(data, env, str(path)), version)
    return parse_for_release(lambda v: args_from_mapping(data, str(path), v), choice, str(path)), env


_CONTROL = frozenset({"&", "&&", ";", "||", "|", "|&", ";;"})
_REDIRECT = re.compile(r"^(\d*>>?|&>>?|\d*<|\d*>&\d*-?)")


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
    while i < len(tokens) and (
        tokens[i] in ("export", ";", "&&") or ("=" in tokens[i] and not tokens[i].startswith("-"))
    ):
        if "=" in tokens[i]:
            name, _, value = tokens[i].partition("=")
            env[name] = value
        i += 1
    rest = tokens[i:]
    # the command ends at a shell control operator or redirection (``... --port 30000 &``,
    # ``> prefill.log 2>&1``, ``; wait``), as the -f script reader ends it
    for k, t in enumerate(rest):
        if t in _CONTROL or _REDIRECT.match(t):
            rest = rest[:k]
            break
    for launcher in LAUNCHERS:
        n = len(launcher)
        if tuple(t.rsplit("/", 1)[-1] for t in rest[:n]) == launcher:
            return rest[n:], env
    if rest and rest[0].startswith("-"):
        return rest, env
    from kvcheck.sources.quoting import shown_tokens

    # the words found are quoted only under kvcheck.sources.quoting's rule: a file that
    # is no launch command (/etc/passwd) is never shown
    got = f"'{shown_tokens(rest[:3])}'" if rest else "nothing"
    raise InputError(
        "not a SGLang launch command: expected '[VAR=value ...] python -m sglang.launch_server --flag ...' (or "
        f"'sglang serve ...'), found {got}",
        source=source,
    )


def read_command_line(
    path: Path, text: str | None = None, version: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
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
        cfg_path = inner_path(cfg, path.parent)
        config = _load_inner_yaml(cfg_path, path.parent, source=str(path))
        env = {**_env_mapping(config.pop(ENV_KEY, None), str(cfg_path)), **env}
        _take_gpu_key(config, env, str(cfg_path))
        _take_version_key(config, env, str(cfg_path))
    choice = release_choice(env.get(VERSION_ENV), version)

    def parse(v: str) -> dict[str, Any]:
        table = FlagTable.load(v)
        if config:
            check_inner_config(table, config, str(cfg_path))
        try:
            return table.parse_argv(argv, str(path), config=config)
        except ArgparseRefusal:
            raise
        except InputError as exc:
            raise mask_inner_values(exc, config) from None

    args = parse_for_release(parse, choice, str(path))
    args.pop("config", None)
    return args, env


def inner_path(name: str, base: Path) -> Path:
    """A path named inside an input at directory ``base``: as written when absolute, else
    beside the input (then as written, relative to the working directory)."""
    p = Path(name)
    if p.is_absolute():
        return p
    beside = base / p
    return beside if beside.exists() or not p.exists() else p


def _load_inner_yaml(cfg_path: Path, base: Path, *, source: str) -> dict[str, Any]:
    """A ``--config`` YAML named inside the input at ``source``: read under the read
    root (``read_inner_text``), parsed with limits; never echoed (a refusal names the
    file, not its content)."""
    text = read_inner_text(cfg_path, base, field="--config", source=source)
    config = _load_yaml(text, cfg_path) or {}
    if not isinstance(config, dict):
        raise InputError("a SGLang --config file must hold a mapping of flags", source=str(cfg_path))
    return config


def check_inner_config(table: FlagTable, config: dict[str, Any], source: str) -> None:
    """Each key of a ``--config`` file named inside an input, on its own, read by SGLang's
    parser; a refusal names the key only, never the value (the file may be one kvcheck
    was not meant to show: it is the input's choice, not the user's). An ambiguous
    abbreviation (``ArgparseRefusal``) is the server's own start-up refusal and is kept."""

    from kvcheck.sources.quoting import has_arg_shape

    for key, value in config.items():
        try:
            table.parse_config({key: value}, source)
        except ArgparseRefusal:
            raise
        except InputError:
            if has_arg_shape(key):
                what, field = f"key {key!r}", key
            else:  # not a flag name at all: the key may be the file's content (a shadow line)
                what, field = "a key that is not a flag name", None
            raise InputError(
                f"{what} is refused by SGLang's parser (the file's content is not shown: it is named inside the input)",
                source=source,
                field=field,
            ) from None


def inner_config_problem(table: FlagTable, config: dict[str, Any], source: str) -> str | None:
    """``check_inner_config`` as a message (None when every key reads), for readers that
    record a problem instead of raising."""
    try:
        check_inner_config(table, config, source)
    except ArgparseRefusal as exc:
        return str(exc)
    except InputError as exc:
        return str(exc).split(": ", 1)[-1] if exc.source else str(exc)
    return None


def mask_inner_values(exc: InputError, config: dict[str, Any] | None) -> InputError:
    """``exc`` with every value of ``config`` (a file named inside an input) replaced by
    ``<value from --config>`` in its message."""
    from kvcheck.sources.redact import leaf_strings

    text = str(exc)
    values = sorted({v for v in leaf_strings(config or {}) if len(v) >= 2}, key=len, reverse=True)
    for v in values:
        text = text.replace(v, "<value from --config>")
    out = InputError(text)
    out.source, out.field = exc.source, exc.field
    return out


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
            raise InputError(
                f"{VERSION_KEY} must be an SGLang release written as a string, such as '0.5.8'",
                source=source,
                field=VERSION_KEY,
            )
        env[VERSION_ENV] = value.strip()
        return value.strip()
    return None


# Variables one env file or kvcheck-env mapping may set (a real one sets tens).
MAX_ENV_VARS = 10_000


def _env_mapping(value: Any, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict) and len(value) > MAX_ENV_VARS:
        raise InputError(f"{len(value)} variables; kvcheck reads up to {MAX_ENV_VARS}", source=source, field=ENV_KEY)
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
    if text.count("\n") > MAX_ENV_VARS * 4:
        raise InputError(
            f"{text.count(chr(10))} lines; kvcheck reads env files of up to {MAX_ENV_VARS} variables", source=str(path)
        )
    for lineno, line in enumerate(text.splitlines(), 1):
        if len(env) >= MAX_ENV_VARS:
            raise InputError(
                f"more than {MAX_ENV_VARS} variables; kvcheck reads env files up to that many", source=str(path)
            )
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].strip()
        name, eq, value = line.partition("=")
        if not eq or not name.strip().isidentifier():
            shell = _shell_env(path, text)  # a shell file of variables (a sourced 00_common.sh)
            if shell is not None:
                return shell
            raise InputError(f"line {lineno}: expected VAR=value (or a shell script of assignments)", source=str(path))
        env[name.strip()] = _env_value(value, lineno, str(path))
    return env


def _shell_env(path: Path, text: str) -> dict[str, str] | None:
    """``--env common.sh``: the variables a shell script of assignments leaves set, read
    as the deployment reader reads a sourced file (``if``/``set -e``/``echo`` lines are
    no assignments; ``$(...)`` is never run). Values that still refer to unset variables
    are left out (unset). None when the text sets nothing."""
    from kvcheck.sources.deployments.sourcing import helper_variables

    try:
        defs, _problems = helper_variables(path, text, None, {}, use_os_environ=False)
    except InputError:
        return None
    out = {k: d.value for k, d in defs.items() if d.syntax == "literal"}
    return out or None


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
