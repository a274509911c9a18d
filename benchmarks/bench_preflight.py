"""Cold ``kvcheck preflight`` on a bundled pair vs a bare ``python -c pass``, in one run.

Each run is a fresh process (what a CI gate or an on-call shell pays). Reports the
median wall time of both, their difference and ratio, the peak RSS of each, and
whether the static path imported torch, nixl or sglang (it must not).

Targets (issues 2 and 10): under 0.3 s of wall time over the bare interpreter, and a
peak RSS under 80 MB. Also reported: what ``import typer`` alone and ``kvcheck --version``
cost over the bare interpreter (the CLI framework's share).

Usage: python benchmarks/bench_preflight.py [--runs N] [--pair configs/aligned]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str]) -> tuple[float, float, int]:
    """Run ``cmd``; (wall seconds, peak RSS in MB of that process, exit status)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--pair", default="configs/aligned")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    bare = [sys.executable, "-c", "pass"]
    pair = REPO / args.pair
    kv = [sys.executable, "-m", "kvcheck", "preflight", "--prefill", str(pair / "prefill.yaml"), "--decode", str(pair / "decode.yaml"), "--format", "json"]
    # typer alone (the CLI framework's share of the cold start) and kvcheck --version
    # (typer + kvcheck's CLI module, no command work).
    typer_only = [sys.executable, "-c", "import typer"]
    version = [sys.executable, "-m", "kvcheck", "--version"]
    # Warm the OS file cache once for all, then interleave runs so drift hits all.
    timed(bare), timed(kv), timed(typer_only), timed(version)
    bare_t, kv_t, bare_rss, kv_rss, typer_t, version_t = [], [], [], [], [], []
    for _ in range(args.runs):
        w, r, _ = timed(bare)
        bare_t.append(w), bare_rss.append(r)
        typer_t.append(timed(typer_only)[0])
        version_t.append(timed(version)[0])
        w, r, rc = timed(kv)
        if rc not in (0, 1):
            print(f"kvcheck exited {rc}", file=sys.stderr)
            return 2
        kv_t.append(w), kv_rss.append(r)
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, runpy; sys.argv=['kvcheck','preflight','--prefill',%r,'--decode',%r,'--format','json'];\n"
         "import kvcheck.cli as c\n"
         "try:\n c.app(standalone_mode=False)\nexcept SystemExit: pass\n"
         "print('HEAVY', sorted(m for m in ('torch','nixl','nixl_cu12','sglang') if m in sys.modules))" % (str(pair / "prefill.yaml"), str(pair / "decode.yaml"))],
        capture_output=True, text=True, cwd=REPO,
    )
    heavy = next((line for line in probe.stdout.splitlines() if line.startswith("HEAVY")), "HEAVY ?")
    fig = {
        "runs": args.runs,
        "bare_python_median_s": round(statistics.median(bare_t), 4),
        "kvcheck_preflight_median_s": round(statistics.median(kv_t), 4),
        "overhead_s": round(statistics.median(kv_t) - statistics.median(bare_t), 4),
        "ratio": round(statistics.median(kv_t) / statistics.median(bare_t), 2),
        "typer_import_overhead_s": round(statistics.median(typer_t) - statistics.median(bare_t), 4),
        "kvcheck_version_overhead_s": round(statistics.median(version_t) - statistics.median(bare_t), 4),
        "bare_python_max_rss_mb": round(max(bare_rss), 1),
        "kvcheck_max_rss_mb": round(max(kv_rss), 1),
        "heavy_modules_imported": heavy.split(" ", 1)[1],
        "targets": {"overhead_s": 0.3, "max_rss_mb": 80},
    }
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        for k, v in fig.items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
