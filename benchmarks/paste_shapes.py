#!/usr/bin/env python3
"""The same log, pasted the way people paste it, gets the same answer (issue 20).

For every log of a corpus (``<corpus>/<id>/log.txt``, the layout of ``grade_explain.py``;
round 13 and later blind rounds are skipped unless named with ``--rounds``) this makes
re-pasted variants of the log, one per *shape* below, and runs ``kvcheck explain`` on the
original and on each variant in this process. Per shape it reports the share of logs whose
answer is unchanged:

- ``first``: the first cause's id, its engine and its phase are the original's
  (no first cause on both counts as unchanged);
- ``ids``: the set of finding ids is the original's;

over all logs and over the logs the shape actually altered (a log without tabs is not
altered by ``tabs``), and the explain time of the variants against the originals (a ratio
in the same run). Table on stdout, or the JSON of every number with ``--json``.

Every shape is a small pure function ``str -> str`` (``head-tail`` also takes the lines
the original's findings are on, so that what it drops lies before the first of them: the
measure is whether the gap and its ``...`` confuse the reader, not whether a cause that
was cut out is still found).

Usage: python benchmarks/paste_shapes.py [CORPUS] [--rounds r1..r12] [--shapes a,b] [--ids x,y] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_T0 = 1733493661  # 2024-12-06T14:01:01Z: the times the collectors' prefixes carry


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _ts(i: int) -> str:
    """RFC 3339 with nanoseconds (``kubectl logs --timestamps``, docker's ``time``)."""
    s = _T0 + i // 10
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{(i % 10) * 100000007:09d}Z"


def _each(text: str, f: Callable[[int, str], str]) -> str:
    return "\n".join(f(i, ln) for i, ln in enumerate(_lines(text)))


# ------------------------------------------------------------------ the shapes
def kubectl_prefix(text: str) -> str:
    """``kubectl logs --prefix``: ``[pod/NAME/CONTAINER] `` before every line."""
    return _each(text, lambda i, ln: f"[pod/llm-server-0/server] {ln}")


def kubectl_timestamps(text: str) -> str:
    """``kubectl logs --timestamps``: the RFC 3339 (nanoseconds) time and a space."""
    return _each(text, lambda i, ln: f"{_ts(i)} {ln}")


def compose(text: str) -> str:
    """``docker compose logs``: the service's container name, padding and ``| ``."""
    return _each(text, lambda i, ln: f"server-1  | {ln}")


def docker_json(text: str) -> str:
    """docker's json-file log driver: one JSON object per line (``log`` with its line end,
    ``stream``, ``time``)."""
    return _each(
        text, lambda i, ln: json.dumps({"log": ln + "\n", "stream": "stderr", "time": _ts(i)}, separators=(",", ":"))
    )


def json_message(text: str) -> str:
    """An exporter's JSON lines with the text under ``message`` (fluent-bit's stdout
    ``json_lines``, a CloudWatch Logs Insights export) and the pod in metadata."""
    return _each(
        text,
        lambda i, ln: json.dumps(
            {
                "timestamp": _ts(i),
                "message": ln,
                "kubernetes": {"pod_name": "llm-server-0", "container_name": "server"},
            }
        ),
    )


def json_msg(text: str) -> str:
    """A structured collector's JSON lines with the text under ``msg`` (Loki/Vector
    exports, zap-style)."""
    return _each(text, lambda i, ln: json.dumps({"time": _ts(i), "level": "info", "msg": ln}))


def cloudwatch(text: str) -> str:
    """``aws logs filter-log-events`` output: one indented JSON document, every line an
    event's ``message``."""
    events = [
        {"logStreamName": "llm/server/0", "timestamp": (_T0 + i) * 1000, "message": ln, "eventId": str(i)}
        for i, ln in enumerate(_lines(text))
    ]
    return json.dumps({"events": events, "searchedLogStreams": []}, indent=4)


def journald(text: str) -> str:
    """``journalctl`` (short format): date, host, unit[pid]."""
    return _each(text, lambda i, ln: f"Dec 06 14:{(i // 60) % 60:02d}:{i % 60:02d} gpu-node-3 python3[1234]: {ln}")


def srun_l(text: str) -> str:
    """``srun -l`` with one task: ``0: `` before every line."""
    return _each(text, lambda i, ln: f"0: {ln}")


def srun_interleaved(text: str) -> str:
    """``srun --label`` with two tasks printing the same log, interleaved line by line
    (task 1 one line behind)."""
    lines = _lines(text)
    out = []
    for i, ln in enumerate(lines):
        out.append(f"0: {ln}")
        if i:
            out.append(f"1: {lines[i - 1]}")
    out.append(f"1: {lines[-1]}")
    return "\n".join(out)


def ray(text: str) -> str:
    """Ray's worker prefix: ``(RayWorkerWrapper pid=123, ip=10.0.0.1) ``."""
    return _each(text, lambda i, ln: f"(RayWorkerWrapper pid=123, ip=10.0.0.1) {ln}")


def ansi(text: str) -> str:
    """A terminal's colours: the level words and the time in SGI codes, a reset at the
    end of every line."""
    lvl = re.compile(r"\b(ERROR|WARNING|INFO|CRITICAL)\b")
    return _each(text, lambda i, ln: "\x1b[32m" + lvl.sub("\x1b[1;31m\\1\x1b[0m", ln) + "\x1b[0m" if ln else ln)


def crlf(text: str) -> str:
    """Windows line ends."""
    return text.replace("\n", "\r\n")


def github_quote(text: str) -> str:
    """A GitHub reply quoting the log: ``> `` (``>`` on empty lines)."""
    return _each(text, lambda i, ln: f"> {ln}" if ln else ">")


def fenced(text: str) -> str:
    """A markdown code fence around the log."""
    return "```text\n" + text.rstrip("\n") + "\n```\n"


def _wrap(text: str, width: int) -> str:
    out = []
    for ln in _lines(text):
        if not ln:
            out.append(ln)
        while ln:
            out.append(ln[:width])
            ln = ln[width:]
    return "\n".join(out)


def wrap80(text: str) -> str:
    """A terminal's hard wrap at 80 columns (a long line cut every 80 characters)."""
    return _wrap(text, 80)


def wrap120(text: str) -> str:
    """A terminal's hard wrap at 120 columns."""
    return _wrap(text, 120)


def wrap97(text: str) -> str:
    """A resized terminal's hard wrap at an unusual width (97 columns)."""
    return _wrap(text, 97)


def tabs(text: str) -> str:
    """Tabs expanded to spaces (tab stops of 8)."""
    return text.expandtabs(8)


def dedent(text: str) -> str:
    """Every line's leading whitespace stripped (an editor or a chat client)."""
    return _each(text, lambda i, ln: ln.lstrip())


def indent(text: str) -> str:
    """Every line indented by four spaces (a markdown code block, a quoted e-mail)."""
    return _each(text, lambda i, ln: f"    {ln}" if ln else ln)


def cat_n(text: str) -> str:
    """``cat -n``: the line number right-aligned in six columns and a tab."""
    return _each(text, lambda i, ln: f"{i + 1:6d}\t{ln}")


def head_tail(text: str, keep: frozenset[int] = frozenset()) -> str:
    """The head and the tail, ``...`` in the middle, as a log is shortened for an issue:
    the lines between the first three and the line before the first of ``keep`` (1-based
    numbers of the lines the original's findings stand on; the middle third when there is
    none) replaced by one ``...`` line; unchanged when fewer than 3 lines are there."""
    lines = _lines(text)
    n = len(lines)
    if keep:
        a, b = 4, min(keep) - 2  # 1-based, inclusive
    else:
        a, b = n // 3 + 1, 2 * n // 3
    if b - a + 1 < 3:
        return text
    return "\n".join(lines[: a - 1] + ["..."] + lines[b:])


SHAPES: dict[str, Callable[..., str]] = {
    "kubectl-prefix": kubectl_prefix,
    "kubectl-timestamps": kubectl_timestamps,
    "compose": compose,
    "docker-json": docker_json,
    "json-message": json_message,
    "json-msg": json_msg,
    "cloudwatch": cloudwatch,
    "journald": journald,
    "srun-l": srun_l,
    "srun-interleaved": srun_interleaved,
    "ray": ray,
    "ansi": ansi,
    "crlf": crlf,
    "github-quote": github_quote,
    "fenced": fenced,
    "wrap80": wrap80,
    "wrap120": wrap120,
    "wrap97": wrap97,
    "tabs": tabs,
    "dedent": dedent,
    "indent": indent,
    "cat-n": cat_n,
    "head-tail": head_tail,
}


# ------------------------------------------------------------------ the measure
def answer(text: str) -> tuple[dict[str, Any], float]:
    """(the answer of ``explain_text(text, source='log')``: first cause id/engine/phase,
    the set of finding ids, the lines findings stand on; seconds it took, the faster of
    two runs)."""
    from kvcheck.explain.matcher import explain_text

    dt = float("inf")
    for _ in range(2):  # the faster of two runs: a collection or a cold cache is not the shape's cost
        t = time.perf_counter()
        rep = explain_text(text, source="log").report
        dt = min(dt, time.perf_counter() - t)
    first = rep.first_cause if rep is not None else None
    findings = list(rep.findings) if rep is not None else []
    return {
        "first": (first.id, first.engine, first.phase) if first is not None else None,
        "ids": sorted({f.id for f in findings}),
        "lines": sorted({n for f in findings for n in range(f.first_line, f.last_line + 1)}),
    }, dt


def _round_ok(name: str, rounds: set[int] | None) -> bool:
    m = re.match(r"r(\d+)-", name)
    if m is None:
        return False
    n = int(m.group(1))
    return n in rounds if rounds else n <= 12


def _parse_rounds(s: str) -> set[int] | None:
    if not s:
        return None
    out: set[int] = set()
    for part in s.split(","):
        m = re.fullmatch(r"r?(\d+)(?:\.\.r?(\d+))?", part.strip())
        if not m:
            raise SystemExit(f"--rounds: cannot read {part!r} (r1..r12 or r3,r5)")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        out.update(range(a, b + 1))
    return out


def measure(corpus: Path, rounds: set[int] | None, shapes: list[str], ids: set[str] | None) -> dict[str, Any]:
    logs = []
    for d in sorted(corpus.iterdir()):
        if not _round_ok(d.name, rounds) or (ids and d.name not in ids) or not (d / "log.txt").exists():
            continue
        logs.append((d.name, (d / "log.txt").read_text(errors="replace")))
    answer(logs[0][1] if logs else "")  # warm-up: the catalog and the indexes
    per: dict[str, dict[str, Any]] = {
        s: {"n": 0, "altered": 0, "first": 0, "ids": 0, "first_altered": 0, "ids_altered": 0, "t": 0.0, "changed": []}
        for s in shapes
    }
    t_orig = 0.0
    for name, text in logs:
        answer(text)  # the first runs on a log fill caches (rules compiled on first use): not timed
        base, dt = answer(text)
        t_orig += dt
        for s in shapes:
            f = SHAPES[s]
            variant = f(text, frozenset(base["lines"])) if s == "head-tail" else f(text)
            got, dv = answer(variant)
            p = per[s]
            p["n"] += 1
            p["t"] += dv
            altered = variant != text
            p["altered"] += altered
            same_first = got["first"] == base["first"]
            same_ids = got["ids"] == base["ids"]
            p["first"] += same_first
            p["ids"] += same_ids
            p["first_altered"] += same_first and altered
            p["ids_altered"] += same_ids and altered
            if not (same_first and same_ids):
                p["changed"].append(
                    {
                        "id": name,
                        "was": base["first"],
                        "now": got["first"],
                        "lost": sorted(set(base["ids"]) - set(got["ids"])),
                        "new": sorted(set(got["ids"]) - set(base["ids"])),
                    }
                )
    for p in per.values():
        p["ratio"] = p.pop("t") / t_orig if t_orig else 0.0
    return {"logs": len(logs), "explain_s_originals": t_orig, "shapes": per}


def table(res: dict[str, Any]) -> str:
    n = res["logs"]
    out = [
        f"{n} logs; explain on the originals: {res['explain_s_originals']:.2f} s in all",
        "",
        "| shape | altered | first same | ids same | first same (altered) | ids same (altered) | time vs original |",
        "|---|---|---|---|---|---|---|",
    ]
    tot = [0, 0, 0]
    for s, p in res["shapes"].items():
        a = p["altered"]
        tot[0] += p["n"]
        tot[1] += p["first"]
        tot[2] += p["ids"]
        out.append(
            f"| {s} | {a}/{p['n']} | {100 * p['first'] / max(p['n'], 1):.0f}% | {100 * p['ids'] / max(p['n'], 1):.0f}% "
            f"| {p['first_altered']}/{a} | {p['ids_altered']}/{a} | {p['ratio']:.2f}x |"
        )
    out.append(f"| **all** | | {100 * tot[1] / max(tot[0], 1):.1f}% | {100 * tot[2] / max(tot[0], 1):.1f}% | | | |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=Path("/work/corpus/logs"))
    ap.add_argument("--rounds", default="", help="r1..r12 (default), or a list: r3,r5..r7")
    ap.add_argument("--shapes", default="", help="a comma list of shapes (default: all)")
    ap.add_argument("--ids", default="")
    ap.add_argument("-v", action="store_true", help="list the logs whose answer changed, per shape")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    shapes = [s for s in args.shapes.split(",") if s] or list(SHAPES)
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    res = measure(args.corpus, _parse_rounds(args.rounds), shapes, {x for x in args.ids.split(",") if x} or None)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print(table(res))
    if args.v:
        for s, p in res["shapes"].items():
            for c in p["changed"]:
                print(f"{s:<20} {c['id']:<10} {c['was']} -> {c['now']}  lost={c['lost']} new={c['new']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
