"""kvcheck's start-up model, release by release, against each installed release's own start-up code.

``tests/startup_worker.py`` runs the seeded start-up corpus (``startup_corpus.draw`` /
``draw_sharded_prefill``, the same distribution as test_startup_corpus.py) through one older
release's ``prepare_server_args`` -> resolution -> ``check_server_args`` in its own process
(``PYTHONPATH=<venv>/sglang-releases/X``) and compares ``first_outcome`` for a side on that
release: the same exception class and text, no refusal where the release starts, or a
``Stop`` (unchecked). 0 disagreements on every release run here; a release older than
``STARTUP_VERIFIED_FROM`` is ``unchecked`` wherever the flags reach a step in which it differs
(``startup._older_release_differences``) and predicted on plain flag sets; 0.5.22 is predicted
(with --enable-kv-cache-sharding a Stop).
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
# (release, draws, sharded draws) x 4 GPUs each, + plain draws on Hopper (startup_worker.draw_plain);
# about 100 s in all on 2 busy cores.
RUNS = (("0.5.8", 12, 0, 15), ("0.5.17", 10, 0, 15), ("0.5.22", 25, 4, 0))


def _run(release: str, draws: int, sharded: int, plain: int, tmp: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / release), str(ROOT / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
    cmd = [sys.executable, str(REPO / "tests" / "startup_worker.py"), "--release", release, "--draws", str(draws),
           "--sharded-draws", str(sharded), "--plain-draws", str(plain), "--tmp", str(tmp / release)]
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
        assert r["compared"] >= 20, r
        assert r["runtime_refusals"] >= 5 and r["runtime_starts"] >= 5, r  # both verdicts are exercised
        assert r["n_disagreements"] == 0, "\n".join(r["disagreements"][:10])


def test_unverified_releases_are_unchecked_and_verified_ones_decided(results):
    from kvcheck.sglang.releases import in_range
    from kvcheck.sglang.startup import STARTUP_VERIFIED_FROM

    for release, r in results.items():
        if in_range(release, STARTUP_VERIFIED_FROM):
            assert r["stops"] < r["compared"] // 3, r  # kvcheck decides most of them
        else:
            # every corpus draw reaches a step where the release differs: unchecked, never
            # 0.5.23's answer; the plain draws (TP, page size, NIXL/Mooncake on Hopper) are decided
            assert r["stops"] >= r["compared"] - r["plain_draws"] and r["stops"] > 0, r
            assert all(k.startswith(f"SGLang {release}: its start-up refusals") for k in r["stop_reasons"]), r["stop_reasons"]


def test_an_older_release_side_is_reported_unchecked_by_name():
    """The ``startup`` check on a 0.5.8 side: one ``startup-unchecked`` finding naming 0.5.8,
    where the same flags on 0.5.23 are its ``check_server_args`` node-split refusal (``tp_size``
    1 over 2 nodes: validation_hook.check_server_args, SGLang 0.5.23). Needs no runtime."""
    import startup_corpus as C
    from kvcheck.checks.base import REGISTRY, Severity
    from kvcheck.checks.startup import side_findings

    d = C.model_dirs(Path(__import__("tempfile").mkdtemp()))["qwen3-8b"]
    flags = {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", "nnodes": 2}
    side = C.kv_side("prefill", d, flags, "h100")
    side.sglang_version = "0.5.23"
    newest = side_findings(REGISTRY["startup"], side)
    assert [f.severity for f in newest] == [Severity.ERROR]
    side.sglang_version = "0.5.8"
    old = side_findings(REGISTRY["startup"], side)
    assert [(f.id, f.severity) for f in old] == [("startup-unchecked", Severity.UNCHECKED)]
    assert "SGLang 0.5.8" in old[0].message
