"""How well ``kvcheck explain`` reads a traceback's release and the later releases of the line
that raised, measured on frames made from the releases' own source (issue 20).

For every release unpacked under ``--tree`` (0.5.1 on) and every PD-path folder
(``managers``, ``mem_cache``, ``entrypoints/*.py``, ``model_executor``, ``layers/attention``,
``speculative``, ``disaggregation``), ``--per`` files are drawn (seeded) and, in each, one
``raise``/``assert`` line with the function it is in. Two measures:

- release: a one-frame traceback with that line pasted under it goes through
  ``explain_text``; counted: the true release among the candidates, exactly the release, a
  candidate list without it (wrong), the median number of candidates;
- follow: ``funcchanges.trace_line`` from that release; each claim is checked against the later
  release's file: 'gone at N' (changed) is wrong when the text is still inside a function of that
  name in N; 'still there' is wrong when the text is not in a function of that name in the
  newest release (in the file, where the function is gone from it). Moves (a split file, a
  function gone) are counted; they are never called a fix.

The function bodies of the check are read by indentation (a rough reader: a few of its
'wrong' may be its own). Run by hand; it reads the wheels, so it is not a test::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/measure_traceback_release.py --tree /tmp/sgl
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIRS = ["managers", "mem_cache", "entrypoints", "model_executor", "layers/attention", "speculative", "disaggregation"]
FUNC = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")


def _draw(tree: Path, per: int, seed: int) -> list[tuple[str, str, str, int, str, str]]:
    """(release, folder, srt file, 1-based line, function, stripped text) of the drawn lines."""
    from kvcheck.release.version import unpacked_releases

    rnd = random.Random(seed)
    out = []
    for v in unpacked_releases(tree, "0.5.1"):
        root = tree / v / "sglang"
        for d in DIRS:
            files = sorted(
                p for p in (root / "srt" / d).rglob("*.py") if d != "entrypoints" or p.parent.name == "entrypoints"
            )
            rnd.shuffle(files)
            got = 0
            for p in files:
                lines = p.read_text(errors="replace").splitlines()
                cand = [
                    i
                    for i, x in enumerate(lines)
                    if x.strip().startswith(("raise ", "assert ")) and len(x.strip()) > 25
                ]
                if not cand:
                    continue
                i = rnd.choice(cand)
                func = next((m.group(2) for x in reversed(lines[:i]) if (m := FUNC.match(x))), None)
                if func is None:
                    continue
                out.append((v, d, p.relative_to(root).as_posix(), i + 1, func, lines[i].strip()))
                got += 1
                if got >= per:
                    break
    return out


def _bodies(path: Path, name: str) -> list[set[str]] | None:
    """The stripped lines of each ``def name`` in ``path`` (by indentation); None: no file."""
    if not path.exists():
        return None
    lines = path.read_text(errors="replace").splitlines()
    out = []
    for i, x in enumerate(lines):
        m = FUNC.match(x)
        if m and m.group(2) == name:
            ind, j = len(m.group(1)), i + 1
            while j < len(lines) and (
                not lines[j].strip()
                or len(lines[j]) - len(lines[j].lstrip()) > ind
                or lines[j].strip().startswith((")", "]"))
            ):
                j += 1
            out.append({y.strip() for y in lines[i:j]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path("/tmp/sgl"))
    ap.add_argument("--per", type=int, default=2, help="files drawn per release and folder")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("-v", action="store_true", help="print each wrong claim")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from kvcheck.explain import explain_text, funcchanges, linedigests

    newest = linedigests.all_releases()[-1]
    rel = {"frames": 0, "found": 0, "exact": 0, "wrong": 0, "sizes": []}
    fol = {"gone": 0, "gone_wrong": 0, "still": 0, "still_wrong": 0, "moved_out": 0, "none": 0}
    for v, _d, f, ln, func, src in _draw(a.tree, a.per, a.seed):
        text = (
            "Traceback (most recent call last):\n"
            f'  File "/usr/lib/python3/dist-packages/sglang/{f}", line {ln}, in {func}\n    {src}\nRuntimeError: x\n'
        )
        cands = explain_text(text, source="log").report.release.candidates
        rel["frames"] += 1
        rel["found"] += v in cands
        rel["exact"] += cands == [v]
        rel["wrong"] += bool(cands) and v not in cands
        if v in cands:
            rel["sizes"].append(len(cands))
        if v == newest:
            continue
        tr = funcchanges.trace_line(f, func, ln, src, v)
        if tr is None:
            fol["none"] += 1
        elif not tr.gone:
            fol["still"] += 1
            ch = funcchanges.changes(f, func)
            path = a.tree / tr.last / "sglang" / f
            b = (
                [{x.strip() for x in path.read_text(errors="replace").splitlines()}]
                if ch and ch[1] != newest
                else _bodies(path, func)
            )
            if not b or not any(src in x for x in b):
                fol["still_wrong"] += 1
                if a.v:
                    print("still?", v, tr, f, func, ln, src[:60])
        elif tr.why in ("changed", "function-changed"):
            fol["gone"] += 1
            b = _bodies(a.tree / tr.gone / "sglang" / f, func)
            if tr.why == "changed" and b and any(src in x for x in b):
                fol["gone_wrong"] += 1
                if a.v:
                    print("gone?", v, tr, f, func, ln, src[:60])
        else:
            fol["moved_out"] += 1
    sizes = sorted(rel.pop("sizes"))
    rel["median candidates (found)"] = sizes[len(sizes) // 2] if sizes else None
    print(json.dumps({"release": rel, "follow": fol}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
