#!/usr/bin/env python3
"""Which releases a traceback's pasted source line fits: a one-byte digest of every line of
the SGLang modules a PD traceback runs through, release by release.

A traceback prints, under each frame, the source line it ran. Line numbers alone fit many
releases (a function's span moves little); the line's text fits only the releases whose file
has that text at that line. For every release unpacked under ``--tree``
(``<tree>/<version>/sglang``) from 0.5.1 on and every file ``FILES`` names, each line
(whitespace stripped) is reduced to one byte (the first byte of its blake2b digest): a wrong
release passes the test one time in 256, a right one never fails it. Files are stored as a
chain of versions: the first in full, each later one as copies of the previous version's
ranges and new digests, only where the file changed. The copies are difflib's ``equal``
opcodes over the stripped lines themselves (not their digests), so a copied line is the same
text: ``kvcheck.explain.linedigests.follow`` tracks the line that raised through the later
releases with them (where it stays, and the release whose file no longer has it).

Which files (``FILES``), and the size budget. Every file of SGLang 0.5.1 .. 0.5.23 under
``srt/disaggregation``, ``srt/managers``, ``srt/mem_cache``, ``srt/entrypoints``,
``srt/model_executor``, ``srt/layers/attention``, ``srt/speculative`` and ``server_args.py``
is about 1.0 MB gzipped (measured 2026-12, per folder: layers/attention 249 KB, managers
133 KB, mem_cache 117 KB + storage 35 KB, disaggregation 96 KB, speculative 73 KB,
model_executor 47 KB, server_args 40 KB, entrypoints/*.py 23 KB, entrypoints/openai 36 KB).
Left out: the protocol adapters under ``srt/entrypoints/<folder>/`` (OpenAI, Anthropic,
Ollama: ~40 KB; a request's own error there, not a PD path). The kernel wrappers
(``triton_ops``, ``fla``, ...: ~33 KB) stay: a kernel launch's assert is a frame too. The
budget: this table under 1 MiB gzipped, and under 1.5 MiB with ``func_changes.json.gz``; a
folder added must fit in it (``tests/test_explain_traceback_release.py`` holds both).

Output: ``kvcheck/explain/line_digests.json.gz``:
``{"releases": [...], "files": {path: "[[release index, ops] ...]"}}`` (each file's chain a JSON
string, parsed when a traceback names that file) where ``ops`` is ``"="``
(as the previous stored version) or a list of ``[start, end]`` (copy lines of the previous
version) and hex strings (new lines). ``kvcheck.explain.linedigests`` reads it.

Usage: python scripts/gen_explain_line_digests.py --tree /tmp/sgl [--check]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from kvcheck.release.version import unpacked_releases  # noqa: E402

FIRST = "0.5.1"  # the oldest release read
OUT = REPO / "kvcheck" / "explain" / "line_digests.json.gz"
FILES = re.compile(
    r"^srt/(?:disaggregation|managers|mem_cache|model_executor|layers/attention|speculative)/.+\.py$"
    r"|^srt/entrypoints/[^/]+\.py$|^srt/server_args\.py$"
)


def line_digest(text: str) -> str:
    """Two hex characters: the first byte of blake2b of the stripped line."""
    return hashlib.blake2b(text.strip().encode("utf-8"), digest_size=1).hexdigest()


def wanted(rel: str) -> bool:
    """Whether ``rel`` (``srt/...py``) is in the table."""
    return bool(FILES.match(rel))


def diff_ops(prev: list[str], cur: list[str]) -> list:
    """``cur`` as copies of ``prev``'s line ranges (``[start, end]``, 0-based, end excluded)
    and hex digests of new lines: difflib's opcodes over the stripped lines, run on the part
    between the common head and tail (the same opcodes, in a fraction of the time)."""
    head = 0
    while head < min(len(prev), len(cur)) and prev[head] == cur[head]:
        head += 1
    tail = 0
    while tail < min(len(prev), len(cur)) - head and prev[-1 - tail] == cur[-1 - tail]:
        tail += 1
    ops: list = [[0, head]] if head else []
    sm = difflib.SequenceMatcher(None, prev[head : len(prev) - tail], cur[head : len(cur) - tail])
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            ops.append([head + i1, head + i2])
        elif j2 > j1:
            ops.append("".join(line_digest(x) for x in cur[head + j1 : head + j2]))
    if tail:
        ops.append([len(prev) - tail, len(prev)])
    return ops


def build(tree: Path) -> dict:
    rels = unpacked_releases(tree, FIRST)
    files: dict[str, list] = {}
    prev: dict[str, list[str]] = {}
    for i, v in enumerate(rels):
        base = tree / v / "sglang"
        for path in sorted(base.joinpath("srt").rglob("*.py")):
            rel = path.relative_to(base).as_posix()
            if not wanted(rel):
                continue
            cur = [x.strip() for x in path.read_text(encoding="utf-8", errors="replace").splitlines()]
            p = prev.get(rel)
            if p == cur:
                files[rel].append([i, "="])
                continue
            if p is None:
                ops: list = ["".join(line_digest(x) for x in cur)]
            else:
                ops = diff_ops(p, cur)
            files.setdefault(rel, []).append([i, ops])
            prev[rel] = cur
    # each file's chain as a JSON string of its own: explain parses only the files a traceback
    # names (the whole table is ~2 MB of JSON: 48 ms to parse at once, 13 ms as strings)
    chains = {k: json.dumps(v, separators=(",", ":")) for k, v in files.items()}
    return {"generated_by": "scripts/gen_explain_line_digests.py", "releases": rels, "files": chains}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    a = ap.parse_args()
    data = json.dumps(build(a.tree), separators=(",", ":"), sort_keys=True).encode()
    if a.check:
        old = gzip.decompress(OUT.read_bytes()) if OUT.exists() else b""
        print("up to date" if old == data else "differs")
        return 0 if old == data else 1
    OUT.write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"{OUT}: {len(data)} bytes raw, {OUT.stat().st_size} gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
