"""Kinds of fault that kept published Mooncake deployments undecided, each on an example
file written here in the published shape (the corpus itself stays outside the project).

* OME runtimes: ``$(PARALLELISM_SIZE)`` is set by OME's controller (the container's GPUs x
  the pods of its group); the components of one runtime mount the same ``$(MODEL_PATH)``,
  so one component's ``--served-model-name`` names the others' model too.
* A model whose public ``config.json`` the catalog lacked (srt-slurm's Qwen3.5 FP8 recipes
  serve ``Qwen/Qwen3.5-397B-A17B-FP8``): now a catalog entry with the copy it was read from.
  Its weight-only block FP8 quant config carries no KV quant algorithm, so ``auto`` KV stays
  the model dtype (SGLang 0.5.23 ``Fp8Config.from_config`` and ``configure_kv_cache_dtype``).
* A moving image tag (srt-slurm's ``dev`` alias, ``latest``, no tag) stays ``unchecked``: the
  build pulled may hold code newer than any modeled release (as a dated nightly after the
  newest one does, ``kvcheck.sglang.releases.nightly_window``), so the answer is given for
  a pinned release only, and the finding names the option.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

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


QWEN35_FP8 = "Qwen/Qwen3.5-397B-A17B-FP8"


def _qwen35_recipe(tmp: Path, container: str) -> Path:
    """An srt-slurm recipe in the published Qwen3.5 FP8 shape: the weights mounted at
    ``/model/``, the hub id given as ``served-model-name``, KV dtype left ``auto``."""
    side = {
        "served-model-name": QWEN35_FP8,
        "model-path": "/model/",
        "trust-remote-code": True,
        "tensor-parallel-size": 4,
        "page-size": 64,
        "attention-backend": "trtllm_mha",
    }
    recipe = {
        "name": "q35-fp8-1p1d",
        "model": {"path": "qwen3.5-fp8", "container": container, "precision": "fp8"},
        "resources": {"gpu_type": "gb300", "gpus_per_node": 4, "prefill_nodes": 1, "prefill_workers": 1,
                      "decode_nodes": 1, "decode_workers": 1},
        "backend": {"type": "sglang", "sglang_config": {
            "prefill": {**side, "disaggregation-mode": "prefill"},
            "decode": {**side, "disaggregation-mode": "decode"},
        }},
    }
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


@pytest.mark.runtime
def test_qwen35_fp8_catalog_kv_dtype_is_the_runtimes(tmp_path: Path):
    """The catalog's quant config, read by SGLang 0.5.23's own ``Fp8Config.from_config``,
    has no KV quant algorithm, so its ``configure_kv_cache_dtype`` keeps ``auto`` KV at the
    model dtype: kvcheck resolves the same dtype and bytes; the text config (the KV
    geometry) gives SGLang's ``ModelConfig`` kvcheck's layers, KV heads and head dim."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sglang")
    from sglang.srt.configs.model_config import ModelConfig as SGLangModelConfig
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.kv_dtype import kv_dtype_bytes
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sides import Side
    from kvcheck.sources.models import load_catalog

    raw = dict(load_catalog()[QWEN35_FP8]["config"])
    quant = Fp8Config.from_config(dict(raw["quantization_config"]))
    _, runtime_dtype = configure_kv_cache_dtype(
        server_args_kv_cache_dtype="auto",
        model=SimpleNamespace(quant_config=quant),
        model_dtype=torch.bfloat16,
        is_draft_worker=False,
        is_dflash=False,
        speculative_draft_attention_backend="triton",
    )
    ours = parse_model_config(raw)
    assert quant.kv_cache_quant_algo == ours.kv_cache_quant_algo is None
    side = Side(role="prefill", args=ServerArgs(disaggregation_mode="prefill", tp_size=4), model=ours,
                sglang_version="0.5.23", gpu="gb300")
    assert kv_dtype_bytes(side, ours) == ("bfloat16", runtime_dtype.itemsize) == ("bfloat16", 2)
    assert runtime_dtype == torch.bfloat16
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({k: v for k, v in raw.items() if k != "quantization_config"}))
    mc = SGLangModelConfig(str(d), trust_remote_code=False)
    assert (mc.num_hidden_layers, mc.get_total_num_kv_heads(), mc.head_dim) == (
        ours.num_hidden_layers, ours.num_key_value_heads, ours.head_dim) == (60, 2, 256)


def test_qwen35_fp8_recipe_is_decided_and_the_pair_path_agrees(tmp_path: Path):
    proc = run_cli("preflight", "-f", str(_qwen35_recipe(tmp_path, "lmsysorg/sglang:v0.5.23-cu130")),
                   "--format", "json")
    report = json.loads(proc.stdout)
    ids = [x["id"] for p in report["pairs"] for x in p["findings"]]
    assert proc.returncode == 0 and "unknown-model" not in ids, ids
    assert all("catalog" in c["model_source"] and "tpu_benchmark_daily" in c["model_source"] for c in report["classes"])
    # 15 full-attention layers of 60 (every 4th), K and V each: SGLang's HybridLinearKVPool
    plan = report["pairs"][0]["plan"]
    assert (plan["path"], plan["n_src"], plan["n_dst"]) == ("equal_tp", 30, 30)
    for role in ("prefill", "decode"):
        (tmp_path / f"{role}.sh").write_text(
            f"python3 -m sglang.launch_server --model-path {QWEN35_FP8} --disaggregation-mode {role} --tp 4 "
            "--page-size 64 --attention-backend trtllm_mha --trust-remote-code\n"
        )
    pair = run_cli("preflight", "--prefill", str(tmp_path / "prefill.sh"), "--decode", str(tmp_path / "decode.sh"),
                   "--format", "json", "--sglang-version", "0.5.23", "--gpu", "gb300")
    got = json.loads(pair.stdout)
    assert pair.returncode == 0 and got["verdict"] == report["pairs"][0]["verdict"] == "pass"
    assert (got["plan"]["n_src"], got["plan"]["n_dst"]) == (30, 30)


@pytest.mark.parametrize("container", ["dev", "lmsysorg/sglang:latest", "lmsysorg/sglang"])
def test_a_moving_image_tag_stays_unchecked_and_names_the_pin(tmp_path: Path, container: str):
    proc = run_cli("preflight", "-f", str(_qwen35_recipe(tmp_path, container)), "--format", "json")
    report = json.loads(proc.stdout)
    findings = [x for p in report["pairs"] for x in p["findings"]]
    assert proc.returncode == 4 and {f["id"] for f in findings} == {"unknown-release"}, findings
    assert all("--sglang-version" in f["fix"] for f in findings)
