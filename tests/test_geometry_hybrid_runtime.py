"""Hybrid pools (SWA, Mamba/linear attention, MXFP8 block scales) and the per-GPU
attention backend / page size, against SGLang 0.5.23's own code on CPU.

Each case writes a small ``config.json`` of a deployed model's shape (fewer layers),
publishes real server args (``prepare_server_args`` + ``resolve_once``), builds the
pool class ``KVCacheConfigurator`` would build (``SWAKVPool``, ``HybridLinearKVPool`` +
``MambaPool``, ``MHATokenToKVPoolMXFP8``) with ``device="cpu"``, runs the runtime's own
``setup_state_kv_args`` on a ``KVArgs`` to get ``state_types``/``state_item_lens``, and
compares all of it with ``derive_geometry``.

The GPU is the input being varied: ``override_platform`` (SGLang's own hook for "what
kind of machine this is"), ``torch.cuda.get_device_capability`` and ``memory_pool._is_cuda``
(read once at import) answer Hopper or Blackwell on CUDA, since this machine has no GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

sglang = pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

from helpers import BLACKWELL, HOPPER, flags_argv  # noqa: E402
from kvcheck.errors import InputError  # noqa: E402
from kvcheck.sglang.args import ServerArgs  # noqa: E402
from kvcheck.sglang.geometry import derive_geometry  # noqa: E402
from kvcheck.sglang.model import parse_model_config  # noqa: E402
from kvcheck.sides import Side  # noqa: E402

pytestmark = pytest.mark.runtime

GPUS = {"h100": HOPPER, "b200": BLACKWELL}

# Small configs of the deployed models' shapes (gpt-oss-120b, Llama 4 Maverick,
# Qwen3-Next-80B, Nemotron 3 Super, Qwen3.5) with fewer layers.
CONFIGS = {
    "gpt-oss": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 6, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 512, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 3, "vocab_size": 1000, "intermediate_size": 512,
        "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
    },
    "llama4": {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "torch_dtype": "bfloat16",
        "text_config": {"model_type": "llama4_text", "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8,
                        "head_dim": 128, "hidden_size": 1024, "attention_chunk_size": 8192, "vocab_size": 1000,
                        "intermediate_size": 512, "intermediate_size_mlp": 1024, "num_local_experts": 4, "torch_dtype": "bfloat16"},
        "vision_config": {"model_type": "llama4_vision_model"},
    },
    "qwen3-next": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 8, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 1024, "full_attention_interval": 4, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "vocab_size": 1000, "intermediate_size": 512, "num_experts": 4, "torch_dtype": "bfloat16",
    },
    "nemotron-h": {
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 1024, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "hybrid_override_pattern": "MEM*EMEM", "vocab_size": 1000,
        "intermediate_size": 512, "torch_dtype": "bfloat16",
    },
    "falcon-h1": {
        "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 1024, "mamba_d_ssm": 1536, "mamba_n_heads": 24,
        "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4, "vocab_size": 1000,
        "intermediate_size": 512, "torch_dtype": "bfloat16",
    },
    "kimi-linear": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "num_hidden_layers": 8, "num_attention_heads": 32,
        "num_key_value_heads": 32, "hidden_size": 1024, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "q_lora_rank": None, "head_dim": 72, "vocab_size": 1000, "intermediate_size": 512,
        "torch_dtype": "bfloat16", "num_experts": 4, "moe_intermediate_size": 256,
        "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 32, "head_dim": 128,
                               "short_conv_kernel_size": 4},
    },
    "mimo-v2": {
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
        "swa_v_head_dim": 128, "hybrid_layer_pattern": [0, 1, 1, 0], "sliding_window": 128, "hidden_size": 1024,
        "vocab_size": 1000, "intermediate_size": 512, "torch_dtype": "bfloat16",
    },
    "minimax-m3": {
        "architectures": ["MiniMaxM3SparseForCausalLM"], "model_type": "llama", "num_hidden_layers": 6,
        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128, "hidden_size": 1024, "vocab_size": 1000,
        "intermediate_size": 512, "torch_dtype": "bfloat16",
        "sparse_attention_config": {"sparse_attention_freq": [0, 0, 1, 1, 1, 1], "sparse_disable_index_value": [0, 0, 1, 1, 1, 1],
                                    "sparse_index_dim": 128},
    },
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 32,
        "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 1024, "vocab_size": 1000, "torch_dtype": "bfloat16",
    },
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 16, "hidden_size": 1024, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128, "intermediate_size": 1024, "moe_intermediate_size": 256, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 1000, "torch_dtype": "bfloat16",
        "num_nextn_predict_layers": 1, "n_group": 1, "topk_group": 1,
    },
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name, cfg in CONFIGS.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
    return root




@pytest.fixture
def runtime(monkeypatch, model_dirs):
    """publish(model, role, flags, gpu) -> the runtime's resolved ServerArgs, published."""
    from sglang.srt.runtime_context import get_context, override_platform, reset_context
    from sglang.srt.server_args import prepare_server_args

    scopes = []

    def publish(model: str, role: str, flags: dict, gpu: str = "h100"):
        spec = GPUS[gpu]
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: spec["capability"])
        # memory_pool reads is_cuda() once at import; on a GPU machine it is True.
        import sglang.srt.mem_cache.memory_pool as memory_pool

        monkeypatch.setattr(memory_pool, "_is_cuda", True)
        scope = override_platform(**spec["facts"])
        scope.install()
        scopes.append(scope)
        reset_context()
        argv = ["--model-path", str(model_dirs / model), "--device", "cuda"]
        argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
        sa = prepare_server_args(argv + flags_argv(flags))
        sa.resolve_once()
        get_context().set_server_args(sa)
        return sa

    yield publish
    for scope in reversed(scopes):
        scope.restore()
    reset_context()


def _side(model_dirs: Path, model: str, role: str, flags: dict, gpu: str | None = "h100", env: dict | None = None) -> Side:
    raw = json.loads((model_dirs / model / "config.json").read_text())
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    draft = None
    if flags.get("speculative_draft_model_path"):
        draft = parse_model_config(json.loads((Path(flags["speculative_draft_model_path"]) / "config.json").read_text()))
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(raw), origin=model, gpu=gpu, draft_model=draft,
                gpu_source="--gpu" if gpu else "default (Hopper assumed)", env=env or {})


def _resolved(sa, name):
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(sa, name)


def _kv_dtype(sa, mc):
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    _, dtype = configure_kv_cache_dtype(
        server_args_kv_cache_dtype=_resolved(sa, "kv_cache_dtype"), model=None, model_dtype=mc.dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
    )
    return dtype


def _runtime_pool(sa, pp_rank: int = 0):
    """The target pool ``KVCacheConfigurator._build_token_to_kv_pool`` builds, on CPU."""
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, MambaPool, MHATokenToKVPool, MHATokenToKVPoolMXFP8
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.runtime_context import get_parallel

    mc = ModelConfig.from_server_args(sa)
    page = _resolved(sa, "page_size") or 1
    dtype = _kv_dtype(sa, mc)
    start, end = get_pp_indices(mc.num_hidden_layers, pp_rank, _resolved(sa, "pp_size"))
    heads = mc.get_num_kv_heads(get_parallel().attn_tp_size, get_parallel().attn_dcp_size)
    mxfp8 = _resolved(sa, "kv_cache_dtype") == "mxfp8"
    mha_cls = MHATokenToKVPoolMXFP8 if mxfp8 else MHATokenToKVPool
    if mc.is_hybrid_swa:
        own = range(start, end)
        kwargs = {}
        if mc.is_hybrid_swa_compress:  # _build_hybrid_swa_kv_pool's compressed-SWA kwargs
            kwargs = dict(swa_head_num=max(1, mc.hf_text_config.swa_num_key_value_heads // get_parallel().attn_tp_size),
                          swa_head_dim=mc.swa_head_dim, swa_v_head_dim=mc.swa_v_head_dim, v_head_dim=mc.v_head_dim)
        return SWAKVPool(**kwargs,
            size=4 * page, size_swa=4 * page, page_size=page, dtype=dtype, head_num=heads, head_dim=mc.head_dim,
            swa_attention_layer_ids=[i for i in mc.swa_attention_layer_ids if i in own],
            full_attention_layer_ids=[i for i in mc.full_attention_layer_ids if i in own],
            device="cpu", enable_kv_cache_copy=False, token_to_kv_pool_class=mha_cls, enable_memory_saver=False,
        )
    from sglang.srt.configs.model_config import (
        get_minimax_sparse_attention_config, get_minimax_sparse_disable_value_layer_ids, get_minimax_sparse_layer_ids,
        is_minimax_sparse,
    )

    if is_minimax_sparse(mc.hf_config):
        # _build_minimax_sparse_kv_pool (non-NVFP4, no HiSparse)
        from sglang.srt.mem_cache.memory_pool import MiniMaxSparseKVPool, get_minimax_sparse_index_dtype
        from sglang.srt.arg_groups.model_override_base import resolving_view
        from sglang.srt.server_args import m3_fp8_attn_gemm_enabled

        sc = get_minimax_sparse_attention_config(mc.hf_config)
        dense, sparse = get_minimax_sparse_layer_ids(sc)
        return MiniMaxSparseKVPool(
            size=4 * page, page_size=page, dtype=dtype,
            index_dtype=get_minimax_sparse_index_dtype(fp8_attn_gemm=m3_fp8_attn_gemm_enabled(resolving_view(sa)), kv_cache_dtype=dtype, model_dtype=mc.dtype),
            head_num=heads, head_dim=mc.head_dim, idx_head_dim=sc["sparse_index_dim"], dense_layer_ids=dense,
            sparse_layer_ids=sparse, disable_value_sparse_layer_ids=get_minimax_sparse_disable_value_layer_ids(sc),
            device="cpu", enable_memory_saver=False, start_layer=start, end_layer=end,
        )
    cfg = mambaish_config(mc)
    if cfg is not None:
        params = cfg.mamba2_cache_params
        mamba_pool = MambaPool(size=4, spec_state_size=0, cache_params=params,
                               mamba_layer_ids=[i for i in params.layers if start <= i < end], device="cpu")
        mla = mc.attention_arch.name == "MLA"
        extra = dict(kv_lora_rank=mc.kv_lora_rank, qk_rope_head_dim=mc.qk_rope_head_dim) if mla else {}
        return HybridLinearKVPool(
            page_size=page, size=4 * page, dtype=dtype, head_num=heads, head_dim=mc.head_dim,
            full_attention_layer_ids=[i for i in cfg.full_attention_layer_ids if start <= i < end], device="cpu",
            mamba_pool=mamba_pool, enable_memory_saver=False, enable_kv_cache_copy=False, start_layer=start,
            full_kv_pool_class=None if mla else mha_cls, use_mla=mla, **extra,
        )
    return mha_cls(4 * page, page_size=page, dtype=dtype, head_num=heads, head_dim=mc.head_dim, v_head_dim=mc.v_head_dim,
                   layer_num=end - start, device="cpu", enable_memory_saver=False, start_layer=start, end_layer=end - 1)


def _registered(sa, pp_rank: int = 0):
    """(kv item lens, state types, state item lens) as ``_init_kv_manager`` +
    ``setup_state_kv_args`` assemble them for the target pool."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import get_kv_transfer_buf_infos, setup_state_kv_args

    pool = _runtime_pool(sa, pp_rank)
    _, _, items = get_kv_transfer_buf_infos(pool)
    kv_args = KVArgs()
    setup_state_kv_args(kv_args, pool, None, ModelConfig.from_server_args(sa).num_hidden_layers)
    return items, [t.value for t in kv_args.state_types], [list(x) for x in kv_args.state_item_lens]


def _compare(sa, side: Side, pp_rank: int = 0):
    items, types, state_items = _registered(sa, pp_rank)
    geo = derive_geometry(side, pp_rank=pp_rank)
    assert geo.page_size == (_resolved(sa, "page_size") or 1)
    assert geo.item_lens == items
    assert geo.state_types == types
    assert geo.state_item_lens_by_type == state_items
    return geo


# ---------------------------------------------------------------------------------------
# SWA hybrids: full-attention layers' KV regions + "swa" state component
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100", "b200"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
@pytest.mark.parametrize("model", ["gpt-oss", "llama4", "mimo-v2"])
def test_swa_pool(runtime, model_dirs, model, tp, kv, gpu):
    flags = dict(tp_size=tp, kv_cache_dtype=kv)
    sa = runtime(model, "decode", flags, gpu)
    geo = _compare(sa, _side(model_dirs, model, "decode", flags, gpu))
    assert geo.pool == "SWA" and geo.state_types == ["swa"]
    assert geo.attention_backend == _resolved(sa, "attention_backend")


@pytest.mark.parametrize("pp_rank", [0, 1])
def test_swa_pool_pp_stages(runtime, model_dirs, pp_rank):
    flags = dict(tp_size=2, pp_size=2, page_size=16)
    sa = runtime("gpt-oss", "prefill", flags)
    geo = _compare(sa, _side(model_dirs, "gpt-oss", "prefill", flags), pp_rank=pp_rank)
    assert {r.layer_id for r in geo.regions} <= set(range(3 * pp_rank, 3 * pp_rank + 3))


@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_swa_pool_mxfp8_block_scales(runtime, model_dirs, gpu):
    """MXFP8: both sub-pools are block-scaled; the scales ride as block_scale and
    block_scale_swa components after the swa one."""
    flags = dict(tp_size=2, kv_cache_dtype="mxfp8", page_size=64, attention_backend="fa4")
    try:
        sa = runtime("gpt-oss", "decode", flags, gpu)
    except (ValueError, AssertionError, NotImplementedError) as exc:
        pytest.skip(f"runtime refuses mxfp8 here: {exc}")
    geo = _compare(sa, _side(model_dirs, "gpt-oss", "decode", flags, gpu))
    assert geo.state_types == ["swa", "block_scale", "block_scale_swa"]


def test_mha_pool_mxfp8_block_scales(runtime, model_dirs):
    flags = dict(tp_size=2, kv_cache_dtype="mxfp8", page_size=64, attention_backend="fa4")
    try:
        sa = runtime("llama", "decode", flags, "b200")
    except (ValueError, AssertionError, NotImplementedError) as exc:
        pytest.skip(f"runtime refuses mxfp8 here: {exc}")
    geo = _compare(sa, _side(model_dirs, "llama", "decode", flags, "b200"))
    assert geo.state_types == ["block_scale"] and geo.bytes_per_element == 1


# ---------------------------------------------------------------------------------------
# Mamba / linear-attention hybrids: full-attention KV + "mamba" state component
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("model", ["qwen3-next", "nemotron-h", "falcon-h1", "kimi-linear"])
def test_linear_hybrid_pool(runtime, model_dirs, model, tp):
    flags = dict(tp_size=tp, page_size=64)
    sa = runtime(model, "prefill", flags)
    geo = _compare(sa, _side(model_dirs, model, "prefill", flags))
    assert geo.pool == "HYBRID_LINEAR" and geo.state_types == ["mamba"]


@pytest.mark.parametrize("ssm", ["float32", "bfloat16"])
def test_linear_hybrid_ssm_dtype_env(runtime, model_dirs, monkeypatch, ssm):
    monkeypatch.setenv("SGLANG_MAMBA_SSM_DTYPE", ssm)
    flags = dict(tp_size=2, page_size=16)
    sa = runtime("qwen3-next", "decode", flags)
    _compare(sa, _side(model_dirs, "qwen3-next", "decode", flags, env={"SGLANG_MAMBA_SSM_DTYPE": ssm}))


@pytest.mark.parametrize("pp_rank", [0, 1])
def test_linear_hybrid_pp_stages(runtime, model_dirs, pp_rank):
    flags = dict(tp_size=1, pp_size=2, page_size=16)
    sa = runtime("nemotron-h", "prefill", flags)
    _compare(sa, _side(model_dirs, "nemotron-h", "prefill", flags), pp_rank=pp_rank)


# ---------------------------------------------------------------------------------------
# attention backend and page size per GPU (page size unset)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100", "b200"])
@pytest.mark.parametrize(
    "model,flags",
    [
        ("deepseek-v3", {}),
        ("deepseek-v3", {"attention_backend": "flashinfer"}),
        ("deepseek-v3", {"attention_backend": "triton"}),
        ("deepseek-v3", {"attention_backend": "flashmla"}),
        ("deepseek-v3", {"prefill_attention_backend": "fa3", "decode_attention_backend": "fa3"}),
        ("llama", {}),
        ("llama", {"attention_backend": "flashinfer"}),
        ("llama", {"page_size": 16}),
        ("gpt-oss", {}),
        ("llama4", {}),
        ("qwen3-next", {}),
        ("nemotron-h", {}),
        ("mimo-v2", {}),
        ("minimax-m3", {}),
        ("minimax-m3", {"kv_cache_dtype": "fp8_e4m3"}),
        ("llama", {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 4, "speculative_num_steps": 3,
                   "speculative_num_draft_tokens": 8, "speculative_draft_model_path": "DRAFT"}),
        ("llama", {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1, "speculative_num_steps": 3,
                   "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "DRAFT"}),
        ("llama", {"kv_cache_dtype": "fp8_e5m2", "attention_backend": "fa3"}),
    ],
)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_page_size_and_backend_per_gpu(runtime, model_dirs, gpu, model, flags, role):
    flags = dict(flags, tp_size=2)
    if flags.get("speculative_draft_model_path") == "DRAFT":
        flags["speculative_draft_model_path"] = str(model_dirs / "llama")
    sa = runtime(model, role, flags, gpu)
    geo = derive_geometry(_side(model_dirs, model, role, flags, gpu))
    assert geo.page_size == (_resolved(sa, "page_size") or 1)
    assert geo.attention_backend == _resolved(sa, "attention_backend")


def test_mla_page_size_unset_is_one_on_hopper(runtime, model_dirs):
    """Issue 7: an MLA decode with page size unset resolves to fa3 and page size 1 on
    Hopper (not 64); on Blackwell DeepSeek V3 picks trtllm_mla and 64."""
    sa = runtime("deepseek-v3", "decode", {"tp_size": 8}, "h100")
    assert (_resolved(sa, "page_size") or 1) == 1
    geo = derive_geometry(_side(model_dirs, "deepseek-v3", "decode", {"tp_size": 8}, "h100"))
    assert geo.page_size == 1 and geo.attention_backend == "fa3"
    sa = runtime("deepseek-v3", "decode", {"tp_size": 8}, "b200")
    geo = derive_geometry(_side(model_dirs, "deepseek-v3", "decode", {"tp_size": 8}, "b200"))
    assert geo.page_size == _resolved(sa, "page_size") == 64 and geo.attention_backend == "trtllm_mla"


def test_gpu_not_given_is_noted(model_dirs):
    geo = derive_geometry(_side(model_dirs, "gpt-oss", "decode", {"tp_size": 2}, gpu=None))
    assert geo.gpu_assumed and any("Hopper assumed" in n for n in geo.notes)


# ---------------------------------------------------------------------------------------
# model config: range checks
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-oss", "llama4", "mimo-v2", "qwen3-next", "nemotron-h", "falcon-h1", "kimi-linear"])
def test_model_config_layer_split_agrees(runtime, model_dirs, model):
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.configs.model_config import ModelConfig

    rt = ModelConfig.from_server_args(runtime(model, "prefill", {"tp_size": 1}))
    ours = parse_model_config(json.loads((model_dirs / model / "config.json").read_text()))
    assert rt.num_hidden_layers == ours.num_hidden_layers
    if ours.is_mla:
        assert rt.attention_arch.name == "MLA"
        assert (rt.kv_lora_rank, rt.qk_rope_head_dim) == (ours.kv_lora_rank, ours.qk_rope_head_dim)
    else:
        assert rt.get_total_num_kv_heads() == ours.num_key_value_heads and rt.head_dim == ours.head_dim
    if rt.is_hybrid_swa:
        assert ours.hybrid == "swa"
        assert rt.swa_attention_layer_ids == ours.swa_layer_ids and rt.full_attention_layer_ids == ours.full_layer_ids
    else:
        cfg = mambaish_config(rt)
        assert ours.hybrid == "linear"
        assert list(cfg.full_attention_layer_ids) == ours.full_layer_ids
        assert list(cfg.mamba2_cache_params.layers) == ours.mamba_layer_ids


@pytest.mark.parametrize(
    "model,field,value",
    [("llama", "head_dim", -5), ("llama", "torch_dtype", "float7"), ("qwen3-next", "linear_conv_kernel_dim", 0),
     ("nemotron-h", "hybrid_override_pattern", "MXM"), ("gpt-oss", "layer_types", ["sliding_attention"]),
     ("llama", "num_key_value_heads", 10**9), ("deepseek-v3", "kv_lora_rank", "512")],
)
def test_garbage_fields_are_input_errors(model, field, value):
    cfg = dict(CONFIGS[model], **{field: value})
    with pytest.raises(InputError) as err:
        parse_model_config(cfg)
    assert err.value.field == field


def test_json_model_override_args_applied(model_dirs):
    """--json-model-override-args goes onto the config before it is read (get_config)."""
    from sglang.srt.configs.model_config import ModelConfig

    override = '{"num_hidden_layers": 2, "head_dim": 128}'
    rt = ModelConfig(str(model_dirs / "gpt-oss"), model_override_args=override)
    ours = parse_model_config(CONFIGS["gpt-oss"], override_args=override)
    assert ours.num_hidden_layers == rt.num_hidden_layers == 2
    assert ours.head_dim == rt.head_dim == 128
    assert ours.full_layer_ids == rt.full_attention_layer_ids


# ---------------------------------------------------------------------------------------
# MiniMax M3 sparse: sparse layers' KV + minimax_index_k / minimax_dense_kv states
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100", "b200"])
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_minimax_sparse_pool(runtime, model_dirs, gpu, kv, tp):
    flags = dict(tp_size=tp, kv_cache_dtype=kv)
    sa = runtime("minimax-m3", "decode", flags, gpu)
    geo = _compare(sa, _side(model_dirs, "minimax-m3", "decode", flags, gpu))
    assert geo.pool == "MINIMAX_SPARSE" and geo.state_types == ["minimax_index_k", "minimax_dense_kv"]
    assert geo.attention_backend == _resolved(sa, "attention_backend")


def test_minimax_sparse_index_value_layers_are_refused(runtime, model_dirs):
    """Sparse layers with an index value: setup_state_kv_args raises, kvcheck does not model it."""
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import setup_state_kv_args

    cfg = json.loads(json.dumps(CONFIGS["minimax-m3"]))
    cfg["sparse_attention_config"]["sparse_disable_index_value"] = [0, 0, 0, 1, 1, 1]
    (model_dirs / "minimax-m3-iv").mkdir(exist_ok=True)
    (model_dirs / "minimax-m3-iv" / "config.json").write_text(json.dumps(cfg))
    sa = runtime("minimax-m3-iv", "decode", {"tp_size": 2})
    with pytest.raises(NotImplementedError) as exc:
        setup_state_kv_args(KVArgs(), _runtime_pool(sa), None, 6)
    side = _side(model_dirs, "minimax-m3-iv", "decode", {"tp_size": 2})
    geo = derive_geometry(side)
    assert geo.pool == "not_modeled" and "index value" in geo.not_modeled_reason
    # kvcheck predicts the scheduler's start-up refusal with the runtime's own text
    from kvcheck.sglang.startup import connector_outcome

    r = connector_outcome(side)
    assert r.id == "minimax-index-value" and (r.type, r.message) == ("NotImplementedError", str(exc.value))
    k_only = _side(model_dirs, "minimax-m3", "decode", {"tp_size": 2})
    assert connector_outcome(k_only) is None


@pytest.mark.parametrize("dtype", [None, "float32", "bfloat16", "float16"])
def test_model_dtype_under_auto_agrees(tmp_path, dtype):
    """_get_and_verify_dtype: a float32 or missing config dtype runs as float16 under
    --dtype auto; kvcheck sizes the KV with the same dtype."""
    from sglang.srt.configs.model_config import ModelConfig

    cfg = {k: v for k, v in CONFIGS["llama"].items() if k != "torch_dtype"}
    if dtype:
        cfg["torch_dtype"] = dtype
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rt = ModelConfig(str(tmp_path))
    assert str(rt.dtype).removeprefix("torch.") == parse_model_config(cfg).torch_dtype
