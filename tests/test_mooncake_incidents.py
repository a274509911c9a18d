"""Public Mooncake incidents, written here as the deployments their reports describe.

sglang #23020: GLM-5.1 served with a PP4 x TP8 prefill on four nodes of RTX 5090 into one
H20 node decoding at TP8 with DP attention (DP8) and EAGLE, bf16 KV on both sides, Mooncake
over RDMA or TCP; the output degrades into gibberish after about a hundred long requests.
kvcheck must not pass it: its KV regions are decided, but the DSA index-K state that a PP
stage sends into a PP 1 decode of another attention TP is not restated for Mooncake, so the
pair is unchecked and says so, on every release it may run and on the release pinned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli

SCRIPT = """\
# four prefill nodes of 8 x RTX 5090 (node-rank 0 shown): PP4 x TP8
python3 -m sglang.launch_server --model-path nvidia/GLM-5.1-NVFP4 --nnodes 4 --node-rank 0 --tp 8 --pp-size 4 \\
  --dist-init-addr 10.1.0.1:29500 --quantization modelopt_fp4 --kv-cache-dtype bfloat16 --trust-remote-code \\
  --attention-backend flashinfer --disaggregation-mode prefill --disaggregation-ib-device mlx5_1 \\
  --disaggregation-transfer-backend mooncake --port 5000 &
# one decode node of 8 x H20: TP8 with DP attention (DP8), EAGLE
sglang serve --model-path nvidia/GLM-5.1-NVFP4 --tp 8 --dp 8 --enable-dp-attention \\
  --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \\
  --quantization modelopt_fp4 --kv-cache-dtype bfloat16 --trust-remote-code \\
  --disaggregation-mode decode --disaggregation-ib-device mlx5_1 --disaggregation-transfer-backend mooncake --port 30000 &
"""


@pytest.mark.parametrize("pin", [[], ["--sglang-version", "0.5.10.post1"], ["--sglang-version", "0.5.23"]])
def test_sglang_23020_is_never_passed(tmp_path: Path, pin: list[str]):
    f = tmp_path / "glm51-pd.sh"
    f.write_text(SCRIPT)
    proc = run_cli(
        "preflight", "-f", str(f), "--prefill-gpu", "rtx5090", "--decode-gpu", "h20", "--format", "json", *pin
    )
    report = json.loads(proc.stdout)
    pair = report["pairs"][0]
    assert proc.returncode == 4 and pair["verdict"] == "unchecked", pair["verdict"]
    reasons = [x["message"] for x in pair["findings"] if x["id"] == "mooncake-unchecked"]
    assert reasons and all("state transfer" in m and "dsa" in m and "PP 4 -> 1" in m for m in reasons), reasons
