"""Kinds of fault that kept published Mooncake deployments undecided, each on an example
file written here in the published shape (the corpus itself stays outside the project).

* OME runtimes: ``$(PARALLELISM_SIZE)`` is set by OME's controller (the container's GPUs x
  the pods of its group); the components of one runtime mount the same ``$(MODEL_PATH)``,
  so one component's ``--served-model-name`` names the others' model too.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_cli

OME_RUNTIME = """\
apiVersion: ome.io/v1beta1
kind: ClusterServingRuntime
metadata:
  name: srt-example-pd
spec:
  engineConfig:
    leader:
      runner:
        name: ome-container
        image: docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64
        command:
          - python3
          - -m
          - sglang.launch_server
          - --model-path
          - $(MODEL_PATH)
          - --tp-size
          - $(PARALLELISM_SIZE)
          - --dp-size
          - $(PARALLELISM_SIZE)
          - --enable-dp-attention
          - --disaggregation-mode
          - prefill
          - --dist-init-addr
          - $(LWS_LEADER_ADDRESS):5000
          - --nnodes
          - $(LWS_GROUP_SIZE)
          - --node-rank
          - $(LWS_WORKER_INDEX)
        resources:
          limits:
            nvidia.com/gpu: 8
    worker:
      size: 1
      runner:
        name: ome-container
        image: docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64
        command:
          - python3
          - -m
          - sglang.launch_server
          - --model-path
          - $(MODEL_PATH)
          - --tp-size
          - $(PARALLELISM_SIZE)
          - --dp-size
          - $(PARALLELISM_SIZE)
          - --enable-dp-attention
          - --disaggregation-mode
          - prefill
          - --dist-init-addr
          - $(LWS_LEADER_ADDRESS):5000
          - --nnodes
          - $(LWS_GROUP_SIZE)
          - --node-rank
          - $(LWS_WORKER_INDEX)
        resources:
          limits:
            nvidia.com/gpu: 8
  decoderConfig:
    runner:
      name: ome-container
      image: docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64
      command:
        - python3
        - -m
        - sglang.launch_server
        - --model-path
        - $(MODEL_PATH)
        - --served-model-name
        - deepseek-ai/DeepSeek-V3
        - --tp-size
        - $(PARALLELISM_SIZE)
        - --disaggregation-mode
        - decode
      resources:
        limits:
          nvidia.com/gpu: 8
"""


def test_ome_parallelism_size_and_shared_model(tmp_path: Path):
    f = tmp_path / "runtime.yaml"
    f.write_text(OME_RUNTIME)
    proc = run_cli("preflight", "-f", str(f), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, [x["id"] for p in report["pairs"] for x in p["findings"]]
    by_role = {c["role"]: c for c in report["classes"]}
    # 8 GPUs x (leader + 1 worker) on the engine, 8 x 1 on the decoder
    assert by_role["prefill"]["kv_args"]["tp_size"] == 16 and by_role["decode"]["kv_args"]["tp_size"] == 8
    assert by_role["prefill"]["model"] == by_role["decode"]["model"] == "deepseek-ai/DeepSeek-V3"


def test_ome_runtime_without_a_named_model_stays_unchecked(tmp_path: Path):
    f = tmp_path / "runtime.yaml"
    f.write_text(OME_RUNTIME.replace("        - --served-model-name\n        - deepseek-ai/DeepSeek-V3\n", ""))
    proc = run_cli("preflight", "-f", str(f), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 4
    ids = {x["id"] for p in report["pairs"] for x in p["findings"]}
    assert "unknown-model" in ids and not any(i.startswith("unresolved-variable") for i in ids)
