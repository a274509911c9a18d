"""A release's ``--config`` YAML, as its ``ConfigArgumentMerger``
(``sglang/srt/utils/server_args_config_parser.py``) turns it into argv, for
``kvcheck.sglang.flags.FlagTable``: which keys it refuses or treats as store_true, how
values become tokens, and where ``prepare_server_args`` finds the file. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvcheck.errors import InputError
from kvcheck.sglang.flag_values import _config_hint

if TYPE_CHECKING:
    from kvcheck.sglang.flags import Flag, FlagTable

# argparse class names, for SGLang's "Unsupported config option" message.
_ACTION_CLASS = {
    "store": "_StoreAction",
    "store_true": "_StoreTrueAction",
    "store_false": "_StoreFalseAction",
    "store_const": "_StoreConstAction",
    "help": "_HelpAction",
    "boolean_optional": "BooleanOptionalAction",
    "lora_paths": "LoRAPathAction",
    "deprecated_store_true": "DeprecatedStoreTrueAction",
    "deprecated_store_const": "DeprecatedStoreConstAction",
    "deprecated": "DeprecatedAction",
    "deprecated_warn": "DeprecatedAction",
    "deprecated_alias_store": "DeprecatedAliasStoreAction",
    "append": "_AppendAction",
}


def config_key_sets(table: FlagTable) -> tuple[frozenset[str], dict[str, Flag]]:
    """(store_true keys, unsupported key -> flag), as ``ConfigArgumentMerger.__init__``
    of this release computes them (see ``CONFIG_MERGERS``)."""
    if table._config_sets is None:
        variant = table.config_merger
        ordered = table._ordered
        special = lambda f: "--config" in f.option_strings or "--help" in f.option_strings or "-h" in f.option_strings  # noqa: E731
        if variant in ("v0.5.3", "v0.5.4", "none"):
            # 0.5.3-0.5.7: prepare_server_args passes boolean_actions computed from
            # ``action.action``, an attribute argparse actions lack: always empty.
            table._config_sets = (frozenset(), {})
        elif variant in ("v0.5.8", "v0.5.14"):
            # ConfigArgumentMerger(parser), keyed by dest (0.5.8-0.5.22)
            store_true = frozenset(f.dest for f in ordered if f.isa == "store_true")
            unsupported: dict[str, Flag] = {
                f.dest: f for f in ordered if f.option_strings and f.isa is None and not special(f)
            }
            table._config_sets = (store_true, unsupported)
        else:
            # 0.5.23: keyed by every long spelling; single-value actions supported

            def keys(f: Flag) -> set[str]:
                return {f.dest} | {o[2:].replace("-", "_") for o in f.option_strings if o.startswith("--")}

            store_true = frozenset(k for f in ordered if f.isa == "store_true" for k in keys(f))
            # isinstance(_StoreTrueAction) or _takes_one_value (isinstance(_StoreAction)
            # or nargs is None); the table keeps nargs None on valueless flags, whose
            # real nargs is 0, hence takes_value.
            supported = {f.name for f in ordered if f.isa is not None or (f.takes_value and f.nargs is None)}
            supported_keys = {k for f in ordered if f.name in supported for k in keys(f)}
            unsupported = {}
            for f in ordered:
                if f.name in supported or special(f) or not f.option_strings:
                    continue
                for k in keys(f):
                    if k not in supported_keys:
                        unsupported[k] = f
            table._config_sets = (store_true, unsupported)
    return table._config_sets


def config_to_argv(table: FlagTable, config: Mapping[str, Any], source: str | None = None) -> list[str]:
    """The argv this release's SGLang makes of a ``--config`` YAML mapping (keys used
    as written).

    Mirrors ``ConfigArgumentMerger._convert_config_to_args`` of the release
    (``CONFIG_MERGERS``). 0.5.23: a key whose underscore form names a flag SGLang will
    not take from a file (``--x/--no-x`` flags, ``--lora-paths``, deprecated booleans
    such as ``--enable-dp-attention``) is refused with SGLang's message; bool -> bare
    ``--key`` (true, on a store_true key) / nothing (false, same) / ``--key
    true|false`` (other keys); list -> ``--key a b`` (empty list: nothing); dict ->
    ``--key <json>`` (0.5.14 on; ``str(dict)`` before); anything else ``--key
    str(value)`` (so YAML null becomes ``None``). 0.5.3: true -> bare ``--key`` for
    every key, no refusals. 0.5.4-0.5.7: ``--key true|false`` for every key (so a
    store_true key then fails in argparse). 0.5.8-0.5.22: refusals and store_true
    keys by dest only. Raises ``InputError``.
    """
    variant = table.config_merger
    if variant == "none":
        raise InputError(
            f"SGLang {table.version} has no --config option (YAML config files arrived in 0.5.3)",
            source=source,
            field="--config",
        )
    store_true, unsupported = config_key_sets(table)
    args: list[str] = []
    for key, value in config.items():
        if not isinstance(key, str):
            raise InputError(
                f"config key {key!r} is not a string (SGLang fails on it with AttributeError)",
                source=source,
                field=str(key),
            )
        key_norm = key.replace("-", "_")
        if key_norm in unsupported:
            cls = _ACTION_CLASS.get(unsupported[key_norm].action, unsupported[key_norm].action)
            raise InputError(
                f"Unsupported config option '{key_norm}' with action '{cls}'"
                + _config_hint(unsupported[key_norm], table.version),
                source=source,
                field=key,
            )
        if isinstance(value, bool):
            if variant == "v0.5.3":
                if value:
                    args.append(f"--{key}")
            elif key_norm in store_true:
                if value:
                    args.append(f"--{key}")
            else:
                args.extend([f"--{key}", str(value).lower()])
        elif isinstance(value, list):
            if value:
                args.append(f"--{key}")
                args.extend(str(item) for item in value)
        elif isinstance(value, dict) and variant in ("v0.5.14", "v0.5.23"):
            args.extend([f"--{key}", json.dumps(value)])
        else:
            args.extend([f"--{key}", str(value)])
    return args


def config_path(argv: Sequence[str], source: str | None = None) -> str | None:
    """The YAML path SGLang would read: the token after a standalone ``--config``.

    Mirrors ``prepare_server_args`` (merges only if ``"--config" in argv``) and
    ``ConfigArgumentMerger._extract_config_file_path``. None when there is no such
    token (``--config=f.yaml`` is accepted by argparse and then ignored by SGLang).
    SGLang also requires a ``.yaml``/``.yml`` suffix, an existing file and a mapping at
    the root; the caller that reads the file checks those. Raises ``InputError`` for
    ``Multiple config files specified! Only one allowed.`` and ``No config file
    specified after --config flag!``.
    """
    idx = [i for i, a in enumerate(argv) if a == "--config"]
    if not idx:
        return None
    if len(idx) > 1:
        raise InputError("Multiple config files specified! Only one allowed.", source=source, field="config")
    if idx[0] == len(argv) - 1:
        raise InputError("No config file specified after --config flag!", source=source, field="config")
    return str(argv[idx[0] + 1])
