"""A server that runs SGLang off CUDA (ROCm, Ascend NPU, Intel XPU) is never decided as if
it ran on Hopper or Blackwell: kvcheck restates SGLang's CUDA start-up, attention backends
and page sizes (0.5.23's ``get_default_attn_backend``, ``arg_groups/model_override_base.py``,
returns the out-of-tree platform's own backend for NPU/XPU and ``aiter`` on ROCm, where
kvcheck's model gives ``fa3``/``trtllm_mha``/``flashinfer``), so such a pair is
``unknown-gpu``, unchecked (exit 4), with the clue named."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LINE = "python -m sglang.launch_server --model-path {m} --disaggregation-mode {role} --disaggregation-transfer-backend nixl --page-size 16{extra}"


def _script(tmp_path, prefix: str = "", extra: str = "") -> str:
    body = "\n".join(prefix + LINE.format(m=MODEL, role=r, extra=extra) + (" --port 30001" if r == "decode" else "") for r in ("prefill", "decode"))
    path = tmp_path / "pd.sh"
    path.write_text(body + "\n")
    return str(path)


def _gpu_findings(proc) -> list[dict]:
    report = json.loads(proc.stdout)
    out = []

    def walk(o):
        if isinstance(o, dict):
            if o.get("id") == "unknown-gpu" and "severity" in o:
                out.append(o)
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(report)
    return out


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
