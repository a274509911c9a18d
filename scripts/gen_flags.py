#!/usr/bin/env python3
"""Generate ``kvcheck/sglang/v0_5_23/flags.json`` from the installed SGLang.

Builds the very parser ``python -m sglang.launch_server`` and ``sglang serve`` use
(``sglang.srt.server_args.prepare_server_args``: ``argparse.ArgumentParser(prog="sglang
serve")`` filled by ``ServerArgs.add_cli_args``) and records every argparse action: its
option strings, dest, value type, nargs, action kind, default, choices and the first
sentence of its help. (How SGLang's ``--config`` YAML loader treats a key is derived
from these fields at runtime by ``kvcheck.sglang.flags``.) It checks that each dest's parsed default (``parser.parse_args(["--model-path", "x"])``)
equals the default recorded on its first flag, which is what kvcheck's ``defaults()`` reads.

Usage::

    python scripts/gen_flags.py            # write the file
    python scripts/gen_flags.py --check    # exit 1 if the committed file differs
    python scripts/gen_flags.py --stdout   # print the JSON instead

Needs ``sglang`` importable (e.g. ``pip install --no-deps sglang==0.5.23`` plus torch
CPU and its small import dependencies). This script is never imported by kvcheck.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

EXPECTED_VERSION = "0.5.23"
OUT = Path(__file__).resolve().parent.parent / "kvcheck" / "sglang" / "v0_5_23" / "flags.json"
HELP_MAX = 160

# argparse ``type=`` callables SGLang 0.5.23 uses, by qualified name -> our type tag.
# kvcheck.sglang.flags re-states each tag's conversion; an unknown callable stops the
# generator so a new SGLang version is mapped deliberately, not silently as "str".
TYPE_TAGS = {
    "builtins.str": "str",
    "builtins.int": "int",
    "builtins.float": "float",
    "json.loads": "json",
    "sglang.srt.utils.common.json_list_type": "json_list",
    "sglang.srt.utils.common.human_readable_int": "human_int",
    "sglang.srt.utils.common.nullable_str": "nullable_str",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": "cuda_graph_config",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": "cuda_graph_backend",
}

# argparse action classes -> our action tag.
ACTION_TAGS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_HelpAction": "help",
    "BooleanOptionalAction": "boolean_optional",
    "LoRAPathAction": "lora_paths",
    "DeprecatedStoreTrueAction": "deprecated_store_true",
    "DeprecatedStoreConstAction": "deprecated_store_const",
}

# Keys left out of an entry when they hold this value (the Flag model's defaults).
OMIT_WHEN = {"aliases": [], "nargs": None, "default": None, "const": None, "choices": None,
             "required": False, "deprecated": None}

BOOL_ACTIONS = {"store_true", "store_false", "boolean_optional", "deprecated_store_true"}


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SystemExit(f"non-finite default {value!r}: extend gen_flags.py")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_json_safe(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    raise SystemExit(f"default/choice {value!r} ({type(value).__name__}) is not JSON-safe")


def _first_sentence(text: str | None) -> str | None:
    if text is None or text == argparse.SUPPRESS:
        return None
    text = " ".join(text.split())
    # End at the first ". X" that is not an abbreviation like "e.g. " or "i.e. ".
    for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z`'\"(\[])", text):
        if not re.search(r"\b(?:e\.g|i\.e|etc|vs|approx)\.$", text[: m.start()]):
            text = text[: m.start()]
            break
    if len(text) > HELP_MAX:
        text = text[: HELP_MAX - 3].rstrip() + "..."
    return text


def _type_tag(action: argparse.Action, action_tag: str) -> str:
    if action_tag in BOOL_ACTIONS or action_tag == "help":
        return "bool" if action_tag != "help" else "none"
    t = action.type
    if t is None:
        return "str"  # argparse hands the raw string through
    key = f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', repr(t))}"
    if key not in TYPE_TAGS:
        raise SystemExit(f"unmapped argparse type {key} on {action.option_strings}")
    return TYPE_TAGS[key]


def build_parser() -> argparse.ArgumentParser:
    """The parser ``sglang.srt.server_args.prepare_server_args`` builds, unparsed."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def generate() -> dict[str, Any]:
    # --sampling-backend gains "token_oracle" only with this env set: pin the default env.
    os.environ.pop("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", None)
    import sglang

    version = getattr(sglang, "__version__", None)
    if version != EXPECTED_VERSION:
        raise SystemExit(f"installed sglang is {version}, expected {EXPECTED_VERSION}")

    parser = build_parser()
    namespace = parser.parse_args(["--model-path", "x"])

    flags = []
    seen_dests: set[str] = set()
    for index, action in enumerate(parser._actions):
        kind = type(action).__name__
        if kind not in ACTION_TAGS:
            raise SystemExit(f"unmapped argparse action {kind} on {action.option_strings}")
        action_tag = ACTION_TAGS[kind]
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = (longs or action.option_strings)[0].lstrip("-")
        const = getattr(action, "const_value", action.const)
        if action_tag in ("store_true", "store_false", "deprecated_store_true"):
            const = None  # implied by the action
        entry = {
            "name": name,
            # registration order: argparse lists ambiguous matches and applies
            # shared-dest defaults in this order
            "index": index,
            "option_strings": list(action.option_strings),
            "aliases": [o.lstrip("-") for o in action.option_strings if o.lstrip("-") != name],
            "dest": action.dest,
            "type": _type_tag(action, action_tag),
            "nargs": action.nargs if action_tag not in BOOL_ACTIONS | {"help"} else None,
            "action": action_tag,
            "default": None if action.default == argparse.SUPPRESS else _json_safe(action.default),
            "const": _json_safe(const),
            "choices": None if action.choices is None else _json_safe(list(action.choices))
            if not isinstance(action.choices, (set, frozenset))
            else _json_safe(action.choices),
            "required": bool(action.required),
            "deprecated": getattr(action, "new_flag", None) or None,
            "help": _first_sentence(action.help),
        }
        if action_tag in ("deprecated_store_true", "deprecated_store_const") and entry["deprecated"] is None:
            entry["deprecated"] = ""
        # Compact: leave out what the loader fills in (see kvcheck.sglang.flags.Flag).
        for key, empty in OMIT_WHEN.items():
            if entry[key] == empty and type(entry[key]) is type(empty):
                del entry[key]
        flags.append(entry)
        # defaults() is read from the per-flag defaults (first registration wins, as in
        # argparse): make sure that equals the parsed namespace.
        if action.dest != "help" and action.dest not in seen_dests and action.dest != "model_path":
            seen_dests.add(action.dest)
            if _json_safe(getattr(namespace, action.dest)) != entry.get("default"):
                raise SystemExit(f"namespace default of {action.dest} differs from action default")

    flags.sort(key=lambda f: f["name"])
    return {
        "sglang_version": version,
        "generated_by": "scripts/gen_flags.py",
        "parser": {"prog": "sglang serve", "allow_abbrev": parser.allow_abbrev,
                   "python": f"{sys.version_info.major}.{sys.version_info.minor}"},
        "count": {
            "actions": len(parser._actions),
            "dests": len({a.dest for a in parser._actions}),
            "option_strings": len(parser._option_string_actions),
        },
        "flags": flags,
    }


def render(data: dict[str, Any]) -> str:
    """One flag per line: small diffs, still valid JSON."""
    head = {k: v for k, v in data.items() if k != "flags"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)},")
    lines.append('  "flags": [')
    body = [f"    {json.dumps(f, ensure_ascii=False)}" for f in data["flags"]]
    lines.append(",\n".join(body))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file")
    ap.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = ap.parse_args(argv)
    text = render(generate())
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("flags.json is up to date" if same else f"{OUT} differs from the installed SGLang")
        return 0 if same else 1
    OUT.write_text(text)
    data = json.loads(text)
    print(f"wrote {OUT}: {data['count']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
