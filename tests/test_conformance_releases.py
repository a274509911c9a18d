"""Builtin vs runtime, release by release: each installed SGLang release in its own process.

``scripts/setup-test-env.sh`` installs the releases whose PD path changed side by side
(``pip install --no-deps --target <venv>/sglang-releases/X sglang==X``); each is imported
alone (``PYTHONPATH=<venv>/sglang-releases/X``) by ``tests/conformance_worker.py``, which
drives that release's own ``try_ensure_parallel_info`` / ``PrefillServerInfo`` /
``KVArgsRegisterInfo.from_zmq`` (and, where the runtime kernel drives it, the prefill's
``_add_remote_peer``) against kvcheck's restatement with ``behaviour(X)`` on a seeded
corpus, and reports every disagreement. The installed SGLang (0.5.23) runs the same way.

Expected values come from each release's code; the corpus sizes are set so that CI
compares more than 10,000 pairs in all (``KVCHECK_CONFORMANCE_PAIRS`` scales them).
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

pytest.importorskip("sglang")

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(1800)]

ROOT = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))
INSTALLED = sorted((p.name for p in ROOT.glob("0.*") if (p / "sglang" / "__init__.py").exists()), key=lambda v: [int(x) for x in v.replace("post", ".").split(".") if x])
SCALE = float(os.environ.get("KVCHECK_CONFORMANCE_PAIRS", "1"))
BOOTSTRAP_PAIRS = int(1200 * SCALE)
TRANSFER_PAIRS = int(4000 * SCALE)  # the installed release; a quarter for other releases with a modeled decision


def _run(release: str, path: str | None, seed: int) -> dict:
    env = dict(os.environ)
    parts = ([path] if path else []) + [str(ROOT / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    cmd = [sys.executable, str(REPO / "tests" / "conformance_worker.py"), "--release", release, "--pairs", str(BOOTSTRAP_PAIRS), "--seed", str(seed)]
    # the prefill decision, where kvcheck restates it (0.5.5 .. 0.5.23): the worker skips it elsewhere
    cmd += ["--transfer-pairs", str(TRANSFER_PAIRS if path is None else TRANSFER_PAIRS // 4)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    import sglang

    jobs = [(sglang.__version__, None)] + [(v, str(ROOT / v)) for v in INSTALLED if v != sglang.__version__]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {v: pool.submit(_run, v, p, 1000 + i) for i, (v, p) in enumerate(jobs)}
        out = {v: f.result() for v, f in futures.items()}
    for v, r in out.items():  # shown with -s / in the captured output on failure
        parts = {k: r[k] for k in ("bootstrap", "route", "registration", "transfer") if k in r}
        print(f"conformance sglang {v}: {parts} in {r['seconds']} s (import {r['import_seconds']} s)")
    return out


def test_each_release_agrees_with_kvcheck(results):
    for release, r in results.items():
        assert r["imported"] == release, r  # the release's own code ran, not another one
        assert r["n_disagreements"] == 0, json.dumps(r["disagreements"][:3], indent=1)


def test_the_corpus_covers_the_releases_where_the_pd_path_changed(results):
    if len(results) < 4:
        pytest.skip(f"only {sorted(results)} installed beside this Python (run scripts/setup-test-env.sh)")
    from kvcheck.sglang.pd_release import BOOTSTRAP_VARIANTS

    modeled = [v for v in results if "bootstrap" in results[v]]
    assert len(modeled) >= 4
    assert "0.5.23" in results and "0.5.8" in results  # the newest release and the oldest v1 /route decode with checks
    total = sum(r.get("bootstrap", 0) + r.get("route", 0) + r.get("registration", 0) + r.get("transfer", 0) for r in results.values())
    if SCALE >= 1:
        assert total >= 10_000, total
    # the oldest restated bootstrap variant (0.5.5) ran too, once scripts/setup-test-env.sh installed it
    oldest = min(BOOTSTRAP_VARIANTS.values(), key=lambda v: [int(x) for x in v.replace("post", "").split(".")])
    if oldest not in results:
        pytest.skip(f"SGLang {oldest} (the oldest modeled release) is not installed: run scripts/setup-test-env.sh")


def test_each_modeled_prefill_decision_ran_against_its_release(results):
    """Every installed release whose prefill decision kvcheck restates (0.5.5 .. 0.5.23)
    drove its own code on compared pairs (0.5.5 .. 0.5.12.post1: add_transfer_request /
    transfer_worker for one request; later: _add_remote_peer); from 0.5.15 on the corpus
    has host and mixed memory kinds, from 0.5.17 decode DCP, and the releases where a branch
    changed (0.5.17: DCP relayout and layer-id pairing; 0.5.21: PP-MLA offsets) reached
    the outcomes only they produce."""
    from kvcheck.sglang.pd_release import at_least, behaviour

    modeled = [v for v in results if behaviour(v).decision_modeled]
    if not modeled:
        pytest.skip("no release with a modeled prefill decision installed")
    for v in modeled:
        assert results[v].get("transfer", 0) >= 1, results[v]
        assert "transfer_skipped" not in results[v], results[v]
        outcomes = results[v].get("transfer_outcomes", {})
        if at_least(behaviour(v).decision_variant, "0.5.15"):  # memory kinds (0.5.15)
            assert {"direct_to_host", "mixed_segments"} <= set(outcomes), outcomes
        if behaviour(v).dcp_relayout:  # 0.5.17
            assert "dcp_relayout" in outcomes and any(k.startswith("RuntimeError:Unsupported PD DCP") for k in outcomes), outcomes
        if behaviour(v).pp_mla_offsets:  # 0.5.21
            assert any(k.startswith("RuntimeError:PP-heterogeneous MLA") for k in outcomes) or "equal_tp" in outcomes, outcomes
    for v in ("0.5.17", "0.5.21"):
        if v in results:
            assert behaviour(v).decision_modeled and results[v]["transfer"] >= 100, results[v]


def test_release_0_5_8_registration_is_refused_by_newer_prefills(results):
    """A 0.5.8 decode's 11-frame registration (gpu_id at frame 7) against newer prefills:
    each newer release's own from_zmq raises what kvcheck predicts (checked in the worker)."""
    newer = [v for v, r in results.items() if r.get("registration")]
    if not newer:
        pytest.skip("no release with a different frame layout installed")
    for v in newer:
        assert results[v]["registration"] >= 1
