"""What does deciding over the release window cost? (issue 14 "Speed")

One command times, in fresh processes and interleaved run by run (machine drift hits every
variant alike), a cold ``python -m kvcheck preflight -f`` on the same two-line launch
script, written here:

* ``unpinned``: the script names no release, so each side's window is every release whose
  PD path kvcheck models and whose parser accepts the flags, and the pair is decided once
  per distinct behaviour;
* ``pinned``: the same script with ``--sglang-version 0.5.23`` (one release, one decision);
* ``bare``: ``python -c pass`` (the interpreter alone).

CPU time (user + system, ``wait4``) decides; on a shared 2-core machine the wall time
mostly measures waiting for a core. Reported: median CPU per variant, over bare, and the
ratio unpinned/pinned (goal: under 2). ``--json`` prints the figures as one object.

Usage: python benchmarks/bench_window.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "configs" / "models" / "llama-3.1-8b"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvcheck-bench-window-"))
    launch = f"python -m sglang.launch_server --model-path {MODEL} --disaggregation-transfer-backend nixl --page-size 16 --tp-size 2"
    script = tmp / "run.sh"
    script.write_text(f"{launch} --disaggregation-mode prefill\n{launch} --disaggregation-mode decode --port 30001\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    base = [sys.executable, "-P", "-m", "kvcheck", "preflight", "-f", str(script), "--format", "json"]
    variants = {"bare": [sys.executable, "-c", "pass"], "unpinned": base, "pinned": base + ["--sglang-version", "0.5.23"]}
    for cmd in variants.values():  # warm the file cache and the bytecode
        timed(cmd, env)
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    wall: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(a.runs):
        for name, cmd in variants.items():
            w, c, _rc = timed(cmd, env)
            cpu[name].append(c)
            wall[name].append(w)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    out = {
        "runs": a.runs,
        "cpu_median_s": med,
        "wall_median_s": {k: statistics.median(v) for k, v in wall.items()},
        "over_bare_s": {k: med[k] - med["bare"] for k in ("unpinned", "pinned")},
        "ratio_unpinned_over_pinned": med["unpinned"] / med["pinned"],
        "ratio_over_bare": (med["unpinned"] - med["bare"]) / max(1e-9, med["pinned"] - med["bare"]),
    }
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for k in variants:
            print(f"{k:9s} cpu median {med[k]:.3f} s  wall median {out['wall_median_s'][k]:.3f} s")
        print(f"unpinned / pinned: {out['ratio_unpinned_over_pinned']:.2f}x (over bare: {out['ratio_over_bare']:.2f}x); goal < 2x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
