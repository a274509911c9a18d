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


# The handed cases' situations in the project's own words (files written here, in the cases'
# shapes), release by release: what each release's own code does with them.
from helpers import run_cli, write_config  # noqa: E402

NIXL = {"disaggregation-transfer-backend": "nixl"}
PREFILL = {"disaggregation-mode": "prefill", **NIXL}
DECODE = {"disaggregation-mode": "decode", **NIXL}
DSA = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16"}
HISPARSE = {"enable-hisparse": True, "disable-radix-cache": True}


def _on(tmp_path, model, pa, da, release):
    from kvcheck.preflight import run_preflight
    from kvcheck.sources import load_side

    p = load_side(str(write_config(tmp_path, "prefill", model, pa)), "prefill", sglang_version=release)
    d = load_side(str(write_config(tmp_path, "decode", model, da)), "decode", sglang_version=release)
    return run_preflight(p, d, kernel="builtin")


def _unpinned(tmp_path, model, pa, da) -> tuple[int, dict]:
    import json

    p, d = write_config(tmp_path, "prefill", model, pa), write_config(tmp_path, "decode", model, da)
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", pin=False)
    return proc.returncode, json.loads(proc.stdout)


def test_hicache_on_the_prefill_only_is_decided_on_every_release(tmp_path):
    """HiCache on the prefill only: its start-up is restated on 0.5.5 .. 0.5.23 (0.5.17 .. 0.5.21
    add only HiCache + DCP checks), so the unpinned pair passes over the whole window, VRAM to VRAM."""
    rc, report = _unpinned(tmp_path, "llama-3.1-8b", {**PREFILL, "page-size": 16, "enable-hierarchical-cache": True, "hicache-ratio": 2.0},
                           {**DECODE, "page-size": 16})
    ids = [f["id"] for f in report["findings"]]
    assert rc == 0 and report["verdict"] == "pass", ids
    assert "startup-unchecked" not in ids and "release-window" not in ids
    assert report["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]


def test_hisparse_decode_over_nixl_release_by_release(tmp_path):
    """A DSA decode with HiSparse (host KV pool): from 0.5.15 NIXL moves every region into host
    (DRAM) memory; before 0.5.15 the decode registers that host pool as VRAM, which NIXL >= 1.0.0
    refuses at start-up (NIXL_ERR_BACKEND), and which an older or unknown NIXL leaves open."""
    for release in ("0.5.15", "0.5.23"):
        r = _on(tmp_path, "deepseek-v3.2", {**PREFILL, **DSA}, {**DECODE, **DSA, **HISPARSE}, release)
        assert r.exit_code == 0 and r.plan.path == "direct_to_host", release
        assert [s.as_list() for s in r.plan.segments] == [[0, 61, "VRAM", "DRAM"]]
    for release, nixl, verdict in (("0.5.12.post1", None, "unchecked"), ("0.5.14", "1.2.0", "fail"), ("0.5.10", "0.10.1", "unchecked")):
        env = {"kvcheck-env": {"NIXL_VERSION": nixl}} if nixl else {}
        r = _on(tmp_path, "deepseek-v3.2", {**PREFILL, **DSA}, {**DECODE, **DSA, **HISPARSE, **env}, release)
        found = {f.id: f for f in r.findings}
        assert r.verdict == verdict and "startup-unchecked" not in found, (release, list(found))
        if verdict == "fail":
            assert found["hisparse-host-as-vram"].runtime_error.message == "NIXL_ERR_BACKEND"
        else:
            assert "registers its host KV pool with NIXL as VRAM" in found["connector-startup"].message
    rc, report = _unpinned(tmp_path, "deepseek-v3.2", {**PREFILL, **DSA}, {**DECODE, **DSA, **HISPARSE})
    window = next(f["message"] for f in report["findings"] if f["id"] == "release-window")
    assert rc == 4 and "is unchecked on 0.5.10-0.5.14" in window and "passes on 0.5.15-0.5.23" in window


def test_kv_dtype_strings_are_compared_from_0_5_10(tmp_path):
    """auto against bf16 (the same bytes): 0.5.5 .. 0.5.9 compare no KV dtype at bootstrap (no
    kv_cache_dtype anywhere in their disaggregation code), 0.5.10 compares the strings."""
    p, d = {**PREFILL, "page-size": 16}, {**DECODE, "page-size": 16, "kv-cache-dtype": "bf16"}
    assert _on(tmp_path, "llama-3.1-8b", p, d, "0.5.9").exit_code == 0
    r = _on(tmp_path, "llama-3.1-8b", p, d, "0.5.10")
    assert r.verdict == "fail" and any(
        (f.runtime_error and f.runtime_error.message) == "KV cache dtype mismatch: prefill server has kv_cache_dtype=auto, but decode "
        "server has kv_cache_dtype=bf16. Both servers must use the same --kv-cache-dtype value." for f in r.findings)
