"""kvcheck.sglang.geometry / model against SGLang 0.5.23's own KV pool classes, on CPU.

Each case publishes real server args (``prepare_server_args`` + ``resolve_once`` +
``set_server_args``, the way a scheduler process does), builds the pool class the
runtime's ``KVCacheConfigurator`` would pick with the constructor arguments it would pass
(heads from ``ModelConfig.get_num_kv_heads(attn_tp, attn_dcp)``, the kv dtype from
``configure_kv_cache_dtype``, the DSA row width from ``calculate_mla_kv_cache_dim``),
with ``device="cpu"`` and a few pages, and compares ``get_contiguous_buf_infos()`` (what
``_init_kv_manager`` hands NIXL) with ``derive_geometry``: region count and every item
length.

The only stand-in: ``torch.cuda.get_device_capability`` answers a GPU generation (Hopper
9.0 / Blackwell 10.0), because the DSA arg resolution reads it and this machine has no
GPU. That is the input being varied, not a piece of SGLang.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

sglang = pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

from helpers import flags_argv  # noqa: E402
from kvcheck.sglang.args import ServerArgs  # noqa: E402
from kvcheck.sglang.geometry import derive_geometry, pp_stage_layers  # noqa: E402
from kvcheck.sglang.model import parse_model_config  # noqa: E402
from kvcheck.sides import Side  # noqa: E402

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "configs" / "models"
MODEL_NAMES = ["llama-3.1-8b", "qwen3-8b", "deepseek-v3", "deepseek-v3.2"]
HOPPER, BLACKWELL = (9, 0), (10, 0)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------




@pytest.fixture
def runtime(monkeypatch):
    """publish(model, role, flags, gpu) -> the runtime's resolved ServerArgs, published."""
    from sglang.srt.runtime_context import get_context, reset_context
    from sglang.srt.server_args import prepare_server_args

    def publish(model: str, role: str, flags: dict, gpu=HOPPER):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: gpu)
        reset_context()
        argv = ["--model-path", str(MODELS / model), "--device", "cuda"]
        argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "nixl"]
        sa = prepare_server_args(argv + flags_argv(flags))
        sa.resolve_once()
        get_context().set_server_args(sa)
        return sa

    yield publish
    reset_context()


def _side(model: str, role: str, flags: dict) -> Side:
    raw = json.loads((MODELS / model / "config.json").read_text())
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(raw), origin=model)


def _resolved(sa, name):
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(sa, name)


def _kv_dtype(sa, mc, *, draft=False):
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    _, dtype = configure_kv_cache_dtype(
        server_args_kv_cache_dtype=_resolved(sa, "kv_cache_dtype"),
        model=None,
        model_dtype=mc.dtype,
        is_draft_worker=draft,
        is_dflash=False,
        speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=_resolved(sa, "speculative_draft_kv_cache_dtype") if draft else None,
    )
    return dtype


def _pages(page_size: int) -> int:
    return 2 * page_size  # pool size in tokens: two pages (+1 padded page the pool adds)


def _runtime_target_pool(sa, *, layers: tuple[int, int], hisparse_host: bool = False):
    """The target pool ``_build_token_to_kv_pool`` builds for this config, on CPU, and the
    pool ``_init_kv_manager`` registers (the HiSparse host pool on a HiSparse decode)."""
    from sglang.srt.configs.model_config import ModelConfig, get_dsa_index_head_dim, is_deepseek_dsa
    from sglang.srt.mem_cache.kv_cache_configurator import calculate_mla_kv_cache_dim
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, MHATokenToKVPool, MLATokenToKVPool
    from sglang.srt.runtime_context import get_parallel

    mc = ModelConfig.from_server_args(sa)
    page = _resolved(sa, "page_size") or 1
    dtype = _kv_dtype(sa, mc)
    start, end = layers
    common = dict(size=_pages(page), page_size=page, dtype=dtype, layer_num=end - start, device="cpu",
                  enable_memory_saver=False, start_layer=start, end_layer=end - 1)
    if mc.attention_arch.name == "MLA" and is_deepseek_dsa(mc.hf_config):
        kv_cache_dim = calculate_mla_kv_cache_dim(model_config=mc, kv_cache_dtype=dtype)
        dsa = dict(common, kv_lora_rank=mc.kv_lora_rank, qk_rope_head_dim=mc.qk_rope_head_dim,
                   index_head_dim=get_dsa_index_head_dim(mc.hf_config), kv_cache_dim=kv_cache_dim)
        if hisparse_host:
            from sglang.srt.mem_cache.hisparse_memory_pool import HiSparseDSATokenToKVPool
            from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

            device_pool = HiSparseDSATokenToKVPool(**dsa, host_to_device_ratio=2)
            # hisparse_coordinator builds the host mirror this way; pin_memory only
            # decides whether cudaHostRegister runs (no GPU here), not the shapes.
            from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope

            # the runtime's own budget scope: the host pool's shapes do not depend on how much
            # RAM this machine has free (outside a scope SGLang keeps 10 GiB in reserve and
            # refuses the pool when the test machine is short of it)
            with host_memory_budget_scope(1 << 30):
                host = MLATokenToKVPoolHost(
                    buffer_info=device_pool.get_device_pool_infos()[0].buffer_info,
                    device_capacity_tokens=device_pool.size, start_layer=device_pool.start_layer,
                    end_layer=device_pool.end_layer, target_layer_num=device_pool.layer_num,
                    host_to_device_ratio=2, host_size=0, page_size=page, layout="layer_first",
                    override_kv_cache_dim=device_pool.kv_cache_dim, pin_memory=False,
                )
            host.device_pool_for_state = device_pool  # setup_state_kv_args reads the device pool
            return host
        return DSATokenToKVPool(**dsa)
    if mc.attention_arch.name == "MLA":
        return MLATokenToKVPool(**common, kv_lora_rank=mc.kv_lora_rank, qk_rope_head_dim=mc.qk_rope_head_dim)
    return MHATokenToKVPool(
        **common, head_num=mc.get_num_kv_heads(get_parallel().attn_tp_size, get_parallel().attn_dcp_size),
        head_dim=mc.head_dim, v_head_dim=mc.v_head_dim, enable_kv_cache_copy=False,
    )


def _runtime_draft_pool(sa):
    """The MTP/NextN draft worker's pool: ModelConfig(is_draft_model=True), layers =
    num_nextn_predict_layers (layer_setup._compute_model_num_layers), same pool dispatch."""
    from sglang.srt.configs.model_config import ModelConfig, get_dsa_index_head_dim, is_deepseek_dsa
    from sglang.srt.mem_cache.kv_cache_configurator import calculate_mla_kv_cache_dim
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, MLATokenToKVPool

    mc = ModelConfig.from_server_args(sa, is_draft_model=True)
    assert mc.hf_config.architectures[0] == "DeepseekV3ForCausalLMNextN"
    page = _resolved(sa, "page_size") or 1
    dtype = _kv_dtype(sa, mc, draft=True)
    common = dict(size=_pages(page), page_size=page, dtype=dtype, layer_num=mc.num_nextn_predict_layers,
                  device="cpu", enable_memory_saver=False, kv_lora_rank=mc.kv_lora_rank,
                  qk_rope_head_dim=mc.qk_rope_head_dim)
    if is_deepseek_dsa(mc.hf_config):
        return DSATokenToKVPool(**common, index_head_dim=get_dsa_index_head_dim(mc.hf_config),
                                kv_cache_dim=calculate_mla_kv_cache_dim(model_config=mc, kv_cache_dtype=dtype))
    return MLATokenToKVPool(**common)


def _registered(sa, *, role: str, pp_rank: int = 0, hisparse: bool = False, draft: bool = False):
    """(item_lens, kinds) the side registers, assembled like prefill/decode ``_init_kv_manager``."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed.utils import get_pp_indices

    mc = ModelConfig.from_server_args(sa)
    layers = get_pp_indices(mc.num_hidden_layers, pp_rank, _resolved(sa, "pp_size"))
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import setup_state_kv_args

    pool = _runtime_target_pool(sa, layers=layers, hisparse_host=hisparse)
    ptrs, lens, items = pool.get_contiguous_buf_infos()
    assert len(ptrs) == len(lens) == len(items)
    kinds = ["DRAM" if hisparse else "VRAM"] * len(items)
    draft_pool = _runtime_draft_pool(sa) if draft else None
    if draft:
        _, _, ditems = draft_pool.get_contiguous_buf_infos()
        items = items + ditems
        kinds += ["VRAM"] * len(ditems)
    # State components, by the runtime's own setup_state_kv_args on the device pool.
    kv_args = KVArgs()
    setup_state_kv_args(kv_args, getattr(pool, "device_pool_for_state", pool), draft_pool, mc.num_hidden_layers)
    _registered.states = ([t.value for t in kv_args.state_types], [list(x) for x in kv_args.state_item_lens])
    return items, kinds


def _compare(sa, model, role, flags, **kw):
    items, kinds = _registered(sa, role=role, **kw)
    geo = derive_geometry(_side(model, role, flags), pp_rank=kw.get("pp_rank", 0))
    assert geo.page_size == (_resolved(sa, "page_size") or 1)
    assert geo.n == len(items)
    assert geo.item_lens == items
    assert geo.kinds == kinds
    types, state_items = _registered.states
    assert geo.state_types == types
    assert geo.state_item_lens_by_type == state_items
    return geo, items


# ---------------------------------------------------------------------------------------
# 1. region geometry
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("kv", ["auto", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-8b"])
def test_mha_pool(runtime, model, page_size, tp, kv):
    flags = dict(page_size=page_size, tp_size=tp, kv_cache_dtype=kv)
    sa = runtime(model, "prefill", flags)
    geo, items = _compare(sa, model, "prefill", flags)
    assert geo.pool == "MHA" and len(items) == 2 * geo.stage_layers[-1][1]


@pytest.mark.parametrize(
    "flags",
    [
        dict(tp_size=8, attn_dp_size=4),  # attn_tp 2
        dict(tp_size=8, dp_size=8, enable_dp_attention=True),  # deprecated flag: attn_tp 1
        dict(tp_size=16),  # 8 kv heads < attn_tp 16: one head per rank
        dict(tp_size=32),
    ],
)
def test_mha_attention_tp(runtime, flags):
    from sglang.srt.runtime_context import get_parallel

    flags = dict(flags, page_size=16)
    sa = runtime("llama-3.1-8b", "decode", flags)
    assert _side("llama-3.1-8b", "decode", flags).args.attn_tp_size == get_parallel().attn_tp_size
    _compare(sa, "llama-3.1-8b", "decode", flags)


@pytest.mark.parametrize("pp_rank", [0, 1, 2])
def test_mha_pp_stages(runtime, pp_rank):
    flags = dict(page_size=16, tp_size=2, pp_size=3)
    sa = runtime("qwen3-8b", "prefill", flags)
    geo, items = _compare(sa, "qwen3-8b", "prefill", flags, pp_rank=pp_rank)
    assert len(items) == 2 * 12  # 36 layers / 3 stages


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("kv", ["auto", "bf16", "fp8_e4m3"])
def test_mla_pool(runtime, page_size, tp, kv):
    flags = dict(page_size=page_size, tp_size=tp, kv_cache_dtype=kv)
    sa = runtime("deepseek-v3", "decode", flags)
    geo, items = _compare(sa, "deepseek-v3", "decode", flags)
    assert geo.pool == "MLA" and len(items) == 61


@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("kv", ["fp8_e4m3", "bf16"])
def test_mla_mtp_draft(runtime, role, kv):
    flags = dict(page_size=64, tp_size=8, kv_cache_dtype=kv, speculative_algorithm="EAGLE")
    sa = runtime("deepseek-v3", role, flags)
    geo, items = _compare(sa, "deepseek-v3", role, flags, draft=True)
    assert geo.num_draft_regions == 1 and len(items) == 62


@pytest.mark.parametrize("gpu", [HOPPER, BLACKWELL], ids=["hopper", "blackwell"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
@pytest.mark.parametrize("kv", ["bf16", "fp8_e4m3"])
@pytest.mark.parametrize("page_size", [None, 16, 64])
def test_dsa_pool(runtime, gpu, role, kv, page_size):
    """DSA: pages forced to 64; fp8 row width follows the role's DSA backend. kvcheck
    sees the backend only when given, so the flags name the one the GPU would pick."""
    flags = dict(tp_size=8, kv_cache_dtype=kv, page_size=page_size)
    sa = runtime("deepseek-v3.2", role, flags, gpu=gpu)
    backend = _resolved(sa, f"dsa_{role}_backend")
    flags[f"dsa_{role}_backend"] = backend
    geo, items = _compare(sa, "deepseek-v3.2", role, flags)
    assert geo.pool == "DSA" and len(items) == 61 and geo.page_size == 64


def test_dsa_default_backend_assumption_is_hopper(runtime):
    """Backends unset: kvcheck assumes Hopper (flashmla_kv, 656-byte rows), and notes it."""
    flags = dict(tp_size=8, kv_cache_dtype="fp8_e4m3", page_size=64)
    sa = runtime("deepseek-v3.2", "decode", flags, gpu=HOPPER)
    assert _resolved(sa, "dsa_decode_backend") == "flashmla_kv"
    geo, _ = _compare(sa, "deepseek-v3.2", "decode", flags)
    assert any("assumed Hopper" in n for n in geo.notes)
    sa = runtime("deepseek-v3.2", "decode", flags, gpu=BLACKWELL)
    items, _ = _registered(sa, role="decode")
    assert _resolved(sa, "dsa_decode_backend") == "trtllm"
    assert items[0] == 64 * 576 != geo.item_lens[0]  # what the note warns about


@pytest.mark.parametrize("gpu", [HOPPER, BLACKWELL], ids=["hopper", "blackwell"])
@pytest.mark.parametrize("kv", ["auto", "bf16", "fp8_e4m3"])
def test_dsa_hisparse_decode(runtime, gpu, kv):
    """The decode registers the HiSparse host pool (MLATokenToKVPoolHost): DRAM regions."""
    flags = dict(tp_size=8, page_size=64, kv_cache_dtype=kv, enable_hisparse=True)
    sa = runtime("deepseek-v3.2", "decode", flags, gpu=gpu)
    resolved_kv = _resolved(sa, "kv_cache_dtype")
    if kv == "auto" and resolved_kv != "bfloat16":
        # auto is GPU-dependent (Blackwell -> fp8_e4m3); kvcheck assumes Hopper and notes it.
        flags["kv_cache_dtype"] = resolved_kv
    flags["dsa_decode_backend"] = _resolved(sa, "dsa_decode_backend")
    geo, items = _compare(sa, "deepseek-v3.2", "decode", flags, hisparse=True)
    assert set(geo.kinds) == {"DRAM"} and len(items) == 61


@pytest.mark.parametrize("gpu", [HOPPER, BLACKWELL], ids=["hopper", "blackwell"])
def test_dsa_hisparse_decode_with_mtp(runtime, gpu):
    """HiSparse host regions (DRAM) then the NextN draft's DSA pool (VRAM, plain DSA class)."""
    flags = dict(tp_size=8, page_size=64, kv_cache_dtype="fp8_e4m3", enable_hisparse=True,
                 speculative_algorithm="EAGLE")
    sa = runtime("deepseek-v3.2", "decode", flags, gpu=gpu)
    flags["dsa_decode_backend"] = _resolved(sa, "dsa_decode_backend")
    geo, items = _compare(sa, "deepseek-v3.2", "decode", flags, hisparse=True, draft=True)
    assert geo.kinds == ["DRAM"] * 61 + ["VRAM"]


def test_pinned_page_size_overridden_by_backend(runtime):
    """--attention-backend flashmla replaces --page-size 16 with 64 (_mla_backend_page_constraints)."""
    flags = dict(tp_size=8, page_size=16, attention_backend="flashmla")
    sa = runtime("deepseek-v3", "decode", flags)
    assert _resolved(sa, "page_size") == 64
    _compare(sa, "deepseek-v3", "decode", flags)


# ---------------------------------------------------------------------------------------
# PP stage split: kvcheck's pp_stage_layers vs the runtime's get_pp_indices
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers,pp", [(61, 1), (61, 2), (61, 3), (61, 4), (61, 8), (36, 5), (32, 3), (7, 4)])
def test_pp_split_matches_get_pp_indices(monkeypatch, layers, pp):
    from sglang.srt.distributed.utils import get_pp_indices

    monkeypatch.delenv("SGLANG_PP_LAYER_PARTITION", raising=False)
    assert pp_stage_layers(layers, pp, None) == [get_pp_indices(layers, r, pp) for r in range(pp)]


@pytest.mark.parametrize("partition,pp", [("30,31", 2), ("20,20,21", 3), ("61", 1)])
def test_pp_partition_matches_get_pp_indices(monkeypatch, partition, pp):
    from sglang.srt.distributed.utils import get_pp_indices

    monkeypatch.setenv("SGLANG_PP_LAYER_PARTITION", partition)
    assert pp_stage_layers(61, pp, partition) == [get_pp_indices(61, r, pp) for r in range(pp)]


@pytest.mark.parametrize("partition,pp", [("30,30", 2), ("61", 2), ("a,b", 2), ("20,20,20,1", 3)])
def test_pp_partition_errors_match(monkeypatch, partition, pp):
    from sglang.srt.distributed.utils import get_pp_indices

    from kvcheck.errors import InputError

    monkeypatch.setenv("SGLANG_PP_LAYER_PARTITION", partition)
    with pytest.raises(ValueError) as rt:
        get_pp_indices(61, 0, pp)
    with pytest.raises(InputError) as ours:
        pp_stage_layers(61, pp, partition)
    assert str(rt.value) in str(ours.value)


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("dcp", [1, 2, 4])
def test_kv_heads_per_rank_matches_get_num_kv_heads(tp, dcp):
    from sglang.srt.configs.model_config import ModelConfig

    from kvcheck.sglang.geometry import kv_heads_per_rank

    if dcp > tp:
        pytest.skip("dcp wider than attention TP")
    mc = ModelConfig(str(MODELS / "llama-3.1-8b"))
    assert kv_heads_per_rank(8, tp, dcp) == mc.get_num_kv_heads(tp, dcp)


# ---------------------------------------------------------------------------------------
# 2. model config: SGLang's ModelConfig vs parse_model_config
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_config_agrees(model):
    from sglang.srt.configs.model_config import ModelConfig, is_deepseek_dsa

    rt = ModelConfig(str(MODELS / model))
    ours = parse_model_config(json.loads((MODELS / model / "config.json").read_text()))
    assert (rt.attention_arch.name == "MLA") == ours.is_mla
    assert is_deepseek_dsa(rt.hf_config) == ours.dsa
    assert rt.num_hidden_layers == ours.num_hidden_layers
    assert (rt.num_nextn_predict_layers or 0) == ours.num_nextn_predict_layers
    if ours.is_mla:
        assert rt.kv_lora_rank == ours.kv_lora_rank
        assert rt.qk_rope_head_dim == ours.qk_rope_head_dim
    else:
        assert rt.get_total_num_kv_heads() == ours.num_key_value_heads
        assert rt.head_dim == ours.head_dim
        assert rt.v_head_dim == ours.v_head_dim


@pytest.mark.parametrize("gpu,name", [(HOPPER, "h100"), (BLACKWELL, "b200")], ids=["hopper", "blackwell"])
@pytest.mark.parametrize("kv", ["auto", "bf16", "fp8_e4m3"])
def test_dsa_kv_cache_dtype_str_per_gpu(runtime, gpu, name, kv):
    """_dsa_kv_cache_dtype_default rewrites the flag (auto -> bfloat16 on Hopper, fp8_e4m3
    on Blackwell; bf16 -> bfloat16): the string the peers compare and the row width follow."""
    flags = dict(tp_size=8, kv_cache_dtype=kv, page_size=64)
    sa = runtime("deepseek-v3.2", "decode", flags, gpu=gpu)
    side = _side("deepseek-v3.2", "decode", flags).model_copy(update={"gpu": name, "gpu_source": "--gpu"})
    geo = derive_geometry(side)
    assert geo.kv_cache_dtype_str == _resolved(sa, "kv_cache_dtype")
    items, _ = _registered(sa, role="decode")
    assert geo.item_lens == items
