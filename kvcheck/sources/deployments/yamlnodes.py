"""YAML read safely, with the source line of every mapping value and sequence item.

Deployment files are untrusted input in a CI gate, so this reader refuses, before or
while parsing, what would exhaust the machine: a file over ``MAX_FILE_BYTES`` (checked
with ``stat`` before reading), alias "billion laughs" expansions and huge documents
(more than ``MAX_NODES`` nodes once aliases are expanded), and nesting deeper than
``MAX_DEPTH``. Only YAML's safe schema is used (PyYAML ``SafeLoader``: no Python tags).

Documents are composed into nodes (``yaml.compose_all``), then turned into ``LMap``
(a ``dict``) and ``LSeq`` (a ``list``) that remember the 1-based line of each key's value
and of each item; scalars become plain Python values exactly as ``yaml.safe_load`` makes
them (``"8"`` stays a string, ``8`` is an int, ``0.90`` a float, ``true`` a bool).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from kvcheck.errors import InputError

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_NODES = 500_000
MAX_DEPTH = 200
_ANCHOR = re.compile(r"(^|[\s\[{,:?-])&[^\s]")


class LMap(dict):
    """A YAML mapping: ``line`` (1-based, where it starts), ``lines[key]`` (where the
    value of ``key`` starts; for a ``|``/``>`` block scalar, its first content line)."""

    line: int = 0

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int:
        return self.lines.get(key, self.line)


class LSeq(list):
    """A YAML sequence: ``line`` and ``lines[i]`` (1-based line of item ``i``)."""

    line: int = 0

    def __init__(self, *a: Any):
        super().__init__(*a)
        self.lines: list[int] = []

    def line_of(self, i: int) -> int:
        return self.lines[i] if 0 <= i < len(self.lines) else self.line


def _content_line(node: yaml.Node) -> int:
    """1-based line where a node's content starts (block scalars: the line after ``|``)."""
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        line += 1
    return line


_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """SafeLoader (libyaml's when PyYAML has it: same nodes and marks, ~10x faster) used
    only to compose nodes and construct scalars."""


def check_size(path: Path) -> None:
    """Refuse a file over ``MAX_FILE_BYTES`` before reading it (``InputError``, exit 2)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError("file not found", source=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", source=str(path)) from None
    if path.is_dir():
        raise InputError("is a directory, expected a file", source=str(path))
    if size > MAX_FILE_BYTES:
        raise InputError(
            f"file is {size / 1024 / 1024:.0f} MiB, over kvcheck's limit of {MAX_FILE_BYTES // 1024 // 1024} MiB for "
            "a deployment file; refusing to parse it",
            source=str(path),
        )


class Duplicate(NamedTuple):
    """A key written twice in one YAML mapping: ``key`` (as parsed), the 1-based lines of
    its first and of its later occurrence. PyYAML (and so ``yaml.safe_load``) keeps the
    later value; the reader of each format decides what that means
    (``kvcheck.sources.deployments.reader``)."""

    key: Any
    first: int
    again: int


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    def __init__(self, loader: _Loader, source: str):
        self.loader = loader
        self.source = source
        self.count = 0
        self.duplicates: list[Duplicate] = []

    def build(self, node: yaml.Node, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise InputError(
                f"YAML expands to more than {MAX_NODES:,} nodes (aliases included; an alias bomb?); refusing to read "
                "it",
                source=self.source,
            )
        if depth > MAX_DEPTH:
            raise InputError(
                f"YAML nesting deeper than {MAX_DEPTH} levels at line {node.start_mark.line + 1}; refusing to read it",
                source=self.source,
            )
        if isinstance(node, yaml.MappingNode):
            # keys written in this mapping (not merged in with ``<<``, which a written key
            # overrides by design): a key written twice is a duplicate
            written = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
            self.loader.flatten_mapping(node)
            out = LMap()
            out.line = node.start_mark.line + 1
            first: dict[Any, int] = {}
            for knode, vnode in node.value:
                key = self.build(knode, depth + 1)
                if isinstance(key, (dict, list)):
                    key = str(key)
                if id(knode) in written:
                    at = knode.start_mark.line + 1
                    try:
                        if key in first:
                            self.duplicates.append(Duplicate(key, first[key], at))
                        else:
                            first[key] = at
                    except TypeError:  # an unhashable key is refused below, as PyYAML refuses it
                        pass
                out[key] = self.build(vnode, depth + 1)
                out.lines[key] = _content_line(vnode)
            return out
        if isinstance(node, yaml.SequenceNode):
            seq = LSeq()
            seq.line = node.start_mark.line + 1
            for item in node.value:
                seq.append(self.build(item, depth + 1))
                seq.lines.append(_content_line(item))
            return seq
        if node.tag == "tag:yaml.org,2002:str":
            return node.value  # the common case, without the constructor's bookkeeping
        return self.loader.construct_object(node, deep=True)


_FLOW_CHARS = re.compile(r"[\[\]{}\"'#\n]")


def _flow_depth(text: str) -> tuple[int, int]:
    """Deepest ``[``/``{`` nesting outside quotes and comments, and the line it is on
    (a cheap scan over the special characters only: PyYAML's scanner is quadratic in
    flow depth, so a deep file is refused before it is parsed)."""
    depth = best = 0
    best_line = line = 1
    quote = ""
    comment = False
    for m in _FLOW_CHARS.finditer(text):
        c = m.group(0)
        prev = text[m.start() - 1] if m.start() else "\n"
        if c == "\n":
            line += 1
            comment = False
        elif comment:
            continue
        elif quote:
            if c == quote:
                quote = ""
        elif c in "\"'" and prev in " \t\n[{,:":
            quote = c
        elif c == "#" and prev in " \t\n":
            comment = True
        elif c in "[{":
            depth += 1
            if depth > best:
                best, best_line = depth, line
        elif c in "]}":
            depth = max(0, depth - 1)
    return best, best_line


def _expanded_size(root: yaml.Node, source: str) -> int:
    """Nodes in the document once every alias is expanded, computed on the node graph
    (each distinct node once), so an alias bomb is refused before it is walked."""
    memo: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    active: set[int] = set()
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if nid in memo:
            continue
        if isinstance(node, yaml.ScalarNode):
            memo[nid] = 1
            continue
        children = [x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode) else list(node.value)
        if done:
            active.discard(nid)
            total = 1 + sum(memo[id(c)] for c in children)
            memo[nid] = min(total, MAX_NODES + 1)
            continue
        if nid in active:
            raise InputError("YAML holds a recursive alias; refusing to read it", source=source)
        active.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in memo)
    return memo[id(root)]


_QUOTED = re.compile(r"'((?:[^'\\]|\\.){0,200})'")
_CHAR_NAMES = {"\\t": "a tab", " ": "a space", "\\x00": "a NUL byte"}


def syntax_error(exc: yaml.YAMLError, source: str) -> InputError:
    """A PyYAML error -> one-line ``InputError`` naming the file, line and column and
    PyYAML's kind of problem. What PyYAML quotes of the input (a character, an alias or
    tag name) is shown only under ``kvcheck.sources.quoting``'s rule; PyYAML's context
    snippet (the offending line) never is."""
    from kvcheck.sources.quoting import quoted

    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or type(exc).__name__
    problem = _QUOTED.sub(lambda m: _CHAR_NAMES.get(m.group(1)) or quoted(m.group(1)), str(problem).splitlines()[0])
    return InputError(f"YAML syntax error{where}: {problem}", source=source)


def load_documents(text: str, source: str, duplicates: list[Duplicate] | None = None) -> list[Any]:
    """Every document of a YAML stream as ``LMap``/``LSeq``/scalars (empty ones dropped).
    A key written twice in one mapping keeps its later value, as ``yaml.safe_load`` does;
    each such key is appended to ``duplicates`` when given (``Duplicate``).

    Raises ``InputError`` (exit 2) on a syntax error (with its line), on alias bombs,
    on too many nodes and on too deep nesting."""
    # Composing costs memory per node before any count can run (libyaml builds a whole
    # document): bound the nodes from the text first. Every node but the first needs a
    # line break, a ", " in a flow collection, or a "- "/": " on its line. (Counted
    # before the flow-depth scan, which walks the text in Python.)
    estimate = text.count("\n") + text.count(",")
    if estimate > 2 * MAX_NODES:
        raise InputError(
            f"YAML holds about {estimate:,} items, more than kvcheck reads in one deployment ({MAX_NODES:,} nodes); "
            "refusing to parse it",
            source=source,
        )
    depth, at = _flow_depth(text) if text.count("[") + text.count("{") > MAX_DEPTH else (0, 0)
    if depth > MAX_DEPTH:
        raise InputError(
            f"YAML nesting deeper than {MAX_DEPTH} levels at line {at}; refusing to read it", source=source
        )
    has_anchors = _ANCHOR.search(text) is not None
    import gc

    gc_was_on = gc.isenabled()
    gc.disable()  # many small objects, no cycles: the cyclic collector only costs time
    loader = _Loader(text)
    docs: list[Any] = []
    builder = _Builder(loader, source)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if has_anchors and _expanded_size(node, source) > MAX_NODES:
                raise InputError(
                    f"YAML expands to more than {MAX_NODES:,} nodes (aliases included; an alias bomb?); refusing to "
                    "read it",
                    source=source,
                )
            docs.append(builder.build(node))
        if duplicates is not None:
            duplicates.extend(builder.duplicates)
    except yaml.YAMLError as exc:
        raise syntax_error(exc, source) from None
    except RecursionError:
        raise InputError("YAML nesting too deep; refusing to read it", source=source) from None
    finally:
        loader.dispose()
        if gc_was_on:
            gc.enable()
    return [d for d in docs if d is not None]


def walk(obj: Any) -> Iterator[Any]:
    """Every mapping and sequence inside ``obj``, depth first (``obj`` included)."""
    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            yield cur
            stack.extend(v for v in cur.values() if isinstance(v, (dict, list)))
        elif isinstance(cur, list):
            yield cur
            stack.extend(v for v in cur if isinstance(v, (dict, list)))


_EMPTY: Any = object()


def sub_map(obj: Any, key: str, default: Any = _EMPTY) -> Any:
    """``obj[key]`` when ``obj`` is a mapping that holds a mapping there (the same object:
    an ``LMap`` with its line numbers), else ``default`` (a new empty dict when not given).
    YAML subtrees stay ``Any``: an ``LMap`` or a plain dict, read with ``isinstance``."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(value, dict):
        return value
    return {} if default is _EMPTY else default
