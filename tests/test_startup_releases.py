"""kvcheck's start-up model, release by release, against each installed release's own start-up code.

``tests/startup_worker.py`` runs the seeded start-up corpus (``startup_corpus.draw``, and
``startup_worker.draw_plain``: the flags published deployments use) on four GPUs through one
release's ``prepare_server_args`` -> resolution -> ``check_server_args`` in its own process
(``PYTHONPATH=<venv>/sglang-releases/X``) and compares ``first_outcome`` for a side on that
release: the same exception class and text, no refusal where the release starts, or a
``Stop`` (unchecked). 0 disagreements on every release run here; the plain draws are never
unchecked (the steps are restated per release); a flag set that reaches a step its release
runs differently and kvcheck does not restate for it (``startup.unrestated_steps``) is
unchecked. A release kvcheck has not verified (newer than the newest modeled, or not modeled)
is unchecked whatever its flags. CI runs a handful of releases with a few draws each; the full
measurement over every release is ``benchmarks/measure_startup_releases.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import REPO

ROOT = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))
# (release, corpus draws, sharded draws, plain draws), each on 4 GPUs: one release per era of
# start-up code (0.5.5 .. 0.5.7 FA4 prefill-only and the NSA texts, 0.5.8 .. 0.5.9 trtllm_mha
# SM100-only, 0.5.10 .. 0.5.18 the split TRTLLM MHA checks; 0.5.23 is tests/test_startup_corpus.py);
# about 2 min CPU in all (two at a time). Every release: benchmarks/measure_startup_releases.py.
# The last two: HiCache and HiSparse draws (startup_worker.draw_hicache / draw_hisparse), restated
# per release: 0.5.12.post1 (HiSparse's validate_hisparse of 0.5.12 .. 0.5.13), 0.5.17 (HiCache's DCP era).
RUNS = (("0.5.5", 8, 0, 8, 0, 0), ("0.5.8", 8, 0, 8, 0, 0), ("0.5.17", 8, 2, 8, 4, 4), ("0.5.12.post1", 0, 0, 2, 0, 8))


def _run(release: str, draws: int, sharded: int, plain: int, hicache: int, hisparse: int, tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / release), str(ROOT / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
    cmd = [sys.executable, str(REPO / "tests" / "startup_worker.py"), "--release", release, "--draws", str(draws),
           "--sharded-draws", str(sharded), "--plain-draws", str(plain), "--hicache-draws", str(hicache),
           "--hisparse-draws", str(hisparse), "--tmp", str(tmp / release)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["plain_draws"] = plain
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    pytest.importorskip("sglang")
    runs = [r for r in RUNS if (ROOT / r[0] / "sglang" / "__init__.py").exists()]
    if len(runs) < 2:
        pytest.skip(f"fewer than two of {[r[0] for r in RUNS]} installed under {ROOT} (run scripts/setup-test-env.sh)")
    tmp = tmp_path_factory.mktemp("startup-releases")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {r[0]: pool.submit(_run, *r, tmp) for r in runs}
        out = {v: f.result() for v, f in futures.items()}
    for v, r in out.items():
        print(f"startup sglang {v}: compared {r['compared']} (parser refused {r['parser_refused']}), runtime refusals "
              f"{r['runtime_refusals']}, starts {r['runtime_starts']}, kvcheck unchecked {r['stops']}, "
              f"disagreements {r['n_disagreements']} in {r['seconds']} s")
    return out


pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]


def test_each_release_agrees_with_kvcheck(results):
    for release, r in results.items():
        assert r["imported"] == release, r  # that release's own code ran
        assert r["compared"] >= 30, r
        assert r["runtime_refusals"] >= 5 and r["runtime_starts"] >= 5, r  # both verdicts are exercised
        assert r["n_disagreements"] == 0, "\n".join(r["disagreements"][:10])


def test_plain_deployments_are_decided_on_every_release(results):
    """The flags published deployments use are decided on each release (never
    ``startup-unchecked``); what is left unchecked names the release and the step."""
    for release, r in results.items():
        assert r.get("plain_stops", 0) == 0, r
        assert r["stops"] < r["compared"] // 2, r
        for reason in r["stop_reasons"]:
            assert reason.startswith(f"SGLang {release}: its start-up refusals") or "not restated" in reason, reason


@pytest.mark.parametrize("release,verified", [("0.5.5", True), ("0.5.8.post1", True), ("0.5.13.post1", True), ("0.5.23", True),
                                              ("0.5.24", False), ("0.6.0", False), ("0.5.4", False)])
def test_unverified_releases_fail_closed(tmp_path, release, verified):
    """A release outside ``STARTUP_VERIFIED_RELEASES`` (newer than the newest modeled, or not
    verified) is a ``ReleaseStop`` whatever its flags, never another release's answer; a
    verified one is decided on plain flags. Needs no runtime."""
    import startup_corpus as C
    from kvcheck.sglang.startup import STARTUP_VERIFIED_RELEASES, ReleaseStop, first_outcome

    d = C.model_dirs(tmp_path)["qwen3-8b"]
    side = C.kv_side("prefill", d, {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", "tp_size": 2}, "h100")
    side.sglang_version = release
    out = first_outcome(side)
    assert (release in STARTUP_VERIFIED_RELEASES) == verified
    if verified:
        assert out is None
    else:
        assert isinstance(out, ReleaseStop) and out.release == release
        assert f"SGLang {release}: kvcheck has not verified" in out.reason


def test_a_pinned_old_release_is_decided_and_an_unknown_one_unchecked(tmp_path):
    """The ``startup`` check on the same flags (``tp_size`` 1 over 2 nodes: check_server_args'
    node split, the same text in every release 0.5.5 .. 0.5.23): an error on 0.5.8 as on 0.5.23,
    one ``startup-unchecked`` finding naming 0.5.24 (newer than the newest modeled)."""
    import startup_corpus as C
    from kvcheck.checks.base import REGISTRY, Severity
    from kvcheck.checks.startup import side_findings

    d = C.model_dirs(tmp_path)["qwen3-8b"]
    flags = {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", "nnodes": 2}
    side = C.kv_side("prefill", d, flags, "h100")
    for release in ("0.5.23", "0.5.8", "0.5.8.post1", "0.5.13.post1"):
        side.sglang_version = release
        found = side_findings(REGISTRY["startup"], side)
        assert [(f.id, f.severity) for f in found] == [("nodes", Severity.ERROR)], release
        assert found[0].runtime_error.message == "tp_size must be divisible by number of nodes"
    side.sglang_version = "0.5.24"
    found = side_findings(REGISTRY["startup"], side)
    assert [(f.id, f.severity) for f in found] == [("startup-unchecked", Severity.UNCHECKED)]
    assert "SGLang 0.5.24" in found[0].message
