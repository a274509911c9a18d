"""What environment a server started by a ``-f`` script runs with: the shell's exported
variables at its launch (POSIX ``export``; bash's ``declare -x``, ``set -a``), plus its
``VAR=v`` / ``env VAR=v`` prefixes. A plain ``VAR=v`` is a shell variable only.

The ground truth is the real thing: each script is run by ``bash`` with a stand-in
``python3`` on ``PATH`` that loads SGLang 0.5.23's own ``sglang/srt/environ.py`` (by path,
without the package's heavy imports) and records, per role, what
``envs.SGLANG_DISAGGREGATION_NIXL_BACKEND.get()`` returns: the value
``NixlKVManager.__init__`` (``sglang/srt/disaggregation/nixl/conn.py``, 0.5.23) creates its
NIXL backend from. kvcheck's reading of the same script must give the same value per
server, and the pair's verdict must follow it (two servers on different backends share
none: ``nixl-backend``, an error).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcheck.cli import app
from kvcheck.sources.deployments import read_deployments

VAR = "SGLANG_DISAGGREGATION_NIXL_BACKEND"
LINE = (
    "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode {role} "
    "--disaggregation-transfer-backend nixl --page-size 16 --port {port}"
)
P, D = LINE.format(role="prefill", port=30000), LINE.format(role="decode", port=30001)

# name -> (script, {role: the backend the runtime reads}) ; the expected values are what
# bash and SGLang's environ.py give (asserted by test_the_runtime_reads_what_kvcheck_reads)
SCRIPTS = {
    "export-then-unset": (
        f"export {VAR}=LIBFABRIC\n{P}\nunset {VAR}\n{D}\n",
        {"prefill": "LIBFABRIC", "decode": "UCX"},
    ),
    "assign-then-export": (f"{VAR}=LIBFABRIC\n{D}\nexport {VAR}\n{P}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "export-two-names": (
        f"export A=1 {VAR}=LIBFABRIC\n{P}\nexport -n {VAR}\n{D}\n",
        {"prefill": "LIBFABRIC", "decode": "UCX"},
    ),
    "declare-x": (f"{D}\ndeclare -x {VAR}=LIBFABRIC\n{P}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "env-prefix": (f"env {VAR}=LIBFABRIC {P}\n{D}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "set-a": (f"set -a\n{VAR}=LIBFABRIC\nset +a\n{P}\nunset {VAR}\n{D}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "set-o-allexport": (f"{D}\nset -o allexport\n{VAR}=LIBFABRIC\n{P}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "export-reassigned": (f"export {VAR}=UCX\n{D}\n{VAR}=LIBFABRIC\n{P}\n", {"prefill": "LIBFABRIC", "decode": "UCX"}),
    "bash-c-inherits": (
        f"export {VAR}=LIBFABRIC\nbash -c '{P}'\nunset {VAR}\n{D}\n",
        {"prefill": "LIBFABRIC", "decode": "UCX"},
    ),
    "declare-plus-x": (
        f"declare -x {VAR}=LIBFABRIC\n{P}\ndeclare +x {VAR}\n{D}\n",
        {"prefill": "LIBFABRIC", "decode": "UCX"},
    ),
    # not exported: a shell variable, no process sees it (no false fail)
    "plain-assignment": (f"{VAR}=LIBFABRIC\n{P}\n{D}\n", {"prefill": "UCX", "decode": "UCX"}),
    "exported-both": (f"export {VAR}=LIBFABRIC\n{P}\n{D}\n", {"prefill": "LIBFABRIC", "decode": "LIBFABRIC"}),
}

_STUB = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("sglang_environ", {environ!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
role = sys.argv[sys.argv.index("--disaggregation-mode") + 1]
with open(os.environ["KVCHECK_TEST_OUT"], "a") as f:
    f.write(role + "=" + mod.envs.{var}.get() + "\\n")
"""


def _sglang_environ() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "srt" / "environ.py"
    if not path.is_file():
        pytest.skip("SGLang has no srt/environ.py")
    return path


def _runtime_values(tmp: Path, script: str) -> dict[str, str]:
    """Run ``script`` with bash; per role, the NIXL backend SGLang's own environ.py reads."""
    bindir = tmp / "bin"
    bindir.mkdir()
    stub = tmp / "stub.py"
    stub.write_text(_STUB.format(environ=str(_sglang_environ()), var=VAR))
    py = bindir / "python3"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} {stub} "$@"\n')
    py.chmod(0o755)
    out = tmp / "out.txt"
    env = {k: v for k, v in os.environ.items() if k != VAR}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", KVCHECK_TEST_OUT=str(out))
    subprocess.run([shutil.which("bash") or "/bin/bash", str(tmp / "run.sh")], env=env, check=True, timeout=30)
    return dict(line.split("=", 1) for line in out.read_text().split())


def _kvcheck_values(path: Path) -> dict[str, str]:
    (dep,) = read_deployments([path], env={})
    return {i.role: i.env.get(VAR, "UCX") for i in dep.instances}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_runtime_reads_what_kvcheck_reads(tmp_path, name):
    script, expected = SCRIPTS[name]
    (tmp_path / "run.sh").write_text(script)
    assert _runtime_values(tmp_path, script) == expected
    assert _kvcheck_values(tmp_path / "run.sh") == expected


@pytest.mark.parametrize("name", ["export-then-unset", "set-a", "plain-assignment", "exported-both"])
def test_the_verdict_follows_the_exported_environment(tmp_path, name):
    script, expected = SCRIPTS[name]
    (tmp_path / "run.sh").write_text(script)
    res = CliRunner().invoke(
        app,
        ["preflight", "-f", str(tmp_path / "run.sh"), "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json"],
        catch_exceptions=False,
    )
    report = json.loads(res.stdout)
    ids = {f["id"] for pr in report["pairs"] for f in pr["findings"]}
    if expected["prefill"] != expected["decode"]:
        assert res.exit_code == 1 and "nixl-backend" in ids, res.stdout
    else:
        assert res.exit_code == 0 and "nixl-backend" not in ids, res.stdout


def test_no_shell_export_crosses_into_a_container_or_over_ssh(tmp_path):
    # `docker run` starts the container with the image's environment plus what -e/--env
    # pass (docker's `run --env`: `-e VAR` alone passes the caller's exported value);
    # ssh runs the remote command in the remote login environment. A prefix before the
    # wrapper is the wrapper's own variable.
    script = (
        f"export {VAR}=LIBFABRIC UCX_TLS=rc\n"
        f"docker run --network host -e UCX_TLS lmsysorg/sglang:v0.5.23 {P}\n"
        f"{VAR}=LIBFABRIC ssh node1 {D}\n"
        f"env -i {VAR}=MOONCAKE_TEST {LINE.format(role='decode', port=30002)}\n"
    )
    (tmp_path / "run.sh").write_text(script)
    (dep,) = read_deployments([tmp_path / "run.sh"], env={})
    p, d1, d2 = dep.instances
    assert (p.role, VAR in p.env, p.env.get("UCX_TLS")) == ("prefill", False, "rc")
    assert (d1.role, VAR in d1.env) == ("decode", False)
    assert d2.env == {VAR: "MOONCAKE_TEST"}


def test_a_helper_scripts_exports_reach_the_servers_of_the_script_read_after_it(tmp_path):
    (tmp_path / "00_common.sh").write_text(f"export {VAR}=LIBFABRIC\nMODEL=meta-llama/Llama-3.1-8B-Instruct\n")
    (tmp_path / "run.sh").write_text(f"{P}\n")
    (tmp_path / "src.sh").write_text(f". ./00_common.sh\n{P}\n")
    deps = read_deployments([tmp_path / "00_common.sh", tmp_path / "run.sh"], env={})
    assert [i.env.get(VAR) for d in deps for i in d.instances] == ["LIBFABRIC"]
    (dep,) = read_deployments([tmp_path / "src.sh"], env={})
    assert [i.env.get(VAR) for i in dep.instances] == ["LIBFABRIC"]


# --- the same rule in the other formats: what reaches the server's environment ---------

_K8S = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {role}}}
spec:
  template:
    spec:
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.23
        env:
{env}
        command: ["bash", "-c", "{script}python3 -m sglang.launch_server \\
          --model-path meta-llama/Llama-3.1-8B-Instruct \\
          --disaggregation-mode {role} --disaggregation-transfer-backend nixl --page-size 16"]
"""


def _k8s(role: str, env: str = "        - {name: A, value: '1'}", script: str = "") -> str:
    return _K8S.format(role=role, env=env, script=script)


def _preflight(*args: str) -> tuple[int, set[str]]:
    res = CliRunner().invoke(
        app, ["preflight", *args, "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json"], catch_exceptions=False
    )
    report = json.loads(res.stdout)
    return res.exit_code, {f["id"] for pr in report["pairs"] for f in pr["findings"]}


def test_kubernetes_env_and_a_bash_c_export_reach_the_server(tmp_path):
    # the kubelet sets a container's `env` in its process; `export` inside its `bash -c`
    # reaches the server that script starts
    (tmp_path / "pd.yaml").write_text(
        _k8s("prefill", f"        - {{name: {VAR}, value: LIBFABRIC}}")
        + "---\n"
        + _k8s("decode", script=f"export {VAR}=UCX; ")
    )
    (dep,) = read_deployments([tmp_path / "pd.yaml"], env={})
    assert {i.role: i.env[VAR] for i in dep.instances} == {"prefill": "LIBFABRIC", "decode": "UCX"}
    rc, ids = _preflight("-f", str(tmp_path / "pd.yaml"))
    assert rc == 1 and "nixl-backend" in ids


def test_a_kv_variable_from_a_secret_or_configmap_is_unknown_never_the_default(tmp_path):
    # valueFrom: the value lives in the cluster: the pair is unchecked (it was decided on
    # UCX, the default, and passed); --env or --prefill-env naming it settles it
    ref = f"        - name: {VAR}\n          valueFrom: {{configMapKeyRef: {{name: nixl, key: backend}}}}"
    (tmp_path / "pd.yaml").write_text(_k8s("prefill", ref) + "---\n" + _k8s("decode"))
    rc, ids = _preflight("-f", str(tmp_path / "pd.yaml"))
    assert rc == 4 and "unresolved-variable" in ids
    (tmp_path / "p.env").write_text(f"{VAR}=UCX\n")
    assert _preflight("-f", str(tmp_path / "pd.yaml"), "--prefill-env", str(tmp_path / "p.env"))[0] == 0
    assert _preflight("-f", str(tmp_path / "pd.yaml"), "--env", str(tmp_path / "p.env"))[0] == 0
    (tmp_path / "p.env").write_text(f"{VAR}=LIBFABRIC\n")
    assert _preflight("-f", str(tmp_path / "pd.yaml"), "--env", str(tmp_path / "p.env"))[0] == 1


def test_a_script_variable_left_unset_in_a_kv_variable_is_unchecked(tmp_path):
    (tmp_path / "run.sh").write_text(f"export {VAR}=$BACKEND\n{P}\nunset {VAR}\n{D}\n")
    rc, ids = _preflight("-f", str(tmp_path / "run.sh"))
    assert rc == 4 and "nixl-backend" not in ids and "unresolved-variable" in ids
    (tmp_path / "v.env").write_text("BACKEND=LIBFABRIC\n")
    rc, ids = _preflight("-f", str(tmp_path / "run.sh"), "--env", str(tmp_path / "v.env"))
    assert rc == 1 and "nixl-backend" in ids


def test_compose_environment_names_without_a_value_come_from_the_caller(tmp_path):
    # compose-spec `environment`: `- NAME` takes the value of the shell Compose runs in
    line = "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode {} "
    line += "--disaggregation-transfer-backend nixl --page-size 16"
    (tmp_path / "compose.yaml").write_text(
        "services:\n"
        f"  prefill:\n    image: lmsysorg/sglang:v0.5.23\n    environment:\n      - {VAR}\n"
        f"    command: {line.format('prefill')} --port 30000\n"
        f"  decode:\n    image: lmsysorg/sglang:v0.5.23\n    environment:\n      {VAR}: ${{BK:-UCX}}\n"
        f"    command: {line.format('decode')} --port 30001\n"
    )
    rc, ids = _preflight("-f", str(tmp_path / "compose.yaml"))
    assert rc == 4 and "unresolved-variable" in ids
    (tmp_path / "v.env").write_text(f"{VAR}=LIBFABRIC\n")
    rc, ids = _preflight("-f", str(tmp_path / "compose.yaml"), "--env", str(tmp_path / "v.env"))
    assert rc == 1 and "nixl-backend" in ids


def test_an_srt_slurm_recipes_top_level_environment_joins_every_worker(tmp_path):
    # srtctl's worker_stage (c88ef731): the mode's environment, then config.environment over it
    (tmp_path / "recipe.yaml").write_text(
        'name: "pd"\nmodel:\n  path: "hf:meta-llama/Llama-3.1-8B-Instruct"\n  container: "lmsysorg/sglang:v0.5.23"\n'
        "resources:\n  gpu_type: h100\n  gpus_per_node: 8\n  prefill_nodes: 1\n  decode_nodes: 1\n"
        "  prefill_workers: 1\n  decode_workers: 1\n"
        f"environment:\n  {VAR}: LIBFABRIC\n"
        f"backend:\n  type: sglang\n  decode_environment:\n    {VAR}: UCX\n"
        "  sglang_config:\n    prefill: {disaggregation-transfer-backend: nixl, page-size: 16}\n"
        "    decode: {disaggregation-transfer-backend: nixl, page-size: 16}\n"
    )
    (dep,) = read_deployments([tmp_path / "recipe.yaml"], env={})
    assert {i.role: i.env[VAR] for i in dep.instances} == {"prefill": "LIBFABRIC", "decode": "LIBFABRIC"}
