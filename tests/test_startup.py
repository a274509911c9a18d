"""kvcheck.sglang.startup against SGLang 0.5.23's own argument resolution.

Each case builds one server's flags, runs the runtime's start-up path on them
(``prepare_server_args`` -> ``ServerArgs.resolve_once()`` -> ``check_server_args()``, the
order ``Engine._launch_subprocesses`` uses) with a temporary model directory holding a
``config.json`` from ``configs/models``, and compares the exception class and ``str()``
with kvcheck's prediction. Nothing expected is written here: the runtime supplies it.

How it runs on a CPU-only machine: ``--device cuda`` selects SGLang's CUDA platform, so
its CUDA code paths (DSA backends and KV dtype, HiSparse defaults) are the ones taken.
The hardware queries on those paths (``torch.cuda.get_device_capability()`` and SGLang's
platform facts ``is_sm90``/``is_sm100``/``is_blackwell``/...) cannot be answered by a CPU
build; ``startup_corpus.gpu_facts`` answers them for the GPU under test through SGLang's
own scoped platform override. Every case runs on Hopper (h100, sm90) and Blackwell (b200,
sm100); SGLang's decision code runs unmodified.
"""

from __future__ import annotations

import json
import shutil
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml

import startup_corpus

from helpers import flags_argv  # noqa: E402
from kvcheck.checks import REGISTRY, CheckContext
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.startup import REFUSAL_IDS, first_refusal, startup_error
from kvcheck.sides import Side

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "configs" / "models"

pytestmark = pytest.mark.runtime

NIXL = {"disaggregation_transfer_backend": "nixl"}
PREFILL = {"disaggregation_mode": "prefill", **NIXL}
DECODE = {"disaggregation_mode": "decode", **NIXL}


GPU_UNDER_TEST = {"h100": (9, 0), "b200": (10, 0)}


@pytest.fixture(scope="module", params=sorted(GPU_UNDER_TEST))
def sglang_cuda(request):
    """SGLang importable; yields (the runtime driver for one GPU, that GPU's kvcheck name)."""
    pytest.importorskip("sglang")
    gpu = request.param

    def run(model_dir, flags):
        return startup_corpus.runtime_outcome(model_dir, flags, GPU_UNDER_TEST[gpu])

    return run, gpu




def _model_dir(tmp_path: Path, model: str) -> Path:
    d = tmp_path / model
    d.mkdir(exist_ok=True)
    shutil.copy(MODELS / model / "config.json", d / "config.json")
    return d


def runtime_outcome(driver, model_dir: Path, flags: dict[str, Any]):
    """What SGLang does at start-up with these flags on the fixture's GPU: ``None`` or
    (type name, str(exc), function)."""
    run, _ = driver
    return run(model_dir, flags)


def kv_side(role: str, model_dir: Path, flags: dict[str, Any], gpu: str | None = None) -> Side:
    raw = json.loads((model_dir / "config.json").read_text())
    return Side(
        role=role,
        args=ServerArgs(model_path=str(model_dir), **flags),
        raw_args=dict(flags),
        model=parse_model_config(raw, str(model_dir / "config.json")),
        origin=f"{role} test flags",
        gpu=gpu,
    )


# (case name, model, role, flags, the refusal id kvcheck must name)
CASES = [
    ("hisparse-model-llama", "llama-3.1-8b", "decode", {**DECODE, "enable_hisparse": True}, "hisparse-model"),
    ("hisparse-model-v3-not-dsa", "deepseek-v3", "decode", {**DECODE, "enable_hisparse": True}, "hisparse-model"),
    ("hisparse-radix-prefill", "deepseek-v3.2", "prefill", {**PREFILL, "enable_hisparse": True}, "hisparse-radix-cache"),
    ("decode-radix-hisparse", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_enable_radix_cache": True}, "decode-radix-cache-incompatible"),
    # the PD hook fires before validate_hisparse's model check
    ("decode-radix-hisparse-before-model", "llama-3.1-8b", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_enable_radix_cache": True}, "decode-radix-cache-incompatible"),
    ("decode-radix-fake", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "fake", "disaggregation_decode_enable_radix_cache": True},
     "decode-radix-cache-incompatible"),
    ("decode-radix-ngram", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "ngram"}, "decode-radix-cache-incompatible"),
    ("decode-radix-ngram-dsa", "deepseek-v3.2", "decode",
     {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "NGRAM"}, "decode-radix-cache-incompatible"),
    ("decode-radix-standalone", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "STANDALONE",
      "speculative_draft_model_path": str(MODELS / "llama-3.1-8b")}, "decode-radix-cache-incompatible"),
    ("decode-radix-nextn-ok", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "nextn",
      "speculative_draft_model_path": str(MODELS / "llama-3.1-8b")}, None),
    ("dsa-kv-dtype-e5m2", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e5m2"}, "dsa-kv-cache-dtype"),
    ("dsa-kv-dtype-nvfp4-prefill", "deepseek-v3.2", "prefill", {**PREFILL, "kv_cache_dtype": "nvfp4"}, "dsa-kv-cache-dtype"),
    ("hisparse-spec-topk", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "attention_backend": "fa3", "speculative_algorithm": "EAGLE",
      "speculative_eagle_topk": 2, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}, "hisparse-spec-topk"),
    # on the default DSA attention backend the EAGLE page-tree check fires first
    ("hisparse-spec-topk-dsa-backend", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE",
      "speculative_eagle_topk": 2, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}, "speculative-params"),
    ("hisparse-spec-topk-no-steps", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2}, "speculative-params"),
    ("hisparse-spec-linear-ok", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1,
      "speculative_num_steps": 1, "speculative_num_draft_tokens": 2}, None),
    ("hisparse-spec-adaptive", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE", "speculative_adaptive": True}, "hisparse-spec-adaptive"),
    ("hisparse-mixed-chunk", "deepseek-v3.2", "decode", {**DECODE, "enable_hisparse": True, "enable_mixed_chunk": True}, "hisparse-mixed-chunk"),
    ("hisparse-dsa-decode-backend-bf16", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bfloat16", "dsa_decode_backend": "flashmla_kv"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-prefill-backend-bf16", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bf16", "dsa_prefill_backend": "fa3"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-decode-backend-fp8", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "flashmla_sparse"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-tilelang-fp8", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "tilelang"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-triton", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bfloat16", "dsa_prefill_backend": "triton"}, "hisparse-dsa-backend"),
    ("dsa-dcp-pd-decode", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2}, "dsa-dcp"),
    ("dsa-dcp-pd-prefill", "deepseek-v3.2", "prefill", {**PREFILL, "tp_size": 2, "dcp_size": 2}, "dsa-dcp"),
    ("dsa-dcp-hisparse", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2, "enable_hisparse": True}, "dsa-dcp"),
    ("dsa-dcp-before-kv-dtype", "deepseek-v3.2", "decode",
     {**DECODE, "tp_size": 2, "dcp_size": 2, "kv_cache_dtype": "fp8_e5m2"}, "dsa-dcp"),
    ("mla-dcp-decode-ok", "deepseek-v3", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2}, None),
    ("mha-dcp-decode-ok", "llama-3.1-8b", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2}, None),
    ("dcp-size-zero", "llama-3.1-8b", "decode", {**DECODE, "dcp_size": 0}, "dcp-size"),
    ("host-receive-range", "llama-3.1-8b", "decode", {**DECODE, "disaggregation_decode_host_receive_threshold": 1.5}, "decode-host-receive-threshold"),
    ("host-receive-range-before-hisparse", "llama-3.1-8b", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_host_receive_threshold": 2}, "decode-host-receive-threshold"),
    ("host-receive-hisparse", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_host_receive_threshold": 0.5}, "decode-host-receive-hisparse"),
    ("host-receive-hisparse-before-radix", "llama-3.1-8b", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_host_receive_threshold": 0.5,
      "disaggregation_decode_enable_radix_cache": True}, "decode-host-receive-hisparse"),
    ("host-receive-cpu-tensor", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_host_receive_threshold": 0.5, "disaggregation_decode_retraction_backup": "cpu_tensor"},
     "decode-host-receive-retraction"),
    ("host-receive-ok", "llama-3.1-8b", "decode", {**DECODE, "disaggregation_decode_host_receive_threshold": 0.5}, None),
    ("host-receive-on-prefill", "llama-3.1-8b", "prefill", {**PREFILL, "disaggregation_decode_host_receive_threshold": 0.5}, "decode-host-pool-role"),
    ("host-pool-on-prefill", "llama-3.1-8b", "prefill", {**PREFILL, "disaggregation_decode_retraction_backup": "host_pool"}, "decode-host-pool-role"),
    ("host-receive-dcp", "llama-3.1-8b", "decode",
     {**DECODE, "tp_size": 2, "dcp_size": 2, "disaggregation_decode_host_receive_threshold": 0.5}, "decode-host-pool-dcp"),
    ("host-pool-dcp", "llama-3.1-8b", "decode",
     {**DECODE, "tp_size": 2, "dcp_size": 2, "disaggregation_decode_retraction_backup": "host_pool"}, "decode-host-pool-dcp"),
    ("prefill-complete-nixl", "llama-3.1-8b", "decode", {**DECODE, "disaggregation_decode_allocation_policy": "prefill_complete"},
     "decode-allocation-policy"),
    ("prefill-complete-many", "deepseek-v3.2", "prefill",
     {**PREFILL, "tp_size": 2, "pp_size": 2, "enable_hisparse": True, "disaggregation_decode_allocation_policy": "prefill_complete"},
     "decode-allocation-policy"),
    ("prefill-complete-mooncake-tcp-hisparse", "llama-3.1-8b", "prefill",
     {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "mooncake_tcp", "enable_hisparse": True,
      "disaggregation_decode_allocation_policy": "prefill_complete"}, "decode-allocation-policy"),
    ("prefill-fake", "llama-3.1-8b", "prefill", {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "fake"},
     "prefill-fake-backend"),
    # handle_page_major_kv_layout / handle_unified_memory_pool (0.5.23): once a pass; the
    # servers refuse these flags at start-up (unified memory moves KV over Mooncake only)
    ("page-major-without-unified", "llama-3.1-8b", "prefill", {**PREFILL, "enable_page_major_kv_layout": True},
     "unified-memory"),
    ("unified-memory-nixl", "llama-3.1-8b", "decode", {**DECODE, "enable_unified_memory": True}, "unified-memory"),
    ("unified-memory-nixl-qwen3", "qwen3-8b", "prefill", {**PREFILL, "enable_unified_memory": True}, "unified-memory"),
    ("unified-memory-nixl-mla", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 8, "enable_unified_memory": True},
     "unified-memory"),
    ("unified-memory-backend", "llama-3.1-8b", "prefill",
     {**PREFILL, "enable_unified_memory": True, "attention_backend": "torch_native"}, "unified-memory"),
    ("unified-memory-mooncake-pp", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "pp_size": 2}, "unified-memory"),
    ("unified-memory-mooncake-mtp", "deepseek-v3", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "tp_size": 8,
      "enable_unified_memory": True, "speculative_algorithm": "EAGLE", "speculative_num_steps": 1,
      "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}, "unified-memory"),
    ("unified-memory-mooncake-hisparse", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "enable_hisparse": True}, "unified-memory"),
    ("unified-memory-mooncake-ok", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "enable_page_major_kv_layout": True}, None),
    ("unified-memory-mooncake-tcp-ok", "llama-3.1-8b", "prefill",
     {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "mooncake_tcp", "enable_unified_memory": True,
      "attention_backend": "flashinfer"}, None),
    ("unified-memory-mooncake-mla-ok", "deepseek-v3", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "tp_size": 8,
      "enable_unified_memory": True}, None),
]


@pytest.mark.parametrize("name,model,role,flags,expected_id", CASES, ids=[c[0] for c in CASES])
def test_startup_refusal_matches_runtime(sglang_cuda, tmp_path, name, model, role, flags, expected_id):
    model_dir = _model_dir(tmp_path, model)
    outcome = runtime_outcome(sglang_cuda, model_dir, flags)
    gpu = sglang_cuda[1]
    side = kv_side(role, model_dir, flags, gpu)
    predicted = startup_error(side)
    refusal = first_refusal(side)
    if gpu != "h100":
        expected_id = refusal.id if refusal is not None else None  # the ids below are Hopper's
    if outcome is None:
        assert predicted is None, f"the runtime starts, kvcheck predicts {predicted}"
        assert expected_id is None
        return
    rt_type, rt_message, rt_function = outcome
    assert predicted is not None, f"the runtime refuses with {rt_type}: {rt_message!r} ({rt_function}); kvcheck predicts nothing"
    assert (predicted.type, predicted.message) == (rt_type, rt_message)
    assert predicted.when == "start-up"
    assert predicted.raised_by.startswith(f"{role}: server start-up (")
    assert rt_function in predicted.raised_by  # names the runtime function that raised
    assert refusal.id == expected_id and refusal.id in REFUSAL_IDS


def _bundled_sides(tmp_path, pair: str):
    """The bundled example pair configs/PAIR/ (the handed HiSparse direct-to-host case)."""
    out = {}
    for role in ("prefill", "decode"):
        args = yaml.safe_load((ROOT / "configs" / pair / f"{role}.yaml").read_text())
        model = Path(args.pop("model-path")).name
        out[role] = (_model_dir(tmp_path, model), {k.replace("-", "_"): v for k, v in args.items()})
    return out


def test_handed_hisparse_pair_starts(sglang_cuda, tmp_path):
    """The handed HiSparse direct-to-host pair: both servers resolve their args, and kvcheck
    predicts no start-up refusal (the check emits nothing)."""
    sides = {}
    for role, (model_dir, flags) in _bundled_sides(tmp_path, "hisparse").items():
        assert runtime_outcome(sglang_cuda, model_dir, flags) is None
        sides[role] = kv_side(role, model_dir, flags, sglang_cuda[1])
        assert startup_error(sides[role]) is None
    ctx = CheckContext(prefill=sides["prefill"], decode=sides["decode"], prefill_geometry=None, decode_geometry=None, plan=None)
    assert REGISTRY["startup"].run(ctx) == []


def test_check_emits_one_finding_per_refusing_side(sglang_cuda, tmp_path):
    """Through the check: each refusing side gives one error finding carrying the runtime's text."""
    model_dir = _model_dir(tmp_path, "llama-3.1-8b")
    pflags = {**PREFILL, "enable_hisparse": True}
    dflags = {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "NGRAM"}
    ctx = CheckContext(prefill=kv_side("prefill", model_dir, pflags, sglang_cuda[1]), decode=kv_side("decode", model_dir, dflags, sglang_cuda[1]),
                       prefill_geometry=None, decode_geometry=None, plan=None)
    findings = REGISTRY["startup"].run(ctx)
    assert [f.id for f in findings] == ["hisparse-model", "decode-radix-cache-incompatible"]
    for f, flags in zip(findings, (pflags, dflags)):
        rt_type, rt_message, _ = runtime_outcome(sglang_cuda, model_dir, flags)
        assert (f.runtime_error.type, f.runtime_error.message) == (rt_type, rt_message)
        assert f.severity.value == "error"


# (case name, model, role, flags, GPU, the refusal id kvcheck must name): refusals the GPU decides.
GPU_CASES = [
    ("trtllm-mla-on-hopper", "deepseek-v3", "decode", {**DECODE, "attention_backend": "trtllm_mla"}, "h100", "attention-backend-gpu"),
    ("trtllm-mla-on-blackwell-ok", "deepseek-v3", "decode", {**DECODE, "attention_backend": "trtllm_mla"}, "b200", None),
    ("trtllm-mla-bfloat16-spelling", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "bfloat16"}, "b200", "attention-kv-dtype"),
    ("trtllm-mla-bf16-spelling-ok", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "bf16"}, "b200", None),
    ("fa3-default-bfloat16-ok", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "bfloat16"}, "h100", None),
    ("dsa-trtllm-mla-bf16", "deepseek-v3.2", "prefill", {**PREFILL, "attention_backend": "trtllm_mla", "kv_cache_dtype": "bf16"}, "b200", "attention-kv-dtype"),
    ("cutedsl-decode-hopper", "deepseek-v3", "decode", {**DECODE, "decode_attention_backend": "cutedsl_mla"}, "h100", "attention-backend-gpu"),
    ("cutedsl-prefill", "deepseek-v3", "prefill", {**PREFILL, "prefill_attention_backend": "cutedsl_mla"}, "b200", "attention-backend-gpu"),
    ("trtllm-mha-ampere", "llama-3.1-8b", "decode", {**DECODE, "attention_backend": "trtllm_mha"}, "a100", "attention-backend-gpu"),
    ("trtllm-mha-sm120-fp8", "llama-3.1-8b", "prefill", {**PREFILL, "attention_backend": "trtllm_mha", "kv_cache_dtype": "fp8_e4m3"}, "rtx5090", "attention-kv-dtype"),
    ("mxfp8-hopper", "qwen3-8b", "decode", {**DECODE, "kv_cache_dtype": "mxfp8"}, "h100", "kv-dtype-gpu-refused"),
    ("nvfp4-hopper", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "nvfp4"}, "h100", "kv-dtype-gpu-refused"),
    ("nvfp4-blackwell-pd", "llama-3.1-8b", "prefill", {**PREFILL, "kv_cache_dtype": "nvfp4"}, "b200", "kv-dtype-gpu-refused"),
    ("nvfp4-deepseek-blackwell", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "nvfp4"}, "b200", "nvfp4-prefill-dequant"),
    ("nvfp4-native-prefill-hopper", "llama-3.1-8b", "prefill",
     {**PREFILL, "kv_cache_dtype": "nvfp4", "prefill_attention_backend": "trtllm_mha"}, "h100", "nvfp4-prefill-dequant"),
    ("dsa-auto-kv-blackwell-hisparse-bf16-backend", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "dsa_decode_backend": "flashmla_sparse"}, "b200", "hisparse-dsa-backend"),
    ("dsa-auto-kv-hopper-hisparse-bf16-backend-ok", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "dsa_decode_backend": "flashmla_sparse"}, "h100", None),
    ("tp-not-divisible-attn-dp", "deepseek-v3", "decode", {**DECODE, "tp_size": 4, "attn_dp_size": 8}, "h100", "tp-attn-dp-cp"),
    ("tp-not-divisible-attn-dp-cp", "qwen3-8b", "prefill", {**PREFILL, "tp_size": 4, "attn_dp_size": 4, "attn_cp_size": 2}, "h100", "tp-attn-dp-cp"),
    ("dp-and-attn-dp", "deepseek-v3", "decode", {**DECODE, "tp_size": 8, "dp_size": 2, "attn_dp_size": 4}, "h100", "dp-size"),
    ("deprecated-dp-attention-ok", "deepseek-v3", "decode", {**DECODE, "tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, "h100", None),
    ("pp-mtp-decode", "deepseek-v3", "decode", {**DECODE, "pp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 1,
     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}, "h100", "pp-speculative"),
    ("pp-mtp-prefill-ok", "deepseek-v3", "prefill", {**PREFILL, "pp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 1,
     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}, "h100", None),
    ("hicache-on-pd-decode", "llama-3.1-8b", "decode", {**DECODE, "enable_hierarchical_cache": True}, "h100", "hicache-radix-cache"),
    ("hicache-on-pd-decode-radix-ok", "llama-3.1-8b", "decode",
     {**DECODE, "enable_hierarchical_cache": True, "disaggregation_decode_enable_radix_cache": True}, "h100", None),
    ("hicache-dcp-mha", "llama-3.1-8b", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2, "enable_hierarchical_cache": True,
     "disaggregation_decode_enable_radix_cache": True}, "h100", "hicache-dcp"),
    ("kv-sharding-decode", "deepseek-v3", "decode", {**DECODE, "enable_kv_cache_sharding": True}, "h100", "kv-sharding"),
    ("decode-offload-no-storage", "llama-3.1-8b", "decode", {**DECODE, "disaggregation_decode_enable_offload_kvcache": True}, "h100",
     "decode-offload-kvcache"),
]
GPU_CASES += [
    ("tp-nnodes", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 8, "nnodes": 3}, "h100", "nodes"),
    ("dp-replicas-multi-node", "llama-3.1-8b", "decode", {**DECODE, "tp_size": 2, "dp_size": 2, "nnodes": 2}, "h100", "nodes"),
    ("chunk-not-page-multiple", "llama-3.1-8b", "prefill", {**PREFILL, "page_size": 64, "chunked_prefill_size": 1000}, "h100", "chunked-prefill-page"),
    ("chunk-on-decode-ok", "llama-3.1-8b", "decode", {**DECODE, "page_size": 64, "chunked_prefill_size": 1000}, "h100", None),
    # trtllm_mla (DeepSeek V3 on SM100) snaps the page to 64; 4096 / attention DP 8 = 512 is fine, 1000 is not
    ("chunk-trtllm-page-blackwell", "deepseek-v3", "prefill", {**PREFILL, "chunked_prefill_size": 1000}, "b200", "chunked-prefill-page"),
    ("chunk-page-one-hopper-ok", "deepseek-v3", "prefill", {**PREFILL, "chunked_prefill_size": 1000}, "h100", None),
    ("chunk-attn-dp-ok", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 8, "attn_dp_size": 8, "chunked_prefill_size": 4096}, "b200", None),
]
GPU_CASES += [
    # EAGLE without --speculative-num-steps: _auto_choose_speculative_params gives DSA models topk 1
    ("hisparse-eagle-auto-params-ok", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 8, "page_size": 64, "kv_cache_dtype": "bfloat16",
     "speculative_algorithm": "EAGLE", "enable_hisparse": True, "disable_radix_cache": True}, "h100", None),
    ("hisparse-eagle-auto-params-b200-ok", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 8, "page_size": 64, "kv_cache_dtype": "bfloat16",
     "speculative_algorithm": "EAGLE", "enable_hisparse": True, "disable_radix_cache": True}, "b200", None),
]
GPU_CAPS = {"h100": (9, 0), "b200": (10, 0), "a100": (8, 0), "rtx5090": (12, 0)}


@pytest.mark.parametrize("name,model,role,flags,gpu,expected_id", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_dependent_refusal_matches_runtime(tmp_path, name, model, role, flags, gpu, expected_id):
    pytest.importorskip("sglang")
    model_dir = _model_dir(tmp_path, model)
    outcome = startup_corpus.runtime_outcome(model_dir, flags, GPU_CAPS[gpu])
    side = kv_side(role, model_dir, flags, gpu)
    refusal = first_refusal(side)
    if expected_id is None:
        assert outcome is None and refusal is None
        return
    assert outcome is not None and refusal is not None, (outcome, refusal)
    assert (refusal.type, refusal.message) == outcome[:2]
    assert refusal.id == expected_id


def test_gpu_not_given_says_when_blackwell_refuses(tmp_path):
    """GPU defaulted (Hopper assumed): a server that starts on Hopper but that the runtime
    refuses on Blackwell gets a warning carrying the Blackwell refusal; a GPU-decided
    refusal on the assumed Hopper says the GPU was assumed. A named GPU gets neither."""
    pytest.importorskip("sglang")
    model_dir = _model_dir(tmp_path, "deepseek-v3")
    bf = {**DECODE, "kv_cache_dtype": "bfloat16"}
    blackwell = startup_corpus.runtime_outcome(model_dir, bf, (10, 0))
    assert startup_corpus.runtime_outcome(model_dir, bf, (9, 0)) is None and blackwell is not None

    def run(pflags, dflags, gpu, source):
        p, d = kv_side("prefill", model_dir, pflags, gpu), kv_side("decode", model_dir, dflags, gpu)
        p.gpu_source = d.gpu_source = source
        return REGISTRY["startup"].run(CheckContext(prefill=p, decode=d, prefill_geometry=None, decode_geometry=None, plan=None))

    findings = [f for f in run(PREFILL, bf, "h100", "default (Hopper assumed)") if f.id == "startup-gpu-dependent"]
    assert len(findings) == 1 and findings[0].severity.value == "warning"
    assert f"{blackwell[0]}: {blackwell[1]}" in findings[0].message
    assert not [f for f in run(PREFILL, bf, "h100", "--gpu") if f.id == "startup-gpu-dependent"]
    mla = {**DECODE, "attention_backend": "trtllm_mla"}
    refused = [f for f in run(PREFILL, mla, "h100", "default (Hopper assumed)") if f.id == "attention-backend-gpu"]
    assert len(refused) == 1 and "GPU not given: assumed Hopper" in refused[0].message
    assert refused[0].runtime_error.message == startup_corpus.runtime_outcome(model_dir, mla, (9, 0))[1]


# ------------------------------------------------------------------------------------------
# Start-up refusals on architectures the bundled configs do not cover: a Qwen4Exp hybrid
# (CP-TP group sharing, SGLang 0.5.23) and a DSA NextN architecture (HiSparse KV dtype).
# The configs are written here in the shape of the real ones (config.json only).

def variant_model_dir(tmp_path: Path, name: str) -> Path:
    """A model directory holding ``startup_corpus.variant_config(name)``."""
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(startup_corpus.variant_config(name)))
    return d


STAGING = {"SGLANG_DISAGG_STAGING_BUFFER": "1"}
CPTP = {**PREFILL, "tp_size": 2, "attn_cp_size": 2, "enable_prefill_cp": True, "cp_strategy": "zigzag"}

# (case name, model, role, flags, env, the id kvcheck must name; None: the runtime starts)
VARIANT_CASES = [
    ("cp-tp-staging", "qwen4-exp", "prefill", CPTP, STAGING, "staging-cp-tp-sharing"),
    ("cp-tp-no-staging-starts", "qwen4-exp", "prefill", CPTP, {}, None),
    ("cp-tp-size", "qwen4-exp", "prefill", {**CPTP, "tp_size": 4}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-strategy", "qwen4-exp", "prefill", {**CPTP, "cp_strategy": "interleave"}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-spec", "qwen4-exp", "prefill", {**CPTP, "speculative_algorithm": "NGRAM"}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-mixed-chunk", "qwen4-exp", "prefill", {**CPTP, "enable_mixed_chunk": True}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-ep", "qwen4-exp", "prefill", {**CPTP, "ep_size": 2}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-a2a", "qwen4-exp", "prefill", {**CPTP, "moe_a2a_backend": "deepep"}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-pp", "qwen4-exp", "prefill", {**CPTP, "pp_size": 2}, STAGING, "cp-tp-group-sharing"),
    ("cp-tp-decode", "qwen4-exp", "decode", {**CPTP, "disaggregation_mode": "decode"}, STAGING, "cp-tp-group-sharing"),
    ("hisparse-kv-bf16-nextn", "deepseek-v3.2-nextn", "decode", {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bf16"}, {},
     "hisparse-kv-dtype"),
    ("hisparse-kv-e5m2-nextn", "deepseek-v3.2-nextn", "prefill",
     {**PREFILL, "enable_hisparse": True, "disable_radix_cache": True, "kv_cache_dtype": "fp8_e5m2"}, {}, "hisparse-kv-dtype"),
    ("hisparse-kv-bfloat16-nextn-ok", "deepseek-v3.2-nextn", "decode", {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bfloat16"}, {},
     None),
    ("hisparse-kv-auto-nextn-ok", "deepseek-v3.2-nextn", "decode", {**DECODE, "enable_hisparse": True}, {}, None),
]


@pytest.mark.parametrize("name,model,role,flags,env,expected_id", VARIANT_CASES, ids=[c[0] for c in VARIANT_CASES])
@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_variant_architecture_refusal_matches_runtime(tmp_path, name, model, role, flags, env, expected_id, gpu):
    """CP-TP group sharing (0.5.23 ``resolve_cp_tp_group_sharing``, reached from
    ``handle_context_parallelism``) and HiSparse's KV dtype (``validate_hisparse_kv_cache_dtype``)
    against the runtime's own start-up path, with the runtime's exact text."""
    pytest.importorskip("sglang")
    from kvcheck.sglang.startup import Refusal, first_outcome

    model_dir = variant_model_dir(tmp_path, model)
    outcome = startup_corpus.runtime_outcome(model_dir, flags, GPU_CAPS[gpu], env)
    side = startup_corpus.kv_side(role, model_dir, flags, gpu, env)
    predicted = first_outcome(side)
    if expected_id is None:
        assert outcome is None
        assert not isinstance(predicted, Refusal), predicted  # None, or a Stop (prefill CP past the hook: unchecked)
        return
    assert outcome is not None and isinstance(predicted, Refusal), (outcome, predicted)
    assert (predicted.type, predicted.message, predicted.hook) == outcome
    assert predicted.id == expected_id


def test_new_startup_steps_are_gated_by_release(tmp_path):
    """Each restated step exists from the release that introduced it (the hook's source in that
    release's wheel): validate_hisparse_kv_cache_dtype from 0.5.14 (0.5.12 .. 0.5.13: the older
    "bfloat16 or fp8_e4m3" text of validate_hisparse; 0.5.10: no dtype check); the CP-TP staging
    refusal from 0.5.23 (0.5.22's hook supported GLM-5 Next only): earlier, kvcheck does not name them."""
    from kvcheck.sglang.gpu import resolve_gpu
    from kvcheck.sglang.startup import ORDER, STARTUP_RESTATED_FROM, Refusal, ReleaseStop, first_outcome
    from kvcheck.sglang.releases import in_range

    def steps(side):  # the restated steps alone, without first_outcome's release gate
        return next((o for o in (step(side, resolve_gpu("h100")) for step in ORDER) if o is not None), None)

    nextn = variant_model_dir(tmp_path, "deepseek-v3.2-nextn")
    qwen = variant_model_dir(tmp_path, "qwen4-exp")
    hs = startup_corpus.kv_side("decode", nextn, {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bf16"}, "h100")
    cp = startup_corpus.kv_side("prefill", qwen, CPTP, "h100", STAGING)
    for release, hs_id, cp_refused in (("0.5.23", "hisparse-kv-dtype", True), ("0.5.22", "hisparse-kv-dtype", False),
                                       ("0.5.14", "hisparse-kv-dtype", False), ("0.5.13", "hisparse-kv-dtype", False),
                                       ("0.5.10", None, False)):
        hs.sglang_version = cp.sglang_version = release
        got = steps(hs)
        assert (got.id if isinstance(got, Refusal) else None) == hs_id, (release, got)
        assert isinstance(steps(cp), Refusal) == cp_refused, release
        if not in_range(release, STARTUP_RESTATED_FROM):
            # prefill CP before 0.5.22 reaches steps not restated for those releases: unchecked
            # (startup.unrestated_steps; tests/test_startup_releases.py); HiSparse is restated.
            assert isinstance(first_outcome(cp), ReleaseStop), release
            assert first_outcome(hs) == got, release


# --- flag values whose start-up checks kvcheck does not restate (kvcheck.sglang.startup.unrestated)
# Each was a pass: SGLang 0.5.23 refuses it at start-up on a plain PD server (the runtime's
# text below comes from its own start-up, run here), and kvcheck's restated steps predicted a
# start. Now that side is startup-unchecked naming the flag, never a pass.
UNRESTATED_CASES = [
    ("llama-3.1-8b", "decode", {**DECODE, "enable_watermark": True}),
    ("llama-3.1-8b", "prefill", {**PREFILL, "enable_response_store": True}),
    ("llama-3.1-8b", "decode", {**DECODE, "retraction_policy": "priority"}),
    ("llama-3.1-8b", "prefill", {**PREFILL, "quantization": "gptq"}),
    ("llama-3.1-8b", "prefill", {**PREFILL, "enable_lmcache": True}),
    ("llama-3.1-8b", "decode", {**DECODE, "moe_runner_backend": "lora_triton"}),
    ("llama-3.1-8b", "decode", {**DECODE, "language_model_only": True}),
    # the checkpoint is FP8 (quantization_config.quant_method): another --quantization is refused
    ("deepseek-v3", "decode", {**DECODE, "tp_size": 8, "quantization": "awq"}),
    # numeric flags (UNRESTATED_REFUSING_NUMBERS): values the probes bracket, not only the probes
    ("llama-3.1-8b", "prefill", {**PREFILL, "tokenizer_worker_num": 0}),
    ("llama-3.1-8b", "decode", {**DECODE, "gpu_id_step": -3}),
    ("llama-3.1-8b", "decode", {**DECODE, "swa_full_tokens_ratio": 1.5}),
    ("llama-3.1-8b", "prefill", {**PREFILL, "max_ep_size": 16}),
]


@pytest.mark.parametrize("model,role,flags", UNRESTATED_CASES, ids=[str(sorted(c[2].items())[-1]) for c in UNRESTATED_CASES])
def test_a_flag_the_runtime_refuses_by_an_unrestated_check_is_unchecked_not_a_pass(tmp_path, model, role, flags):
    pytest.importorskip("sglang")
    from kvcheck.sglang.startup import Stop, first_outcome

    model_dir = _model_dir(tmp_path, model)
    outcome = startup_corpus.runtime_outcome(model_dir, flags, GPU_UNDER_TEST["h100"])
    assert outcome is not None, "the runtime starts: the case is wrong"
    side = kv_side(role, model_dir, flags, "h100")
    predicted = first_outcome(side)
    assert isinstance(predicted, Stop), (outcome, predicted)
    flag = next(k for k in flags if k not in ("disaggregation_mode", "disaggregation_transfer_backend", "tp_size"))
    assert "--" + flag.replace("_", "-") in predicted.reason
    # and a value the runtime accepts is not stopped by the table
    # (swa-full-tokens-ratio: its range (0, 1.0] is read in the runtime, so values between the
    # refused probe 0 and the accepted 0.5 pass too: published DeepSeek V4 recipes set 0.056, 0.1)
    ok = {"tokenizer_worker_num": [2], "gpu_id_step": [1], "swa_full_tokens_ratio": [0.8, 0.056, 0.1, 1.0]}
    for value in ok.get(flag, []):
        fine = {**flags, flag: value}
        assert startup_corpus.runtime_outcome(model_dir, fine, GPU_UNDER_TEST["h100"]) is None, value
        assert first_outcome(kv_side(role, model_dir, fine, "h100")) is None, value


# The same values where the side's own flags meet the runtime's condition (0.5.23
# parallel_hook._handle_eplb_and_dispatch): the runtime starts, and kvcheck does not stop
# (published wide-EP recipes set these with --ep-size and --moe-a2a-backend deepep).
UNRESTATED_ALLOWED = [
    {**DECODE, "tp_size": 8, "ep_size": 8, "enable_eplb": True},
    {**PREFILL, "tp_size": 8, "ep_size": 8, "moe_a2a_backend": "deepep", "enable_eplb": True},
    {**DECODE, "tp_size": 8, "ep_size": 8, "moe_a2a_backend": "deepep", "ep_dispatch_algorithm": "static"},
    # deepep spans EP over TP (ep_size := tp_size before the assert): OME's DeepSeek RDMA runtime
    {**PREFILL, "tp_size": 8, "moe_a2a_backend": "deepep", "enable_eplb": True},
]
UNRESTATED_STILL_REFUSED = [
    {**DECODE, "tp_size": 8, "enable_eplb": True},  # ep size 1: the assert
    {**DECODE, "tp_size": 1, "moe_a2a_backend": "deepep", "enable_eplb": True},  # tp 1: ep 1
    {**DECODE, "tp_size": 8, "ep_size": 8, "ep_dispatch_algorithm": "static"},  # no a2a backend
]


@pytest.mark.parametrize("flags", UNRESTATED_ALLOWED + UNRESTATED_STILL_REFUSED)
def test_eplb_and_dispatch_refusals_follow_the_runtimes_condition(tmp_path, flags):
    pytest.importorskip("sglang")
    from kvcheck.sglang.startup import Stop, first_outcome

    model_dir = _model_dir(tmp_path, "deepseek-v3")
    outcome = startup_corpus.runtime_outcome(model_dir, flags, GPU_UNDER_TEST["h100"])
    predicted = first_outcome(kv_side(flags["disaggregation_mode"], model_dir, flags, "h100"))
    if flags in UNRESTATED_ALLOWED:
        assert outcome is None and predicted is None, (outcome, predicted)
    else:
        assert outcome is not None and outcome[2] == "handle_eplb_and_dispatch", outcome
        assert isinstance(predicted, Stop), predicted


def test_an_unrestated_refusal_is_exit_4_on_the_pair_path_and_with_f(tmp_path):
    from typer.testing import CliRunner

    from kvcheck.cli import app

    model = MODELS / "llama-3.1-8b"
    nixl = "--disaggregation-transfer-backend nixl --page-size 16"
    p = f"python -m sglang.launch_server --model-path {model} --disaggregation-mode prefill {nixl}"
    d = f"python -m sglang.launch_server --model-path {model} --disaggregation-mode decode {nixl} --port 30001 --enable-watermark"
    (tmp_path / "p.sh").write_text(p + "\n")
    (tmp_path / "d.sh").write_text(d + "\n")
    (tmp_path / "deploy.sh").write_text(p + "\n" + d + "\n")
    common = ["--sglang-version", "0.5.23", "--gpu", "h100", "--format", "json"]
    for args in (["-p", str(tmp_path / "p.sh"), "-d", str(tmp_path / "d.sh")], ["-f", str(tmp_path / "deploy.sh")]):
        res = CliRunner().invoke(app, ["preflight", *args, *common])
        report = json.loads(res.stdout)
        findings = report["findings"] + [f for pair in report.get("pairs") or [] for f in pair["findings"]]
        assert res.exit_code == 4 and report["verdict"] == "unchecked", findings
        assert any(f["id"] == "startup-unchecked" and "--enable-watermark" in f["message"] for f in findings)
