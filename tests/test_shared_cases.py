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
    # The cases state SGLang 0.5.23's outcome and their files name no release: pin it.
    pinned = f"{sys.executable} {REPO / 'tests' / 'pinned_kvcheck.py'}"
    proc = subprocess.run([sys.executable, str(RUN_CASES), "--verbose", "--kvcheck", pinned], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")


@pytest.mark.skipif(not RUN_CASES.exists(), reason="../shared/tools/run-cases is not beside this checkout")
def test_unpinned_shared_cases_never_pass_a_failure():
    """Unpinned, each case is decided over every release its flags allow: a case whose
    0.5.23 outcome is a failure is never passed (it fails, or is unchecked where an older
    release behaves otherwise), and the only disagreements are unchecked verdicts."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, str(RUN_CASES)], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    bad = [line for line in proc.stdout.splitlines() if line.startswith("MISMATCH")]
    assert all("verdict 'unchecked'" in line for line in bad), bad
    assert proc.stdout.strip().splitlines()[-1].endswith(f" {len(bad)} failed")
