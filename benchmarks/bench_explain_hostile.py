"""``kvcheck explain`` on hostile one-line logs: CPU seconds per shape, as a ratio to a
short valid log read in the same run (the ratio is the figure: absolute times depend on
the machine's load).

Each shape is one line cut at kvcheck's line limit (8192 characters) that holds the words
of the runtime's message formats without their whole text (near-miss repeats), runs of
blanks, word characters or digits; a log of 1000 chained exceptions and a 1000-frame
recursion; a gzip of blank lines (a compression bomb). ``explain_blocks`` runs in a fresh
child process per shape, after the baseline log has loaded its data files (``--timeout``
seconds at most: past it the row says so).

Before/after: ``--tree DIR`` runs the same shapes against another checkout's ``kvcheck``
(``git archive <commit> kvcheck | tar -x -C DIR``), e.g. the commit before the format
matcher was bounded.

    python benchmarks/bench_explain_hostile.py [--tree DIR] [--timeout 120] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
N = 8180
REGION = "ValueError: NIXL PD transfer: decode registered fewer KV regions (61) than prefill (62); unexpected geometry"
FRAME = '  File "/usr/lib/python3.12/site-packages/sglang/srt/x.py", line 10, in f\n    return f(x)\n'

SHAPES: dict[str, bytes] = {
    "baseline (3 lines)": f"[2026-01-01 10:00:00 TP0] Decode batch. #running-req: 3\n{REGION}\nok\n".encode(),
    "'has invalid ' x 680": ("ValueError: " + "has invalid " * (N // 12) + "\n").encode(),
    "'failed ' x 1168": ("ValueError: " + "failed " * (N // 7) + "\n").encode(),
    "'failed for key ' x 545": ("ERROR " + "failed for key " * (N // 15) + "\n").encode(),
    "8 KB of letters": ("a" * N + "\n").encode(),
    "'sglang_' x 1168": ("sglang_" * (N // 7) + "\n").encode(),
    "8 KB of blanks": ("RuntimeError: " + " " * N + "x\n").encode(),
    "'a ' x 4090": ("ValueError: " + "a " * (N // 2) + "\n").encode(),
    "8 KB word run (IndexError source)": (
        'Traceback (most recent call last):\n  File "/x/sglang/srt/a.py", line 3, in f\n    '
        + "A" * N
        + "[self.worker_id]\nIndexError: list index out of range\n"
    ).encode(),
    "1000 chained exceptions": (
        "".join(
            f"Traceback (most recent call last):\n{FRAME}ValueError: step {i}\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            for i in range(1000)
        )
    ).encode(),
    "1000-frame recursion": (
        "Traceback (most recent call last):\n" + FRAME * 1000 + "RecursionError: maximum recursion depth exceeded\n"
    ).encode(),
    "gzip of 64 MiB blank lines": gzip.compress(b"\n" * (64 << 20), 9),
}

CHILD = (
    "import resource, sys, time\n"
    "from kvcheck.explain.matcher import explain_blocks, iter_log_blocks\n"
    "try:\n"
    "    from kvcheck.explain.scan import open_log_text\n"
    "except ImportError:\n"
    "    open_log_text = lambda fh, source='': fh\n"
    "import io\n"
    "explain_blocks(iter_log_blocks(io.BytesIO(sys.argv[2].encode())))  # data files loaded, not measured\n"
    "fh = open(sys.argv[1], 'rb')\n"
    "t = time.process_time()\n"
    "try:\n"
    "    r = explain_blocks(iter_log_blocks(open_log_text(fh, 'log')))\n"
    "    out = 'explained' if r.recognized else 'not explained'\n"
    "except Exception as exc:\n"
    "    out = type(exc).__name__ + ': ' + str(exc)[:60]\n"
    "print(time.process_time() - t, out)\n"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(REPO), help="the checkout whose kvcheck runs")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": args.tree}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        warm = SHAPES["baseline (3 lines)"].decode()
        for name, data in SHAPES.items():
            p = Path(d) / "shape.log"
            p.write_bytes(data)
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, str(p), warm],
                    env=env,
                    cwd=args.tree,
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                cpu, _, outcome = proc.stdout.strip().partition(" ")
                rows.append(
                    {"shape": name, "cpu_s": float(cpu) if cpu else None, "outcome": outcome or proc.stderr[-200:]}
                )
            except subprocess.TimeoutExpired:
                rows.append({"shape": name, "cpu_s": None, "outcome": f"killed after {args.timeout:.0f} s"})
    base = rows[0]["cpu_s"] or 1e-9
    for r in rows:
        r["x_baseline"] = None if r["cpu_s"] is None else round(r["cpu_s"] / base, 1)
    if args.json:
        print(json.dumps({"tree": args.tree, "rows": rows}, indent=2))
        return 0
    print(f"tree: {args.tree}")
    print(f"{'shape':36} {'CPU s':>8} {'x baseline':>11}  outcome")
    for r in rows:
        cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
        ratio = f">{args.timeout / base:.0f}" if r["x_baseline"] is None else f"{r['x_baseline']}"
        print(f"{r['shape']:36} {cpu:>8} {ratio:>11}  {r['outcome']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
