#!/usr/bin/env python3
"""Generate kvcheck's store of SGLang server flags, one table per release.

For each release the table is read from that release's own parser: the one
``sglang.srt.server_args.prepare_server_args`` builds (``argparse.ArgumentParser()``, or
``ArgumentParser(prog="sglang serve")`` in newer releases, filled by
``ServerArgs.add_cli_args``). Every argparse action is recorded: option strings, dest,
value type tag, nargs, action kind, default, const, choices, required, the replacement a
deprecated flag names, the first sentence of its help, and what ``--config``'s
``ConfigArgumentMerger`` sees of it (``isa``: ``store_true`` when it is an
``argparse._StoreTrueAction``, ``store`` when an ``argparse._StoreAction``). Per release
the generator also names the ``--config`` merger variant (``config_merger``), found by
driving that release's own ``ConfigArgumentMerger`` (built the way that release's
``prepare_server_args`` builds it) on a probe config and comparing with each variant
``kvcheck.sglang.flags`` re-states: a release that matches none stops the generator.

Store (``kvcheck/sglang/flagstore/``): ``entries.jsonl`` holds every distinct flag entry
once (one JSON object a line, numbered by line); ``r/<release>.json`` holds a release's
header and its entries as line numbers in registration order (run-length coded). A
release's table is rebuilt from these alone; ``--check`` regenerates the installed
release and compares the rendered table byte for byte with the stored one.

Usage::

    python scripts/gen_flags.py                        # (re)generate the installed release
    python scripts/gen_flags.py --check                # exit 1 if the installed release's table differs
    python scripts/gen_flags.py --release 0.5.8        # pip download 0.5.8 into /tmp/sgl/0.5.8, generate
    python scripts/gen_flags.py --tree /tmp/sgl        # every release unpacked under /tmp/sgl/<version>/sglang
    python scripts/gen_flags.py --stdout [--release X] # print one release's rendered table

A release other than the installed one runs in a subprocess with ``PYTHONPATH=<its
directory>:tests/stubs`` and this interpreter (torch CPU, transformers... come from it).
Modules an old release imports that this environment lacks (``fastapi``, ``openai``,
``sgl_kernel``...) are stubbed here, only for imports made by ``sglang`` code, and
named in its log (not in the table); this never happens inside kvcheck. This script is
never imported by kvcheck.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STORE = REPO / "kvcheck" / "sglang" / "flagstore"
ENTRIES = STORE / "entries.jsonl"
RELEASE_DIR = STORE / "r"
HELP_MAX = 160
DEFAULT_TREE = Path("/tmp/sgl")

# argparse ``type=`` callables SGLang uses, by qualified name -> our type tag.
# kvcheck.sglang.flags re-states each tag's conversion; an unknown callable stops the
# generator so a new SGLang version is mapped deliberately, not silently as "str".
TYPE_TAGS = {
    "builtins.str": "str",
    "builtins.int": "int",
    "builtins.float": "float",
    "json.loads": "json",
    "sglang.srt.utils.common.json_list_type": "json_list",
    "sglang.srt.utils.json_list_type": "json_list",
    "sglang.srt.utils.common.human_readable_int": "human_int",
    "sglang.srt.utils.common.nullable_str": "nullable_str",
    "sglang.srt.utils.nullable_str": "nullable_str",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": "cuda_graph_config",
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": "cuda_graph_backend",
}

# argparse action classes -> our action tag.
ACTION_TAGS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_HelpAction": "help",
    "BooleanOptionalAction": "boolean_optional",
    "LoRAPathAction": "lora_paths",
    "DeprecatedAction": "deprecated",
    "DeprecatedAliasStoreAction": "deprecated_alias_store",
    "DeprecatedStoreTrueAction": "deprecated_store_true",
    "DeprecatedStoreConstAction": "deprecated_store_const",
}

# Keys left out of an entry when they hold this value (the Flag model's defaults).
OMIT_WHEN = {"aliases": [], "nargs": None, "default": None, "const": None, "choices": None,
             "required": False, "deprecated": None, "isa": None}

BOOL_ACTIONS = {"store_true", "store_false", "boolean_optional", "deprecated_store_true", "deprecated", "deprecated_warn"}


# ---------------------------------------------------------------------------------------
# stubs for modules an old release imports and this environment lacks (generator only)
# ---------------------------------------------------------------------------------------


def _any_schema(cls, source, handler):
    from pydantic_core import core_schema

    return core_schema.any_schema()


class _Anything(type):
    """A class that yields more such classes for any attribute (stub module contents)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls


def _stub_class(name: str) -> type:
    return _Anything(name, (), {
        "__init__": lambda self, *a, **k: None,
        "__call__": lambda self, *a, **k: self,
        "__class_getitem__": classmethod(lambda c, i: c),
        "__get_pydantic_core_schema__": classmethod(_any_schema),
        "__init_subclass__": classmethod(lambda c, **kw: None),
    })


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return "0.0.0"
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub_class(name)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stub a missing third-party top-level module, only when ``sglang`` code imports it."""

    def __init__(self) -> None:
        self.stubbed: set[str] = set()

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top in self.stubbed:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if top == "sglang" or fullname != top or top in sys.stdlib_module_names:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
            frame = frame.f_back
        caller = frame.f_globals.get("__name__", "") if frame is not None else ""
        if not caller.startswith("sglang"):
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(fullname, path) is not None:
                    return None
            except Exception:
                pass
        self.stubbed.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


# ---------------------------------------------------------------------------------------
# one release's table (runs where that release's sglang is importable)
# ---------------------------------------------------------------------------------------


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
    text = " ".join(str(text).split())
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


def _prog(server_args_module) -> str | None:
    """``prog=`` of the parser ``prepare_server_args`` builds; None: argparse's default
    (the script name, ``launch_server.py`` under ``python -m sglang.launch_server``)."""
    import inspect

    src = inspect.getsource(server_args_module.prepare_server_args)
    m = re.search(r"ArgumentParser\(\s*prog\s*=\s*[\"']([^\"']+)[\"']", src)
    return m.group(1) if m else None


def build_parser() -> argparse.ArgumentParser:
    """The parser ``sglang.srt.server_args.prepare_server_args`` builds, unparsed."""
    from sglang.srt import server_args as sa

    prog = _prog(sa)
    parser = argparse.ArgumentParser(prog=prog) if prog else argparse.ArgumentParser()
    sa.ServerArgs.add_cli_args(parser)
    return parser


def _real_merger(parser: argparse.ArgumentParser):
    """That release's ``ConfigArgumentMerger``, built as its ``prepare_server_args`` does
    (``ConfigArgumentMerger(parser)``, or the legacy ``boolean_actions=`` list it computes),
    or None when the release has no ``--config``."""
    import importlib
    import inspect

    from sglang.srt import server_args as sa

    if "--config" not in parser._option_string_actions:
        return None
    mod = None
    for name in ("sglang.srt.utils.server_args_config_parser", "sglang.srt.server_args_config_parser"):
        try:
            mod = importlib.import_module(name)
            break
        except ImportError:
            continue
    if mod is None:
        raise SystemExit("release has --config but no ConfigArgumentMerger")
    src = inspect.getsource(sa.prepare_server_args)
    if re.search(r"ConfigArgumentMerger\(\s*parser", src):
        return mod.ConfigArgumentMerger(parser)
    if "boolean_actions=boolean_actions" in src:
        # Re-run the release's own list comprehension: it reads ``action.action``, which
        # argparse actions do not have, so the list it passes is always empty.
        boolean_actions = [a.dest for a in parser._actions if hasattr(a, "dest") and hasattr(a, "action") and a.action in ["store_true", "store_false"]]
        return mod.ConfigArgumentMerger(boolean_actions=boolean_actions)
    raise SystemExit("cannot tell how this release builds its ConfigArgumentMerger: extend gen_flags.py")


def _probe_config(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Configs that tell the merger variants apart: every long spelling with a bool, plus
    lists, dicts and scalars."""
    keys = [o[2:] for o in parser._option_string_actions if o.startswith("--") and o not in ("--help", "--config")]
    probes = []
    for value in (True, False, ["a", 1], {"k": 1}, 3, None):
        probes.append({k: value for k in keys})
    return probes


def _merger_output(merger, config: dict[str, Any]) -> list[str] | str:
    """``--config`` conversion of one mapping, key by key: argv, or the error text."""
    out: list[str] = []
    for k, v in config.items():
        try:
            out.extend(merger._convert_config_to_args({k: v}))
        except ValueError as e:
            out.append(f"!{e}")
    return out


def _per_key(merger, config):
    out = []
    for k, v in config.items():
        try:
            out.append(merger._convert_config_to_args({k: v}))
        except ValueError as e:
            out.append(f"!{e}")
    return out


def _per_key_ours(table, config):
    from kvcheck.errors import InputError

    out = []
    for k, v in config.items():
        try:
            out.append(table.config_to_argv({k: v}))
        except InputError as e:
            out.append("!" + re.sub(r"^field '[^']*': ", "", str(e)).split(" (")[0])
    return out


def _config_variant(parser, flags: list[dict[str, Any]]) -> str:
    """The ``kvcheck.sglang.flags`` merger variant that behaves as this release's."""
    sys.path.insert(0, str(REPO))
    from kvcheck.errors import InputError
    from kvcheck.sglang.flags import CONFIG_MERGERS, Flag, FlagTable

    merger = _real_merger(parser)
    if merger is None:
        return "none"
    probes = _probe_config(parser)
    real = [_merger_output(merger, p) for p in probes]
    table_flags = [Flag._from_json(d) for d in flags]  # registration order
    notes = []
    for variant in CONFIG_MERGERS:
        if variant == "none":
            continue
        table = FlagTable("probe", table_flags, {"config_merger": variant})
        ours = []
        for p in probes:
            out: list[str] = []
            for k, v in p.items():
                try:
                    out.extend(table.config_to_argv({k: v}))
                except InputError as e:
                    text = re.sub(r"^field '[^']*': ", "", str(e))
                    out.append("!" + text.split(" (")[0])
            ours.append(out)
        if ours == real:
            return variant
        diffs = [(k, a, b) for p, r, o in zip(probes, real, ours) for k, a, b in zip(p, _per_key(merger, p), _per_key_ours(table, p)) if a != b]
        notes.append(f"variant {variant}: {len(diffs)} differences, e.g. {diffs[:3]}")
    print("\n".join(notes), file=sys.stderr)
    raise SystemExit("no kvcheck --config merger variant matches this release's ConfigArgumentMerger: extend kvcheck.sglang.flags")


def generate(expected: str | None = None, stubbed: set[str] | None = None) -> dict[str, Any]:
    """The table of the importable ``sglang``: ``{"sglang_version", "parser", "count",
    "config_merger", "flags": [entry, ...]}`` (entries in registration order).
    Raises ``SystemExit`` when the importable release is not ``expected``."""
    # --sampling-backend gains "token_oracle" only with this env set: pin the default env.
    os.environ.pop("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", None)
    import sglang

    version = getattr(sglang, "__version__", None)
    if version in (None, "0.0.0.dev0"):
        from sglang import version as vmod  # noqa: F401

        version = getattr(vmod, "__version__", version)
    if expected is not None and version != expected:
        raise SystemExit(f"importable sglang is {version}, expected {expected}")

    parser = build_parser()
    namespace = parser.parse_args(["--model-path", "x"])

    flags = []
    seen_dests: set[str] = set()
    for action in parser._actions:
        kind = type(action).__name__
        if kind not in ACTION_TAGS:
            raise SystemExit(f"unmapped argparse action {kind} on {action.option_strings}")
        action_tag = ACTION_TAGS[kind]
        if kind == "DeprecatedAction" and hasattr(action, "error_message") and action.error_message is None:
            action_tag = "deprecated_warn"  # newer DeprecatedAction: warns and goes on
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = (longs or action.option_strings)[0].lstrip("-")
        const = getattr(action, "const_value", action.const)
        if action_tag in ("store_true", "store_false", "deprecated_store_true"):
            const = None  # implied by the action
        isa = "store_true" if isinstance(action, argparse._StoreTrueAction) else "store" if isinstance(action, argparse._StoreAction) else None
        entry = {
            "name": name,
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
            "isa": isa,
        }
        if action_tag == "deprecated":
            # raises: ValueError(help) (older releases) or parser.error(error_message)
            entry["deprecated"] = getattr(action, "error_message", None) or " ".join(str(action.help or "").split())
        if action_tag in ("deprecated_store_true", "deprecated_store_const", "deprecated", "deprecated_warn", "deprecated_alias_store") and entry["deprecated"] is None:
            entry["deprecated"] = ""
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

    from sglang.srt import server_args as sa

    return {
        "sglang_version": version,
        "generated_by": "scripts/gen_flags.py",
        "parser": {"prog": _prog(sa) or "launch_server.py", "allow_abbrev": parser.allow_abbrev,
                   "python": f"{sys.version_info.major}.{sys.version_info.minor}"},
        "count": {
            "actions": len(parser._actions),
            "dests": len({a.dest for a in parser._actions}),
            "option_strings": len(parser._option_string_actions),
        },
        "config_merger": _config_variant(parser, flags),
        "flags": flags,
    }


def render(data: dict[str, Any]) -> str:
    """One release's table as text: header keys, then one flag per line (registration
    order). What ``--check`` compares byte for byte. (Modules stubbed to import an old
    release are logged, not stored: the table is the parser's alone.)"""
    head = {k: v for k, v in sorted(data.items()) if k != "flags"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)},")
    lines.append('  "flags": [')
    body = [f"    {_entry_text(f)}" for f in data["flags"]]
    lines.append(",\n".join(body))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _entry_text(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------
# the store
# ---------------------------------------------------------------------------------------


def _version_key(v: str) -> tuple:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:rc(\d+))?(?:\.post(\d+))?$", v)
    if not m:
        return (999,)
    a, b, c, rc, post = m.groups()
    return (int(a), int(b), int(c), -1 if rc is None else int(rc) - 100, int(post or 0))


def _release_file(version: str) -> Path:
    return RELEASE_DIR / f"{version}.json"


def _runs(ids: list[int]) -> list[list[int]]:
    """[[start, length], ...] for runs of consecutive ids."""
    out: list[list[int]] = []
    for i in ids:
        if out and out[-1][0] + out[-1][1] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return out


def read_store() -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(entry lines, {version: release header with "ids"})."""
    entries = ENTRIES.read_text("utf-8").splitlines() if ENTRIES.exists() else []
    releases = {}
    if RELEASE_DIR.exists():
        for p in RELEASE_DIR.glob("*.json"):
            head = json.loads(p.read_text("utf-8"))
            head["ids"] = [s + k for s, n in head.pop("runs") for k in range(n)]
            releases[head["sglang_version"]] = head
    return entries, releases


def stored(version: str) -> dict[str, Any]:
    """One release's table rebuilt from the store (what ``render`` takes)."""
    entries, releases = read_store()
    head = dict(releases[version])
    ids = head.pop("ids")
    head["flags"] = [json.loads(entries[i]) for i in ids]
    return head


def write_store(tables: dict[str, dict[str, Any]]) -> None:
    """Rewrite the store from ``tables`` ({version: generate() output}): entries numbered
    in order of first use (oldest release first, registration order), unused ones dropped."""
    STORE.mkdir(parents=True, exist_ok=True)
    RELEASE_DIR.mkdir(parents=True, exist_ok=True)
    index: dict[str, int] = {}
    lines: list[str] = []
    for version in sorted(tables, key=_version_key):
        ids = []
        for entry in tables[version]["flags"]:
            text = _entry_text(entry)
            if text not in index:
                index[text] = len(lines)
                lines.append(text)
            ids.append(index[text])
        head = {k: v for k, v in tables[version].items() if k != "flags"}
        head["runs"] = _runs(ids)
        _release_file(version).write_text(json.dumps(head, sort_keys=True, separators=(",", ":")) + "\n", "utf-8")
    for p in RELEASE_DIR.glob("*.json"):
        if p.stem not in tables:
            p.unlink()
    ENTRIES.write_text("\n".join(lines) + "\n", "utf-8")
    (STORE / "index.json").write_text(json.dumps(sorted(tables, key=_version_key)) + "\n", "utf-8")


def merge_into_store(new: dict[str, dict[str, Any]]) -> None:
    entries, releases = read_store()
    tables = {}
    for v, head in releases.items():
        head = dict(head)
        ids = head.pop("ids")
        head["flags"] = [json.loads(entries[i]) for i in ids]
        tables[v] = head
    tables.update(new)
    write_store(tables)


# ---------------------------------------------------------------------------------------
# driving one release in a subprocess
# ---------------------------------------------------------------------------------------


def download(version: str, tree: Path = DEFAULT_TREE) -> Path:
    """``pip download --no-deps sglang==version`` and unpack its ``sglang/`` into
    ``tree/version``; returns that directory."""
    import zipfile

    dest = tree / version
    if (dest / "sglang").is_dir():
        return dest
    wheels = tree / "_wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(wheels)], check=True)
    found = [w for w in wheels.glob(f"sglang-{version}-*.whl")]
    if not found:
        raise SystemExit(f"no wheel for sglang=={version}")
    with zipfile.ZipFile(found[0]) as z:
        z.extractall(dest, [n for n in z.namelist() if n.startswith("sglang/")])
    return dest


def generate_in_subprocess(version: str, path: Path, cache: Path | None = None) -> dict[str, Any]:
    """That release's table, generated in a subprocess; ``cache``: a directory where the
    result is kept per release and generator/flag-module content (reruns skip it)."""
    import hashlib

    modules = ("flags.py", "flag_values.py", "flag_config.py")  # the flag modules the generator's check reads
    key = hashlib.sha256(Path(__file__).read_bytes() + b"".join((REPO / "kvcheck" / "sglang" / m).read_bytes() for m in modules)).hexdigest()[:16]
    cached = cache / f"{version}.{key}.json" if cache is not None else None
    if cached is not None and cached.exists():
        return json.loads(cached.read_text("utf-8"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(REPO / "tests" / "stubs")])
    env.pop("SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE", None)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--dump", version],
                          env=env, capture_output=True, text=True, cwd=str(path))
    if proc.returncode != 0:
        raise SystemExit(f"sglang {version}: generator failed:\n{proc.stderr[-3000:]}")
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(proc.stdout, "utf-8")
    return json.loads(proc.stdout)


def _dump(version: str) -> int:
    finder = _StubFinder()
    sys.meta_path.append(finder)
    # A stubbed module looks importable to other libraries (transformers probes
    # ``find_spec`` then reads the version): give stubbed names a version.
    from importlib import metadata

    real_version = metadata.version
    metadata.version = lambda name: "0.0.0" if name.split(".")[0] in finder.stubbed else real_version(name)
    # Older releases register model configs that this environment's newer transformers
    # already ships: let the registration through (it does not touch the parser).
    try:
        from transformers.models.auto import auto_factory, configuration_auto

        for cls in (configuration_auto._LazyConfigMapping, auto_factory._LazyAutoMapping):
            original = cls.register
            cls.register = lambda self, key, value, exist_ok=False, _o=original: _o(self, key, value, exist_ok=True)
    except Exception:
        pass
    import warnings

    warnings.simplefilter("ignore")
    import logging

    logging.disable(logging.CRITICAL)
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):  # some releases print at import
        data = generate(version, finder.stubbed)
    print(f"stubbed for sglang {version}: {sorted(finder.stubbed)}", file=sys.stderr)
    sys.stdout.write(json.dumps(data))
    return 0


def installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare the installed release's table with the store")
    ap.add_argument("--stdout", action="store_true", help="print the rendered table instead of writing")
    ap.add_argument("--release", action="append", default=[], help="release to (download and) generate; repeatable")
    ap.add_argument("--tree", type=Path, help="directory of unpacked releases: <tree>/<version>/sglang")
    ap.add_argument("--dump", metavar="VERSION", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dump:
        return _dump(args.dump)

    if args.check:
        version = installed_version()
        if version is None:
            print("no SGLang installed: nothing to check")
            return 1
        text = render(generate(version))
        try:
            same = render(stored(version)) == text
        except KeyError:
            same = False
        print(f"flag table of SGLang {version} is up to date" if same else f"the stored table of SGLang {version} differs from the installed SGLang: run scripts/gen_flags.py")
        return 0 if same else 1

    new: dict[str, dict[str, Any]] = {}
    if args.tree:
        for d in sorted(args.tree.iterdir(), key=lambda p: _version_key(p.name)):
            if (d / "sglang").is_dir() and _version_key(d.name) != (999,):
                new[d.name] = generate_in_subprocess(d.name, d, args.tree / "_cache")
                print(f"sglang {d.name}: {new[d.name]['count']} merger={new[d.name]['config_merger']}", file=sys.stderr)
    for version in args.release:
        new[version] = generate_in_subprocess(version, download(version))
    if not new:
        version = installed_version()
        if version is None:
            raise SystemExit("no SGLang installed; use --release or --tree")
        new[version] = generate(version)
    if args.stdout:
        for data in new.values():
            sys.stdout.write(render(data))
        return 0
    merge_into_store(new)
    size = sum(p.stat().st_size for p in STORE.rglob("*") if p.is_file())
    print(f"store: {len(list(RELEASE_DIR.glob('*.json')))} releases, {size} bytes ({', '.join(sorted(new, key=_version_key))} written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
