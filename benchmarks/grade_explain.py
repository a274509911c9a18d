#!/usr/bin/env python3
"""Grade ``kvcheck explain`` on a corpus of real logs with established causes (issue 20).

The corpus lives outside the repository (published logs are never committed): one
directory per log, ``<corpus>/<id>/log.txt`` as pasted (host names, addresses and tokens
replaced) and ``<corpus>/<id>/key.yaml``::

    engine: sglang | vllm | dynamo-vllm | dynamo-sglang | trtllm | lmcache | nixl | ucx | mooncake | ...
    release: "0.5.10" or null          # as the thread states it
    url: https://github.com/...        # the thread
    cause: one line, the thread's resolution
    fix: one line
    phase: startup | first-request | first-transfer | serving | after-peer-restart
    expect: [regex, ...]               # written from the thread, before kvcheck is run:
                                       # every one must match what kvcheck states as the cause
    foreign: true                      # the log is another engine's (never explained as SGLang's)
    seen: true                         # the thread is referenced by kvcheck's own code/tests
    established: weak                  # the thread points at the cause without confirming it

Grades (per log, automatic; ``<corpus>/GRADES.yaml`` holds the manual grade where a
reading of kvcheck's answer differs, ``{id: {grade: ..., first: <first cause id it was
given for>, title: <the start of its title>, note: ...}}``, applied with ``--manual``
while the first cause is the same):

- ``right``: kvcheck's first cause (its title and cause text) matches every ``expect``;
- ``partial``: another finding matches every ``expect``, or the first cause matches some;
- ``wrong``: a first cause is stated and matches none;
- ``none``: no finding (at most the engines named).

Also per log: ``as_sglang`` (catalog findings explaining a non-SGLang log's lines as
SGLang's: must be 0), ``phase_ok`` (the first cause's phase is the thread's), and whether
the log's engine was named.

Usage: python benchmarks/grade_explain.py [CORPUS] [--round N] [--ids a,b] [-v] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SGLANG_ENGINES = {"sglang", "dynamo-sglang"}
SAME_PHASE = {frozenset({"first-request", "first-transfer"})}
# the engine names kvcheck's attribution uses, per corpus engine
ENGINE_ALIASES = {
    "dynamo-vllm": {"dynamo-vllm", "vllm", "dynamo"},
    "dynamo-sglang": {"sglang", "dynamo"},
    "dynamo-trtllm": {"trtllm", "dynamo"},
    "vllm-ascend": {"vllm-ascend", "vllm", "mooncake"},
    "mori": {"mori", "vllm", "sglang"},
}


def _text(f: Any) -> str:
    return f"{f.title}\n{f.cause}"


def _matches(expect: list[str], text: str) -> list[bool]:
    return [re.search(e, text, re.I | re.S) is not None for e in expect]


def grade_one(key: dict, log: str) -> dict:
    """Run explain on ``log``; the grade and the facts it rests on."""
    from kvcheck.explain.matcher import explain_text

    res = explain_text(log, source="log")
    rep = res.report
    expect = key.get("expect") or []
    first = rep.first_cause if rep is not None else None
    findings = list(rep.findings) if rep is not None else []
    if first is None:
        grade = "none"
    else:
        got = _matches(expect, _text(first))
        if expect and all(got):
            grade = "right"
        elif any(all(_matches(expect, _text(f))) for f in findings) or any(got):
            grade = "partial"
        else:
            grade = "wrong"
    engine = key.get("engine", "")
    as_sglang = 0
    if engine not in SGLANG_ENGINES and key.get("foreign", engine not in SGLANG_ENGINES | {"nixl", "ucx", "mooncake"}):
        as_sglang = sum(f.count for f in findings if f.kind == "catalog" and f.engine == "sglang")
    named = {e.engine for e in (rep.engines if rep is not None else [])}
    want = ENGINE_ALIASES.get(engine, {engine})
    phase_ok = None
    if first is not None and key.get("phase"):
        phase_ok = first.phase == key["phase"] or frozenset({first.phase, key["phase"]}) in SAME_PHASE
    return {
        "id": key["id"],
        "engine": engine,
        "grade": grade,
        "first": f"{first.id} [{first.phase or '-'}]" if first is not None else "-",
        "first_title": first.title[:120] if first is not None else "",
        "as_sglang": as_sglang,
        "engine_named": bool(named & want),
        "phase_ok": phase_ok,
        "seen": bool(key.get("seen")),
        "weak": key.get("established") == "weak",
        "round": key.get("round") or int(re.match(r"r(\d+)-", key["id"]).group(1)) if re.match(r"r\d+-", key["id"]) else 0,
    }


def load(corpus: Path, ids: set[str] | None, rnd: int | None) -> list[tuple[dict, str]]:
    out = []
    for d in sorted(corpus.iterdir()):
        k = d / "key.yaml"
        if not k.exists():
            continue
        key = yaml.safe_load(k.read_text())
        key.setdefault("id", d.name)
        if ids and key["id"] not in ids:
            continue
        m = re.match(r"r(\d+)-", key["id"])
        if rnd is not None and (not m or int(m.group(1)) != rnd):
            continue
        out.append((key, (d / "log.txt").read_text(errors="replace")))
    return out


def table(rows: list[dict], title: str) -> str:
    cols = ["right", "partial", "wrong", "none"]
    by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        by[r["engine"]][r["grade"]] += 1
    lines = [f"### {title} ({len(rows)} logs)", "", "| engine | " + " | ".join(cols) + " | right % |", "|---" * 6 + "|"]
    total: collections.Counter = collections.Counter()
    for eng in sorted(by):
        c = by[eng]
        total.update(c)
        n = sum(c[x] for x in cols)
        lines.append(f"| {eng} | " + " | ".join(str(c[x]) for x in cols) + f" | {100 * c['right'] / max(n, 1):.0f}% |")
    n = sum(total[x] for x in cols)
    lines.append("| **all** | " + " | ".join(str(total[x]) for x in cols) + f" | {100 * total['right'] / max(n, 1):.0f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=Path("/work/corpus/logs"))
    ap.add_argument("--round", type=int, default=None)
    ap.add_argument("--ids", default="")
    ap.add_argument("--manual", action="store_true", help="apply the manual grades of GRADES.yaml")
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    ids = {x for x in args.ids.split(",") if x} or None
    manual = {}
    gpath = args.corpus / "GRADES.yaml"
    if args.manual and gpath.exists():
        manual = yaml.safe_load(gpath.read_text()) or {}
    rows = []
    for key, log in load(args.corpus, ids, args.round):
        r = grade_one(key, log)
        m = manual.get(key["id"]) or {}
        # a manual grade holds for the answer it was given to: the same first cause (``first``,
        # its id) with a title that starts the same (``title``)
        same = (not m.get("first") or r["first"].split(" [")[0] == m["first"]) and r["first_title"].startswith(
            m.get("title", "")
        )
        if m.get("grade") and same:
            r["auto"], r["grade"] = r["grade"], m["grade"]
        rows.append(r)
        if args.v:
            flags = ("S" if r["seen"] else "-") + ("w" if r["weak"] else "-")
            print(
                f"{r['id']:<8} {flags} {r['engine']:<14} {r['grade']:<8} {r['first']:<44} "
                f"as_sglang={r['as_sglang']} named={int(r['engine_named'])} phase_ok={r['phase_ok']}  {r['first_title'][:70]}"
            )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print()
    print(table(rows, "all"))
    unseen = [r for r in rows if not r["seen"]]
    if len(unseen) != len(rows):
        print()
        print(table(unseen, "threads kvcheck's code does not cite (unseen)"))
    print()
    print(f"another engine's lines explained as SGLang's: {sum(r['as_sglang'] for r in rows)}")
    print(f"engine named: {sum(r['engine_named'] for r in rows)}/{len(rows)}")
    ph = [r["phase_ok"] for r in rows if r["phase_ok"] is not None]
    print(f"first cause in the thread's phase: {sum(ph)}/{len(ph)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
