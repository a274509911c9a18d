"""FP4 KV pools (``--kv-cache-dtype nvfp4`` / ``fp4_mx_block16``) against SGLang 0.5.23's
own pool classes, on CPU.

Each case publishes real server args for a GPU (``startup_corpus.gpu_facts``: SGLang's
platform override + the device capability), builds the pool ``KVCacheConfigurator`` builds
for an FP4 KV dtype (MHA: ``MHATokenToKVPool`` with the quant method of
``_build_fp4_quant_method``; MLA: ``MLATokenToKVPoolFP4`` as ``_build_mla_fp4_kv_pool``;
the NextN draft the same way) with ``device="cpu"``, and compares what ``_init_kv_manager``
registers (``get_contiguous_buf_infos`` + ``setup_state_kv_args``) with ``derive_geometry``:
region count, every item length, no state component, and the number of block-scale buffers
the pool allocates whose pointers NIXL never sees.
"""

from __future__ import annotations

import json

import pytest

sglang = pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

import startup_corpus as C  # noqa: E402
from kvcheck.sglang.args import ServerArgs  # noqa: E402
from kvcheck.sglang.geometry import derive_geometry  # noqa: E402
from kvcheck.sglang.model import parse_model_config  # noqa: E402
from kvcheck.sides import Side  # noqa: E402

pytestmark = pytest.mark.runtime


@pytest.fixture
def publish(monkeypatch):
    """publish(model, role, flags, gpu) -> resolved ServerArgs, published for the pools;
    the GPU's platform facts stay installed for the test."""
    import contextlib

    from sglang.srt.runtime_context import get_context, reset_context
    from sglang.srt.server_args import prepare_server_args

    import sglang.srt.mem_cache.memory_pool as memory_pool

    monkeypatch.setattr(memory_pool, "_is_cuda", True)  # read once at import; True on a GPU machine
    stack = contextlib.ExitStack()

    def run(model: str, role: str, flags: dict, gpu: str):
        stack.close()
        stack.enter_context(C.gpu_facts(C.GPUS[gpu]))
        reset_context()
        argv = ["--model-path", str(C.MODELS / model), "--device", "cuda", "--disaggregation-mode", role,
                "--disaggregation-transfer-backend", "nixl"] + C.argv(flags)
        sa = prepare_server_args(argv)
        sa.resolve_once()
        get_context().set_server_args(sa)
        return sa

    yield run
    stack.close()
    reset_context()


def _resolved(sa, name):
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(sa, name)


def _pool(sa, *, draft: bool = False):
    """The FP4 pool the configurator builds for the target (or the NextN draft), on CPU."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import get_kv_cache_quant_method, resolve_kv_cache_quant
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPoolFP4
    from sglang.srt.runtime_context import get_parallel

    mc = ModelConfig.from_server_args(sa, is_draft_model=draft)
    kv_str = _resolved(sa, "kv_cache_dtype")
    _, dtype = configure_kv_cache_dtype(server_args_kv_cache_dtype=kv_str, model=None, model_dtype=mc.dtype, is_draft_worker=draft,
                                        is_dflash=False, speculative_draft_attention_backend=None)
    assert dtype == torch.float4_e2m1fn_x2
    page = _resolved(sa, "page_size") or 1
    layers = mc.num_nextn_predict_layers if draft else mc.num_hidden_layers
    if mc.attention_arch.name == "MLA":
        return MLATokenToKVPoolFP4(2 * page, page_size=page, dtype=dtype, kv_lora_rank=mc.kv_lora_rank,
                                   qk_rope_head_dim=mc.qk_rope_head_dim, layer_num=layers, device="cpu", enable_memory_saver=False)
    qm = get_kv_cache_quant_method(resolve_kv_cache_quant(kv_str), num_layers=layers, device="cpu", page_size=page)
    qm.configure_attention_backends_from_server_args(sa)
    return MHATokenToKVPool(2 * page, page_size=page, dtype=dtype, layer_num=layers, device="cpu", enable_memory_saver=False,
                            head_num=mc.get_num_kv_heads(get_parallel().attn_tp_size, get_parallel().attn_dcp_size),
                            head_dim=mc.head_dim, v_head_dim=mc.v_head_dim, quant_method=qm)


def _scale_buffers(pool) -> list:
    out = []
    for name in ("k_scale_buffer", "v_scale_buffer", "kv_scale_buffer", "native_k_scale_buffer", "native_v_scale_buffer"):
        out += list(getattr(pool, name, None) or [])
    return out


def _registered(sa, draft: bool):
    """(item lens, state types, scale buffers allocated but registered nowhere)."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import get_kv_transfer_buf_infos, setup_state_kv_args

    pool = _pool(sa)
    pools = [pool] + ([_pool(sa, draft=True)] if draft else [])
    ptrs, items = [], []
    for p in pools:
        p_ptrs, _, p_items = get_kv_transfer_buf_infos(p)
        ptrs += p_ptrs
        items += p_items
    kv_args = KVArgs()
    setup_state_kv_args(kv_args, pool, pools[1] if draft else None, ModelConfig.from_server_args(sa).num_hidden_layers)
    state_ptrs = {x for comp in kv_args.state_data_ptrs for x in comp}
    scales = [t for p in pools for t in _scale_buffers(p)]
    unregistered = [t for t in scales if t.data_ptr() not in set(ptrs) | state_ptrs]
    return items, [t.value for t in kv_args.state_types], len(unregistered), len(scales)


def _side(model: str, role: str, flags: dict, gpu: str) -> Side:
    raw = json.loads((C.MODELS / model / "config.json").read_text())
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(raw), origin=model, gpu=gpu, gpu_source="--gpu")


CASES = [
    # (model, kv, gpu, flags)
    *[("llama-3.1-8b", "fp4_mx_block16", gpu, dict(tp_size=tp, page_size=ps, attention_backend="triton"))
      for gpu in ("h100", "b200", "rtx5090") for tp in (1, 2, 16) for ps in (1, 16, 64)],
    *[("qwen3-8b", "fp4_mx_block16", "h100", dict(tp_size=tp, page_size=16, attention_backend=b))
      for tp in (1, 4) for b in ("triton", "torch_native", "flex_attention")],
    *[("llama-3.1-8b", "nvfp4", "rtx5090", dict(tp_size=tp, page_size=ps)) for tp in (1, 8) for ps in (None, 16, 32)],
    ("qwen3-8b", "nvfp4", "rtx5090", dict(tp_size=2, page_size=64)),
    *[("deepseek-v3", "fp4_mx_block16", gpu, dict(tp_size=8, page_size=ps, attention_backend="flashinfer"))
      for gpu in ("h100", "b200", "rtx5090") for ps in (1, 16, 64)],
]


@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("model,kv,gpu,flags", CASES)
def test_fp4_pool_registration(publish, model, kv, gpu, flags, role):
    flags = dict(flags, kv_cache_dtype=kv)
    sa = publish(model, role, flags, gpu)
    items, types, unregistered, allocated = _registered(sa, draft=False)
    geo = derive_geometry(_side(model, role, flags, gpu))
    assert geo.page_size == (_resolved(sa, "page_size") or 1)
    assert geo.pool == ("MLA" if model.startswith("deepseek") else "MHA")
    assert geo.n == len(items) and geo.item_lens == items
    assert geo.state_types == types == []
    # every scale buffer the FP4 pool allocates stays off NIXL's lists
    assert allocated > 0 and geo.unregistered_scale_buffers == unregistered == allocated


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_fp4_mla_nextn_draft(publish, role):
    flags = dict(tp_size=8, page_size=64, attention_backend="flashinfer", kv_cache_dtype="fp4_mx_block16", speculative_algorithm="EAGLE")
    sa = publish("deepseek-v3", role, flags, "b200")
    items, types, unregistered, allocated = _registered(sa, draft=True)
    geo = derive_geometry(_side("deepseek-v3", role, flags, "b200"))
    assert geo.num_draft_regions == 1 and geo.item_lens == items and len(items) == 62
    assert geo.unregistered_scale_buffers == unregistered == allocated == 62


def test_fp4_hybrid_pool_stays_unmodeled():
    """A hybrid pool with FP4 KV: its sub-pools' FP4 layout is not derived (unchecked)."""
    raw = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 512, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 2, "vocab_size": 1000}
    args = ServerArgs(disaggregation_mode="decode", disaggregation_transfer_backend="nixl", kv_cache_dtype="fp4_mx_block16")
    geo = derive_geometry(Side(role="decode", args=args, raw_args={}, model=parse_model_config(raw), origin="x"))
    assert geo.pool == "not_modeled" and "swa hybrid pool" in geo.not_modeled_reason


# An EAGLE3 draft of Llama 3.1 8B's shape (one layer), written here.
EAGLE3_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 32,
                "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 1024, "vocab_size": 1000,
                "draft_vocab_size": 500, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("tp", [1, 2])
def test_fp4_mha_eagle3_draft(publish, tmp_path, tp):
    """A separate EAGLE3 draft: the draft worker's configurator builds the same FP4 MHA pool
    (``_build_mha_kv_pool`` with the draft's FP4 quant method) over the draft's layers."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import get_kv_cache_quant_method
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.runtime_context import get_parallel

    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(EAGLE3_DRAFT))
    flags = dict(tp_size=tp, page_size=16, attention_backend="triton", kv_cache_dtype="fp4_mx_block16", speculative_algorithm="EAGLE3",
                 speculative_draft_model_path=str(tmp_path / "draft"), speculative_num_steps=1, speculative_eagle_topk=1,
                 speculative_num_draft_tokens=2)
    sa = publish("llama-3.1-8b", "decode", flags, "b200")
    target, _, _, _ = _registered(sa, draft=False)
    dmc = ModelConfig.from_server_args(sa, model_path=str(tmp_path / "draft"), is_draft_model=True)
    qm = get_kv_cache_quant_method("fp4_mx_block16", num_layers=dmc.num_hidden_layers, device="cpu", page_size=16)
    qm.configure_attention_backends_from_server_args(sa)
    dpool = MHATokenToKVPool(32, page_size=16, dtype=torch.float4_e2m1fn_x2, layer_num=dmc.num_hidden_layers, device="cpu",
                             enable_memory_saver=False, quant_method=qm, head_dim=dmc.head_dim, v_head_dim=dmc.v_head_dim,
                             head_num=dmc.get_num_kv_heads(get_parallel().attn_tp_size, get_parallel().attn_dcp_size))
    _, _, ditems = dpool.get_contiguous_buf_infos()
    side = _side("llama-3.1-8b", "decode", flags, "b200").model_copy(update={"draft_model": parse_model_config(EAGLE3_DRAFT)})
    geo = derive_geometry(side)
    assert geo.item_lens == target + ditems and geo.num_draft_regions == len(ditems) == 2
    assert geo.unregistered_scale_buffers == len(_scale_buffers(_pool(sa))) + len(_scale_buffers(dpool))


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("model", ["qwen3-next", "nemotron-h"])
def test_fp4_linear_hybrid_full_attention_pool(tmp_path, monkeypatch, model, tp):
    """An MHA linear-attention hybrid with FP4 KV: ``HybridLinearKVPool`` hands the FP4
    quant method to its full-attention ``MHATokenToKVPool``; the Mamba state component is
    unchanged and the block scales stay unregistered."""
    from test_geometry_hybrid_runtime import CONFIGS

    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import setup_state_kv_args
    from sglang.srt.layers.quantization.fp4_kv_cache_quant_method import get_kv_cache_quant_method
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, MambaPool
    from sglang.srt.runtime_context import get_context, get_parallel, reset_context
    from sglang.srt.server_args import prepare_server_args

    import sglang.srt.mem_cache.memory_pool as memory_pool

    monkeypatch.setattr(memory_pool, "_is_cuda", True)
    (tmp_path / model).mkdir()
    (tmp_path / model / "config.json").write_text(json.dumps(CONFIGS[model]))
    flags = dict(tp_size=tp, page_size=16, attention_backend="triton", kv_cache_dtype="fp4_mx_block16")
    with C.gpu_facts(C.GPUS["h100"]):
        reset_context()
        sa = prepare_server_args(["--model-path", str(tmp_path / model), "--device", "cuda", "--disaggregation-mode", "decode",
                                  "--disaggregation-transfer-backend", "nixl"] + C.argv(flags))
        sa.resolve_once()
        get_context().set_server_args(sa)
        mc = ModelConfig.from_server_args(sa)
        cfg = mambaish_config(mc)
        params = cfg.mamba2_cache_params
        qm = get_kv_cache_quant_method("fp4_mx_block16", num_layers=len(cfg.full_attention_layer_ids), device="cpu", page_size=16)
        qm.configure_attention_backends_from_server_args(sa)
        pool = HybridLinearKVPool(
            page_size=16, size=64, dtype=torch.float4_e2m1fn_x2, head_num=mc.get_num_kv_heads(get_parallel().attn_tp_size, 1),
            head_dim=mc.head_dim, full_attention_layer_ids=list(cfg.full_attention_layer_ids), device="cpu",
            mamba_pool=MambaPool(size=4, spec_state_size=0, cache_params=params, mamba_layer_ids=list(params.layers), device="cpu"),
            enable_memory_saver=False, enable_kv_cache_copy=False, start_layer=0, use_mla=False, quant_method=qm,
        )
        ptrs, _, items = pool.get_contiguous_buf_infos()
        kv_args = KVArgs()
        setup_state_kv_args(kv_args, pool, None, mc.num_hidden_layers)
        reset_context()
    raw = CONFIGS[model]
    side = Side(role="decode", args=ServerArgs(disaggregation_mode="decode", disaggregation_transfer_backend="nixl", **flags),
                raw_args=dict(flags), model=parse_model_config(raw), origin=model, gpu="h100", gpu_source="--gpu")
    geo = derive_geometry(side)
    assert geo.pool == "HYBRID_LINEAR" and geo.item_lens == items
    assert geo.state_types == [t.value for t in kv_args.state_types] == ["mamba"]
    assert geo.state_item_lens_by_type == [list(x) for x in kv_args.state_item_lens]
    scales = _scale_buffers(pool.full_kv_pool)
    state_ptrs = {x for comp in kv_args.state_data_ptrs for x in comp}
    assert scales and all(t.data_ptr() not in set(ptrs) | state_ptrs for t in scales)
    assert geo.unregistered_scale_buffers == len(scales)
