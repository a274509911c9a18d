"""argparse restated on one release's flag table: a launch command line -> ``{dest: typed value}``.

Python 3.11's ``argparse.ArgumentParser.parse_args`` (``_parse_optional``, ``_get_values``
and each action's ``__call__``) on the parser SGLang builds (``prepare_server_args`` ->
``ServerArgs.add_cli_args``), for ``kvcheck.sglang.flags.FlagTable`` (whose
``parse_argv``, ``_parse_optional`` and ``_apply`` call these): exact options, then
``--opt=value``, then unique prefixes (``allow_abbrev``); nargs lists that stop at the next
option-like token; negative numbers as values; argparse's and SGLang's error texts
(``InputError``; an ambiguous prefix is ``ArgparseRefusal``). Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvcheck.errors import ArgparseRefusal, InputError
from kvcheck.sglang.flag_values import _arg_error, _check_choice, _convert, _copy, _lora_paths

if TYPE_CHECKING:
    from kvcheck.sglang.flags import Flag, FlagTable

_NOTHING = object()  # an action that stores nothing (a warning-only deprecated flag)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def apply_action(table: FlagTable, f: Flag, option_string: str, args: list[str], source: str | None) -> Any:
    """argparse ``_get_values`` + the action's ``__call__`` for one occurrence."""
    a = f.action
    if a in ("store_true", "deprecated_store_true"):
        return True
    if a == "deprecated":
        # a retired flag: SGLang raises (ValueError(help) before 0.5.23's
        # parser.error(error_message)) before any server starts
        raise InputError(
            f"argument {f.display}: SGLang {table.version} refuses this retired flag: "
            f"{f.deprecated or f.help or 'deprecated'}",
            source=source,
            field=f.dest,
        )
    if a == "deprecated_warn":
        return _NOTHING
    if a in ("store_const", "deprecated_store_const") and f.nargs == 0:
        return f.const
    if a == "store_false":
        return False
    if a == "boolean_optional":
        return not option_string.startswith("--no-")
    if a == "help":
        raise InputError(
            f"{option_string}: SGLang prints its help and exits; this starts no server",
            source=source,
            field=f.dest,
        )
    if f.nargs == "?" and not args:
        value = f.const
        if isinstance(value, str):
            value = _convert(f, value, source)
        _check_choice(f, value, source)
    elif f.nargs in ("*", "+") or (f.action == "lora_paths"):
        value = [_convert(f, s, source) for s in args]
        for v in value:
            _check_choice(f, v, source)
    else:
        value = _convert(f, args[0], source)
        _check_choice(f, value, source)
    if a == "deprecated_store_const":
        return f.const
    if a == "lora_paths":
        return _lora_paths(f, value, source)
    return value


def parse_argv(
    table: FlagTable,
    argv: Sequence[str],
    source: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    with_defaults: bool = False,
    check_required: bool = False,
) -> dict[str, Any]:
    """``table.parse_argv(argv, ...)``: the flags of a launch command line -> ``{dest: typed
    value}``. Arguments, result and the errors raised (``InputError`` with argparse's
    message): ``FlagTable.parse_argv``, the public entry."""
    argv = [str(a) for a in argv]
    if config is not None and "--config" in argv and table.config_merger != "none":
        argv = table.merge_config(argv, config, source)
    # classify every token first, as argparse does ('O' optional, 'A' argument)
    kinds: list[tuple[str, Any]] = []
    after_dashdash = False
    for tok in argv:
        if after_dashdash:
            kinds.append(("A", None))
        elif tok == "--":
            after_dashdash = True
            kinds.append(("-", None))
        else:
            opt = parse_optional(table, tok, source)
            kinds.append(("A", None) if opt is None else ("O", opt))

    result: dict[str, Any] = {}
    seen: set[str] = set()
    extras: list[str] = []
    i = 0
    while i < len(argv):
        kind, opt = kinds[i]
        if kind == "-":
            i += 1
            continue
        if kind == "A":
            extras.append(argv[i])
            i += 1
            continue
        f, option_string, explicit = opt
        if f is None:
            extras.append(argv[i])
            i += 1
            continue
        if explicit is not None:
            if not f.takes_value:
                raise _arg_error(f, f"ignored explicit argument {explicit!r}", source)
            args = [explicit]
            i += 1
        else:
            j = i + 1
            while j < len(argv) and kinds[j][0] == "A":
                j += 1
            avail = argv[i + 1 : j]
            if not f.takes_value:
                n = 0
            elif f.nargs is None:
                if not avail:
                    raise _arg_error(f, "expected one argument", source)
                n = 1
            elif f.nargs == "?":
                n = min(1, len(avail))
            elif f.nargs == "*":
                n = len(avail)
            elif f.nargs == "+":
                if not avail:
                    raise _arg_error(f, "expected at least one argument", source)
                n = len(avail)
            elif isinstance(f.nargs, int):
                if len(avail) < f.nargs:
                    raise _arg_error(f, f"expected {f.nargs} arguments", source)
                n = f.nargs
            else:  # pragma: no cover - not used by SGLang 0.5.23
                raise InputError(f"unsupported nargs {f.nargs!r} for {f.display}", source=source)
            args = avail[:n]
            i = i + 1 + n
        value = apply_action(table, f, option_string, args, source)
        if value is _NOTHING:
            pass  # a warning only: nothing stored
        elif f.action == "append":
            result[f.dest] = list(result.get(f.dest) or _copy(f.default) or []) + [value]
        else:
            result[f.dest] = value
        seen.add(f.dest)
    if check_required:
        missing = [f.display for f in table._ordered if f.required and f.dest not in seen]
        if missing:
            raise InputError("the following arguments are required: " + ", ".join(missing), source=source)
    if extras:
        raise table.unrecognized(extras, source=source)
    if with_defaults:
        merged = table.defaults()
        merged.update(result)
        return merged
    return result


def parse_optional(table: FlagTable, tok: str, source: str | None) -> tuple[Flag | None, str, str | None] | None:
    """argparse ``_parse_optional``: None for a positional, else (flag|None, option, explicit)."""
    if not tok or tok[0] != "-":
        return None
    if tok in table._by_option:
        return table._by_option[tok], tok, None
    if len(tok) == 1:
        return None
    explicit: str | None
    if "=" in tok:
        head, explicit = tok.split("=", 1)
        if head in table._by_option:
            return table._by_option[head], head, explicit
    if tok[1] == "-":
        head, explicit = tok.split("=", 1) if "=" in tok else (tok, None)
        matches = [(o, f) for o, f in table._by_option.items() if o.startswith(head)]
    else:
        # single-dash: "-hX" is -h with explicit "X"; else prefixes of "-..." options
        head, explicit = tok, None
        matches = []
        for o, f in table._by_option.items():
            if o == tok[:2]:
                matches.append((o, f))
                explicit = tok[2:]
            elif o.startswith(tok):
                matches.append((o, f))
    if len(matches) > 1:
        # argparse's own error: the server exits at start-up (ArgparseRefusal, exit 1
        # in preflight; any other reader treats it as bad input).
        raise ArgparseRefusal(
            f"ambiguous option: {tok} could match " + ", ".join(o for o, _ in matches),
            option=tok,
            source=source,
            field=tok,
        )
    if len(matches) == 1:
        o, f = matches[0]
        return f, o, explicit
    if _NEGATIVE_NUMBER.match(tok):
        return None  # SGLang has no negative-number-like options
    if " " in tok:
        return None
    return None, tok, None
