"""Run the team's shared handed cases (../shared/cases) through ../shared/tools/run-cases.

The same situations are restated one by one in test_handed_cases.py; this test also
catches a case added to shared/ later. Skipped where the shared folder is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

RUN_CASES = REPO.parent / "shared" / "tools" / "run-cases"


@pytest.mark.skipif(not RUN_CASES.exists(), reason="../shared/tools/run-cases is not beside this checkout")
def test_every_shared_case_agrees_with_the_runtime_outcome():
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, str(RUN_CASES), "--verbose"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")
