"""SGLang's own PD tests, rebuilt from each release's test base class, pass in kvcheck.

``tests/data/sglang_pd_tests.yaml`` restates how each SGLang PD test class launches its
two servers (with the repo@commit:path read). ``tests/sglang_pd_tests_worker.py`` runs
the release's own base class as SGLang's CI does and records the two argvs (the release's
``ServerArgs`` parser must accept them); here each pair becomes a launch script that
``kvcheck preflight -f`` reads, pinned to that release and to the CI runner's GPU. The
tests pass in SGLang's CI, so kvcheck must pass them (exit 0), or say unchecked with the
reason the data names.

CI runs the releases it installs (``scripts/setup-test-env.sh``); the others are run with
``KVCHECK_PD_TESTS_RELEASES=all`` (or a space-separated list). ``run_release`` is also
what ``benchmarks/sglang_pd_tests.py``-style reports call.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "sglang_pd_tests.yaml"
RELEASES_DIR = REPO / ".venv" / "sglang-releases"
INSTALLED = "0.5.23"  # the SGLang in the test venv itself
CI_RELEASES = ("0.5.23", "0.5.12.post1", "0.5.7")
# Unchecked for a reason outside the PD transfer: the release's start-up refusals are not
# verified by kvcheck (kvcheck.sglang.startup, STARTUP_VERIFIED_RELEASES).
OUTSIDE_THE_TRANSFER = {"startup-unchecked"}


def _spec() -> dict:
    return yaml.safe_load(DATA.read_text())


def _worker(release: str, tests: list[dict], tmp: Path) -> list[dict]:
    stubs = [str(REPO / "tests" / "stubs_pd"), str(REPO / "tests" / "stubs")]
    if release == INSTALLED:
        path = stubs
    else:
        path = [str(RELEASES_DIR / release), str(RELEASES_DIR / "_deps"), *stubs]
    path.append(str(REPO))
    src = tmp / f"pd_tests_{release}.json"
    src.write_text(json.dumps(tests))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "sglang_pd_tests_worker.py"), str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _script(rec: dict, model_path: str, tmp: Path, local: dict[str, str]) -> Path:
    """The pair as a launch script; ``local``: hub ids (a draft model) read from a config
    directory of the data instead."""
    lines = []
    for port, role in ((21100, "prefill"), (21200, "decode")):
        side = rec[role]
        env = "".join(f"{k}={shlex.quote(str(v))} " for k, v in sorted(side["env"].items()))
        argv = " ".join(shlex.quote(local.get(a, a)) for a in side["argv"])
        lines.append(
            f"{env}python3 -m sglang.launch_server --model-path {model_path} --host 127.0.0.1 --port {port} {argv} &\n"
        )
    path = tmp / f"{rec['name']}.{rec['release']}.sh"
    path.write_text("".join(lines))
    return path


def _kvcheck(script: Path, release: str, gpu: str) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvcheck",
            "preflight",
            "-f",
            str(script),
            "--sglang-version",
            release,
            "--gpu",
            gpu,
            "--kernel",
            "builtin",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.stdout, proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def _not_passing(report: dict) -> list[str]:
    fs = [f for p in report.get("pairs", []) for f in p["findings"]] + report.get("findings", [])
    return [f"{f['id']}: {f['message'][:300]}" for f in fs if f["severity"] in ("error", "unchecked")]


def run_release(release: str, tmp: Path) -> list[dict]:
    """Every test of the data on ``release``: one row per test with ``outcome`` one of
    pass / unchecked-as-expected / fails-as-the-release-writes / not-in-release / skipped /
    DISAGREES."""
    spec = _spec()
    tests = spec["tests"]
    by_name = {t["name"]: t for t in tests}
    rows = []
    jobs = []
    for rec in _worker(release, tests, tmp):
        t = by_name[rec["name"]]
        row = {"release": release, "name": rec["name"], "source": t["source"]}
        rows.append(row)
        if not rec["applies"]:
            # a base class the recorder could not drive is the harness's failure, not the test's absence
            harness = rec["why"].startswith("the base class could not be driven")
            row.update(outcome="DISAGREES" if harness else "not-in-release", why=rec["why"])
            continue
        model = spec["models"].get(rec["model"])
        if model is None:
            row.update(
                outcome="skipped", why=f"model {rec['model']} is neither in kvcheck's catalog nor given a stand-in"
            )
            continue
        path = model.get("standin", rec["model"])
        row["model"] = rec["model"] + (f" (stand-in {path})" if path != rec["model"] else "")
        # -f reads a model directory only under the script's own folder: the data's config
        # directories are copied beside the scripts
        local = {}
        for k, v in spec["models"].items():
            if v.get("path"):
                dst = tmp / "models" / Path(v["path"]).name
                if not dst.exists():
                    shutil.copytree(REPO / v["path"], dst)
                local[k] = str(dst)
        if rec.get("draft") and rec["draft"] not in local and rec["draft"] not in spec["models"]:
            row.update(
                outcome="skipped", why=f"draft model {rec['draft']} is neither in kvcheck's catalog nor given a config"
            )
            continue
        jobs.append((row, t, _script(rec, path, tmp, local)))

    def one(job):
        row, t, script = job
        rc, rep = _kvcheck(script, release, t.get("gpu", "h100"))
        row.update(rc=rc, findings=_not_passing(rep))
        want = (t.get("expect") or {}).get("unchecked")
        before = (t.get("expect") or {}).get("fail_before")
        if before and Version(release) < Version(before):
            # the release's own send path writes this pair wrongly (see the data's note)
            ok = rc == 1 and any(f.startswith(t["expect"]["finding"] + ":") for f in row["findings"])
            row["outcome"] = "fails-as-the-release-writes" if ok else "DISAGREES"
            return row
        unchecked_ids = {f.split(":", 1)[0] for f in row["findings"]}
        if rc == 0 and not want:
            row["outcome"] = "pass"
        elif rc == 4 and unchecked_ids <= OUTSIDE_THE_TRANSFER:
            row["outcome"] = "unchecked-startup"  # kvcheck's start-up model does not cover this release (said, counted)
        elif rc == 4 and want and any(want in f for f in row["findings"]):
            row["outcome"] = "unchecked-as-expected"
        elif rc == 0 and want:
            row["outcome"] = "pass"  # decided where the data expected unchecked: not a disagreement
        else:
            row["outcome"] = "DISAGREES"
        return row

    with ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(one, jobs))
    return rows


def _releases() -> list[str]:
    asked = os.environ.get("KVCHECK_PD_TESTS_RELEASES", "").strip()
    if asked == "all":
        return [INSTALLED] + sorted(
            (p.name for p in RELEASES_DIR.iterdir() if p.name[0].isdigit()), key=Version, reverse=True
        )
    return asked.split() if asked else list(CI_RELEASES)


@pytest.mark.parametrize("release", _releases())
def test_sglang_pd_tests_pass_on_their_release(release, tmp_path):
    if release != INSTALLED and not (RELEASES_DIR / release / "sglang").is_dir():
        pytest.skip(f"SGLang {release} is not installed side by side (scripts/setup-test-env.sh RELEASES)")
    rows = run_release(release, tmp_path)
    out = os.environ.get("KVCHECK_PD_TESTS_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in rows))
    bad = [r for r in rows if r["outcome"] == "DISAGREES"]
    assert not bad, json.dumps(bad, indent=1)
    # the worker drove the release's own base class: the pairs SGLang's CI launches were built
    assert any(r["outcome"] in ("pass", "unchecked-as-expected") for r in rows), rows
