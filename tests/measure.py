"""Run the CLI in a fresh process and measure that process alone: its exit status,
output, wall time and peak RSS (``os.wait4`` on its pid, not RUSAGE_CHILDREN, which is
the largest child the test session ever waited for)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_measured(*args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float, float]:
    """``python -m kvcheck ARGS``; (result, wall seconds, peak RSS in MB of that process).
    Output goes through temporary files so the child never blocks on a full pipe."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kvcheck", *args], stdout=out, stderr=err, cwd=REPO)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        took = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))
    return result, took, usage.ru_maxrss / 1024.0
