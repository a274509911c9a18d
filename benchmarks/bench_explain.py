"""``kvcheck explain --log`` on a large generated log: throughput (MB/s) and peak RSS.

The log is written in the shape of a SGLang server log (timestamped scheduler lines,
decode-batch statistics, a traceback now and then) with every catalog message spread
through it, a few lines of 1 MB, and near-misses (lines holding a catalog message's
literal text but not the whole message). The CLI runs in a fresh process, as on call.

Targets (issue 10): linear time (a 200 MB log in seconds: the MB/s figure stays flat
as the size grows) and bounded memory (peak RSS does not grow with the log).

Usage: python benchmarks/bench_explain.py [--mb 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# ``kvcheck`` as ``python -m kvcheck`` runs it, writing its own peak RSS (VmHWM, kB) at
# exit: ru_maxrss would include the parent's high-water mark (Linux carries it across
# fork + exec).
WRAPPER = (
    "import atexit, os, sys\n"
    "def _hwm():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        kb = next(int(l.split()[1]) for l in fh if l.startswith('VmHWM:'))\n"
    "    with open(os.environ['KVCHECK_BENCH_HWM'], 'w') as out:\n"
    "        out.write(str(kb))\n"
    "atexit.register(_hwm)\n"
    "sys.argv[0] = 'kvcheck'\n"
    "from kvcheck.cli import main\n"
    "main()\n"
)


def write_log(path: Path, megabytes: int) -> int:
    """Write about ``megabytes`` MB of log to ``path``; the number of lines."""
    sys.path.insert(0, str(REPO))
    from kvcheck.explain import load_catalog

    messages = [e.example_text() for e in load_catalog().entries]
    noise = (
        "[2026-01-02 10:11:{s:02d} TP{tp}] Decode batch. #running-req: 31, #token: 40213, token usage: 0.42, "
        "gen throughput (token/s): 2043.11, #queue-req: 0, \n"
    )
    near = "[2026-01-02 10:11:00 TP0] WARNING NIXL PD transfer: decode registered fewer KV regions than usual (not a catalog message)\n"
    target = megabytes * 1024 * 1024
    written = lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        block = []
        for i in range(2000):
            block.append(noise.format(s=i % 60, tp=i % 8))
            if i % 250 == 0:
                block.append(near)
        block_text = "".join(block)
        block_lines = block_text.count("\n")
        k = 0
        while written < target:
            fh.write(block_text)
            written += len(block_text)
            lines += block_lines
            msg = f"[2026-01-02 10:12:00 TP0] {messages[k % len(messages)]}\n"
            fh.write(msg)
            written += len(msg)
            lines += 1
            k += 1
            if k % 50 == 0:  # a 1 MB line now and then (a dumped tensor, a base64 blob)
                long = "x" * (1024 * 1024) + "NIXL PD transfer: decode registered fewer KV regions (" * 3 + "\n"
                fh.write(long)
                written += len(long)
                lines += 1
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200, help="log size in MB")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        lines = write_log(log, args.mb)
        size = log.stat().st_size
        hwm = Path(tmp) / "hwm"
        cmd = [sys.executable, "-c", WRAPPER, "explain", "--log", str(log), "--format", "json"]
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), "KVCHECK_BENCH_HWM": str(hwm)}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        rss_mb = round(int(hwm.read_text()) / 1024.0, 1) if hwm.exists() else None
    if proc.returncode not in (0, 1):
        print(f"kvcheck explain exited {proc.returncode}: {err.decode()[:500]}", file=sys.stderr)
        return 2
    report = json.loads(out)
    fig = {
        "log_mb": round(size / 1e6, 1),
        "lines": lines,
        "seconds": round(wall, 2),
        "mb_per_s": round(size / 1e6 / wall, 1),
        "peak_rss_mb": rss_mb,
        "messages_recognized": len(report["hits"]),
    }
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        for k, v in fig.items():
            print(f"{k:22} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
