"""Run the CLI in a fresh process and measure that process alone: its exit status,
output, wall time and peak RSS.

The peak RSS is the process's own ``VmHWM`` (``/proc/self/status``), written at exit by
a small wrapper around ``kvcheck.cli.main``: ``ru_maxrss`` from ``wait4``/``getrusage``
is not usable here, because Linux carries the parent's high-water mark across
``fork``/``vfork`` + ``exec`` (a test session that imported torch makes every child look
600 MB large).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Runs kvcheck's CLI as ``python -m kvcheck`` would, and writes VmHWM (kB) at exit.
WRAPPER = (
    "import atexit, os, sys\n"
    "def _hwm():\n"
    "    try:\n"
    "        with open('/proc/self/status') as fh:\n"
    "            kb = next(int(l.split()[1]) for l in fh if l.startswith('VmHWM:'))\n"
    "        with open(os.environ['KVCHECK_TEST_HWM'], 'w') as out:\n"
    "            out.write(str(kb))\n"
    "    except (OSError, StopIteration):\n"
    "        pass\n"
    "atexit.register(_hwm)\n"
    "sys.argv[0] = 'kvcheck'\n"
    "from kvcheck.cli import main\n"
    "main()\n"
)


def run_measured(*args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float, float]:
    """``kvcheck ARGS`` in a fresh process; (result, wall seconds, peak RSS in MB of that
    process, ``nan`` where ``/proc`` is missing). Output goes through temporary files
    so the child never blocks on a full pipe."""
    with tempfile.TemporaryDirectory() as tmp:
        hwm = Path(tmp) / "hwm"
        env = {**os.environ, "KVCHECK_TEST_HWM": str(hwm)}
        with open(Path(tmp) / "out", "w+b") as out, open(Path(tmp) / "err", "w+b") as err:
            start = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *args], stdout=out, stderr=err, cwd=REPO, env=env)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            took = time.monotonic() - start
            out.seek(0), err.seek(0)
            result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))
        rss = int(hwm.read_text()) / 1024.0 if hwm.exists() else float("nan")
    return result, took, rss
