"""kvcheck.sglang.geometry without SGLang: numbers worked by hand from each config.json
with the runtime's formulas (SGLang 0.5.23, read from mem_cache/memory_pool.py,
kv_cache_configurator.calculate_mla_kv_cache_dim, configs/model_config.get_num_kv_heads,
distributed/utils.get_pp_indices). tests/test_geometry_runtime.py checks the same against
the runtime's pool classes.

MHA item length per page = page_size * kv_heads_per_rank * head_dim * bytes, K then V.
MLA item length per page = page_size * (kv_lora_rank + qk_rope_head_dim) * bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.errors import InputError
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.geometry import derive_geometry, kv_heads_per_rank, pp_stage_layers
from kvcheck.sglang.model import parse_model_config
from kvcheck.sides import Side

MODELS = Path(__file__).resolve().parent.parent / "configs" / "models"


def side(model: str, role: str = "prefill", env: dict | None = None, **flags) -> Side:
    raw = json.loads((MODELS / model / "config.json").read_text())
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), env=env or {}, model=parse_model_config(raw), origin=model)


# ---------------------------------------------------------------------------------------
# the four models
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tp,kv,item",
    [
        # Llama 3.1 8B: 32 layers, 8 kv heads, head_dim = 4096 / 32 = 128, bf16.
        (1, "auto", 16 * 8 * 128 * 2),  # 32768
        (2, "bf16", 16 * 4 * 128 * 2),  # 16384
        (8, "bf16", 16 * 1 * 128 * 2),  # 4096
        (8, "fp8_e4m3", 16 * 1 * 128 * 1),  # 2048
        (16, "bf16", 16 * 1 * 128 * 2),  # 8 heads < attn_tp 16: max(1, 8 // 16) = 1
    ],
)
def test_llama(tp, kv, item):
    g = derive_geometry(side("llama-3.1-8b", tp_size=tp, kv_cache_dtype=kv, page_size=16))
    assert g.pool == "MHA" and g.n == 2 * 32
    assert g.item_lens == [item] * 64
    assert [r.part for r in g.regions] == ["K"] * 32 + ["V"] * 32
    assert [r.layer_id for r in g.regions] == list(range(32)) * 2
    assert set(g.kinds) == {"VRAM"}


def test_qwen3():
    # Qwen3 8B: 36 layers, 8 kv heads, head_dim 128 (explicit), bf16; tp 2 -> 4 heads/rank.
    g = derive_geometry(side("qwen3-8b", tp_size=2, page_size=64))
    assert g.n == 2 * 36
    assert g.item_lens == [64 * 4 * 128 * 2] * 72  # 65536


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("kv,row", [("bf16", (512 + 64) * 2), ("fp8_e4m3", (512 + 64) * 1)])
def test_deepseek_v3(tp, kv, row):
    # DeepSeek V3: 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per token; TP-independent.
    g = derive_geometry(side("deepseek-v3", tp_size=tp, kv_cache_dtype=kv, page_size=64))
    assert g.pool == "MLA" and g.n == 61
    assert g.item_lens == [64 * row] * 61  # bf16 73728, fp8 36864
    assert {r.part for r in g.regions} == {"KV"}


@pytest.mark.parametrize(
    "flags,row",
    [
        (dict(kv_cache_dtype="bf16"), 576 * 2),  # 1152
        # fp8, scaled layout (flashmla_kv / fa3 / ...): 512 fp8 + 512 // 128 * 4 scale bytes + 64 * 2 rope bytes = 656
        (dict(kv_cache_dtype="fp8_e4m3", dsa_decode_backend="flashmla_kv"), 512 + 16 + 128),
        # fp8, raw layout (trtllm): 576 fp8 bytes
        (dict(kv_cache_dtype="fp8_e4m3", dsa_decode_backend="trtllm"), 576),
        (dict(kv_cache_dtype="fp8_e4m3", dsa_decode_backend="tilelang", dsa_prefill_backend="tilelang"), 576),
        # HiSparse defaults to flashmla_kv whatever the GPU: scaled.
        (dict(kv_cache_dtype="fp8_e4m3", enable_hisparse=True), 656),
    ],
)
def test_deepseek_v32_dsa(flags, row):
    g = derive_geometry(side("deepseek-v3.2", "decode", tp_size=8, page_size=64, **flags))
    assert g.pool == "DSA" and g.n == 61
    assert g.item_lens == [64 * row] * 61


def test_dsa_unset_backend_assumes_hopper_and_says_so():
    g = derive_geometry(side("deepseek-v3.2", "prefill", kv_cache_dtype="fp8_e4m3", page_size=64))
    assert g.item_lens[0] == 64 * 656
    assert any("assumed Hopper" in n for n in g.notes)
    g = derive_geometry(side("deepseek-v3.2", "prefill", kv_cache_dtype="auto", page_size=64))
    assert g.item_lens[0] == 64 * 1152 and any("auto" in n for n in g.notes)


def test_dsa_page_size_forced_to_64():
    g = derive_geometry(side("deepseek-v3.2", kv_cache_dtype="bf16", page_size=16))
    assert g.page_size == 64 and g.item_lens[0] == 64 * 1152
    assert any("overridden" in n for n in g.notes)


@pytest.mark.parametrize(
    "backend,flag,page",
    [("flashmla", "attention_backend", 64), ("trtllm_mla", "decode_attention_backend", 64), ("fa3", "attention_backend", 16)],
)
def test_backend_page_constraints(backend, flag, page):
    g = derive_geometry(side("deepseek-v3", "decode", page_size=16, **{flag: backend}))
    assert g.page_size == page and g.item_lens[0] == page * 576 * 2


def test_hisparse_decode_is_dram_prefill_is_vram():
    d = derive_geometry(side("deepseek-v3.2", "decode", kv_cache_dtype="bf16", page_size=64, enable_hisparse=True))
    p = derive_geometry(side("deepseek-v3.2", "prefill", kv_cache_dtype="bf16", page_size=64, enable_hisparse=True))
    assert d.kinds == ["DRAM"] * 61 and p.kinds == ["VRAM"] * 61
    assert d.item_lens == p.item_lens


# ---------------------------------------------------------------------------------------
# draft regions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_mtp_draft_on_either_side(role):
    # DeepSeek V3 MTP: num_nextn_predict_layers = 1 -> one MLA region appended, VRAM.
    g = derive_geometry(side("deepseek-v3", role, page_size=64, kv_cache_dtype="bf16", speculative_algorithm="EAGLE"))
    assert g.n == 62 and g.num_draft_regions == 1
    assert g.regions[-1].pool == "draft" and g.regions[-1].layer_id == 61
    assert g.item_lens[-1] == 64 * 576 * 2


def test_draft_stays_vram_under_hisparse():
    g = derive_geometry(side("deepseek-v3.2", "decode", page_size=64, kv_cache_dtype="bf16", enable_hisparse=True,
                             speculative_algorithm="EAGLE"))
    assert g.kinds == ["DRAM"] * 61 + ["VRAM"]


def test_no_draft_for_ngram_and_error_without_mtp_layers():
    assert derive_geometry(side("llama-3.1-8b", page_size=1, speculative_algorithm="NGRAM")).num_draft_regions == 0
    with pytest.raises(InputError):
        derive_geometry(side("llama-3.1-8b", page_size=1, speculative_algorithm="EAGLE"))


def test_draft_on_prefill_only_on_last_pp_stage():
    s = side("deepseek-v3", "prefill", page_size=64, pp_size=2, speculative_algorithm="EAGLE")
    # 61 layers / 2 stages: 30 then 31 (the extra layer goes to the last stage)
    assert derive_geometry(s, pp_rank=0).n == 30
    assert derive_geometry(s, pp_rank=1).n == 31 + 1


def test_mtp_draft_layers_follow_num_nextn_predict_layers():
    # layer_setup._compute_model_num_layers: a draft with MTP layers has num_nextn_predict_layers layers.
    s = side("deepseek-v3", page_size=64, speculative_algorithm="EAGLE")
    s = s.model_copy(update={"model": s.model.model_copy(update={"num_nextn_predict_layers": 3})})
    assert derive_geometry(s).num_draft_regions == 3


# ---------------------------------------------------------------------------------------
# PP stages and attention TP
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layers,pp,expected",
    [
        (61, 1, [(0, 61)]),
        (61, 2, [(0, 30), (30, 61)]),  # remainder 1 -> last stage
        (61, 4, [(0, 15), (15, 30), (30, 45), (45, 61)]),
        (32, 3, [(0, 10), (10, 21), (21, 32)]),  # remainder 2 -> the last two stages
        (7, 4, [(0, 1), (1, 3), (3, 5), (5, 7)]),
        (36, 4, [(0, 9), (9, 18), (18, 27), (27, 36)]),
    ],
)
def test_pp_even_split(layers, pp, expected):
    assert pp_stage_layers(layers, pp, None) == expected


def test_pp_partition_and_errors():
    assert pp_stage_layers(61, 2, "20,41") == [(0, 20), (20, 61)]
    assert pp_stage_layers(61, 1, "1,2") == [(0, 61)]  # ignored at pp 1
    with pytest.raises(InputError, match=r"len\(partitions\)=3 does not match pp_size=2\."):
        pp_stage_layers(61, 2, "20,20,21")
    with pytest.raises(InputError, match=r"sum\(partitions\)=60 does not match num_hidden_layers=61\."):
        pp_stage_layers(61, 2, "30,30")
    with pytest.raises(InputError, match="Invalid partition string: a,b"):
        pp_stage_layers(61, 2, "a,b")


def test_pp_partition_from_env_shapes_regions():
    s = side("llama-3.1-8b", page_size=16, pp_size=2, env={"SGLANG_PP_LAYER_PARTITION": "12,20"})
    assert derive_geometry(s, pp_rank=0).n == 2 * 12
    assert derive_geometry(s, pp_rank=1).n == 2 * 20


@pytest.mark.parametrize(
    "total,tp,dcp,expected",
    [(8, 1, 1, 8), (8, 2, 1, 4), (8, 8, 1, 1), (8, 16, 1, 1), (2, 8, 1, 1), (8, 8, 2, 2), (8, 4, 4, 8), (32, 8, 1, 4)],
)
def test_kv_heads_per_rank(total, tp, dcp, expected):
    assert kv_heads_per_rank(total, tp, dcp) == expected


@pytest.mark.parametrize(
    "flags,attn_tp",
    [
        (dict(tp_size=8), 8),
        (dict(tp_size=8, attn_dp_size=2), 4),
        (dict(tp_size=8, dp_size=8, enable_dp_attention=True), 1),
        (dict(tp_size=8, attn_cp_size=2), 4),
    ],
)
def test_attention_tp_divides_heads(flags, attn_tp):
    g = derive_geometry(side("llama-3.1-8b", page_size=1, **flags))
    assert g.attn_tp_size == attn_tp
    assert g.item_lens[0] == 1 * max(1, 8 // attn_tp) * 128 * 2


def test_json_model_override_args_reach_the_model(tmp_path):
    """build_side applies --json-model-override-args before reading config.json
    (SGLang: ModelConfig(model_override_args=...) -> get_config sets each key)."""
    import json

    from kvcheck.sources import build_side

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16",
    }))
    args = {"model_path": str(model), "disaggregation_mode": "prefill", "page_size": 16,
            "json_model_override_args": '{"num_hidden_layers": 4, "num_key_value_heads": 2}'}
    side = build_side("prefill", args, {}, "cmd", sglang_version="0.5.23")
    assert side.model.num_hidden_layers == 4 and side.model.num_key_value_heads == 2
    geo = derive_geometry(side)
    assert geo.n == 8 and geo.item_lens[0] == 16 * 2 * 128 * 2


@pytest.mark.parametrize(
    "field,value",
    [("head_dim", -5), ("torch_dtype", "float7"), ("num_hidden_layers", 0), ("num_key_value_heads", "8"), ("v_head_dim", 10**7)],
)
def test_config_fields_out_of_range_are_input_errors(field, value):
    from kvcheck.errors import InputError

    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096, field: value}
    with pytest.raises(InputError) as err:
        parse_model_config(cfg, source="config.json")
    assert err.value.field == field and field in str(err.value)


def test_bad_override_json_is_input_error():
    from kvcheck.errors import InputError

    with pytest.raises(InputError) as err:
        parse_model_config({"architectures": ["LlamaForCausalLM"]}, override_args="{not json")
    assert err.value.field == "--json-model-override-args"


GPT_OSS_SHAPE = {
    "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 64, "hidden_size": 512, "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 2,
}


def _pair_side(role: str, cfg: dict, **flags) -> Side:
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(cfg), origin=role)


def test_swa_pair_states_decided_on_0_5_23_unchecked_before():
    """SWA pools are derived (KV regions of the full layers + the 'swa' component). On
    0.5.23 the 'swa' component with attention TP 1 -> 4 takes maybe_send_extra's
    _send_swa_state_slice (head slice, nhd layout): decided, no unchecked. A 0.5.21
    prefill refuses unequal attention TP for the SWA state (RuntimeError on the first
    request, states.legacy_hetero_tp_refusals): fail; the rest of its transfer is not
    restated (state-components stays)."""
    from kvcheck.preflight import run_preflight

    p = _pair_side("prefill", GPT_OSS_SHAPE, tp_size=1, page_size=16)
    d = _pair_side("decode", GPT_OSS_SHAPE, tp_size=4, page_size=16)
    g = derive_geometry(p)
    # full layers 1, 3: K then V, 16 tokens x 8 heads x 64 x 2 bytes; swa layers 0, 2.
    assert g.pool == "SWA" and g.item_lens == [16 * 8 * 64 * 2] * 4 and [r.layer_id for r in g.regions] == [1, 3, 1, 3]
    assert g.state_types == ["swa"] and [r.layer_id for r in g.state_regions] == [0, 2, 0, 2]
    report = run_preflight(p, d)
    assert report.verdict != "unchecked"
    assert not any(f.id == "state-components" for f in report.findings)
    assert [c["path"] for c in report.extra["state_components"]] == ["swa_head_slice"]
    old_p = p.model_copy(update={"sglang_version": "0.5.21"})
    old_d = d.model_copy(update={"sglang_version": "0.5.21"})
    report = run_preflight(old_p, old_d)
    assert report.verdict == "fail"
    assert [f.runtime_error.message for f in report.findings if f.id == "state-transfer"] == [
        "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."]
    assert any(f.id == "state-components" for f in report.findings)


def test_fp4_kv_registers_packed_data_only_and_fails():
    """FP4 KV on SM120 (NVFP4 starts there in PD): the pool registers its packed data
    (heads x head_dim / 2 bytes per token, K and V per layer) and none of its block-scale
    buffers (tests/test_geometry_fp4_runtime.py holds this to SGLang's own pool classes):
    the decode reads the prompt with scales nobody wrote, so the pair fails."""
    from kvcheck.preflight import run_preflight

    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096}
    p = _pair_side("prefill", cfg, page_size=16, kv_cache_dtype="nvfp4")
    d = _pair_side("decode", cfg, page_size=16, kv_cache_dtype="nvfp4")
    p.gpu = d.gpu = "rtx5090"
    g = derive_geometry(p)
    assert g.pool == "MHA" and g.n == 8 and g.item_lens == [16 * 8 * 64] * 8
    assert g.state_types == [] and g.unregistered_scale_buffers == 8
    report = run_preflight(p, d)
    assert report.verdict == "fail" and report.plan is not None
    assert [f.id for f in report.findings if f.severity.value == "error"] == ["fp4-block-scales"]


def test_dcp_decode_draft_pages_are_page_size_times_dcp():
    """KVCacheConfigurator.loc_space_scale (0.5.23): a draft worker under attention DCP
    allocates pages of page_size * dcp_size tokens; the target keeps page_size."""
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 16,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_nextn_predict_layers": 1}
    side = _pair_side("decode", cfg, tp_size=8, dcp_size=4, page_size=64, speculative_algorithm="EAGLE")
    g = derive_geometry(side)
    assert g.draft_page_size == 256
    assert g.item_lens == [64 * 576 * 2] * 4 + [256 * 576 * 2]


def test_modelopt_kv_cache_scheme_fp8_makes_auto_fp8():
    """ModelOptFp4Config.from_config (layers/quantization/modelopt_quant.py, 0.5.23): a
    kv_cache_scheme of 8-bit floats is kv_cache_quant_algo FP8, so --kv-cache-dtype auto
    stores fp8_e4m3 (configure_kv_cache_dtype)."""
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096,
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False}}}
    side = _pair_side("prefill", cfg, page_size=16)
    assert side.model.kv_cache_quant_algo == "FP8"
    g = derive_geometry(side)
    assert g.bytes_per_element == 1 and g.item_lens[0] == 16 * 8 * 128


def test_fp4_on_other_releases_is_not_modeled():
    """FP4 pools are derived for 0.5.23 only (verified there); the fp4_e2m1 recipe of
    0.5.4.post3 .. 0.5.20 (its get_contiguous_buf_infos reads the dequantized views) is
    not modeled: unchecked, never a bad-input exit."""
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096}
    old = _pair_side("decode", cfg, page_size=16, kv_cache_dtype="fp4_e2m1").model_copy(update={"sglang_version": "0.5.14"})
    g = derive_geometry(old)
    assert g.pool == "not_modeled" and "fp4_e2m1" in g.not_modeled_reason
    mid = _pair_side("decode", cfg, page_size=16, kv_cache_dtype="nvfp4").model_copy(update={"sglang_version": "0.5.18", "gpu": "rtx5090"})
    g = derive_geometry(mid)
    assert g.pool == "not_modeled" and "0.5.23 only" in g.not_modeled_reason
