"""Flag value conversion: argparse's ``_get_value`` / ``_check_value`` with SGLang's
``type=`` callables (``human_readable_int``, the CUDA-graph parsers, JSON lists, nullable
strings), restated for ``kvcheck.sglang.flags.FlagTable``. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvcheck.errors import ArgparseRefusal, InputError
from kvcheck.release.manifest import NEWEST as DEFAULT_VERSION

if TYPE_CHECKING:
    from kvcheck.sglang.flags import Flag

# argparse names a failed ``type=`` call by the callable's __name__.
_TYPE_FUNC_NAME = {
    "str": "str",
    "int": "int",
    "float": "float",
    "json": "loads",
    "json_list": "json_list_type",
    "human_int": "human_readable_int",
    "nullable_str": "nullable_str",
    "cuda_graph_config": "parse_cuda_graph_config_arg",
    "cuda_graph_backend": "parse_cuda_graph_backend_arg",
}


class _TypeError(Exception):
    """argparse.ArgumentTypeError stand-in: its text is the whole message."""


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _expected(nargs: Any) -> str:
    return "expected at least one argument" if nargs == "+" else "expected one argument"


def _arg_error(f: Flag, msg: str, source: str | None) -> InputError:
    return InputError(f"argument {f.display}: {msg}", source=source, field=f.dest)


def _config_hint(f: Flag, version: str = DEFAULT_VERSION) -> str:
    if f.action == "boolean_optional":
        return f" (SGLang {version} takes --{f.name}/--no-{f.name} only on the command line)"
    if f.deprecated:
        return f" (deprecated in SGLang {version}; use {f.deprecated})"
    return f" (SGLang {version} takes it only on the command line)"


def _human_readable_int(value: str) -> int:
    """Re-states ``sglang.srt.utils.common.human_readable_int``."""
    from decimal import Decimal

    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        if suffix in iec:
            if "." in number:
                raise _TypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise _TypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


_CUDA_GRAPH_PHASES = ("decode", "prefill")


def _cuda_graph_backend(raw: str) -> str:
    if raw == "tc_piecewise":
        raise _TypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def _cuda_graph_config(raw: str) -> dict[str, Any]:
    """The JSON-shape part of ``parse_cuda_graph_config_arg`` (per-phase key lists are
    not re-stated: SGLang's own parser reports unknown keys inside a phase)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _TypeError(f"--cuda-graph-config must be JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise _TypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
    for phase, settings in parsed.items():
        if str(phase) not in _CUDA_GRAPH_PHASES:
            raise _TypeError(f"--cuda-graph-config: unknown phase '{phase}', expected one of {_CUDA_GRAPH_PHASES}")
        if not isinstance(settings, dict):
            raise _TypeError(f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(settings).__name__}")
        if "backend" in settings:
            _cuda_graph_backend(settings["backend"])
    return parsed


def _json_list(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise _TypeError(f"Invalid JSON list: {raw}. Please provide a valid JSON list.") from None


def _nullable_str(raw: str) -> str | None:
    return None if not raw or raw == "None" else raw


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "json_list": _json_list,
    "human_int": _human_readable_int,
    "nullable_str": _nullable_str,
    "cuda_graph_config": _cuda_graph_config,
    "cuda_graph_backend": _cuda_graph_backend,
}


def _convert(f: Flag, s: str, source: str | None) -> Any:
    """argparse ``_get_value``: apply the flag's type to one command-line string."""
    fn = _CONVERTERS.get(f.type, str)
    try:
        return fn(s)
    except _TypeError as e:
        raise _arg_error(f, str(e), source) from None
    except (TypeError, ValueError, ArithmeticError):  # decimal.InvalidOperation is one
        name = _TYPE_FUNC_NAME.get(f.type, f.type)
        if f.type in ("json", "json_list"):
            # A JSON value whose quotes a shell or YAML layer stripped
            # ('{temperature:0.7}'): SGLang's argparse (type=json.loads) refuses it and the
            # server exits at start-up (verified: 0.5.23 prepare_server_args prints
            # "invalid loads value" and exits 2), so it is that server's refusal, not bad input.
            msg = f"argument {f.display}: invalid {name} value: {s!r}"
            raise ArgparseRefusal(msg, option=f.display.split("/")[0], source=source, field=f.dest) from None
        raise _arg_error(f, f"invalid {name} value: {s!r}", source) from None


def _check_choice(f: Flag, value: Any, source: str | None) -> None:
    """argparse ``_check_value`` (3.11 wording)."""
    if f.choices is not None and value not in f.choices:
        choices = ", ".join(map(repr, f.choices))
        raise _arg_error(f, f"invalid choice: {value!r} (choose from {choices})", source)


def _typed_scalar(f: Flag, value: Any, source: str | None) -> Any:
    """A typed (JSON) value checked against the flag's type; strings are converted."""
    if isinstance(value, str):
        out = _convert(f, value, source)
    elif f.type in ("int", "human_int"):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise _arg_error(f, f"invalid int value: {value!r}", source)
        out = value
    elif f.type == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _arg_error(f, f"invalid float value: {value!r}", source)
        out = float(value)
    elif f.type in ("json", "json_list", "cuda_graph_config"):
        out = value
    else:
        out = str(value).lower() if isinstance(value, bool) else str(value)
    _check_choice(f, out, source)
    return out


def _lora_paths(f: Flag, values: list[str], source: str | None) -> list[Any]:
    """Re-states ``LoRAPathAction``: strip, JSON objects need lora_name and lora_path."""
    out: list[Any] = []
    for item in values:
        item = item.strip()
        if item.startswith("{") and item.endswith("}"):
            try:
                obj = json.loads(item)
            except json.JSONDecodeError as e:
                raise _arg_error(f, f"invalid JSON {item!r}: {e}", source) from None
            if not (isinstance(obj, dict) and "lora_path" in obj and "lora_name" in obj):
                raise _arg_error(
                    f,
                    f"{item!r} looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys.",
                    source,
                )
            out.append(obj)
        else:
            out.append(item)
    return out
