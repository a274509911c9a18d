"""A seeded corpus of one-server flag sets for the start-up refusals, and the runtime driver
that answers each one with SGLang 0.5.23's own start-up path on a CPU-only machine.

``runtime_outcome`` runs ``prepare_server_args`` -> ``ServerArgs.resolve_once()`` ->
``check_server_args()`` (the order ``Engine._launch_subprocesses`` uses) with ``--device
cuda``. The GPU is the one thing a CPU cannot answer; ``gpu_facts`` installs it through
SGLang's own scoped platform override (``sglang.srt.runtime_context._PlatformOverride``,
the hook SGLang provides for exactly this) and answers ``torch.cuda.get_device_capability``
with the same capability. SGLang's decision code runs unmodified.

The corpus draws from the flags kvcheck's start-up model reads (parallel sizes, PD role and
transfer backend, attention backends, KV dtype spellings, HiCache, HiSparse, DCP, KV
sharding, PP with MTP, staging env). Speculative settings are drawn from the ones the
speculative hook accepts (its own parameter checks are tested in test_startup.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "configs" / "models"
MODEL_NAMES = ("llama-3.1-8b", "qwen3-8b", "deepseek-v3", "deepseek-v3.2")
GPUS = {"h100": (9, 0), "b200": (10, 0), "a100": (8, 0), "rtx5090": (12, 0)}


@contextlib.contextmanager
def gpu_facts(capability: tuple[int, int]) -> Iterator[None]:
    """SGLang's platform facts for one NVIDIA GPU of this compute capability, scoped."""
    import torch
    from sglang.srt.runtime_context import _PlatformOverride

    m = capability[0]
    facts = dict(
        is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
        is_sm90=m == 9, is_sm100=m == 10, is_sm110=m == 11, is_sm120=m == 12, is_sm100_or_sm110=m in (10, 11),
        is_blackwell=m in (10, 11, 12), is_hopper_with_cuda_12_3=m == 9, has_flashinfer=True,
        device_sm=m * 10 + capability[1], device_capability=capability,
    )
    saved = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda device=None: capability
    try:
        with _PlatformOverride(**facts):
            yield
    finally:
        torch.cuda.get_device_capability = saved


QWEN4_EXP_TEXT = {
    "model_type": "qwen4_exp_text", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4, "vocab_size": 151936, "num_experts": 64, "num_experts_per_tok": 8,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "intermediate_size": 5120,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
}
VARIANT_MODELS = ("qwen4-exp", "deepseek-v3.2-nextn")


def variant_config(name: str) -> dict:
    """config.json of a model the bundled configs do not cover, in the shape of the real one:
    ``qwen4-exp`` (Qwen4ExpForConditionalGeneration, a hybrid linear-attention MoE whose
    prefill CP shares the TP group) and ``deepseek-v3.2-nextn`` (the bundled DeepSeek V3.2
    config under the DSA NextN architecture DeepseekV3ForCausalLMNextN)."""
    if name == "qwen4-exp":
        return {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp",
                "text_config": dict(QWEN4_EXP_TEXT), "torch_dtype": "bfloat16"}
    if name == "deepseek-v3.2-nextn":
        cfg = json.loads((MODELS / "deepseek-v3.2" / "config.json").read_text())
        cfg["architectures"] = ["DeepseekV3ForCausalLMNextN"]
        return cfg
    raise KeyError(name)


def model_dirs(tmp: Path) -> dict[str, Path]:
    """A directory per bundled model config (``config.json`` only: resolution reads no weights)."""
    out = {}
    for name in MODEL_NAMES:
        d = tmp / name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(MODELS / name / "config.json", d / "config.json")
        out[name] = d
    return out


def argv(flags: dict[str, Any]) -> list[str]:
    """dest -> value as the command line (True: bare flag; False/None: omitted)."""
    out: list[str] = []
    for dest, value in flags.items():
        opt = "--" + dest.replace("_", "-")
        if value is True:
            out.append(opt)
        elif value is False or value is None:
            continue
        else:
            out += [opt, str(value)]
    return out


@contextlib.contextmanager
def _env(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def runtime_outcome(model_dir: Path, flags: dict[str, Any], capability: tuple[int, int],
                    env: Optional[dict[str, str]] = None):
    """What SGLang 0.5.23 does at start-up: ``None`` or (exception class name, str(exc),
    the function that raised)."""
    from sglang.srt.server_args import prepare_server_args

    with gpu_facts(capability), _env(env or {}):
        server_args = prepare_server_args(["--model-path", str(model_dir), "--device", "cuda"] + argv(flags))
        try:
            server_args.resolve_once()
            server_args.check_server_args()
        except Exception as exc:  # noqa: BLE001  (the runtime's own exception, compared by the caller)
            return type(exc).__name__, str(exc), traceback.extract_tb(exc.__traceback__)[-1].name
    return None


SPEC_CHOICES = (
    {},
    {},
    {"speculative_algorithm": "NEXTN", "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
    {"speculative_algorithm": "EAGLE", "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
)


def draw(rng: random.Random) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    """One (model, role, flags, env) from the corpus distribution."""
    model = rng.choice(MODEL_NAMES)
    role = rng.choice(("prefill", "decode"))
    f: dict[str, Any] = {"disaggregation_mode": role}
    f["disaggregation_transfer_backend"] = rng.choice(("nixl", "nixl", "nixl", "mooncake", "fake"))
    f["tp_size"] = rng.choice((1, 2, 4, 8, 8))
    f["dp_size"] = rng.choice((1, 1, 1, 2, 4))
    f["attn_dp_size"] = rng.choice((None, None, None, 2, 4, 8))
    f["enable_dp_attention"] = rng.random() < 0.15
    f["attn_cp_size"] = rng.choice((None, None, None, 2, 4))
    f["dcp_size"] = rng.choice((None, None, None, 2))
    f["pp_size"] = rng.choice((None, None, None, 2))
    f["page_size"] = rng.choice((None, None, 1, 16, 32, 64))
    f["kv_cache_dtype"] = rng.choice((None, None, "auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4"))
    backend = rng.choice((None, None, None, "fa3", "flashinfer", "triton", "trtllm_mla", "trtllm_mha", "flashmla", "cutedsl_mla", "fa4"))
    slot = rng.random()
    if backend is not None:
        if slot < 0.6:
            f["attention_backend"] = backend
        elif slot < 0.8:
            f["decode_attention_backend"] = backend
        else:
            f["prefill_attention_backend"] = backend
    f.update(rng.choice(SPEC_CHOICES) if model.startswith("deepseek") else {})
    f["enable_hierarchical_cache"] = rng.random() < 0.15
    f["disable_radix_cache"] = rng.random() < 0.2
    f["disaggregation_decode_enable_radix_cache"] = rng.random() < 0.1
    f["enable_kv_cache_sharding"] = rng.random() < 0.12
    f["enable_hisparse"] = rng.random() < 0.1
    f["disaggregation_decode_retraction_backup"] = rng.choice((None, None, None, None, "host_pool", "cpu_tensor"))
    f["nnodes"] = rng.choice((None, None, None, None, 2, 3))
    f["chunked_prefill_size"] = rng.choice((None, None, None, 4096, 8192, 1000, 96))
    env = {"SGLANG_DISAGG_STAGING_BUFFER": "1"} if rng.random() < 0.05 else {}
    return model, role, {k: v for k, v in f.items() if v is not None and v is not False}, env


def kv_side(role: str, model_dir: Path, flags: dict[str, Any], gpu: str, env: Optional[dict[str, str]] = None):
    """kvcheck's ``Side`` for the same flags, model, GPU and environment."""
    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sides import Side

    raw = json.loads((model_dir / "config.json").read_text())
    return Side(role=role, args=ServerArgs(model_path=str(model_dir), **flags), raw_args=dict(flags), env=dict(env or {}),
                model=parse_model_config(raw, str(model_dir / "config.json")), origin=f"{role} corpus flags", gpu=gpu)


def compare(outcome, predicted) -> Optional[str]:
    """``None`` when kvcheck's outcome (a Refusal, a Stop or None) agrees with the runtime's;
    else what differs. A Stop is not a disagreement (kvcheck says it cannot decide)."""
    from kvcheck.sglang.startup import Refusal

    if not isinstance(predicted, Refusal) and predicted is not None:
        return None
    if outcome is None:
        return None if predicted is None else f"runtime starts, kvcheck predicts {predicted.type}: {predicted.message!r}"
    rt_type, rt_message, rt_function = outcome
    if predicted is None:
        return f"runtime refuses {rt_type}: {rt_message!r} ({rt_function}); kvcheck predicts a start"
    if (predicted.type, predicted.message) != (rt_type, rt_message):
        return f"runtime {rt_type}: {rt_message!r} ({rt_function}); kvcheck {predicted.type}: {predicted.message!r} ({predicted.hook})"
    if rt_function not in predicted.hook and rt_function != predicted.hook:
        return None  # same text; the raising helper may be nested under the hook kvcheck names
    return None


def draw_sharded_prefill(rng: random.Random) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    """A PD prefill with ``--enable-kv-cache-sharding`` past the first checks: the attention
    backend, transfer backend, staging, MLA/GQA layout and page-size checks decide."""
    model = rng.choice(MODEL_NAMES)
    f: dict[str, Any] = {"disaggregation_mode": "prefill", "enable_kv_cache_sharding": True}
    f["disaggregation_transfer_backend"] = rng.choice(("nixl", "nixl", "mooncake", "mori"))
    f["tp_size"] = rng.choice((1, 2, 4, 8))
    f["attn_dp_size"] = rng.choice((None, None, 2))
    f["attn_cp_size"] = rng.choice((None, None, 2))
    f["page_size"] = rng.choice((None, 1, 16, 32, 64, 128))
    f["kv_cache_dtype"] = rng.choice((None, "bf16", "fp8_e4m3", "fp8_e5m2"))
    f["attention_backend"] = rng.choice((None, None, "fa3", "trtllm_mla", "flashinfer", "triton", "flashmla", "fa4", "trtllm_mha"))
    f["disable_chunked_prefix_cache"] = rng.random() < 0.15
    f["enable_two_batch_overlap"] = rng.random() < 0.08
    env = {"SGLANG_DISAGG_STAGING_BUFFER": "1"} if rng.random() < 0.1 else {}
    return model, "prefill", {k: v for k, v in f.items() if v is not None and v is not False}, env
