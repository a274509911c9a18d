"""A server that runs SGLang off CUDA (ROCm, Ascend NPU, Intel XPU) is never decided as if
it ran on Hopper or Blackwell: kvcheck restates SGLang's CUDA start-up, attention backends
and page sizes (0.5.23's ``get_default_attn_backend``, ``arg_groups/model_override_base.py``,
returns the out-of-tree platform's own backend for NPU/XPU and ``aiter`` on ROCm, where
kvcheck's model gives ``fa3``/``trtllm_mha``/``flashinfer``), so such a pair is
``unknown-gpu``, unchecked (exit 4), with the clue named."""

from __future__ import annotations

import json

import pytest

from tests.helpers import report_findings, run_cli

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LINE = "python -m sglang.launch_server --model-path {m} --disaggregation-mode {role} --disaggregation-transfer-backend nixl --page-size 16{extra}"


def _script(tmp_path, prefix: str = "", extra: str = "") -> str:
    body = "\n".join(prefix + LINE.format(m=MODEL, role=r, extra=extra) + (" --port 30001" if r == "decode" else "") for r in ("prefill", "decode"))
    path = tmp_path / "pd.sh"
    path.write_text(body + "\n")
    return str(path)


def _gpu_findings(proc) -> list[dict]:
    return [f for f in report_findings(json.loads(proc.stdout)) if f["id"] == "unknown-gpu"]


@pytest.mark.parametrize(("prefix", "extra", "clue"), [
    ("HIP_VISIBLE_DEVICES=0,1 ", "", "env HIP_VISIBLE_DEVICES"),
    ("", " --device npu", "--device npu"),
])
def test_off_cuda_is_unchecked(tmp_path, prefix, extra, clue):
    proc = run_cli("preflight", "-f", _script(tmp_path, prefix, extra), "--sglang-version", "0.5.23", "-o", "json")
    found = _gpu_findings(proc)
    assert proc.returncode == 4 and found and all(clue in f["message"] for f in found)


def test_a_named_nvidia_gpu_wins_over_env_clues(tmp_path):
    proc = run_cli("preflight", "-f", _script(tmp_path, "HIP_VISIBLE_DEVICES=0 "), "--sglang-version", "0.5.23", "--gpu", "h100", "-o", "json")
    assert proc.returncode == 0 and _gpu_findings(proc) == []


def test_cuda_script_has_no_platform_finding(tmp_path):
    proc = run_cli("preflight", "-f", _script(tmp_path), "--sglang-version", "0.5.23", "-o", "json")
    assert proc.returncode == 0 and _gpu_findings(proc) == []


# --- a GPU the deployment names but kvcheck cannot place --------------------------------

_K8S = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {role}}}
spec:
  template:
    spec:
{placement}
      containers:
      - name: sglang
        image: lmsysorg/sglang:v0.5.23
        command: ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
                  "--disaggregation-mode", "{role}", "--disaggregation-transfer-backend", "nixl", "--page-size", "16"]
"""
_H100 = "      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}"


def _preflight_inproc(path, *extra):
    from typer.testing import CliRunner

    from kvcheck.cli import app

    res = CliRunner().invoke(app, ["preflight", "-f", str(path), "-o", "json", *extra], catch_exceptions=False)
    report = json.loads(res.stdout)
    return res.exit_code, [f for pr in report["pairs"] for f in pr["findings"]]


@pytest.mark.parametrize("placement, named", [
    ("      nodeSelector: {amd.com/gpu.product-name: AMD-Instinct-MI999X}", "AMD-Instinct-MI999X"),
    ("      nodeSelector: {nvidia.com/gpu.product: NVIDIA-X999-SXM}", "NVIDIA-X999-SXM"),
    ("      nodeSelector: {node.kubernetes.io/instance-type: zz9.48xlarge}", "zz9.48xlarge"),
    ("      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
     "            nodeSelectorTerms:\n            - matchExpressions:\n"
     "              - {key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3, NVIDIA-X999-SXM]}",
     "NVIDIA-X999-SXM"),
])
def test_a_gpu_label_kvcheck_cannot_place_is_unknown_gpu_never_hopper(tmp_path, placement, named):
    # was: the label dropped, the pair decided as CUDA on Hopper -> PASS
    (tmp_path / "pd.yaml").write_text(_K8S.format(role="prefill", placement=placement) + "---\n"
                                      + _K8S.format(role="decode", placement=_H100))
    rc, findings = _preflight_inproc(tmp_path / "pd.yaml", "--sglang-version", "0.5.23")
    (f,) = [f for f in findings if f["id"] == "unknown-gpu"]
    assert rc == 4 and f["severity"] == "unchecked" and named in f["message"] and "--prefill-gpu" in f["fix"]
    # the option decides where the user names the GPU, and the disagreement is said
    rc, findings = _preflight_inproc(tmp_path / "pd.yaml", "--sglang-version", "0.5.23", "--prefill-gpu", "h100")
    ids = {f["id"]: f for f in findings}
    assert rc == 0 and "unknown-gpu" not in ids and named in ids["gpu-clues-disagree"]["message"]


def test_a_gpu_label_that_names_no_model_is_no_unknown_gpu(tmp_path):
    placement = '      nodeSelector: {nvidia.com/gpu.present: "true"}'
    (tmp_path / "pd.yaml").write_text(_K8S.format(role="prefill", placement=placement) + "---\n"
                                      + _K8S.format(role="decode", placement=_H100))
    rc, findings = _preflight_inproc(tmp_path / "pd.yaml", "--sglang-version", "0.5.23")
    assert rc == 0 and not [f for f in findings if f["id"] == "unknown-gpu"]


def test_an_srt_slurm_gpu_type_kvcheck_cannot_place_is_unknown_gpu(tmp_path):
    (tmp_path / "recipe.yaml").write_text(
        'name: "pd"\nmodel:\n  path: "hf:meta-llama/Llama-3.1-8B-Instruct"\n  container: "lmsysorg/sglang:v0.5.23"\n'
        "resources:\n  gpu_type: x999\n  gpus_per_node: 8\n  prefill_nodes: 1\n  decode_nodes: 1\n"
        "  prefill_workers: 1\n  decode_workers: 1\nfrontend:\n  type: sglang\n"
        "backend:\n  type: sglang\n  sglang_config:\n    prefill: {disaggregation-transfer-backend: nixl, page-size: 16}\n"
        "    decode: {disaggregation-transfer-backend: nixl, page-size: 16}\n"
    )
    rc, findings = _preflight_inproc(tmp_path / "recipe.yaml")
    assert rc == 4 and any(f["id"] == "unknown-gpu" and "x999" in f["message"] for f in findings)


def test_a_gpu_option_that_disagrees_with_the_manifest_is_a_warning_naming_both(tmp_path):
    (tmp_path / "pd.yaml").write_text(_K8S.format(role="prefill", placement=_H100) + "---\n"
                                      + _K8S.format(role="decode", placement=_H100))
    rc, findings = _preflight_inproc(tmp_path / "pd.yaml", "--sglang-version", "0.5.23", "--gpu", "b200")
    warned = [f for f in findings if f["id"] == "gpu-clues-disagree"]
    assert rc == 0 and len(warned) == 2 and all("b200" in f["message"] and "h100" in f["message"] for f in warned)
    rc, findings = _preflight_inproc(tmp_path / "pd.yaml", "--sglang-version", "0.5.23", "--gpu", "h100")
    assert rc == 0 and not [f for f in findings if f["id"] == "gpu-clues-disagree"]


@pytest.mark.parametrize("text", ["h100,b200", "a100-or-h100", "H100/B200"])
def test_a_gpu_option_naming_two_gpus_is_bad_input_not_its_first_match(tmp_path, text):
    # Once read as h100 (the first name matched): DeepSeek-V3 with --kv-cache-dtype bfloat16
    # passed, while on a B200 SGLang 0.5.23's trtllm_mla check (_mla_kv_cache_dtype_checks)
    # refuses it: "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto."
    from kvcheck.sglang.gpu import normalize_gpu_name

    assert normalize_gpu_name(text) is None
    assert [normalize_gpu_name(t) for t in ("NVIDIA-GB200", "NVIDIA-H200", "NVIDIA-L40S", "nvidia-h100-80gb-hbm3")] == [
        "gb200", "h200", "l40s", "h100"]
    flags = " --tp-size 8 --kv-cache-dtype bfloat16"
    body = "\n".join(
        LINE.format(m="deepseek-ai/DeepSeek-V3", role=r, extra=flags).replace("--page-size 16", "--page-size 64")
        + (" --port 30001" if r == "decode" else "") for r in ("prefill", "decode"))
    (tmp_path / "pd.sh").write_text(body + "\n")
    proc = run_cli("preflight", "-f", str(tmp_path / "pd.sh"), "--sglang-version", "0.5.23", "--gpu", text, "--format", "json")
    assert proc.returncode == 2, proc.stdout[-500:]
    assert "gpu" in proc.stderr and "smNN" in proc.stderr  # the known names, as for any unknown GPU
    b200 = run_cli("preflight", "-f", str(tmp_path / "pd.sh"), "--sglang-version", "0.5.23", "--gpu", "b200", "--format", "json")
    assert b200.returncode == 1
    assert "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto." in b200.stdout
