#!/usr/bin/env python3
"""The per-release facts ``kvcheck explain`` reads a log's SGLang release from.

For every release unpacked under ``--tree`` (``<tree>/<version>/sglang``) from 0.5.5 on,
record from that release's own source:

- ``server_args``: the field names of ``ServerArgs`` (a ``server_args=ServerArgs(...)``
  dump lists them; a field only some releases have narrows the release);
- ``functions``: for the files a PD traceback runs through (``srt/disaggregation/**``, the
  scheduler, tokenizer manager, HTTP server, server args, memory pools), each function's
  (qualified name -> [first line, last line]); a traceback frame ``File ".../sglang/srt/X.py",
  line N, in f`` fits the releases where ``f`` spans line N of ``X.py``.

Identical per-file tables are stored once (``tables``) and referenced by index. Output:
``kvcheck/explain/release_index.json``. Names and line numbers only, no source text.

Usage: python scripts/gen_explain_release_index.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kvcheck.release.version import unpacked_releases  # noqa: E402

FIRST = "0.5.5"  # the oldest release read
OUT = REPO / "kvcheck" / "explain" / "release_index.json"
FILES = re.compile(
    r"^srt/(?:disaggregation/.+|managers/(?:scheduler\w*|tokenizer_manager|data_parallel_controller|tp_worker\w*)|"
    r"entrypoints/(?:http_server|engine)|server_args|mem_cache/(?:allocator|memory_pool|radix_cache|hiradix_cache)|"
    r"model_executor/model_runner|layers/rotary_embedding(?:/\w+)?)\.py$"
)



def functions(tree: ast.AST) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.setdefault(child.name, [])
                out[child.name].append([child.lineno, child.end_lineno or child.lineno])
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
    walk(tree, "")
    return {k: sorted(v) for k, v in out.items()}


def server_args_fields(tree: ast.AST) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            return [n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    return []


_FIELDS_SNIPPET = (
    "import dataclasses, json\n"
    "from sglang.srt.server_args import ServerArgs\n"
    "f = getattr(ServerArgs, '__struct_fields__', None)\n"
    "print(json.dumps(list(f) if f else [x.name for x in dataclasses.fields(ServerArgs)]))\n"
)


def runtime_fields(tree: Path, v: str, deps: Path, stubs: Path) -> list[str]:
    """``ServerArgs`` fields by importing that release (0.5.20+ composes them from arg
    groups at import time, so the class body has none): a subprocess with the release,
    its dependencies and the test stubs on the path."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in (tree / v, deps, stubs)))
    proc = subprocess.run([sys.executable, "-c", _FIELDS_SNIPPET], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"{v}: ServerArgs import failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return []
    return json.loads(proc.stdout.strip().splitlines()[-1])


def generate(tree: Path, deps: Path | None = None, stubs: Path | None = None) -> dict:
    releases = unpacked_releases(tree, FIRST)
    tables: list[dict] = []
    seen: dict[str, int] = {}
    out_rel: dict[str, dict] = {}
    all_fields: dict[str, list[str]] = {}
    for v in releases:
        root = tree / v / "sglang"
        files: dict[str, int] = {}
        for p in sorted(root.rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if not FILES.match(rel):
                continue
            try:
                t = ast.parse(p.read_text("utf-8", errors="replace"))
            except SyntaxError:
                continue
            table = functions(t)
            key = json.dumps(table, sort_keys=True)
            if key not in seen:
                seen[key] = len(tables)
                tables.append(table)
            files[rel] = seen[key]
            if rel == "srt/server_args.py":
                all_fields[v] = server_args_fields(t)
        if len(all_fields.get(v, [])) < 50 and deps is not None:
            all_fields[v] = runtime_fields(tree, v, deps, stubs or REPO / "tests" / "stubs")
        out_rel[v] = files
        print(f"indexed {v}: {len(files)} files", file=sys.stderr)
    return {"generated_by": "scripts/gen_explain_release_index.py", "releases": releases, "server_args": all_fields, "files": out_rel, "tables": tables}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path("/tmp/sgl"))
    ap.add_argument("--deps", type=Path, default=REPO / ".venv" / "sglang-releases" / "_deps", help="the releases' dependencies (for importing ServerArgs of 0.5.20+)")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = json.dumps(generate(args.tree, args.deps if args.deps.is_dir() else None), separators=(",", ":"), sort_keys=True) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text("utf-8") == text
        print("up to date" if same else f"{OUT} differs")
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
