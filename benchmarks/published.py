"""Run kvcheck on a folder of published deployments and tabulate what it made of them.

Usage:
    python benchmarks/published.py [CORPUS_DIR] [--timeout S] [--jobs N] [--json OUT] [--only SOURCE]
                                   [--split SPLIT.txt --part dev|heldout]

CORPUS_DIR (default /work/corpus/deployments) holds one folder per deployment, grouped by
source: CORPUS_DIR/<source>/<name>/ with the published file(s), unchanged, and a meta.json:
``{"pin": "repo@commit:path", "file": NAME, "inputs": [NAME, ...] (optional, several -f),
"format": "...", "backend": "...", "ran": "..."}``. The corpus is read, never committed.

Each deployment is run as ``kvcheck preflight -f FILE [-f FILE ...] --format json`` (no
--model-config: a model named in the file must be found from the catalog) under a timeout,
and sorted into one outcome:

- decided: exit 0 (pass / warn);
- failed: exit 1 (kvcheck predicts a runtime error);
- unchecked: exit 4, counted by reason (the ids of the findings with severity 'unchecked',
  and for unresolved variables the flag it sat on);
- refused: exit 2 (kvcheck did not read the file: its last stderr line is the reason);
- refused-flags: exit 2 on the launch line's flags, refused by SGLang's parser of the release
  kvcheck checked with (a flag another release added, renamed or retired, or a real typo in
  the published file): the file was read, the release (or the file) is the problem;
- other: exit 3, a timeout, a traceback, or stdout that is not one JSON object.

"read" is every outcome but refused/other: kvcheck found the prefill and decode launch lines
(refused-flags counts as read: the launch lines were found and parsed up to a flag).
The table is printed by source and by format, then the unchecked reasons and the refusals,
then the decided share: decided = pass / warn / fail (exit 0 or 1), against unchecked (exit 4),
with every unchecked deployment listed with its reasons and the first unchecked message.

``--split FILE --part NAME`` runs only the deployments the split file puts in that part (lines
``<part> <source>/<name>``, ``#`` comments): a held-out part measured at the start and the end
of a change that was made from the other part only.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT = Path("/work/corpus/deployments")
OUTCOMES = ("decided", "failed", "unchecked", "refused", "refused-flags", "other")
# A refusal of the launch line's flags by SGLang's parser (of the release kvcheck checked
# with: a flag another release added, renamed or retired; or a flag no release takes): the
# file was read; the release (or the file's own bug) is the problem, counted apart.
RELEASE_REFUSAL = re.compile(r"ambiguous option|refuses this retired flag|unrecognized arguments: |expected (one|at least one) argument|invalid (int|float|choice)")


def _findings(report: dict) -> list[dict]:
    out = list(report.get("findings") or [])
    for group in ("classes", "pairs"):
        for item in report.get(group) or []:
            if isinstance(item, dict):
                out += list(item.get("findings") or [])
    return [f for f in out if isinstance(f, dict)]


def _reason(finding: dict) -> str:
    fid = str(finding.get("id"))
    if fid == "unresolved-variable":
        m = re.match(r"`(--[A-Za-z0-9-]+)", str(finding.get("message") or ""))
        return f"unresolved-variable {m.group(1)}" if m else fid
    return fid


def run_one(folder: Path, timeout: float, kvcheck: list[str]) -> dict:
    meta = json.loads((folder / "meta.json").read_text())
    inputs = meta.get("inputs") or [meta["file"]]
    cmd = list(kvcheck) + ["preflight"]
    for name in inputs:
        cmd += ["-f", str(folder / name)]
    cmd += ["--format", "json"]
    row = {"name": f"{folder.parent.name}/{folder.name}", "source": folder.parent.name,
           "format": meta.get("format", "?"), "pin": meta.get("pin"), "reasons": [], "detail": ""}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        return {**row, "outcome": "other", "exit": None, "detail": f"no answer in {timeout:g} s"}
    row["exit"] = proc.returncode
    if "Traceback (most recent call last)" in proc.stderr:
        return {**row, "outcome": "other", "detail": "traceback: " + proc.stderr.strip().splitlines()[-1][:200]}
    if proc.returncode == 2:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        outcome = "refused-flags" if RELEASE_REFUSAL.search(last) else "refused"
        return {**row, "outcome": outcome, "detail": last if len(last) <= 400 else "…" + last[-400:]}
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {**row, "outcome": "other", "detail": "stdout is not one JSON object"}
    findings = _findings(report)
    unchecked = sorted({_reason(f) for f in findings if f.get("severity") == "unchecked"})
    first = next((f for f in findings if f.get("severity") == "unchecked"), None)
    if first is not None:
        row["detail"] = str(first.get("message") or "")[:300]
    row["model_source"] = sorted({str(i.get("model_source")) for i in report.get("instances") or []})
    outcome = {0: "decided", 1: "failed", 4: "unchecked"}.get(proc.returncode, "other")
    if outcome == "failed":
        row["reasons"] = sorted({str(f.get("id")) for f in findings if f.get("severity") == "error"})
    elif outcome == "unchecked":
        row["reasons"] = unchecked or ["(no unchecked finding)"]
    return {**row, "outcome": outcome}


def table(rows: list[dict], key: str) -> str:
    groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        groups[r[key]][r["outcome"]] += 1
    width = max([len(key)] + [len(g) for g in groups]) + 2
    head = f"| {key:<{width}}| n | read | " + " | ".join(OUTCOMES) + " |"
    lines = [head, "|" + "---|" * (3 + len(OUTCOMES))]
    total: collections.Counter = collections.Counter()
    for g in sorted(groups):
        c = groups[g]
        total.update(c)
        n = sum(c.values())
        read = n - c["refused"] - c["other"]  # noqa: refused-flags was read
        lines.append(f"| {g:<{width}}| {n} | {read} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    n = sum(total.values())
    read = n - total["refused"] - total["other"]
    lines.append(f"| {'all':<{width}}| {n} | {read} ({100 * read / max(n, 1):.0f}%) | "
                 + " | ".join(str(total[o]) for o in OUTCOMES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every row to this file")
    ap.add_argument("--only", help="only this source folder")
    ap.add_argument("--split", help="a split file: lines '<part> <source>/<name>'")
    ap.add_argument("--part", help="with --split: run only the deployments of this part (dev, heldout)")
    ap.add_argument("--from-json", help="tabulate the rows of an earlier --json run instead of running")
    ap.add_argument("--kvcheck", default=f"{sys.executable} -m kvcheck", help="command that runs kvcheck")
    args = ap.parse_args(argv)
    root = Path(args.corpus)
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())
        for r in rows:  # re-sort refusals with today's rule
            if r["outcome"].startswith("refused"):
                r["outcome"] = "refused-flags" if RELEASE_REFUSAL.search(r["detail"]) else "refused"
        return report(rows, root, args)
    folders = sorted(p.parent for p in root.glob("*/*/meta.json") if not args.only or p.parent.parent.name == args.only)
    if args.split:
        part = args.part or "dev"
        names = {
            line.split()[1]
            for line in Path(args.split).read_text().splitlines()
            if line.strip() and not line.startswith("#") and line.split()[0] == part
        }
        folders = [f for f in folders if f"{f.parent.name}/{f.name}" in names]
    if not folders:
        print(f"no deployments under {root} (expected <source>/<name>/meta.json)", file=sys.stderr)
        return 2
    kvcheck = args.kvcheck.split()
    os.environ.setdefault("NO_COLOR", "1")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda f: run_one(f, args.timeout, kvcheck), folders))
    return report(rows, root, args)


def report(rows: list[dict], root: Path, args: argparse.Namespace) -> int:
    print(f"# kvcheck on {len(rows)} published deployments ({root})\n")
    print("## By source\n\n" + table(rows, "source") + "\n")
    print("## By format\n\n" + table(rows, "format") + "\n")
    reasons: collections.Counter = collections.Counter()
    for r in rows:
        if r["outcome"] in ("unchecked", "failed"):
            reasons.update(f"{r['outcome']}: {x}" for x in r["reasons"])
    print("## Unchecked / failed, by reason (a deployment may count under several)\n")
    for reason, n in reasons.most_common():
        print(f"- {n:4d}  {reason}")
    print("\n## Not read (refused / other)\n")
    for r in rows:
        if r["outcome"] in ("refused", "other", "refused-flags"):
            print(f"- {r['name']} [{r['format']}] exit {r['exit']}: {r['detail']}")
    decided = [r for r in rows if r["outcome"] in ("decided", "failed")]
    unchecked = [r for r in rows if r["outcome"] == "unchecked"]
    n = len(decided) + len(unchecked)
    print(f"\n## Decided (pass / warn / fail) vs unchecked\n\n{len(decided)} of {n} decided "
          f"({100 * len(decided) / max(n, 1):.0f}%), {len(unchecked)} unchecked; "
          f"{len(rows) - n} not read (refused / other) of {len(rows)}\n")
    by_reason: collections.Counter = collections.Counter(x for r in unchecked for x in r["reasons"])
    for reason, k in by_reason.most_common():
        print(f"- {k:4d}  {reason}")
    print("\n## Each unchecked deployment\n")
    for r in sorted(unchecked, key=lambda r: (r["reasons"], r["name"])):
        print(f"- {r['name']}: {', '.join(r['reasons'])}: {r['detail']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
