"""FP4 KV start-up refusals (``handle_kv4_compatibility`` and the hooks before it) against
SGLang 0.5.23's own start-up path on CPU, on four GPU generations.

Each draw is one server with ``--kv-cache-dtype nvfp4`` or ``fp4_mx_block16`` and the
attention-backend flags an operator might give; ``startup_corpus.runtime_outcome`` runs
``prepare_server_args`` -> ``resolve_once()`` -> ``check_server_args()`` with SGLang's
platform facts for the GPU, and kvcheck's ``first_outcome`` must agree on the exception
class and text (or on no refusal). A ``Stop`` is allowed but must stay rare.
"""

from __future__ import annotations

import random

import pytest

import startup_corpus as C
from kvcheck.sglang.startup import Refusal, Stop, first_outcome

pytestmark = pytest.mark.runtime

SEED = 777
DRAWS = 100  # x 4 GPUs
BACKENDS = (None, None, "triton", "fa3", "flashinfer", "fa4", "trtllm_mha", "torch_native", "trtllm_mla", "flex_attention")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    pytest.importorskip("sglang")
    return C.model_dirs(tmp_path_factory.mktemp("models"))


def _draw(rng: random.Random):
    model = rng.choice(("llama-3.1-8b", "qwen3-8b", "deepseek-v3"))
    role = rng.choice(("prefill", "decode"))
    f = {"disaggregation_mode": role, "disaggregation_transfer_backend": "nixl", "tp_size": rng.choice((1, 2, 8))}
    f["kv_cache_dtype"] = rng.choice(("fp4_mx_block16", "fp4_mx_block16", "nvfp4"))
    split = rng.random() < 0.3
    if split:
        f["prefill_attention_backend"] = rng.choice(BACKENDS)
        f["decode_attention_backend"] = rng.choice(BACKENDS)
    else:
        f["attention_backend"] = rng.choice(BACKENDS)
    f["page_size"] = rng.choice((None, 16, 64))
    f["enable_unified_memory"] = rng.random() < 0.08
    return model, role, {k: v for k, v in f.items() if v is not None and v is not False}


def test_fp4_startup_agrees_with_the_runtime(dirs):
    rng = random.Random(SEED)
    disagreements, refusals, starts, stops, total = [], 0, 0, 0, 0
    seen_kv4 = set()
    for _ in range(DRAWS):
        model, role, flags = _draw(rng)
        for gpu, capability in C.GPUS.items():
            outcome = C.runtime_outcome(dirs[model], flags, capability)
            predicted = first_outcome(C.kv_side(role, dirs[model], flags, gpu))
            total += 1
            diff = C.compare(outcome, predicted)
            if diff:
                disagreements.append(f"{model} {role} {gpu} {flags}: {diff}")
            elif isinstance(predicted, Stop):
                stops += 1
            elif isinstance(predicted, Refusal):
                refusals += 1
                if predicted.id == "kv4-backend":
                    seen_kv4.add(predicted.message.split(" expects")[0])
            else:
                starts += 1
    assert disagreements == [], "\n".join(disagreements[:20])
    # both verdicts, the KV4 backend asserts of MHA and MLA, and almost no Stop
    assert refusals > total // 3 and starts > total // 20, (refusals, starts, stops, total)
    assert {"KV4 MHA", "KV4 MLA"} <= seen_kv4
    assert stops < total // 10, (stops, total)


@pytest.mark.parametrize("gpu,expected", [
    ("h100", "KV4 MHA expects attention_backend to be one of ['triton', 'torch_native', 'flex_attention', 'trtllm_mha'], but got fa3"),
    ("rtx5090", "KV4 MHA expects attention_backend to be one of ['triton', 'torch_native', 'flex_attention', 'trtllm_mha'], but got flashinfer"),
])
def test_fp4_mx_block16_default_backend_is_refused(dirs, gpu, expected):
    """fp4_mx_block16 with no backend flag: the GPU default (fa3 on Hopper, flashinfer on
    SM120) is not in the KV4 MHA list; the runtime asserts at start-up."""
    flags = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "nixl", "kv_cache_dtype": "fp4_mx_block16"}
    rt = C.runtime_outcome(dirs["llama-3.1-8b"], flags, C.GPUS[gpu])
    assert rt is not None and rt[:2] == ("AssertionError", expected)
    ours = first_outcome(C.kv_side("decode", dirs["llama-3.1-8b"], flags, gpu))
    assert isinstance(ours, Refusal) and ours.id == "kv4-backend" and ours.message == expected


def test_fp4_with_triton_starts(dirs):
    flags = {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", "kv_cache_dtype": "fp4_mx_block16",
             "attention_backend": "triton"}
    for gpu, cap in C.GPUS.items():
        assert C.runtime_outcome(dirs["llama-3.1-8b"], flags, cap) is None
        assert first_outcome(C.kv_side("prefill", dirs["llama-3.1-8b"], flags, gpu)) is None
