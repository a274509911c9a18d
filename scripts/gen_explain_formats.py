#!/usr/bin/env python3
"""The message formats of every SGLang release, for ``kvcheck explain`` (issue 20).

For every release unpacked under ``--tree`` (``<tree>/<version>/sglang/srt/...``, as
``scripts/gen_flags.py --tree`` and ``scripts/gen_message_releases.py`` use), read each
module's syntax tree and collect the text of every message the runtime formats:

- ``raise T(<msg>)`` (the exception type and its message),
- ``assert <cond>, <msg>``,
- ``logger.<level>(<msg>, *args)`` (``debug`` is left out: not shown by default),
- SGLang's own helpers that log or raise their message (``log_info_on_rank0``,
  ``print_warning_once``, ``print_info_once``, ``raise_error_or_warn``) and ``warnings.warn``.

A message is a string constant, an f-string, ``"..." % args``, ``"...".format(...)`` or a
concatenation of those, or a variable the function set to one of them before: its
literal text is kept and each value becomes a field (named
after the expression: ``{self.page_size}`` -> ``page_size``). Messages with little literal
text (under 14 characters or 2 words) are left out: they cannot be told apart from any
other text. Identical formats of different releases are one entry, with the releases
that have it.

Written to ``kvcheck/explain/formats.json.gz`` (gzip, no time stamp: the same tree gives the
same bytes)::

    {"releases": [oldest .. newest], "modules": [...], "kinds": ["raise:ValueError", "assert", "log:error", ...],
     "columns": ["p", "f", "k", "m", "q", "l", "r", "t"],
     "formats": [[p, f, k, m, q, l, r, t], ...]}

one row per format: ``p`` its literals (the fields lie between them), ``f`` the field
names, ``k`` the kind (index into ``kinds``), ``m`` the module (index into ``modules``),
``q`` the function (``Class.function``), ``l`` its line in the newest release that has
it, ``r`` the releases that have it (``[[first, last], ...]``, indices into ``releases``,
inclusive), ``t`` its token (``kvcheck.explain.formats.token``, precomputed).

Usage: python scripts/gen_explain_formats.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "kvcheck" / "explain" / "formats.json.gz"
LEVELS = {"info", "warning", "warn", "error", "exception", "critical", "fatal", "warning_once", "info_once"}
MIN_LITERAL = 14
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[sdifrxXeEgGcoa%]")
_BRACE = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
# directories of sglang/srt that hold no serving path (models' own code is kept: their
# refusals are pasted too)
_SKIP_DIRS = ("/test/", "/tests/", "/benchmark")


def _name(expr: ast.AST) -> str:
    """A field's name: the last identifier of its expression."""
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Call):
        return _name(expr.func)
    if isinstance(expr, ast.Subscript):
        return _name(expr.value)
    return "value"


class _Msg:
    """A message as alternating literals and fields (``parts[0]``, field, ``parts[1]`` ...)."""

    def __init__(self) -> None:
        self.parts: list[str] = [""]
        self.fields: list[str] = []

    def lit(self, s: str) -> None:
        self.parts[-1] += s

    def field(self, name: str) -> None:
        self.fields.append(name)
        self.parts.append("")

    def extend(self, other: _Msg) -> None:
        self.parts[-1] += other.parts[0]
        for f, p in zip(other.fields, other.parts[1:], strict=True):
            self.field(f)
            self.parts[-1] += p


def _from_printf(text: str, args: list[ast.AST]) -> _Msg:
    m = _Msg()
    pos, k = 0, 0
    for mm in _PRINTF.finditer(text):
        m.lit(text[pos : mm.start()])
        if mm.group(0) == "%%":
            m.lit("%")
        else:
            m.field(_name(args[k]) if k < len(args) else "value")
            k += 1
        pos = mm.end()
    m.lit(text[pos:])
    return m


def _from_format(text: str, args: list[ast.AST], kwargs: dict[str, ast.AST]) -> _Msg:
    m = _Msg()
    pos, k = 0, 0
    for mm in _BRACE.finditer(text):
        m.lit(text[pos : mm.start()])
        tok = mm.group(0)
        if tok in ("{{", "}}"):
            m.lit(tok[0])
        else:
            key = tok[1:-1].split(":")[0].split("!")[0]
            if key in kwargs:
                m.field(_name(kwargs[key]))
            elif key.isdigit() and int(key) < len(args):
                m.field(_name(args[int(key)]))
            elif not key and k < len(args):
                m.field(_name(args[k]))
                k += 1
            else:
                m.field(re.sub(r"\W", "_", key) or "value")
        pos = mm.end()
    m.lit(text[pos:])
    return m


def message(expr: ast.AST, printf_args: list[ast.AST] | None = None) -> _Msg | None:
    """The message an expression formats, or None when it is not built from literals."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        if printf_args:
            return _from_printf(expr.value, printf_args)
        m = _Msg()
        m.lit(expr.value)
        return m
    if isinstance(expr, ast.JoinedStr):
        m = _Msg()
        for v in expr.values:
            if isinstance(v, ast.Constant):
                m.lit(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                m.field(_name(v.value))
        return m
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        a, b = message(expr.left), message(expr.right)
        if a is None and b is None:
            return None
        out = _Msg()
        for part in (a, b):
            if part is None:
                out.field("value")
            else:
                out.extend(part)
        return out
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and isinstance(expr.left, ast.Constant):
        if isinstance(expr.left.value, str):
            args = list(expr.right.elts) if isinstance(expr.right, ast.Tuple) else [expr.right]
            return _from_printf(expr.left.value, args)
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "format"
        and isinstance(expr.func.value, ast.Constant)
        and isinstance(expr.func.value.value, str)
    ):
        kw = {k.arg: k.value for k in expr.keywords if k.arg}
        return _from_format(expr.func.value.value, list(expr.args), kw)
    return None


# SGLang's helpers that print or raise their message argument: name -> (kind, the message's
# argument index); srt/utils/common.py (0.5.x): log_info_on_rank0(logger, msg) logs at info on
# rank 0, print_warning_once/print_info_once(msg) log once, raise_error_or_warn(obj, strict,
# counter_name, message) raises ValueError(message) or logs it as a warning; warnings.warn(msg)
# prints a UserWarning
_HELPERS = {
    "log_info_on_rank0": ("log:info", 1),
    "print_warning_once": ("log:warning", 0),
    "print_info_once": ("log:info", 0),
    "raise_error_or_warn": ("raise:ValueError", 3),
    "warn": ("log:warning", 0),
}


def _call_name(f: ast.AST) -> str:
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _is_logger(f: ast.AST) -> bool:
    if not isinstance(f, ast.Attribute) or f.attr not in LEVELS:
        return False
    v = f.value
    name = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
    return "log" in name.lower()


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.found: list[tuple[str, _Msg, str, int]] = []  # kind, message, qualname, line
        # per function: the messages built into a variable first (``msg = f"..."`` then
        # ``logger.error(msg)`` / ``raise T(msg)``)
        self.assigned: list[dict[str, _Msg]] = [{}]

    def _scope(self, node: ast.AST) -> None:
        self.stack.append(node.name)  # type: ignore[attr-defined]
        self.assigned.append({})
        self.generic_visit(node)
        self.assigned.pop()
        self.stack.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            m = message(node.value)
            if m is not None:
                self.assigned[-1][node.targets[0].id] = m
            else:
                self.assigned[-1].pop(node.targets[0].id, None)
        self.generic_visit(node)

    def _message(self, expr: ast.AST, printf_args: list[ast.AST] | None = None) -> _Msg | None:
        """``message``, or the message the function built into the variable ``expr`` names."""
        m = message(expr, printf_args)
        if m is None and isinstance(expr, ast.Name) and not printf_args:
            m = self.assigned[-1].get(expr.id)
        return m

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def _add(self, kind: str, msg: _Msg | None, line: int) -> None:
        if msg is not None:
            self.found.append((kind, msg, ".".join(self.stack), line))

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            t = _call_name(exc.func)
            if t and t[:1].isupper():
                self._add(f"raise:{t}", self._message(exc.args[0]), node.lineno)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add("assert", message(node.msg), node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        t = _call_name(node.func) if node.args else ""
        helper = _HELPERS.get(t)
        if helper is not None and len(node.args) > helper[1]:
            # SGLang's own logging/raising helpers (srt/utils/common.py): the message is the
            # runtime's text as a logger call's is
            self._add(helper[0], self._message(node.args[helper[1]]), node.lineno)
        if t and t[:1].isupper() and t.endswith(("Error", "Exception")):
            # an exception built here and raised elsewhere (``return RuntimeError(f"...")``,
            # ``err = ValueError(...)``; 0.5.23's ``_scheduler_died_error``): its message is
            # the runtime's text all the same (a ``raise T(...)`` is found twice: one entry)
            self._add(f"raise:{t}", self._message(node.args[0]), node.lineno)
        if _is_logger(node.func) and node.args:
            level = node.func.attr.replace("_once", "").replace("warn", "warning").replace("warninging", "warning")  # type: ignore[attr-defined]
            self._add(f"log:{level}", self._message(node.args[0], list(node.args[1:])), node.lineno)
        self.generic_visit(node)


def _clean(msg: _Msg) -> tuple[list[str], list[str]] | None:
    """Literals and fields, with whitespace at both ends trimmed; None for a message with
    too little literal text to be told apart."""
    parts = list(msg.parts)
    parts[0] = parts[0].lstrip()
    parts[-1] = parts[-1].rstrip()
    lit = "".join(parts)
    if len(lit.strip()) < MIN_LITERAL or len(re.findall(r"[A-Za-z]{2,}", lit)) < 2:
        return None
    return parts, list(msg.fields)


def scan_release(root: Path) -> tuple[dict[tuple, tuple[str, str, int]], int]:
    """{(kind, parts, fields): (module, qualname, line)} for one release's ``sglang/``."""
    out: dict[tuple, tuple[str, str, int]] = {}
    files = 0
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).as_posix()
        if any(s in "/" + rel for s in _SKIP_DIRS):
            continue
        try:
            tree = ast.parse(p.read_text("utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        files += 1
        v = _Visitor()
        v.visit(tree)
        mod = rel[:-3].replace("/", ".")
        for kind, msg, qual, line in v.found:
            got = _clean(msg)
            if got is None:
                continue
            parts, fields = got
            out.setdefault((kind, tuple(parts), tuple(fields)), (mod, qual, line))
    return out, files


def _ranges(idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(idx):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def build(tree: Path) -> dict:
    sys.path.insert(0, str(REPO))
    from kvcheck.explain.formats import token
    from kvcheck.release.version import unpacked_releases

    releases = unpacked_releases(tree)
    seen: dict[tuple, dict] = {}
    modules: dict[str, int] = {}
    for ri, v in enumerate(releases):
        found, files = scan_release(tree / v / "sglang")
        print(f"{v}: {files} files, {len(found)} formats", file=sys.stderr)
        for key, (mod, qual, line) in found.items():
            e = seen.get(key)
            if e is None:
                e = seen[key] = {"r": [], "loc": None}
            e["r"].append(ri)
            e["loc"] = (mod, qual, line)  # the newest release's location

    formats = []
    kinds: dict[str, int] = {}
    for (kind, parts, fields), e in seen.items():
        mod, qual, line = e["loc"]
        mi = modules.setdefault(mod, len(modules))
        ki = kinds.setdefault(kind, len(kinds))
        formats.append([list(parts), list(fields), ki, mi, qual, line, _ranges(e["r"]), token(list(parts))])
    formats.sort(key=lambda f: (f[3], f[5], f[0]))
    return {
        "generated_by": "scripts/gen_explain_formats.py",
        "releases": releases,
        "modules": list(modules),
        "kinds": list(kinds),
        "columns": ["p", "f", "k", "m", "q", "l", "r", "t"],
        "formats": formats,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with the stored file instead of writing it")
    args = ap.parse_args(argv)
    data = build(args.tree)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"
    blob = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    if args.check:
        same = args.out.exists() and gzip.decompress(args.out.read_bytes()).decode("utf-8") == text
        print("up to date" if same else f"{args.out} differs", file=sys.stderr)
        return 0 if same else 1
    args.out.write_bytes(blob)
    print(f"{len(data['formats'])} formats of {len(data['releases'])} releases -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
