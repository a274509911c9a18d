"""kvcheck explain for the runtime errors kvcheck's preflight predicts at start-up and for
the PD DCP transfer decisions: every such finding id has a catalog entry, and the message
kvcheck predicts for a representative flag set is recognized and points to that id
(through the entry's check, and through the preflight attached to the explanation).

Pure: the messages come from kvcheck.sglang.startup / kvcheck.sglang.plan (their texts
are the runtime's, see test_startup.py); the templates are compared with the installed
SGLang's source in test_explain_runtime.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import startup_corpus
from kvcheck.explain import explain_text, load_catalog
from kvcheck.explain.matcher import attach_preflight
from kvcheck.preflight import FINDING_IDS, run_preflight
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.startup import REFUSAL_IDS, first_refusal, startup_error
from kvcheck.sides import Side

CATALOG = load_catalog()
MODELS = Path(__file__).resolve().parent.parent / "configs" / "models"

NIXL = {"disaggregation_transfer_backend": "nixl"}
PREFILL = {"disaggregation_mode": "prefill", **NIXL}
DECODE = {"disaggregation_mode": "decode", **NIXL}
DCP_IDS = ("dcp-topology", "dcp-geometry")
TARGET_IDS = tuple(REFUSAL_IDS) + DCP_IDS


def side(role: str, model: str, flags: dict[str, Any]) -> Side:
    """One server, built as tests/test_startup.py builds it (config.json from configs/models);
    ``_gpu`` / ``_env`` in ``flags`` are the side's GPU and environment."""
    cfg = MODELS / model / "config.json"
    flags = dict(flags)
    gpu, env = flags.pop("_gpu", None), flags.pop("_env", {})
    raw = startup_corpus.variant_config(model) if model in startup_corpus.VARIANT_MODELS else json.loads(cfg.read_text())
    return Side(
        role=role,
        args=ServerArgs(model_path=str(MODELS / model), **flags),
        raw_args=dict(flags),
        env=dict(env),
        gpu=gpu,
        model=parse_model_config(raw, str(cfg)),
        origin=f"{role} test flags",
    )


def counterpart(role: str, model: str) -> Side:
    """The other server of the pair, with plain NIXL PD flags (no refusal of its own)."""
    other = "decode" if role == "prefill" else "prefill"
    return side(other, model, DECODE if other == "decode" else PREFILL)


CPTP = {**PREFILL, "tp_size": 2, "attn_cp_size": 2, "enable_prefill_cp": True, "cp_strategy": "zigzag"}

# (catalog entry the predicted message is, model, refusing side, its flags, finding id)
STARTUP_CASES = [
    ("decode-allocation-policy-unsupported", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_allocation_policy": "prefill_complete"}, "decode-allocation-policy"),
    ("decode-allocation-policy-unsupported", "deepseek-v3.2", "prefill",
     {**PREFILL, "tp_size": 2, "pp_size": 2, "enable_hisparse": True, "disaggregation_decode_allocation_policy": "prefill_complete"},
     "decode-allocation-policy"),
    ("decode-host-receive-threshold-range", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_host_receive_threshold": 1.5}, "decode-host-receive-threshold"),
    ("decode-host-receive-hisparse", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_host_receive_threshold": 0.5}, "decode-host-receive-hisparse"),
    ("decode-host-receive-cpu-tensor", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_host_receive_threshold": 0.5, "disaggregation_decode_retraction_backup": "cpu_tensor"},
     "decode-host-receive-retraction"),
    ("decode-radix-hisparse", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "disaggregation_decode_enable_radix_cache": True}, "decode-radix-cache-incompatible"),
    ("decode-radix-fake", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "fake", "disaggregation_decode_enable_radix_cache": True},
     "decode-radix-cache-incompatible"),
    ("decode-radix-speculative", "llama-3.1-8b", "decode",
     {**DECODE, "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "ngram"}, "decode-radix-cache-incompatible"),
    ("prefill-fake-backend", "llama-3.1-8b", "prefill",
     {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "fake"}, "prefill-fake-backend"),
    ("dcp-size-invalid", "llama-3.1-8b", "decode", {**DECODE, "dcp_size": 0}, "dcp-size"),
    ("dcp-prefill-cp", "llama-3.1-8b", "prefill", {**PREFILL, "tp_size": 2, "dcp_size": 2, "enable_prefill_cp": True}, "dcp-size"),
    ("dsa-dcp-pd", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2}, "dsa-dcp"),
    ("dsa-dcp-pd", "deepseek-v3.2", "prefill", {**PREFILL, "tp_size": 2, "dcp_size": 2}, "dsa-dcp"),
    ("dsa-dcp-hisparse-hicache", "deepseek-v3.2", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2, "enable_hisparse": True}, "dsa-dcp"),
    ("dsa-kv-cache-dtype", "deepseek-v3.2", "prefill", {**PREFILL, "kv_cache_dtype": "fp8_e5m2"}, "dsa-kv-cache-dtype"),
    ("dsa-kv-cache-dtype", "deepseek-v3.2", "decode", {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e5m2"}, "dsa-kv-cache-dtype"),
    ("hisparse-tilelang-fp8", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "tilelang"}, "hisparse-dsa-backend"),
    ("dsa-triton-rocm-only", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bfloat16", "dsa_prefill_backend": "triton"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-backend-not-allowed", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bfloat16", "dsa_decode_backend": "flashmla_kv"}, "hisparse-dsa-backend"),
    ("hisparse-dsa-backend-not-allowed", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "flashmla_sparse"}, "hisparse-dsa-backend"),
    ("speculative-topk-page-size", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE",
      "speculative_eagle_topk": 2, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}, "speculative-params"),
    ("retraction-host-pool-dcp", "llama-3.1-8b", "decode",
     {**DECODE, "tp_size": 2, "dcp_size": 2, "disaggregation_decode_retraction_backup": "host_pool"}, "decode-host-pool-dcp"),
    ("decode-host-pool-not-decode", "llama-3.1-8b", "prefill",
     {**PREFILL, "disaggregation_decode_host_receive_threshold": 0.5}, "decode-host-pool-role"),
    ("decode-host-pool-not-decode", "llama-3.1-8b", "prefill",
     {**PREFILL, "disaggregation_decode_retraction_backup": "host_pool"}, "decode-host-pool-role"),
    ("hisparse-model", "llama-3.1-8b", "decode", {**DECODE, "enable_hisparse": True}, "hisparse-model"),
    ("hisparse-radix-cache", "deepseek-v3.2", "prefill", {**PREFILL, "enable_hisparse": True}, "hisparse-radix-cache"),
    ("hisparse-mixed-chunk", "deepseek-v3.2", "decode", {**DECODE, "enable_hisparse": True, "enable_mixed_chunk": True}, "hisparse-mixed-chunk"),
    ("hisparse-topk", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "attention_backend": "fa3", "speculative_algorithm": "EAGLE",
      "speculative_eagle_topk": 2, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}, "hisparse-spec-topk"),
    ("hisparse-adaptive-spec", "deepseek-v3.2", "decode",
     {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE", "speculative_adaptive": True}, "hisparse-spec-adaptive"),
    ("staging-backend", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mori", "_env": {"SGLANG_DISAGG_STAGING_BUFFER": "1"}}, "staging-buffer"),
    ("nvfp4-prefill-backend-none", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "nvfp4", "attention_backend": "triton"}, "nvfp4-prefill-dequant"),
    ("nvfp4-prefill-backend-none", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "nvfp4", "_gpu": "b200"}, "nvfp4-prefill-dequant"),
    ("nvfp4-native-prefill-sm100", "llama-3.1-8b", "prefill", {**PREFILL, "kv_cache_dtype": "nvfp4", "prefill_attention_backend": "trtllm_mha"}, "nvfp4-prefill-dequant"),
    ("trtllm-mla-blackwell", "deepseek-v3", "decode", {**DECODE, "attention_backend": "trtllm_mla"}, "attention-backend-gpu"),
    ("trtllm-mla-kv-dtype", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "bfloat16", "_gpu": "b200"}, "attention-kv-dtype"),
    ("trtllm-mla-kv-dtype", "deepseek-v3.2", "prefill", {**PREFILL, "kv_cache_dtype": "bf16", "attention_backend": "trtllm_mla", "_gpu": "gb200"}, "attention-kv-dtype"),
    ("cutedsl-mla-blackwell", "deepseek-v3", "decode", {**DECODE, "decode_attention_backend": "cutedsl_mla"}, "attention-backend-gpu"),
    ("trtllm-mha-prefill-gpu", "llama-3.1-8b", "prefill", {**PREFILL, "attention_backend": "trtllm_mha", "_gpu": "a100"}, "attention-backend-gpu"),
    ("trtllm-mha-decode-gpu", "llama-3.1-8b", "decode", {**DECODE, "decode_attention_backend": "trtllm_mha", "_gpu": "a100"}, "attention-backend-gpu"),
    ("nvfp4-requires-blackwell", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "nvfp4"}, "kv-dtype-gpu-refused"),
    ("nvfp4-sm100-pd", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "nvfp4", "_gpu": "b200"}, "kv-dtype-gpu-refused"),
    ("fp4-kv-unified-memory", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "fp4_mx_block16", "enable_unified_memory": True},
     "kv-dtype-gpu-refused"),
    ("kv4-mha-backend", "llama-3.1-8b", "decode", {**DECODE, "kv_cache_dtype": "fp4_mx_block16"}, "kv4-backend"),
    ("kv4-mha-backend", "qwen3-8b", "prefill", {**PREFILL, "kv_cache_dtype": "fp4_mx_block16", "_gpu": "rtx5090"}, "kv4-backend"),
    ("kv4-mla-backend", "deepseek-v3", "prefill", {**PREFILL, "kv_cache_dtype": "fp4_mx_block16"}, "kv4-backend"),
    ("kv4-fa4-mha-backend", "llama-3.1-8b", "prefill", {**PREFILL, "kv_cache_dtype": "fp4_mx_block16", "attention_backend": "fa4",
     "_gpu": "b200"}, "kv4-backend"),
    ("kv4-fa4-mla-backend", "deepseek-v3", "decode", {**DECODE, "kv_cache_dtype": "fp4_mx_block16", "attention_backend": "fa4",
     "_gpu": "b200"}, "kv4-backend"),
    ("mxfp8-requires-blackwell", "qwen3-8b", "prefill", {**PREFILL, "kv_cache_dtype": "mxfp8", "_gpu": "h200"}, "kv-dtype-gpu-refused"),
    ("hisparse-dcp", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 2, "dcp_size": 2, "enable_hierarchical_cache": True,
     "enable_hisparse": True}, "hicache-dcp"),
    ("hicache-dcp-speculative", "deepseek-v3", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2, "enable_hierarchical_cache": True,
     "disaggregation_decode_enable_radix_cache": True, "speculative_algorithm": "EAGLE"}, "hicache-dcp"),
    ("hicache-dcp-mha", "llama-3.1-8b", "decode", {**DECODE, "tp_size": 2, "dcp_size": 2, "enable_hierarchical_cache": True,
     "disaggregation_decode_enable_radix_cache": True}, "hicache-dcp"),
    ("dp-size-with-attn-dp", "deepseek-v3", "decode", {**DECODE, "tp_size": 8, "dp_size": 2, "attn_dp_size": 4}, "dp-size"),
    ("tp-attn-dp-cp", "qwen3-8b", "prefill", {**PREFILL, "tp_size": 4, "attn_dp_size": 4, "attn_cp_size": 2}, "tp-attn-dp-cp"),
    ("tp-attn-cp", "qwen3-8b", "prefill", {**PREFILL, "tp_size": 2, "attn_cp_size": 4}, "tp-attn-dp-cp"),
    ("kv-sharding-prefill-only", "deepseek-v3", "decode", {**DECODE, "enable_kv_cache_sharding": True}, "kv-sharding"),
    ("kv-sharding-speculative", "deepseek-v3", "prefill", {**PREFILL, "enable_kv_cache_sharding": True, "speculative_algorithm": "EAGLE"}, "kv-sharding"),
    ("kv-sharding-dcp", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 2, "dcp_size": 2, "enable_kv_cache_sharding": True}, "kv-sharding"),
    ("hicache-radix-exclusive", "llama-3.1-8b", "decode", {**DECODE, "enable_hierarchical_cache": True}, "hicache-radix-cache"),
    ("hicache-radix-exclusive", "llama-3.1-8b", "prefill", {**PREFILL, "enable_hierarchical_cache": True, "disable_radix_cache": True}, "hicache-radix-cache"),
    ("decode-offload-not-decode", "llama-3.1-8b", "prefill", {**PREFILL, "disaggregation_decode_enable_offload_kvcache": True}, "decode-offload-kvcache"),
    ("decode-offload-no-storage", "llama-3.1-8b", "decode", {**DECODE, "disaggregation_decode_enable_offload_kvcache": True}, "decode-offload-kvcache"),
    ("pp-spec-prefill-only", "deepseek-v3", "decode", {**DECODE, "pp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 1,
     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}, "pp-speculative"),
    ("pp-spec-eagle-only", "llama-3.1-8b", "prefill", {**PREFILL, "pp_size": 2, "speculative_algorithm": "NGRAM"}, "pp-speculative"),
    ("tp-nnodes", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 8, "nnodes": 3}, "nodes"),
    ("dp-multi-node", "llama-3.1-8b", "decode", {**DECODE, "tp_size": 2, "dp_size": 2, "nnodes": 2}, "nodes"),
    ("two-batch-overlap-a2a", "deepseek-v3", "prefill", {**PREFILL, "enable_two_batch_overlap": True}, "two-batch-overlap"),
    ("chunked-prefill-page", "llama-3.1-8b", "prefill", {**PREFILL, "page_size": 64, "chunked_prefill_size": 1000}, "chunked-prefill-page"),
    ("chunked-prefill-page", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 8, "attn_dp_size": 8, "chunked_prefill_size": 8000, "_gpu": "b200"},
     "chunked-prefill-page"),
    ("kv-sharding-backend", "deepseek-v3", "prefill", {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "mori",
     "tp_size": 2, "enable_kv_cache_sharding": True, "_gpu": "b200"}, "kv-sharding"),
    ("kv-sharding-staging", "deepseek-v3", "prefill", {**PREFILL, "tp_size": 2, "enable_kv_cache_sharding": True, "_gpu": "b200",
     "_env": {"SGLANG_DISAGG_STAGING_BUFFER": "1"}}, "kv-sharding"),
    ("staging-cp-tp-sharing", "qwen4-exp", "prefill", {**CPTP, "_env": {"SGLANG_DISAGG_STAGING_BUFFER": "1"}}, "staging-cp-tp-sharing"),
    ("cp-tp-group-sharing-size", "qwen4-exp", "prefill", {**CPTP, "tp_size": 4}, "cp-tp-group-sharing"),
    ("cp-tp-group-sharing-strategy", "qwen4-exp", "prefill", {**CPTP, "cp_strategy": "interleave"}, "cp-tp-group-sharing"),
    ("cp-tp-group-sharing-feature", "qwen4-exp", "prefill", {**CPTP, "pp_size": 2}, "cp-tp-group-sharing"),
    ("hisparse-kv-dtype", "deepseek-v3.2-nextn", "decode", {**DECODE, "enable_hisparse": True, "kv_cache_dtype": "bf16"}, "hisparse-kv-dtype"),
    ("page-major-without-unified-memory", "llama-3.1-8b", "prefill", {**PREFILL, "enable_page_major_kv_layout": True},
     "unified-memory"),
    ("page-major-attention-backends", "llama-3.1-8b", "prefill",
     {**PREFILL, "enable_unified_memory": True, "attention_backend": "torch_native"}, "unified-memory"),
    ("unified-memory-pd-transfer-backend", "llama-3.1-8b", "decode", {**DECODE, "enable_unified_memory": True},
     "unified-memory"),
    ("unified-memory-pd-pp", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "pp_size": 2}, "unified-memory"),
    ("unified-memory-pd-mooncake-spec", "deepseek-v3", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "tp_size": 8,
      "enable_unified_memory": True, "speculative_algorithm": "EAGLE", "speculative_num_steps": 1,
      "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}, "unified-memory"),
    ("unified-memory-pd-lazy-compaction", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "_env": {"SGLANG_DISABLE_LAZY_COMPACTION": "1"}}, "unified-memory"),
    ("unified-memory-pd-hisparse", "llama-3.1-8b", "decode",
     {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake", "enable_unified_memory": True,
      "enable_hisparse": True}, "unified-memory"),
]

# (catalog entry, prefill model and flags, decode model and flags, finding id)
DCP_CASES = [
    ("dcp-topology", ("llama-3.1-8b", {**PREFILL, "tp_size": 2}), ("llama-3.1-8b", {**DECODE, "tp_size": 2, "dcp_size": 2}), "dcp-topology"),
    ("dcp-geometry", ("deepseek-v3", {**PREFILL, "kv_cache_dtype": "fp8_e4m3"}),
     ("deepseek-v3", {**DECODE, "tp_size": 2, "dcp_size": 2, "kv_cache_dtype": "bfloat16"}), "dcp-geometry"),
]


def _case_id(case) -> str:
    return f"{case[-1]}:{case[0]}"


def test_every_startup_and_dcp_finding_id_has_an_entry():
    checks = {e.check for e in CATALOG.entries}
    missing = [fid for fid in TARGET_IDS if fid not in checks]
    assert not missing
    assert set(FINDING_IDS["startup"]) == set(REFUSAL_IDS) | {"startup-unchecked", "startup-gpu-dependent", "prefill-dcp-warning",
                                                              "startup-argparse", "pair-not-checked"}
    assert set(DCP_IDS) <= set(FINDING_IDS["transfer-decision"])


def test_the_cases_cover_every_id_and_every_entry_pointing_to_one():
    assert {c[-1] for c in STARTUP_CASES} | {c[-1] for c in DCP_CASES} == set(TARGET_IDS)
    pointing = {e.id for e in CATALOG.entries if e.check in TARGET_IDS}
    assert pointing == {c[0] for c in STARTUP_CASES} | {c[0] for c in DCP_CASES}


def _recognized(text: str, entry_id: str, finding_id: str):
    explanation = explain_text(text)
    assert explanation.recognized, text
    first = explanation.hits[0]
    assert (first.entry_id, first.match) == (entry_id, "full"), (text, [h.entry_id for h in explanation.hits])
    assert CATALOG.get(first.entry_id).check == finding_id
    return explanation


def _points_to(explanation, report, finding_id: str) -> None:
    attach_preflight(explanation, report)
    cause = explanation.hits[0].cause
    assert cause is not None and cause["finding"] == finding_id and cause["how"] == "runtime_error", cause


@pytest.mark.parametrize("entry_id,model,role,flags,finding_id", STARTUP_CASES, ids=[_case_id(c) for c in STARTUP_CASES])
def test_predicted_startup_refusal_is_explained(entry_id, model, role, flags, finding_id):
    s = side(role, model, flags)
    assert first_refusal(s).id == finding_id
    predicted = startup_error(s)
    text = f"{predicted.type}: {predicted.message}"
    explanation = _recognized(text, entry_id, finding_id)
    assert CATALOG.get(entry_id).when == "start-up"
    # the same text in a server's log (the traceback's last line) is found too
    assert entry_id in [h.entry_id for h in explain_text(f"[2026-01-02 10:11:12] {text}", source="log").hits]
    pair = (s, counterpart(role, model)) if role == "prefill" else (counterpart(role, model), s)
    _points_to(explanation, run_preflight(*pair), finding_id)


@pytest.mark.parametrize("entry_id,prefill,decode,finding_id", DCP_CASES, ids=[_case_id(c) for c in DCP_CASES])
def test_predicted_dcp_transfer_error_is_explained(entry_id, prefill, decode, finding_id):
    report = run_preflight(side("prefill", *prefill), side("decode", *decode))
    finding = next(f for f in report.findings if f.id == finding_id)
    rt = finding.runtime_error
    assert rt is not None and rt.when == "decode registration"
    explanation = _recognized(f"{rt.type}: {rt.message}", entry_id, finding_id)
    entry = CATALOG.get(entry_id)
    assert entry.process == "prefill" and "300 s" in entry.operator_sees
    _points_to(explanation, report, finding_id)


def test_empty_speculative_assertion_has_no_text_to_recognize():
    # _handle_eagle_family's bare `assert topk is None and draft_tokens is None` (explicit
    # topk/draft tokens without --speculative-num-steps) raises AssertionError with an
    # empty message: nothing to catalog; the id's other message is covered above.
    s = side("decode", "deepseek-v3.2", {**DECODE, "enable_hisparse": True, "speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2})
    predicted = startup_error(s)
    assert first_refusal(s).id == "speculative-params"
    assert (predicted.type, predicted.message) == ("AssertionError", "")


# Catalog entries a check will predict that kvcheck does not predict yet, each decidable
# from the inputs (so not `unpredictable_because`). Empty: every such entry names its check.
NOT_YET_PREDICTED: set[str] = set()


def _known_check_ids() -> set[str]:
    from kvcheck.checks import REGISTRY
    from kvcheck.preflight import all_finding_ids

    return set(REGISTRY) | set(all_finding_ids())


def test_every_catalog_entry_names_its_check_or_why_none_can():
    """Every entry either names the check (or finding id) that predicts it, and that check
    exists, or says why no input kvcheck reads can predict it; never both."""
    known = _known_check_ids()
    missing, unknown, both = [], [], []
    for e in CATALOG.entries:
        if e.check is not None and e.check not in known:
            unknown.append((e.id, e.check))
        if e.check is not None and e.unpredictable_because:
            both.append(e.id)
        if e.check is None and not e.unpredictable_because:
            missing.append(e.id)
    assert unknown == [] and both == []
    assert set(missing) <= NOT_YET_PREDICTED, sorted(set(missing) - NOT_YET_PREDICTED)


def test_catalog_coverage_figure():
    """The coverage reported: entries predicted by a check / all entries."""
    predicted = sum(1 for e in CATALOG.entries if e.check is not None)
    unpredictable = sum(1 for e in CATALOG.entries if e.check is None and e.unpredictable_because)
    assert predicted + unpredictable + len([e for e in CATALOG.entries if e.id in NOT_YET_PREDICTED and e.check is None]) == len(CATALOG.entries)
    assert predicted >= 84
