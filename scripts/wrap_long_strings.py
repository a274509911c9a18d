"""Split the string literals and docstring lines that keep lines of kvcheck/ over the line
length after `ruff format` (ruff never splits a string).

A long one-line string becomes adjacent literals (implicit concatenation) cut at spaces,
never inside an f-string's ``{...}``; a piece of an f-string without a placeholder drops
the ``f``. A long docstring line is broken at a space, same indentation. The module's AST
is compared before and after (docstrings by their words): a file whose code would change
is left as it is and named. Run it on a formatted tree, then `ruff format` again
(`bash scripts/lint.sh --fix` does both).

    python scripts/wrap_long_strings.py [PATH ...]     (default: kvcheck/)
"""

from __future__ import annotations

import ast
import collections
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

LIMIT = 120  # [tool.ruff] line-length
_TRIPLE = re.compile(r"[A-Za-z]*('''|\"\"\")")


def _long_lines(paths: list[str], ruff: str) -> dict[str, set[int]]:
    out = subprocess.run(
        [ruff, "check", "--select", "E501", "--output-format", "json", "--no-cache", "--exit-zero", *paths],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, set[int]] = collections.defaultdict(set)
    for d in json.loads(out):
        found[d["filename"]].add(d["location"]["row"])
    return found


def _pieces(body: str, is_f: bool, first_max: int, rest_max: int) -> list[str]:
    """``body`` cut after spaces into pieces of at most the given lengths (when a space
    allows), outside f-string replacement fields and escapes."""
    pieces: list[str] = []
    cur, depth, i, cut = "", 0, 0, None
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur += body[i : i + 2]
            i += 2
            continue
        if is_f and c in "{}":
            if depth == 0 and body[i : i + 2] in ("{{", "}}"):
                cur += body[i : i + 2]
                i += 2
                continue
            depth += 1 if c == "{" else -1
        cur += c
        i += 1
        if c == " " and depth == 0 and i < len(body) and body[i] != " ":
            cut = len(cur)
        if len(cur) > (rest_max if pieces else first_max) and cut:
            pieces.append(cur[:cut])
            cur, cut = cur[cut:], None
    pieces.append(cur)
    return [p for p in pieces if p]


def _literal(prefix: str, quote: str, piece: str) -> str:
    if "f" in prefix.lower() and "{" not in piece.replace("{{", "").replace("}}", ""):
        prefix = prefix.replace("f", "").replace("F", "")
        piece = piece.replace("{{", "{").replace("}}", "}")
    return f"{prefix}{quote}{piece}{quote}"


def _split_token(tok: str, first_max: int, rest_max: int) -> str | None:
    m = re.match(r"([A-Za-z]*)(['\"])", tok)
    if m is None:
        return None
    prefix, quote = m.group(1), m.group(2)
    room = len(prefix) + 2
    pieces = _pieces(tok[len(prefix) + 1 : -1], "f" in prefix.lower(), first_max - room, rest_max - room)
    return " ".join(_literal(prefix, quote, p) for p in pieces) if len(pieces) > 1 else None


def _docstrings(tree: ast.AST) -> list[ast.Constant]:
    """The module's, classes' and functions' docstrings."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    out.append(first.value)
    return out


def _docstring_rows(tree: ast.AST) -> set[int]:
    return {r for d in _docstrings(tree) for r in range(d.lineno, (d.end_lineno or d.lineno) + 1)}


def _docs_by_words(tree: ast.AST) -> str:
    for d in _docstrings(tree):
        d.value = " ".join(str(d.value).split())
    return ast.dump(tree)


def wrap_file(path: str, rows: set[int]) -> int:
    src = Path(path).read_text()
    lines = src.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []
    docstrings = _docstring_rows(ast.parse(src))
    doc_rows = rows & docstrings
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type != tokenize.STRING or _TRIPLE.match(t.string):
            continue
        if t.start[0] == t.end[0] and t.start[0] in rows:
            line = lines[t.start[0] - 1]
            indent = len(line) - len(line.lstrip())
            new = _split_token(t.string, max(20, LIMIT - t.start[1] - 3), max(40, LIMIT - indent - 10))
            if new is not None:
                edits.append((t.start[0], t.start[1], t.end[1], new))
    for row, a, b, new in sorted(edits, reverse=True):
        lines[row - 1] = lines[row - 1][:a] + new + lines[row - 1][b:]
    n = len(edits)
    for row in sorted(doc_rows, reverse=True):
        text = lines[row - 1].rstrip("\n")
        lead = text[: len(text) - len(text.lstrip())]
        out = []
        while len(text) > LIMIT:
            cut = text.rfind(" ", len(lead) + 20, LIMIT)
            if cut < 0:
                break
            out.append(text[:cut] + "\n")
            text = lead + text[cut + 1 :]
        lines[row - 1 : row] = [*out, text + "\n"]
        n += len(out)
    new_src = "".join(lines)
    if n == 0 or new_src == src:
        return 0
    if _docs_by_words(ast.parse(src)) != _docs_by_words(ast.parse(new_src)):
        print(f"{path}: left as it is (the split would change its code)", file=sys.stderr)
        return 0
    Path(path).write_text(new_src)
    return n


def main(argv: list[str]) -> int:
    paths = argv or ["kvcheck/"]
    ruff = str(Path(sys.executable).parent / "ruff")
    total = sum(wrap_file(f, rows) for f, rows in sorted(_long_lines(paths, ruff).items()))
    print(f"wrap_long_strings: {total} strings/docstring lines split")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
