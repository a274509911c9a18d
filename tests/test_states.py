"""The state components' transfer (``kvcheck.sglang.states``) against SGLang 0.5.23's own
``NixlKVManager.maybe_send_extra`` / ``_prepare_state_xfer``, driven on CPU by the runtime
kernel with a recording stand-in agent (``runtime_kernel.decide_states``).

Every expected value is the runtime's: the production cases and the refusals assert what
the runtime kernel reports and that the builtin restatement agrees; the corpus compares
the two on seeded random pairs (hybrid pools x attention TP x KV dtypes x environment)."""

from __future__ import annotations

import os
import random

import pytest

from kvcheck.errors import InputError
from kvcheck.preflight import run_preflight
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.geometry import derive_geometry
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang import states
from kvcheck.sides import Side

pytest.importorskip("sglang")
from kvcheck.sglang import runtime_kernel as rk  # noqa: E402

# Small configs in the shapes of the deployed hybrids (fewer layers).
CONFIGS = {
    # gpt-oss-120b: 8 KV heads of 64, alternating sliding/full layers.
    "gpt-oss": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 6, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 512, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 3,
    },
    # Qwen3.5 / Qwen3-Next: gated-delta-net linear attention, every 4th layer full attention, 2 KV heads.
    "qwen3.5": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 1024, "full_attention_interval": 4, "linear_num_key_heads": 16,
        "linear_num_value_heads": 64, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    },
    "nemotron-h": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 1024, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "hybrid_override_pattern": "MEM*EMEM",
    },
    # A Mamba2 hybrid with one B/C group (as Falcon-H1 and Mamba-Codestral): the groups are
    # widened to the TP size, so the conv state's size does not scale with TP.
    "nemotron-h-g1": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 1024, "mamba_num_heads": 64, "mamba_head_dim": 64,
        "n_groups": 1, "ssm_state_size": 128, "conv_kernel": 4, "hybrid_override_pattern": "MEM*EMEM",
    },
    "kimi-linear": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 32, "hidden_size": 1024, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "q_lora_rank": None, "head_dim": 72,
        "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 32, "head_dim": 128,
                               "short_conv_kernel_size": 4},
    },
    # DeepSeek V3.2-shaped DSA (MLA + index-K per layer, the "dsa" state component).
    "dsa": {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "num_hidden_layers": 6, "num_attention_heads": 16,
        "num_key_value_heads": 16, "hidden_size": 1024, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "q_lora_rank": 256, "index_topk": 256, "index_head_dim": 128, "index_n_heads": 16,
    },
    "mimo-v2": {
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
        "swa_v_head_dim": 128, "hybrid_layer_pattern": [0, 1, 1, 0], "sliding_window": 128, "hidden_size": 1024,
    },
    "minimax-m3": {
        "architectures": ["MiniMaxM3SparseForCausalLM"], "model_type": "llama", "num_hidden_layers": 6,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128, "hidden_size": 1024,
        "sparse_attention_config": {"sparse_attention_freq": [0, 0, 1, 1, 1, 1], "sparse_disable_index_value": [0, 0, 1, 1, 1, 1],
                                    "sparse_index_dim": 128},
    },
    # DeepSeek-V4-Flash's KV shape with 8 layers (C4/C128 alternating, a NextN layer).
    "dsv4": {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "num_hidden_layers": 8, "num_attention_heads": 64,
        "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "index_head_dim": 128, "sliding_window": 128,
        "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 0], "num_nextn_predict_layers": 1, "hidden_size": 512,
    },
}


def side(model: str, role: str, flags: dict, env: dict | None = None, gpu: str = "h100") -> Side:
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(CONFIGS[model]), origin=model, gpu=gpu,
                gpu_source="--gpu", env=env or {})


def _dims(s: Side, g):
    return states.mamba_dims(s.model, g.attn_tp_size) if "mamba" in g.state_types else None


def both(p: Side, d: Side, prepared: bool = True, pp_rank: int = 0):
    """(builtin decisions, runtime decisions) for prefill PP stage ``pp_rank`` of one pair:
    the decode's stage of the same rank when both run the same PP size, else the decode's
    whole model (decode PP 1)."""
    pg = derive_geometry(p, pp_rank=pp_rank)
    dg = derive_geometry(d, pp_rank=pp_rank if d.args.pp_size == p.args.pp_size else 0)
    inp = states.state_inputs(p, d, prepared)
    return (
        states.decide_states(pg, dg, inp, pp_rank=pp_rank),
        rk.decide_states(pg, dg, inp, prefill_dims=_dims(p, pg), decode_dims=_dims(d, dg), pp_rank=pp_rank),
    )


def stages(p: Side, d: Side, prepared: bool = True):
    """[(pp_rank, builtin decisions, runtime decisions)] for every prefill PP stage."""
    return [(r, *both(p, d, prepared, r)) for r in range(max(1, p.args.pp_size))]


def key(d) -> tuple:
    return (d.state_type, d.path, d.error.type if d.error else None, d.error.message if d.error else None, d.corruption is not None)


# ---- the two production cases -----------------------------------------------------------


def test_gpt_oss_tp1_prefill_tp4_decode():
    """gpt-oss, prefill TP 1 -> decode TP 4 on 0.5.23: the 'swa' component takes
    _send_swa_state_slice (8 heads split 2 per decode rank, nhd layout): no error. (The
    production failure 'PD Disaggregation does NOT support PD different TP sizes for
    non-MLA SWA hybrid models yet.' is raised by releases 0.5.9 .. 0.5.21, before the head
    slice: states.legacy_hetero_tp_refusals; see tests/test_incidents.py.)"""
    p, d = side("gpt-oss", "prefill", {"tp_size": 1, "page_size": 16}), side("gpt-oss", "decode", {"tp_size": 4, "page_size": 16})
    b, r = both(p, d)
    assert [key(x) for x in r] == [("swa", "swa_head_slice", None, None, False)]
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p, d, kernel="runtime")
    assert rep.verdict in ("pass", "warn") and rep.extra["state_components"][0]["path"] == "swa_head_slice"
    old = run_preflight(p.model_copy(update={"sglang_version": "0.5.21"}), d.model_copy(update={"sglang_version": "0.5.21"}))
    assert old.verdict == "fail"
    f = [f for f in old.findings if f.id == "state-transfer"]
    assert f[0].runtime_error.message == "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."


def test_gpt_oss_tp1_to_tp4_with_hnd_layout_fails():
    """SGLANG_USE_HND_KVCACHE on the prefill: _get_mha_head_slice_blocks refuses."""
    p = side("gpt-oss", "prefill", {"tp_size": 1, "page_size": 16}, env={"SGLANG_USE_HND_KVCACHE": "1"})
    d = side("gpt-oss", "decode", {"tp_size": 4, "page_size": 16})
    b, r = both(p, d)
    assert r[0].error.message == "Head-sliced PD transfer needs the NHD KV cache layout, got hnd"
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p, d, kernel="builtin")
    f = [f for f in rep.findings if f.id == "state-transfer"]
    assert rep.verdict == "fail" and f[0].runtime_error.message == r[0].error.message and "SGLANG_USE_HND_KVCACHE" in f[0].fix


def test_qwen35_attention_tp1_into_tp4():
    """Qwen3.5-shaped linear hybrid, attention TP 1 -> 4: the 'mamba' component takes
    _send_mamba_state_slice (conv and temporal state sliced on their head axis)."""
    p, d = side("qwen3.5", "prefill", {"tp_size": 1, "page_size": 16}), side("qwen3.5", "decode", {"tp_size": 4, "page_size": 16})
    b, r = both(p, d)
    assert [key(x) for x in r] == [("mamba", "mamba_slice", None, None, False)]
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p, d, kernel="runtime")
    assert rep.verdict != "unchecked" and not [f for f in rep.findings if f.id in ("state-transfer", "state-components")]


def test_qwen35_ssm_dtype_differs():
    """SGLANG_MAMBA_SSM_DTYPE on the decode only, equal TP: the 0.5.23 prepared state plan
    rejects the peer (stride mismatch) and every transfer raises; on a non-UCX backend
    (generic path) nothing raises and the decode's slots are overwritten (corruption)."""
    p = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16})
    d = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16}, env={"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"})
    b, r = both(p, d)
    assert r[0].error is not None and r[0].error.message.startswith("NIXL state layout rejected for <decode agent>: NIXL prepared state component 0 (StateType.MAMBA) stride mismatch")
    assert [key(x) for x in b] == [key(x) for x in r]
    p2 = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16}, env={"SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"})
    b, r = both(p2, d)
    assert r[0].error is None and r[0].corruption
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p2, d)
    assert rep.verdict == "fail" and any(f.id == "state-transfer" and "SGLANG_MAMBA_SSM_DTYPE" in f.fix for f in rep.findings)


def test_minimax_unequal_tp_refused():
    p, d = side("minimax-m3", "prefill", {"tp_size": 2, "page_size": 16}), side("minimax-m3", "decode", {"tp_size": 4, "page_size": 16})
    b, r = both(p, d)
    msgs = {x.error.message for x in r if x.error}
    assert msgs == {"PD disagg: heterogeneous TP not supported for MiniMax state yet."}
    assert [key(x) for x in b] == [key(x) for x in r]


def test_nemotron_h_unequal_tp_misplaces_conv_channels():
    """Nemotron-H (Mamba2), attention TP 1 -> 2 and 4 -> 2: a Mamba2 conv state is [x | B |
    C] per rank (mamba_v2_sharded_weight_loader), and 0.5.23 registers no conv sub-blocks
    for it, so _send_mamba_state_slice cuts the axis as one range: the runtime's byte
    blocks put x channels into decode rank 0's B/C channels. Nothing raises: corruption.
    Qwen3.5 (GDN) and Kimi Linear (KDA) register their sub-blocks and slice cleanly."""
    for tp_p, tp_d in ((1, 2), (4, 2)):
        p = side("nemotron-h", "prefill", {"tp_size": tp_p, "page_size": 16})
        d = side("nemotron-h", "decode", {"tp_size": tp_d, "page_size": 16})
        b, r = both(p, d)
        assert r[0].corruption and "Mamba conv entry 0" in r[0].corruption
        assert [key(x) for x in b] == [key(x) for x in r]
    for model in ("qwen3.5", "kimi-linear"):
        p, d = side(model, "prefill", {"tp_size": 1, "page_size": 16}), side(model, "decode", {"tp_size": 2, "page_size": 16})
        b, r = both(p, d)
        assert [key(x) for x in r] == [("mamba", "mamba_slice", None, None, False)] == [key(x) for x in b]
    p = side("nemotron-h", "prefill", {"tp_size": 1, "page_size": 16})
    rep = run_preflight(p, side("nemotron-h", "decode", {"tp_size": 2, "page_size": 16}), kernel="builtin")
    f = [f for f in rep.findings if f.id == "state-transfer"]
    assert rep.verdict == "fail" and f and "same attention TP size" in f[0].fix


def test_mamba2_groups_widened_to_tp():
    """One B/C group, attention TP 1 -> 4: the decode widens the groups to 4
    (Mamba2StateShape.create), so its conv state is not the prefill's cut in 4. The
    runtime's slice misplaces channels (scatter); 2 -> 1 (aggregation) the prefill ranks'
    blocks overrun the decode's slot. Both decided (corruption), never left undecided."""
    for tp_p, tp_d in ((1, 4), (2, 1)):
        p = side("nemotron-h-g1", "prefill", {"tp_size": tp_p, "page_size": 16})
        d = side("nemotron-h-g1", "decode", {"tp_size": tp_d, "page_size": 16})
        b, r = both(p, d)
        assert r[0].corruption and b[0].corruption and b[0].unchecked is None


# ---- a PP>1 prefill --------------------------------------------------------------------


def pp_keys(p: Side, d: Side) -> list[list[tuple]]:
    """Runtime keys per prefill PP stage, after asserting the builtin agrees on each."""
    out = []
    for _, b, r in stages(p, d):
        assert [key(x) for x in b] == [key(x) for x in r]
        out.append([key(x) for x in r])
    return out


def test_gpt_oss_pp2_prefill_into_pp1_decode_misplaces_swa_layers():
    """gpt-oss, prefill PP 2 (layers 0..2, 3..5), decode PP 1, equal TP: the SWA state has
    no layer ids and SWAKVPool.start_layer is 0 on every stage, so the runtime's
    get_mha_kv_ptrs_with_pp writes stage 1's sliding layer 4 into the decode's layer 0
    entries, and stage 0 (2 of the decode's 3 sliding layers: its 'draft' branch) its V
    entries into K entries. Nothing raises: corruption, read back from the runtime's
    descriptors."""
    p = side("gpt-oss", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    d = side("gpt-oss", "decode", {"tp_size": 2, "page_size": 16})
    per_stage = stages(p, d)
    for rank, b, r in per_stage:
        assert r[0].error is None and r[0].corruption and f"prefill PP stage {rank}" in r[0].corruption
        assert [key(x) for x in b] == [key(x) for x in r]
    assert "(layer 4 K) is written into decode entry 0 (layer 0 K)" in per_stage[1][2][0].corruption
    rep = run_preflight(p, d, kernel="runtime")
    f = [f for f in rep.findings if f.id == "state-transfer"]
    assert rep.verdict == "fail" and f and "SGLANG_PP_LAYER_PARTITION" in f[0].fix


def test_gpt_oss_pp2_into_pp2_moves_whole():
    """The same model at decode PP 2 (same partition): each stage pairs with the decode's
    stage of the same rank, the SWA entries line up one to one."""
    p = side("gpt-oss", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    d = side("gpt-oss", "decode", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    assert pp_keys(p, d) == [[("swa", "whole_generic", None, None, False)]] * 2
    rep = run_preflight(p, d, kernel="runtime")
    assert rep.extra["state_components"][0]["path"] == "whole_generic"
    assert not [f for f in rep.findings if f.id in ("state-transfer", "state-components")]


def test_gpt_oss_stage_without_sliding_layers_raises():
    """SGLANG_PP_LAYER_PARTITION=1,1,4 puts only full-attention layer 1 on stage 1: its SWA
    component has no entries, and get_mha_kv_ptrs_with_pp divides the decode's 3 sliding
    layers by 0."""
    p = side("gpt-oss", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 3}, env={"SGLANG_PP_LAYER_PARTITION": "1,1,4"})
    d = side("gpt-oss", "decode", {"tp_size": 2, "page_size": 16})
    keys = pp_keys(p, d)
    assert keys[1] == [("swa", None, "ZeroDivisionError", states._zero_division_text(), False)]
    merged = states.merge_stages([b for _, b, _ in stages(p, d)])
    assert merged[0].error is not None  # stage 0 misplaces (corruption); the error is stage 1's
    assert merged[0].error.raised_by.endswith("on prefill PP stage 1")


def test_qwen35_pp2_into_pp1_pairs_mamba_by_layer_id():
    """Qwen3.5-shaped linear hybrid, prefill PP 2 into a decode at PP 1: the Mamba entries
    carry global layer ids on both sides and pair by them, equal TP (whole slots) and
    attention TP 1 -> 2 (sliced)."""
    p = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    d = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16})
    assert pp_keys(p, d) == [[("mamba", "whole_generic", None, None, False)]] * 2
    p1 = side("qwen3.5", "prefill", {"tp_size": 1, "page_size": 16, "pp_size": 2})
    assert pp_keys(p1, d) == [[("mamba", "mamba_slice", None, None, False)]] * 2


def test_qwen35_pp_partitions_differ():
    """Prefill and decode at PP 2, the prefill with SGLANG_PP_LAYER_PARTITION=2,6: prefill
    stage 0 (Mamba layers 0, 1) finds them in decode stage 0 (layers 0..3); prefill stage 1
    (layers 2..7) holds Mamba layer 2, which decode stage 1 (layers 4..7) lacks: the
    runtime's build_transfer_entry_pairs raises."""
    p = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2}, env={"SGLANG_PP_LAYER_PARTITION": "2,6"})
    d = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    keys = pp_keys(p, d)
    assert keys[0] == [("mamba", "whole_generic", None, None, False)]
    assert keys[1] == [("mamba", None, "RuntimeError", "Decode peer is missing a transfer entry for model layer 2", False)]
    # The decode's stage 1 holding only full-attention layer 7: no Mamba entries, no layer ids.
    d2 = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16, "pp_size": 2}, env={"SGLANG_PP_LAYER_PARTITION": "7,1"})
    p2 = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    assert pp_keys(p2, d2)[1] == [("mamba", None, "RuntimeError", "Layer metadata must be provided by both PD peers or neither", False)]


# ---- DeepSeek V4: "swa" (SWA KV + C4 compress states), "c128_state", the NextN draft's "swa" --

MTP = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2}


@pytest.mark.parametrize("tp", [(4, 4), (4, 8), (8, 2)])
@pytest.mark.parametrize("backend", ["UCX", "LIBFABRIC"])
def test_dsv4_states_whole_slots_any_tp(tp, backend):
    """DeepSeekV4TokenToKVPool is an MLA backend for PD: every component moves whole
    slots whatever the attention TP sizes (prepared on UCX, generic elsewhere)."""
    env = {"SGLANG_DISAGGREGATION_NIXL_BACKEND": backend}
    p, d = side("dsv4", "prefill", {"tp_size": tp[0], **MTP}, env=env), side("dsv4", "decode", {"tp_size": tp[1], **MTP}, env=env)
    b, r = both(p, d)
    path = "whole_prepared" if backend == "UCX" else "whole_generic"
    assert [key(x) for x in r] == [(t, path, None, None, False) for t in ("swa", "c128_state", "swa")]
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p, d, kernel="builtin")
    assert rep.verdict == "pass", [f.message for f in rep.findings]


def test_dsv4_compress_state_dtype_differs():
    """SGLANG_DSV4_COMPRESS_STATE_DTYPE=bfloat16 on the decode only: the C4 compress-state
    entries of 'swa' and the C128 state halve on the decode. UCX: the prepared plan rejects
    the peer and every transfer raises; another backend: the generic path writes the
    prefill's item length into the decode's smaller slots (corruption)."""
    p = side("dsv4", "prefill", {"tp_size": 4})
    d = side("dsv4", "decode", {"tp_size": 4}, env={"SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bfloat16"})
    b, r = both(p, d)
    assert r[0].error is not None and r[0].error.message.startswith(
        "NIXL state layout rejected for <decode agent>: NIXL prepared state component 0 (StateType.SWA) stride mismatch")
    assert "(StateType.DSV4_REQUEST_STATE)" in r[0].error.message
    assert [key(x) for x in b] == [key(x) for x in r]
    p2 = side("dsv4", "prefill", {"tp_size": 4}, env={"SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"})
    d2 = side("dsv4", "decode", {"tp_size": 4}, env={"SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bfloat16", "SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"})
    b, r = both(p2, d2)
    assert [x.error for x in r] == [None, None] and all(x.corruption for x in r)
    assert [key(x) for x in b] == [key(x) for x in r]
    rep = run_preflight(p2, d2)
    found = [f for f in rep.findings if f.id == "state-transfer"]
    assert rep.verdict == "fail" and found and found[0].severity.value == "error"


def test_dsv4_decode_only_mtp_is_not_a_pass():
    """MTP on the decode only: the decode registers a third component (the draft's SWA)
    and its C4 rings are twice as long; kvcheck never passes it."""
    p, d = side("dsv4", "prefill", {"tp_size": 4}), side("dsv4", "decode", {"tp_size": 4, **MTP})
    rep = run_preflight(p, d)
    assert rep.verdict in ("fail", "unchecked")


# ---- seeded corpus: builtin vs runtime ----------------------------------------------------

CORPUS = int(os.environ.get("KVCHECK_STATES_CORPUS", "3000"))


def _random_pair(rng: random.Random):
    model = rng.choice(sorted(CONFIGS))
    page = rng.choice([1, 16, 64])
    tp_p, tp_d = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8])
    kv = rng.choice(["auto", "auto", "fp8_e4m3", "bf16"])
    env_p, env_d = {}, {}
    if rng.random() < 0.2:
        env_p["SGLANG_USE_HND_KVCACHE"] = "1"
    if rng.random() < 0.3:
        env_p["SGLANG_DISAGGREGATION_NIXL_BACKEND"] = rng.choice(["LIBFABRIC", "UCX"])
    for env in (env_p, env_d):
        if rng.random() < 0.2:
            env["SGLANG_MAMBA_SSM_DTYPE"] = rng.choice(["bfloat16", "float32", "float16"])
    kv_d = kv if rng.random() < 0.8 else rng.choice(["auto", "fp8_e4m3"])
    fp = {"tp_size": tp_p, "page_size": page, "kv_cache_dtype": kv}
    fd = {"tp_size": tp_d, "page_size": page, "kv_cache_dtype": kv_d}
    gpu = "h100"
    if model in ("gpt-oss", "mimo-v2") and rng.random() < 0.25:
        # MXFP8 KV: block_scale / block_scale_swa components (Blackwell, fa4).
        gpu, page = "b200", 64
        fp.update(kv_cache_dtype="mxfp8", page_size=64, attention_backend="fa4")
        fd.update(kv_cache_dtype="mxfp8" if rng.random() < 0.8 else "auto", page_size=64, attention_backend="fa4")
    if model == "dsv4":
        # DeepSeek V4 (fp8 KV, page 256 pinned, PP 1): the compress-state dtype and MTP
        # (C4 ring 8 -> 16, the draft's "swa") vary per side.
        fp.update(kv_cache_dtype="auto")
        fd.update(kv_cache_dtype=rng.choice(["auto", "fp8_e4m3"]))
        for env, flags in ((env_p, fp), (env_d, fd)):
            if rng.random() < 0.25:
                env["SGLANG_DSV4_COMPRESS_STATE_DTYPE"] = rng.choice(["bfloat16", "float32"])
        if rng.random() < 0.6:
            fp.update(MTP)
            fd.update(MTP)
        elif rng.random() < 0.3:
            (fp if rng.random() < 0.5 else fd).update(MTP)
    elif rng.random() < 0.3:
        # A PP>1 prefill with a decode at PP 1 or at the same PP size, either side with
        # its own SGLANG_PP_LAYER_PARTITION now and then.
        pp = rng.choice([2, 2, 3, 4])
        fp["pp_size"] = pp
        if rng.random() < 0.5:
            fd["pp_size"] = pp
        layers = CONFIGS[model]["num_hidden_layers"]
        for env, flags in ((env_p, fp), (env_d, fd)):
            n = flags.get("pp_size", 1)
            if n > 1 and n <= layers and rng.random() < 0.35:
                cuts = sorted(rng.sample(range(1, layers), n - 1))
                env["SGLANG_PP_LAYER_PARTITION"] = ",".join(str(b - a) for a, b in zip([0] + cuts, cuts + [layers]))
    p = side(model, "prefill", fp, env_p, gpu)
    d = side(model, "decode", fd, env_d, gpu)
    return p, d, rng.random() < 0.8


def test_corpus_builtin_agrees_with_runtime():
    """Builtin vs runtime on seeded random pairs, every prefill PP stage of each: the
    verdict (path, exception type and text, corruption) of every component, and whether
    it is left undecided (the runtime kernel leaves undecided only what it cannot read
    back: an empty NIXL transfer)."""
    rng = random.Random(20261201)
    compared = disagreements = skipped = decided = pp_pairs = pp_decided = 0
    seen_paths: set = set()
    pp_seen: set = set()
    bad = []
    while compared < CORPUS:
        p, d, prepared = _random_pair(rng)
        try:
            per_stage = stages(p, d, prepared)
        except (InputError, ValueError):
            skipped += 1
            continue
        compared += 1
        pp = p.args.pp_size > 1
        pp_pairs += pp
        for rank, b, r in per_stage:
            for x, y in zip(b, r):
                empty = [u for u in (x.unchecked, y.unchecked) if u and u.startswith("prefill PP stage")]
                if empty and x.unchecked != y.unchecked:
                    disagreements += 1
                    bad.append((p.origin, rank, p.args.tp_size, d.args.tp_size, p.env, d.env, x.unchecked, y.unchecked))
                    continue
                if x.unchecked:
                    continue
                decided += 1
                outcome = y.path or (y.error.message[:30] if y.error else "corruption")
                seen_paths.add(outcome)
                if pp:
                    pp_decided += 1
                    pp_seen.add((y.state_type, outcome))
                if key(x) != key(y):
                    disagreements += 1
                    bad.append((p.origin, rank, p.args.pp_size, d.args.pp_size, p.args.tp_size, d.args.tp_size, p.env, d.env, key(x), key(y)))
    print(
        f"states corpus: {compared} pairs ({pp_pairs} with a PP>1 prefill), {decided} stage components compared "
        f"({pp_decided} of PP>1 prefills), {skipped} skipped (bad input), {disagreements} disagreements"
    )
    print(sorted(pp_seen))
    assert disagreements == 0, "\n".join(map(str, bad[:5]))
    assert decided >= compared  # every pair has at least one decided component
    # The corpus reaches every path and refusal kind.
    assert {"swa_head_slice", "mamba_slice", "whole_prepared", "whole_generic"} <= seen_paths, seen_paths
    # PP>1 prefills: Mamba paired by layer id, SWA moved whole, misplaced SWA layers, and
    # the runtime's own refusals.
    assert {("mamba", "whole_generic"), ("mamba", "mamba_slice"), ("swa", "corruption"), ("dsa", "whole_generic")} <= pp_seen, pp_seen


def test_cli_exit_status_for_state_refusal(tmp_path):
    """`kvcheck preflight` on YAML configs: gpt-oss TP 1 -> TP 4 exits 0 on 0.5.23; with
    SGLANG_USE_HND_KVCACHE on the prefill it exits 1 with the runtime's text."""
    import json as _json

    import yaml

    from helpers import run_cli

    model = tmp_path / "gpt-oss"
    model.mkdir()
    (model / "config.json").write_text(_json.dumps(CONFIGS["gpt-oss"]))
    env = tmp_path / "prefill.env"
    env.write_text("SGLANG_USE_HND_KVCACHE=1\n")
    paths = {}
    for role, tp in (("prefill", 1), ("decode", 4)):
        cfg = {"model-path": str(model), "tp-size": tp, "page-size": 16, "disaggregation-mode": role, "disaggregation-transfer-backend": "nixl"}
        paths[role] = tmp_path / f"{role}.yaml"
        paths[role].write_text(yaml.safe_dump(cfg))
    base = ["preflight", "--prefill", str(paths["prefill"]), "--decode", str(paths["decode"]), "--format", "json", "--kernel", "builtin"]
    ok = run_cli(*base)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "swa_head_slice" in ok.stdout
    bad = run_cli(*base, "--prefill-env", str(env))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Head-sliced PD transfer needs the NHD KV cache layout, got hnd" in bad.stdout


def test_qwen35_pp2_kv_regions_pair_by_layer_id():
    """Qwen3.5-shaped linear hybrid, prefill PP 2: HybridLinearKVPool registers a global
    layer id per KV region (get_kv_layer_ids: the stage's full-attention layers, K then V),
    and SGLang 0.5.23's build_transfer_entry_pairs pairs each stage with a PP 1 decode by
    those ids without raising. kvcheck restates positional pairing only, so that pair is
    unchecked (never the 'requires layer ids' failure positional pairing would give);
    at the same PP layout the ids pair positionally and the plan is decided."""
    from sglang.srt.disaggregation.utils import build_transfer_entry_pairs

    from kvcheck.sglang.plan import decide_transfer

    p = side("qwen3.5", "prefill", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    d1 = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16})
    d2 = side("qwen3.5", "decode", {"tp_size": 2, "page_size": 16, "pp_size": 2})
    full = p.model.full_layer_ids
    for rank in (0, 1):
        pg, dg = derive_geometry(p, pp_rank=rank), derive_geometry(d1)
        lo, hi = pg.stage_layers[rank]
        src_ids = [x for x in full if lo <= x < hi] * 2
        assert len(src_ids) == pg.n and len(full) * 2 == dg.n
        pairs = build_transfer_entry_pairs(src_ids, full * 2, pg.n, dg.n, allow_positional_fallback=False)
        assert len(pairs) == pg.n  # the runtime pairs them; no RuntimeError
        plan = decide_transfer(pg, dg, pp_rank=rank)
        assert plan.path == "not_modeled" and plan.error is None and "layer id" in plan.not_modeled_reason
        same = decide_transfer(pg, derive_geometry(d2, pp_rank=rank), pp_rank=rank)
        assert same.path == "equal_tp" and same.dst_indices == list(range(pg.n))
