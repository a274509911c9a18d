"""A verdict never rests on the machine kvcheck runs on (issue 15): not on the NIXL or
SGLang installed there, nor on a GPU library, nor on NIXL/SGLang settings in kvcheck's own
environment. The same inputs are checked in fresh processes on three "hosts":

* this venv as it is (SGLang 0.5.23, nixl-cu12 1.5.1 when installed);
* a host whose installed releases read differently: ``importlib.metadata`` and the
  dist-info folders on ``sys.path`` say SGLang 0.5.9 and NIXL 0.9.0 (a sitecustomize),
  with ``NIXL_VERSION``, ``SGLANG_DISAGGREGATION_NIXL_BACKEND``, ``UCX_TLS`` and
  ``CUDA_VISIBLE_DEVICES`` set in kvcheck's environment;
* a plain host: nixl, SGLang, torch and cupy neither importable nor installed as far as
  ``importlib`` can tell (a plain ``pip install -e .[test]`` venv).

Exit status, verdict, finding ids and severities, and the release each side is decided on
must be the same on all three. ``--kernel runtime`` (the installed SGLang's own code) is
the one thing a user asks for that reads the machine, and is not used here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import REPO, model_dir, write_config

_FAKE = textwrap.dedent('''
    # kvcheck test host (tests/test_hermetic.py): see HOST below.
    import importlib.abc, importlib.metadata as md, importlib.util, os, sys

    HOST = os.environ["KVCHECK_TEST_HOST"]
    if HOST == "other":
        FAKE = {"sglang": "0.5.9", "nixl": "0.9.0", "nixl-cu12": "0.9.0", "nixl_cu12": "0.9.0", "torch": "2.0.0"}
        _version = md.version
        def version(dist):
            return FAKE.get(dist.lower(), None) or _version(dist)
        md.version = version
    elif HOST == "plain":
        HIDE = ("nixl", "nixl_cu12", "nixl_cu13", "sglang", "torch", "cupy", "mooncake")
        class _Hidden(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in HIDE:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, _Hidden())
        _find_spec = importlib.util.find_spec
        importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in HIDE else _find_spec(name, package)
        _version = md.version
        def version(dist):
            if dist.lower().replace("_", "-").split("-")[0] in ("nixl", "sglang", "torch", "cupy", "mooncake"):
                raise md.PackageNotFoundError(dist)
            return _version(dist)
        md.version = version
''')


def _host(tmp: Path, name: str) -> dict[str, str]:
    """The environment of a kvcheck process on host ``name``."""
    site = tmp / f"host-{name}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_FAKE)
    if name == "other":  # dist-info folders found first on sys.path (kvcheck.sglang.releases.installed_version)
        for dist, ver in (("sglang", "0.5.9"), ("nixl_cu12", "0.9.0")):
            info = site / f"{dist}-{ver}.dist-info"
            info.mkdir(exist_ok=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {ver}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NIXL_", "SGLANG_", "UCX_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["KVCHECK_TEST_HOST"] = name
    if name == "other":
        env.update(NIXL_VERSION="0.9.0", SGLANG_DISAGGREGATION_NIXL_BACKEND="NOPE", UCX_TLS="tcp", CUDA_VISIBLE_DEVICES="0")
    return env


def _answer(env: dict[str, str], *args: str) -> tuple:
    proc = subprocess.run([sys.executable, "-m", "kvcheck", *args, "-o", "json"], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=120)
    assert proc.stdout, proc.stderr
    rep = json.loads(proc.stdout)
    findings = list(rep.get("findings") or [])
    releases = [rep.get("release_window"), rep.get("runtime")]
    for pair in rep.get("pairs") or []:  # -f: the class pairs' own findings and releases
        findings += pair.get("findings") or []
        releases.append(pair.get("releases"))
    found = sorted((f["id"], f["severity"], f["message"]) for f in findings if not f.get("ignored"))
    return proc.returncode, rep.get("verdict"), found, json.dumps(releases, sort_keys=True)


def _inputs(tmp: Path) -> dict[str, list[str]]:
    prefill = {"disaggregation-mode": "prefill", "disaggregation-transfer-backend": "nixl", "page-size": 16}
    decode = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16, "tp-size": 2}
    p = write_config(tmp, "prefill", "llama-3.1-8b", prefill)
    d = write_config(tmp, "decode", "llama-3.1-8b", decode)
    script = tmp / "launch.sh"
    model = model_dir("qwen3-8b")
    script.write_text(
        f"python -m sglang.launch_server --model-path {model} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --port 30000 &\n"
        f"python -m sglang.launch_server --model-path {model} --disaggregation-mode decode --disaggregation-transfer-backend nixl --port 30001 --tp-size 2 &\n"
    )
    return {
        # 0.5.15 imports NIXL 1.1.0's API: decided over the NIXL the server runs, never the host's
        "pair on 0.5.15": ["preflight", "--prefill", str(p), "--decode", str(d), "--sglang-version", "0.5.15"],
        # no release named: the window of modeled releases, never the installed SGLang
        "pair, no release": ["preflight", "--prefill", str(p), "--decode", str(d)],
        "deployment script": ["preflight", "-f", str(script)],
    }


@pytest.mark.parametrize("case", ["pair on 0.5.15", "pair, no release", "deployment script"])
def test_a_verdict_does_not_change_with_the_host(tmp_path, case):
    args = _inputs(tmp_path)[case]
    answers = {host: _answer(_host(tmp_path, host), *args) for host in ("this", "other", "plain")}
    assert answers["this"][1] in ("pass", "warn", "fail", "unchecked") and answers["this"][2], answers["this"]
    assert answers["other"] == answers["this"], (case, answers)
    assert answers["plain"] == answers["this"], (case, answers)


def test_the_fake_hosts_are_what_they_claim(tmp_path):
    """The stand-ins work: on "other" the installed releases read SGLang 0.5.9 / NIXL 0.9.0,
    on "plain" nothing of SGLang or NIXL is found (so the test above compares different
    machines, also when this venv has neither)."""
    probe = (
        "import importlib.metadata as md, importlib.util as u\n"
        "from kvcheck.sglang.releases import installed_release\n"
        "def v(d):\n"
        "    try:\n"
        "        return md.version(d)\n"
        "    except md.PackageNotFoundError:\n"
        "        return None\n"
        "print(installed_release(), v('sglang'), v('nixl-cu12'), u.find_spec('sglang') is not None, u.find_spec('nixl') is not None)\n"
    )
    out = {h: subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_host(tmp_path, h), timeout=60).stdout.split()
           for h in ("other", "plain")}
    assert out["other"][:3] == ["0.5.9", "0.5.9", "0.9.0"], out
    assert out["plain"][1:] == ["None", "None", "False", "False"], out


def test_a_model_path_no_file_system_holds_is_not_in_the_hf_cache(tmp_path):
    """On a machine that has a Hugging Face cache (most that ran a model), a model path too
    long for a file name was an OSError (ENAMETOOLONG) and exit 2 where the same input on a
    machine without one is unknown-model: it is not in the cache, on every machine."""
    from kvcheck.sources.models import hf_cache_config

    (tmp_path / "models--org--name" / "snapshots").mkdir(parents=True)
    assert hf_cache_config("org/" + "m" * (1 << 20), [tmp_path]) is None


def test_a_script_variable_is_not_filled_from_kvchecks_own_environment(tmp_path, monkeypatch):
    """A ``$VAR`` the script, its container and ``--env`` leave unset stays unresolved:
    what the machine kvcheck runs on happens to export is not the server's environment.
    ``inherit_env=True`` (``--inherit-env``) asks for the shell's behaviour."""
    from kvcheck.sources.deployments import read_deployments

    script = tmp_path / "launch.sh"
    script.write_text(
        "python -m sglang.launch_server --model-path /models/m --disaggregation-mode prefill --page-size $PAGE &\n"
        "python -m sglang.launch_server --model-path /models/m --disaggregation-mode decode --page-size 16 &\n"
    )
    monkeypatch.setenv("PAGE", "64")

    def prefill_page(**kw) -> tuple:
        (dep,) = read_deployments([script], **kw)
        inst = next(i for i in dep.instances if i.role == "prefill")
        return inst.argv[inst.argv.index("--page-size") + 1] if "--page-size" in inst.argv else None, inst.unresolved

    value, unresolved = prefill_page()
    assert "PAGE" in str(unresolved), (value, unresolved)
    assert prefill_page(inherit_env=True)[0] == "64"
    assert prefill_page(env={"PAGE": "32"})[0] == "32"


def test_inherit_env_is_the_one_way_kvchecks_environment_reaches_a_script(tmp_path):
    """``kvcheck preflight -f`` on a script whose ``--tp-size $TP`` nothing sets: unchecked
    (unresolved-variable, exit 4) even with ``TP`` exported where kvcheck runs; with
    ``--inherit-env`` the exported value is read."""
    model = model_dir("qwen3-8b")
    script = tmp_path / "launch.sh"
    script.write_text(
        f"python -m sglang.launch_server --model-path {model} --disaggregation-mode prefill --disaggregation-transfer-backend nixl --tp-size $TP --port 30000 &\n"
        f"python -m sglang.launch_server --model-path {model} --disaggregation-mode decode --disaggregation-transfer-backend nixl --tp-size 2 --port 30001 &\n"
    )
    env = {**_host(tmp_path, "this"), "TP": "2"}
    base = ["preflight", "-f", str(script), "--sglang-version", "0.5.23", "--gpu", "h100"]
    rc, verdict, found, _ = _answer(env, *base)
    assert (rc, verdict) == (4, "unchecked"), found
    assert any(f[0] == "unresolved-variable" and "TP" in f[2] for f in found), found
    rc, verdict, found, _ = _answer(env, *base, "--inherit-env")
    assert rc in (0, 1) and not any(f[0] == "unresolved-variable" for f in found), (rc, verdict, found)
