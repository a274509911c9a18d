"""configs/k8s: the manifests parse, call options kvcheck has, and map its exit statuses."""

from __future__ import annotations

import yaml
from helpers import REPO, run_cli

from kvcheck.errors import EXIT_FAIL, EXIT_INPUT, EXIT_UNCHECKED, EXIT_UNREACHABLE

K8S = REPO / "configs" / "k8s"


def _containers(doc: dict) -> list[dict]:
    spec = doc["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def test_manifests_use_only_existing_preflight_options():
    help_text = run_cli("preflight", "--help").stdout
    seen = 0
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for c in _containers(doc):
                args = c.get("args") or []
                if args[:1] != ["preflight"] or "-f" in args:  # -f: the static manifest Job (tests/test_cluster_gate.py)
                    continue
                seen += 1
                for a in args[1:]:
                    assert a.split("=", 1)[0] in help_text, (path.name, a)
                assert any(a.startswith("--prefill=http") for a in args) and any(a.startswith("--decode=http") for a in args)
                assert any(e["name"] == "KVCHECK_API_KEY" and "secretKeyRef" in e["valueFrom"] for e in c.get("env", []))
    assert seen == 2


def test_job_fails_on_fail_and_input_errors_and_retries_unreachable():
    job = next(yaml.safe_load_all((K8S / "kvcheck-preflight-job.yaml").read_text()))
    assert job["kind"] == "Job" and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    rules = {r["action"]: r for r in job["spec"]["podFailurePolicy"]["rules"]}
    assert sorted(rules["FailJob"]["onExitCodes"]["values"]) == [EXIT_FAIL, EXIT_INPUT, EXIT_UNCHECKED]
    assert rules["Count"]["onExitCodes"]["values"] == [EXIT_UNREACHABLE]
