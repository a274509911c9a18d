"""kvcheck's start-up model against SGLang 0.5.23's own start-up path on a seeded corpus.

Each draw is one server (model, PD role, flags, environment) from ``startup_corpus.draw``;
each is run on four GPU generations (Hopper h100, Blackwell b200, Ampere a100, SM120
rtx5090) through ``prepare_server_args`` -> ``resolve_once()`` -> ``check_server_args()``
with SGLang's platform facts for that GPU (``startup_corpus.gpu_facts``). kvcheck's
``first_outcome`` for the same side must agree: the same exception class and ``str()``, or
no refusal when the runtime starts; a ``Stop`` (kvcheck says it cannot decide) is allowed
but counted, and must stay a small share. 0 disagreements.
"""

from __future__ import annotations

import random

import pytest

import startup_corpus as C
from kvcheck.sglang.startup import Refusal, Stop, first_outcome

pytestmark = pytest.mark.runtime

SEED = 20261201
DRAWS = 250  # x 4 GPUs = 1,000 runtime start-ups (about a minute on 2 busy cores)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    pytest.importorskip("sglang")
    return C.model_dirs(tmp_path_factory.mktemp("models"))


def test_corpus_agrees_with_the_runtime(dirs):
    rng = random.Random(SEED)
    disagreements, refusals, starts, stops, total = [], 0, 0, 0, 0
    for _ in range(DRAWS):
        model, role, flags, env = C.draw(rng)
        for gpu, capability in C.GPUS.items():
            outcome = C.runtime_outcome(dirs[model], flags, capability, env)
            predicted = first_outcome(C.kv_side(role, dirs[model], flags, gpu, env))
            total += 1
            diff = C.compare(outcome, predicted)
            if diff:
                disagreements.append(f"{model} {role} {gpu} {flags} {env}: {diff}")
            elif isinstance(predicted, Stop):
                stops += 1
            elif isinstance(predicted, Refusal):
                refusals += 1
            else:
                starts += 1
    assert disagreements == [], "\n".join(disagreements[:20])
    assert total == DRAWS * len(C.GPUS)
    # the corpus exercises both verdicts, and kvcheck decides almost every case
    assert refusals > total // 3 and starts > total // 20
    assert stops < total // 20


def test_gpu_decides_trtllm_mla():
    """The same DeepSeek V3 decode with --kv-cache-dtype bfloat16 starts on Hopper (FA3 by
    default) and is refused on Blackwell, where the DeepSeek override picks trtllm_mla;
    with ``bf16`` it starts on both. The runtime says so too."""
    pytest.importorskip("sglang")
    import tempfile
    from pathlib import Path

    d = C.model_dirs(Path(tempfile.mkdtemp()))["deepseek-v3"]
    for kv, gpu, refused in (("bfloat16", "h100", False), ("bfloat16", "b200", True), ("bf16", "b200", False), ("bf16", "h100", False)):
        flags = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "nixl", "kv_cache_dtype": kv}
        outcome = C.runtime_outcome(d, flags, C.GPUS.get(gpu, (9, 0)))
        predicted = first_outcome(C.kv_side("decode", d, flags, gpu))
        assert (outcome is not None) == refused == isinstance(predicted, Refusal)
        if refused:
            assert (predicted.type, predicted.message) == outcome[:2]
            assert predicted.id == "attention-kv-dtype"


SHARDED_DRAWS = 50  # x 4 GPUs = 200 sharded PD prefills


def test_sharded_prefill_corpus_agrees_with_the_runtime(dirs):
    """``--enable-kv-cache-sharding`` on PD prefills, deep into handle_kv_cache_sharding."""
    rng = random.Random(SEED + 1)
    disagreements, refusals, total = [], 0, 0
    for _ in range(SHARDED_DRAWS):
        model, role, flags, env = C.draw_sharded_prefill(rng)
        for gpu, capability in C.GPUS.items():
            outcome = C.runtime_outcome(dirs[model], flags, capability, env)
            predicted = first_outcome(C.kv_side(role, dirs[model], flags, gpu, env))
            total += 1
            diff = C.compare(outcome, predicted)
            if diff:
                disagreements.append(f"{model} {role} {gpu} {flags} {env}: {diff}")
            refusals += isinstance(predicted, Refusal)
    assert disagreements == [], "\n".join(disagreements[:20])
    assert refusals > total // 2
