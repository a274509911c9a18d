"""SGLang's own PD tests, rebuilt from each release's test base class, pass in kvcheck.

``tests/data/sglang_pd_tests.yaml`` restates how each SGLang PD test class launches its
two servers (with the repo@commit:path read). ``tests/sglang_pd_tests_worker.py`` runs a
release's own base class as SGLang's CI does and records the two argvs (the release's
``ServerArgs`` parser must accept them); ``scripts/record_sglang_pd_tests.py`` runs it for
every modeled release into ``tests/data/sglang_pd_tests_recorded.json`` (the heavy part:
importing 21 SGLang releases). Here each recorded pair is checked cheaply, in process,
on both input paths, pinned to its release and to the CI runner's GPU:

* ``-f``: the pair as a launch script (``kvcheck preflight -f``);
* pair: the two argvs as command-line files (``kvcheck preflight -p -d``, the env of each
  side as ``--prefill-env``/``--decode-env``).

The tests pass in SGLang's CI, so kvcheck must pass them (exit 0), or say unchecked with
the reason the data names; both paths must agree. A class SGLang's CI skips
(``skip_in_ci``) is listed, not counted. The recording is checked for staleness, and the
installed release (0.5.23) is re-recorded live to prove the recording is what the
release's own base class builds (``KVCHECK_PD_TESTS_LIVE=all``: every release installed
side by side too).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from packaging.version import Version
from typer.testing import CliRunner

from kvcheck.cli import app

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "sglang_pd_tests.yaml"
RECORDED = REPO / "tests" / "data" / "sglang_pd_tests_recorded.json"
INSTALLED = "0.5.23"  # the SGLang in the test venv itself
# Unchecked for a reason outside the PD transfer: the release's start-up refusals are not
# verified by kvcheck (kvcheck.sglang.startup, STARTUP_VERIFIED_RELEASES).
OUTSIDE_THE_TRANSFER = {"startup-unchecked"}


def _recorder():
    spec = importlib.util.spec_from_file_location(
        "record_sglang_pd_tests", REPO / "scripts" / "record_sglang_pd_tests.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RECORDER = _recorder()


def _spec() -> dict:
    return yaml.safe_load(DATA.read_text())


def _recorded() -> dict:
    """The recording as ``{"inputs_sha256", "releases": {release: [record per test]}}``."""
    data = json.loads(RECORDED.read_text())
    return {"inputs_sha256": data["inputs_sha256"], "releases": RECORDER.expand(data)}


def _models(spec: dict, tmp: Path) -> dict[str, str]:
    """Hub ids the data gives a config directory for -> that directory copied under
    ``tmp`` (``-f`` reads a model directory only under the script's own folder)."""
    local = {}
    for k, v in spec["models"].items():
        if v.get("path"):
            dst = tmp / "models" / Path(v["path"]).name
            if not dst.exists():
                shutil.copytree(REPO / v["path"], dst)
            local[k] = str(dst)
    return local


def _inputs(rec: dict, model_path: str, tmp: Path, local: dict[str, str]) -> tuple[Path, list[str]]:
    """The pair as a launch script (``-f``) and as pair arguments (``-p``/``-d``)."""
    lines, pair = [], []
    for port, role in ((21100, "prefill"), (21200, "decode")):
        side = rec[role]
        argv = [local.get(a, a) for a in side["argv"]]
        env = "".join(f"{k}={shlex.quote(str(v))} " for k, v in sorted(side["env"].items()))
        lines.append(
            f"{env}python3 -m sglang.launch_server --model-path {model_path} --host 127.0.0.1 --port {port} "
            f"{' '.join(shlex.quote(a) for a in argv)} &\n"
        )
        args = tmp / f"{rec['name']}.{role}.args"
        args.write_text(
            shlex.join(["--model-path", model_path, "--host", "127.0.0.1", "--port", str(port), *argv]) + "\n"
        )
        pair += [f"--{role}", str(args)]
        if side["env"]:
            env_file = tmp / f"{rec['name']}.{role}.env"
            env_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(side["env"].items())))
            pair += [f"--{role}-env", str(env_file)]
    script = tmp / f"{rec['name']}.sh"
    script.write_text("".join(lines))
    return script, pair


def _kvcheck(inputs: list[str], release: str, gpu: str) -> tuple[int, dict]:
    args = ["preflight", *inputs, "--sglang-version", release, "--gpu", gpu, "--kernel", "builtin", "--format", "json"]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.stdout.strip(), res.output[-2000:]
    return res.exit_code, json.loads(res.stdout)


def _not_passing(report: dict) -> list[str]:
    fs = [f for p in report.get("pairs", []) for f in p["findings"]] + report.get("findings", [])
    return sorted(f"{f['id']}: {f['message'][:300]}" for f in fs if f["severity"] in ("error", "unchecked"))


def _outcome(t: dict, release: str, rc: int, findings: list[str]) -> str:
    want = (t.get("expect") or {}).get("unchecked")
    before = (t.get("expect") or {}).get("fail_before")
    fails_on = (t.get("expect") or {}).get("fails_on") or []
    if (before and Version(release) < Version(before)) or release in fails_on:
        # the release's own send path writes this pair wrongly (see the data's note)
        ok = rc == 1 and any(f.startswith(t["expect"]["finding"] + ":") for f in findings)
        return "fails-as-the-release-writes" if ok else "DISAGREES"
    ids = {f.split(":", 1)[0] for f in findings}
    if rc == 0:
        return "pass"  # (decided where the data expected unchecked: not a disagreement)
    if rc == 4 and ids <= OUTSIDE_THE_TRANSFER:
        return "unchecked-startup"  # kvcheck's start-up model does not cover this release (said, counted)
    if rc == 4 and want and any(want in f for f in findings):
        return "unchecked-as-expected"
    return "DISAGREES"


def run_release(release: str, tmp: Path) -> list[dict]:
    """Every test of the data on ``release``, from the recording: one row per test with
    ``outcome`` one of pass / unchecked-as-expected / unchecked-startup /
    fails-as-the-release-writes / not-in-release / skipped-in-ci / skipped / DISAGREES."""
    spec = _spec()
    by_name = {t["name"]: t for t in spec["tests"]}
    local = _models(spec, tmp)
    rows = []
    for rec in _recorded()["releases"][release]:
        t = by_name[rec["name"]]
        row = {"release": release, "name": rec["name"], "source": t["source"]}
        rows.append(row)
        if not rec["applies"]:
            # a base class the recorder could not drive is the harness's failure, not the test's absence
            harness = rec["why"].startswith("the base class could not be driven")
            row.update(outcome="DISAGREES" if harness else "not-in-release", why=rec["why"])
            continue
        if t.get("skip_in_ci"):
            row.update(outcome="skipped-in-ci", why=t["skip_in_ci"])
            continue
        model = spec["models"].get(rec["model"])
        if model is None:
            row.update(
                outcome="skipped", why=f"model {rec['model']} is neither in kvcheck's catalog nor given a stand-in"
            )
            continue
        if rec.get("draft") and rec["draft"] not in spec["models"]:
            row.update(
                outcome="skipped", why=f"draft model {rec['draft']} is neither in kvcheck's catalog nor given a config"
            )
            continue
        model_path = local.get(rec["model"], model.get("standin", rec["model"]))
        if model.get("standin") or model.get("path"):
            row["model"] = f"{rec['model']} (stand-in: {model.get('standin') or model['path']})"
        script, pair = _inputs(rec, model_path, tmp, local)
        gpu = t.get("gpu", "h100")
        rc_f, rep_f = _kvcheck(["-f", str(script)], release, gpu)
        rc_p, rep_p = _kvcheck(pair, release, gpu)
        f_f, f_p = _not_passing(rep_f), _not_passing(rep_p)
        row.update(rc=rc_f, findings=f_f, pair_rc=rc_p, pair_findings=f_p)
        out_f, out_p = _outcome(t, release, rc_f, f_f), _outcome(t, release, rc_p, f_p)
        ids_f = {f.split(":", 1)[0] for f in f_f}
        ids_p = {f.split(":", 1)[0] for f in f_p}
        # the same deployment gets the same answer on every input path
        row["outcome"] = out_f if (out_f == out_p and ids_f == ids_p) else "DISAGREES"
        if row["outcome"] == "DISAGREES" and out_f == out_p:
            row["why"] = f"-f and pair paths report different findings: {sorted(ids_f ^ ids_p)}"
    return rows


def test_recording_is_current():
    """The recording was made from the data and worker as they are, for every release."""
    rec = _recorded()
    assert rec["inputs_sha256"] == RECORDER.inputs_digest(), (
        "tests/data/sglang_pd_tests.yaml or the worker changed: run python scripts/record_sglang_pd_tests.py"
    )
    names = [t["name"] for t in _spec()["tests"]]
    assert list(rec["releases"]) == list(RECORDER.RELEASES)
    for release, recs in rec["releases"].items():
        assert [r["name"] for r in recs] == names, release
        assert {r["release"] for r in recs} == {release}


def _live_releases() -> list[str]:
    if os.environ.get("KVCHECK_PD_TESTS_LIVE", "").strip() == "all":
        side = [r for r in RECORDER.RELEASES if (RECORDER.SIDE_BY_SIDE / r / "sglang").is_dir()]
        return [INSTALLED, *[r for r in side if r != INSTALLED]]
    return [INSTALLED]


@pytest.mark.parametrize("release", _live_releases())
def test_recording_is_what_the_release_builds(release, tmp_path):
    """Re-record live: the release's own base class, test_utils and ServerArgs give the
    recorded argvs (no GPU: popen_launch_pd_server is replaced by a recorder)."""
    if release != RECORDER.installed_release() and not (RECORDER.SIDE_BY_SIDE / release / "sglang").is_dir():
        pytest.skip(f"SGLang {release} is not installed side by side (scripts/setup-test-env.sh RELEASES)")
    live = RECORDER.run_worker(release, _spec()["tests"], tmp_path / "cache")
    assert live == _recorded()["releases"][release]


@pytest.mark.parametrize("release", RECORDER.RELEASES)
def test_sglang_pd_tests_pass_on_their_release(release, tmp_path):
    rows = run_release(release, tmp_path)
    out = os.environ.get("KVCHECK_PD_TESTS_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in rows))
    bad = [r for r in rows if r["outcome"] == "DISAGREES"]
    assert not bad, json.dumps(bad, indent=1)
    # the recorder drove the release's own base class: the pairs SGLang's CI launches were built
    assert any(r["outcome"] in ("pass", "unchecked-as-expected", "fails-as-the-release-writes") for r in rows), rows
