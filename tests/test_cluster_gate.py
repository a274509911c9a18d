"""The gate examples work as written: the Dockerfile, configs/ci/ and configs/k8s/.

The YAMLs parse; every kvcheck container has a ``command``, the image built from this
repository's Dockerfile and a security context the Pod Security "restricted" profile
admits; the workflow installs kvcheck from the checked-out repository and runs
``kvcheck preflight -f`` on manifests that exist, and its gate step, run here as
written, passes on the bundled deployment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from helpers import REPO

IMAGE = "ghcr.io/your-org/kvcheck:0.2.0"
K8S = REPO / "configs" / "k8s"
WORKFLOW = REPO / "configs" / "ci" / "kvcheck-preflight.yml"


def _pod_specs():
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            yield path.name, doc["spec"]["template"]["spec"]


def _kvcheck_containers():
    for name, spec in _pod_specs():
        for c in spec.get("initContainers", []) + spec["containers"]:
            if "kvcheck" in c["image"]:
                yield name, spec, c


def test_dockerfile_builds_from_the_repository_as_non_root():
    text = (REPO / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(f.startswith("python:") and f.split(" ")[0].endswith("-slim") for f in froms)
    assert re.search(r"^RUN python -m pip install .*--prefix=/install \.$", text, re.M)  # the checked-out repository
    assert re.search(r"^COPY kvcheck \./kvcheck$", text, re.M) and re.search(r"^COPY pyproject.toml", text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0].isdigit() and user[-1].split(":")[0] != "0"  # numeric: runAsNonRoot can verify it
    assert re.search(r'^ENTRYPOINT \["kvcheck"\]$', text, re.M)
    assert f"docker build -t {IMAGE} ." in text


def test_every_kvcheck_container_has_command_image_and_restricted_security_context():
    seen = 0
    for name, spec, c in _kvcheck_containers():
        seen += 1
        assert c["image"] == IMAGE, name
        assert c["command"] == ["kvcheck"], name
        assert c["args"][0] == "preflight", name
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
        assert sc["capabilities"]["drop"] == ["ALL"], name
        seccomp = sc.get("seccompProfile") or spec.get("securityContext", {}).get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}, name
        uid = sc.get("runAsUser", spec.get("securityContext", {}).get("runAsUser"))
        assert uid == 10001, name  # the Dockerfile's USER
    assert seen == 3


def test_static_job_reads_a_manifest_with_f():
    docs = list(yaml.safe_load_all((K8S / "kvcheck-preflight-job.yaml").read_text()))
    static = next(d for d in docs if d["metadata"]["name"] == "kvcheck-preflight-manifests")
    c = static["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][:3] == ["preflight", "-f", "/deploy/deploy.yaml"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/deploy"]["readOnly"] is True


def test_workflow_installs_from_the_repository_and_checks_existing_manifests():
    data = yaml.safe_load(WORKFLOW.read_text())
    steps = data["jobs"]["preflight"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert any(r.strip() == "python -m pip install ." for r in runs)
    assert not any(re.search(r"pip install (kvcheck|git\+)", r) for r in runs)
    gate = next(r for r in runs if "--format github" in r)
    assert "kvcheck preflight" in gate and "-f" in gate
    for f in data["env"]["DEPLOY_FILES"].split():
        assert (REPO / f).is_file(), f


def test_workflow_gate_step_runs_as_written(tmp_path):
    pytest.importorskip("kvcheck.sources.deployments")
    from kvcheck.sources import deployments

    if not hasattr(deployments, "read_deployments"):
        pytest.skip("deployment readers not in this build")
    data = yaml.safe_load(WORKFLOW.read_text())
    gate = next(s["run"] for s in data["jobs"]["preflight"]["steps"] if "--format github" in s.get("run", ""))
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "kvcheck").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kvcheck "$@"\n')
    (shim / "kvcheck").chmod(0o755)
    env = dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}", DEPLOY_FILES=data["env"]["DEPLOY_FILES"],
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run(["bash", "-e", "-c", gate], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("::notice title=kvcheck verdict::PASS")
