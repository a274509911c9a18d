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
    "kimi-linear": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 32, "hidden_size": 1024, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "q_lora_rank": None, "head_dim": 72,
        "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 32, "head_dim": 128,
                               "short_conv_kernel_size": 4},
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


def both(p: Side, d: Side, prepared: bool = True):
    """(builtin decisions, runtime decisions) for one pair."""
    pg, dg = derive_geometry(p), derive_geometry(d)
    inp = states.state_inputs(p, d, prepared)

    def dims(s: Side, g):
        return states.mamba_dims(s.model, g.attn_tp_size) if "mamba" in g.state_types else None

    return states.decide_states(pg, dg, inp), rk.decide_states(pg, dg, inp, prefill_dims=dims(p, pg), decode_dims=dims(d, dg))


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
    elif rng.random() < 0.15:
        fp["pp_size"] = 2
    p = side(model, "prefill", fp, env_p, gpu)
    d = side(model, "decode", fd, env_d, gpu)
    return p, d, rng.random() < 0.8


def test_corpus_builtin_agrees_with_runtime():
    rng = random.Random(20261201)
    compared = disagreements = skipped = decided = 0
    seen_paths: set = set()
    bad = []
    while compared < CORPUS:
        p, d, prepared = _random_pair(rng)
        try:
            b, r = both(p, d, prepared)
        except (InputError, ValueError):
            skipped += 1
            continue
        compared += 1
        for x, y in zip(b, r):
            if x.unchecked:
                continue
            decided += 1
            seen_paths.add(y.path or (y.error.message[:30] if y.error else "corruption"))
            if key(x) != key(y):
                disagreements += 1
                bad.append((p.origin, p.args.tp_size, d.args.tp_size, p.env, d.env, key(x), key(y)))
    print(f"states corpus: {compared} pairs, {decided} components compared, {skipped} skipped (bad input), {disagreements} disagreements")
    assert disagreements == 0, "\n".join(map(str, bad[:5]))
    assert decided >= compared  # every pair has at least one decided component
    # The corpus reaches every path and refusal kind.
    assert {"swa_head_slice", "mamba_slice", "whole_prepared", "whole_generic"} <= seen_paths, seen_paths


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
