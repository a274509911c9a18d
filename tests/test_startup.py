"""kvcheck.sglang.startup against SGLang 0.5.23's own argument resolution.

Each case builds one server's flags, runs the runtime's start-up path on them
(``prepare_server_args`` -> ``ServerArgs.resolve_once()`` -> ``check_server_args()``, the
order ``Engine._launch_subprocesses`` uses) with a temporary model directory holding a
``config.json`` from ``configs/models``, and compares the exception class and ``str()``
with kvcheck's prediction. Nothing expected is written here: the runtime supplies it.

How it runs on a CPU-only machine: ``--device cuda`` selects SGLang's CUDA platform, so
its CUDA code paths (DSA backends and KV dtype, HiSparse defaults) are the ones taken.
The one hardware query on those paths is ``torch.cuda.get_device_capability()``, which a
CPU build of torch cannot answer; the fixture answers it with (9, 0), an SM90 Hopper
(H100/H200). Only that torch probe is replaced; SGLang's decision code runs unmodified.
"""

from __future__ import annotations

import json
import shutil
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml

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


@pytest.fixture(scope="module")
def sglang_cuda():
    """SGLang importable, with torch's compute-capability probe answering SM90."""
    pytest.importorskip("sglang")
    import torch

    saved = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    from sglang.srt.server_args import prepare_server_args

    yield prepare_server_args
    torch.cuda.get_device_capability = saved


def _argv(flags: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for dest, value in flags.items():
        opt = "--" + dest.replace("_", "-")
        if value is True:
            argv.append(opt)
        elif value is False or value is None:
            continue
        else:
            argv += [opt, str(value)]
    return argv


def _model_dir(tmp_path: Path, model: str) -> Path:
    d = tmp_path / model
    d.mkdir(exist_ok=True)
    shutil.copy(MODELS / model / "config.json", d / "config.json")
    return d


def runtime_outcome(prepare_server_args, model_dir: Path, flags: dict[str, Any]):
    """What SGLang does at start-up with these flags: ``None`` or (type name, str(exc), function)."""
    argv = ["--model-path", str(model_dir), "--device", "cuda"] + _argv(flags)
    server_args = prepare_server_args(argv)
    try:
        server_args.resolve_once()
        server_args.check_server_args()
    except Exception as exc:  # noqa: BLE001  (the runtime's own exception, compared below)
        return type(exc).__name__, str(exc), traceback.extract_tb(exc.__traceback__)[-1].name
    return None


def kv_side(role: str, model_dir: Path, flags: dict[str, Any]) -> Side:
    raw = json.loads((model_dir / "config.json").read_text())
    return Side(
        role=role,
        args=ServerArgs(model_path=str(model_dir), **flags),
        raw_args=dict(flags),
        model=parse_model_config(raw, str(model_dir / "config.json")),
        origin=f"{role} test flags",
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
]


@pytest.mark.parametrize("name,model,role,flags,expected_id", CASES, ids=[c[0] for c in CASES])
def test_startup_refusal_matches_runtime(sglang_cuda, tmp_path, name, model, role, flags, expected_id):
    model_dir = _model_dir(tmp_path, model)
    outcome = runtime_outcome(sglang_cuda, model_dir, flags)
    side = kv_side(role, model_dir, flags)
    predicted = startup_error(side)
    refusal = first_refusal(side)
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
        sides[role] = kv_side(role, model_dir, flags)
        assert startup_error(sides[role]) is None
    ctx = CheckContext(prefill=sides["prefill"], decode=sides["decode"], prefill_geometry=None, decode_geometry=None, plan=None)
    assert REGISTRY["startup"].run(ctx) == []


def test_check_emits_one_finding_per_refusing_side(sglang_cuda, tmp_path):
    """Through the check: each refusing side gives one error finding carrying the runtime's text."""
    model_dir = _model_dir(tmp_path, "llama-3.1-8b")
    pflags = {**PREFILL, "enable_hisparse": True}
    dflags = {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "NGRAM"}
    ctx = CheckContext(prefill=kv_side("prefill", model_dir, pflags), decode=kv_side("decode", model_dir, dflags),
                       prefill_geometry=None, decode_geometry=None, plan=None)
    findings = REGISTRY["startup"].run(ctx)
    assert [f.id for f in findings] == ["hisparse-model", "decode-radix-cache-incompatible"]
    for f, flags in zip(findings, (pflags, dflags)):
        rt_type, rt_message, _ = runtime_outcome(sglang_cuda, model_dir, flags)
        assert (f.runtime_error.type, f.runtime_error.message) == (rt_type, rt_message)
        assert f.severity.value == "error"
