#!/usr/bin/env python3
"""In which SGLang releases each function on a PD traceback's path changed.

For every release unpacked under ``--tree`` (``<tree>/<version>/sglang``) from 0.5.5 on (the
releases ``release_index.json`` covers), and every file a PD traceback runs through
(``srt/disaggregation/**``, ``srt/managers/**``, ``srt/mem_cache/**``, ``srt/speculative/**``,
``srt/model_executor/**``, ``srt/layers/attention/**``, ``srt/entrypoints/*.py``, server args; the
files of ``gen_explain_line_digests.py``), each function's body is reduced to a digest
of its syntax tree (``ast.dump`` without positions, its docstring left out: a reformatting or a
comment is not a change). Only the releases where a function's digest differs from the previous
release are stored: per file, per function name, ``[first, last, [changed...]]`` as indices into
``releases`` (first/last: the first and last release whose file defines it; changed: the
releases, after the first, whose body differs from the release before). Functions of the same
name in one file (methods of several classes) are merged: a change of any is a change of the name.

Output: ``kvcheck/explain/func_changes.json.gz`` (indices only, no source text). ``kvcheck explain``
reads it to say whether the function that raised was changed in a release after the log's.

Usage: python scripts/gen_explain_func_changes.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kvcheck.release.version import unpacked_releases  # noqa: E402

FIRST = "0.5.5"  # the oldest release read
OUT = REPO / "kvcheck" / "explain" / "func_changes.json.gz"
# the files of ``gen_explain_line_digests`` (the modules a PD traceback runs through), so a
# traceback's line and its function are read over the same files
from gen_explain_line_digests import FILES  # noqa: E402


def digests(src: str) -> dict[str, str]:
    """Function name -> digest of every definition of that name in the file (joined)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return {}
    parts: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]  # the docstring is not the code
            dump = ast.dump(node.args) + "".join(ast.dump(b) for b in body)
            parts.setdefault(node.name, []).append(hashlib.blake2b(dump.encode(), digest_size=6).hexdigest())
    return {k: "".join(sorted(v)) for k, v in parts.items()}


def generate(tree: Path) -> dict:
    releases = unpacked_releases(tree, FIRST)
    table: dict[str, dict[str, list]] = {}
    prev: dict[tuple[str, str], str] = {}
    for i, v in enumerate(releases):
        root = tree / v / "sglang"
        for p in sorted(root.rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if not FILES.match(rel):
                continue
            for name, dg in digests(p.read_text("utf-8", errors="replace")).items():
                row = table.setdefault(rel, {}).setdefault(name, [i, i, []])
                key = (rel, name)
                if key in prev and prev[key] != dg:
                    row[2].append(i)
                row[1] = i
                prev[key] = dg
        print(f"read {v}", file=sys.stderr)
    return {"generated_by": "scripts/gen_explain_func_changes.py", "releases": releases, "files": table}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path("/tmp/sgl"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = json.dumps(generate(args.tree), separators=(",", ":"), sort_keys=True)
    data = gzip.compress(text.encode(), mtime=0)
    if args.check:
        same = OUT.exists() and gzip.decompress(OUT.read_bytes()).decode() == text
        print("up to date" if same else f"{OUT} differs")
        return 0 if same else 1
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data) // 1024} KiB gzipped, {len(text) // 1024} KiB raw)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
