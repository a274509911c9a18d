#!/usr/bin/env python3
"""The release facts behind ``kvcheck/explain/fixed_bugs.yaml`` (SGLang bugs fixed by a merged change).

For every release unpacked under ``--tree`` (``<tree>/<version>/sglang``, e.g. from
``pip download --no-deps sglang==X`` and unzipping the wheel), and every entry of the index:

- ``fix``: the release's source contains the fix (every ``verify.fix`` marker: a regex in one of
  the files, or in the body of the named function in one of them);
- ``bug``: the release's source contains the code that raises (every ``verify.bug`` marker);
- ``frame``: the entry's innermost frame, ``frame.function`` defined in ``frame.file``.

Written to ``kvcheck/explain/fixed_bugs_facts.json`` as one string of 0/1 per fact, one character
per release (``releases``), so the test can check each entry's ``fixed_in`` (the first release with
the fix after the first one with the bug) and the releases it affects without the wheels. Names
of releases and 0/1 only, no source.

Usage: python scripts/gen_explain_fixed_bugs.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kvcheck.release.version import unpacked_releases  # noqa: E402
INDEX = REPO / "kvcheck" / "explain" / "fixed_bugs.yaml"
OUT = REPO / "kvcheck" / "explain" / "fixed_bugs_facts.json"



class Release:
    """One unpacked release: file texts and function bodies, read on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._text: dict[Path, str] = {}
        self._funcs: dict[Path, dict[str, list[str]]] = {}

    def files(self, globs: list[str]) -> list[Path]:
        out: list[Path] = []
        for g in globs:
            out.extend(sorted(self.root.glob(g)))
        return [p for p in out if p.is_file()]

    def text(self, p: Path) -> str:
        if p not in self._text:
            self._text[p] = p.read_text("utf-8", errors="replace")
        return self._text[p]

    def functions(self, p: Path) -> dict[str, list[str]]:
        if p not in self._funcs:
            src = self.text(p)
            out: dict[str, list[str]] = {}
            try:
                tree = ast.parse(src)
            except SyntaxError:
                tree = ast.Module(body=[], type_ignores=[])
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.setdefault(node.name, []).append(ast.get_source_segment(src, node) or "")
            self._funcs[p] = out
        return self._funcs[p]

    def marker(self, m: dict) -> bool:
        """Whether the release's source has the marker ``m`` (``absent``: the function exists and
        its body does not have the regex)."""
        rx = re.compile(m["regex"], re.M)
        if m.get("absent"):
            names = m["function"] if isinstance(m["function"], list) else [m["function"]]
            bodies = [b for p in self.files(m["files"]) for n in names for b in self.functions(p).get(n, [])]
            return bool(bodies) and not any(rx.search(body) for body in bodies)
        for p in self.files(m["files"]):
            if "function" in m:
                names = m["function"] if isinstance(m["function"], list) else [m["function"]]
                bodies = [b for n in names for b in self.functions(p).get(n, [])]
                if any(rx.search(body) for body in bodies):
                    return True
            elif rx.search(self.text(p)):
                return True
        return False

    def frame(self, fr: dict) -> bool:
        files = fr["file"] if isinstance(fr["file"], list) else [fr["file"]]
        return any(fr["function"] in self.functions(p) for p in self.files(files))


def generate(tree: Path) -> dict:
    entries = yaml.safe_load(INDEX.read_text("utf-8"))
    releases = unpacked_releases(tree)
    facts: dict[str, dict[str, str]] = {e["id"]: {"fix": "", "bug": "", "frame": ""} for e in entries}
    for v in releases:
        rel = Release(tree / v / "sglang")
        for e in entries:
            f = facts[e["id"]]
            f["fix"] += "1" if all(rel.marker(m) for m in e["verify"]["fix"]) else "0"
            f["bug"] += "1" if all(rel.marker(m) for m in e["verify"]["bug"]) else "0"
            f["frame"] += "1" if "frame" in e and rel.frame(e["frame"]) else "0"
        print(f"read {v}", file=sys.stderr)
    for e in entries:
        f = facts[e["id"]]
        affected = [releases[i] for i in range(len(releases)) if f["bug"][i] == "1" and f["fix"][i] == "0"]
        # the fixing release: the first with the fix after the first release with the bug
        start = releases.index(affected[0]) if affected else 0
        first = next((releases[i] for i, c in enumerate(f["fix"]) if c == "1" and i > start), None)
        if not affected:
            first = next((releases[i] for i, c in enumerate(f["fix"]) if c == "1"), None)
        span = f"{affected[0]} .. {affected[-1]} ({len(affected)})" if affected else "no release"
        flag = "" if first == e["fixed_in"] else f"   <-- index says {e['fixed_in']}"
        print(f"{e['id']}: first with the fix {first}; affected {span}{flag}", file=sys.stderr)
    return {"generated_by": "scripts/gen_explain_fixed_bugs.py", "releases": releases, "entries": facts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path("/tmp/sgl"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = json.dumps(generate(args.tree), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text("utf-8") == text
        print("up to date" if same else f"{OUT} differs")
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
