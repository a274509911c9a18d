"""DeepSeek V4 pairs through the preflight: modeled pairs get a plan, what kvcheck does
not restate is ``unchecked`` (never a pass). The pool itself is verified against
``DeepSeekV4TokenToKVPool`` in ``test_geometry_dsv4_runtime.py``; the bootstrap texts here
are ``CommonKVManager.try_ensure_parallel_info``'s (disaggregation/common/conn.py, 0.5.23)."""

from __future__ import annotations

import pytest

from kvcheck.preflight import run_preflight
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import parse_model_config
from kvcheck.sides import Side

V4 = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "num_hidden_layers": 8, "num_attention_heads": 64,
    "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "index_head_dim": 128, "sliding_window": 128,
    "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 0], "num_nextn_predict_layers": 1, "hidden_size": 512,
}


def side(role: str, flags: dict, env: dict | None = None, gpu: str = "h200", cfg: dict | None = None) -> Side:
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(cfg or V4), origin=f"{role}.yaml", gpu=gpu,
                gpu_source="--gpu", env=env or {})


@pytest.mark.parametrize("tp", [(4, 4), (4, 8), (8, 1)])
def test_v4_pair_passes_with_equal_regions(tp):
    rep = run_preflight(side("prefill", {"tp_size": tp[0]}), side("decode", {"tp_size": tp[1]}))
    assert rep.verdict == "pass", [f.message for f in rep.findings]
    # [C4 KV x3, C4 indexer x3, C128 KV x3], V4 layout pages.
    assert rep.plan.path == "equal_tp" and (rep.plan.n_src, rep.plan.n_dst) == (9, 9)


def test_v4_hisparse_decode_on_nixl_is_the_runtime_refusal():
    """--enable-hisparse on a DeepSeek V4 decode: its C4 KV regions are the host pool (DRAM),
    the prefill's registration decision takes mixed segments, but the decode's
    ``pop_preallocated`` (decode.py, 0.5.23) sends device page ids for a
    DeepSeekV4TokenToKVPool and, on NIXL, raises NotImplementedError at the first request
    (with or without a draft)."""
    rep = run_preflight(side("prefill", {"tp_size": 4}), side("decode", {"tp_size": 8, "enable_hisparse": True, "disable_radix_cache": True}))
    assert rep.plan.path == "mixed_segments"
    assert [s.as_list() for s in rep.plan.segments] == [[0, 3, "VRAM", "DRAM"], [3, 9, "VRAM", "VRAM"]]
    f = [f for f in rep.findings if f.id == "hisparse-draft-nixl"]
    assert rep.verdict == "fail" and f
    assert (f[0].runtime_error.type, f[0].runtime_error.message) == (
        "NotImplementedError", "HiSparse device-only PD transfer currently requires the Mooncake backend")
    assert "mooncake" in f[0].fix and "speculative decoding does not help" in f[0].fix


def test_v4_kv_layout_mismatch_is_the_runtime_refusal():
    """SGLANG_DSV4_KV_LAYOUT=auto: V4 on a Hopper prefill, V4.1 on a Blackwell decode."""
    env = {"SGLANG_DSV4_KV_LAYOUT": "auto"}
    rep = run_preflight(side("prefill", {"tp_size": 4}, env, "h200"), side("decode", {"tp_size": 4}, env, "b200"))
    f = [f for f in rep.findings if f.id == "kv-layout-mismatch"]
    assert rep.verdict == "fail" and f
    assert f[0].runtime_error.message == (
        "KV layout mismatch: prefill server has kv_layout=v4,c4:v4,c128:v4, but decode server has "
        "kv_layout=v41,c4:v41,c128:v41. Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT.")


@pytest.mark.parametrize("flags,env,cfg", [
    ({"tp_size": 4, "pp_size": 2}, None, None),
    ({"tp_size": 4, "kv_cache_dtype": "bfloat16"}, None, None),
    ({"tp_size": 4, "speculative_algorithm": "DSPARK"}, None, None),
    ({"tp_size": 4}, {"SGLANG_DSV4_KV_LAYOUT": "v41"}, None),  # V4.1 layouts need SM100: a start-up assertion on Hopper
    ({"tp_size": 4}, None, {**V4, "model_type": "deepseek_v41"}),
    ({"tp_size": 4}, None, {**V4, "architectures": ["DeepseekV4ForCausalLMNextN"]}),
])
def test_v4_unmodeled_variants_are_unchecked(flags, env, cfg):
    rep = run_preflight(side("prefill", flags, env, cfg=cfg), side("decode", flags, env, cfg=cfg))
    assert rep.verdict == "unchecked"
    assert any(f.id == "not-modeled" for f in rep.findings) or any(f.severity.value == "unchecked" for f in rep.findings)


@pytest.mark.parametrize("field,value,needle", [
    ("compress_ratios", [0, 4], "fewer than num_hidden_layers"),
    ("compress_ratios", "4,128", "must be a list"),
    ("compress_ratios", [0, 0, 3, 128, 4, 128, 4, 128], "Unsupported compression ratio: 3"),
    ("head_dim", None, "head_dim"),
])
def test_v4_malformed_config_is_bad_input(field, value, needle):
    from kvcheck.errors import InputError

    cfg = {k: v for k, v in V4.items() if not (k == field and value is None)}
    if value is not None:
        cfg[field] = value
    with pytest.raises(InputError) as exc:
        parse_model_config(cfg)
    assert needle in str(exc.value)


def test_v4_layout_auto_without_gpu_is_noted():
    from kvcheck.sglang.geometry import derive_geometry

    s = side("decode", {"tp_size": 4}, {"SGLANG_DSV4_KV_LAYOUT": "auto"}).model_copy(update={"gpu": None, "gpu_source": "default (Hopper assumed)"})
    g = derive_geometry(s)
    assert g.kv_layout == "v4,c4:v4,c128:v4" and any("SGLANG_DSV4_KV_LAYOUT=auto" in n for n in g.notes)
