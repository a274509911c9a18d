"""DeepSeek V4 pools against SGLang 0.5.23's own code on CPU.

Each case writes a small ``config.json`` of DeepSeek-V4-Flash's shape (fewer layers, the
same head dims, sliding window and alternating C4/C128 compress ratios with a trailing 0
for the NextN layer), publishes real server args (``prepare_server_args`` +
``resolve_once``: ``_deepseek_v4_overrides`` pins page 256, the V4 hook resolves the KV
dtype), builds ``DeepSeekV4TokenToKVPool`` as ``KVCacheConfigurator._build_dsv4_kv_pool``
does (target, and the NextN draft pool with compress ratio 0) with ``device="cpu"``, and
compares with ``derive_geometry``:

* KV regions: ``get_contiguous_buf_infos`` item lengths (and, for a HiSparse decode, the
  ``DeepSeekV4PagedHostPool`` the ``HiSparseCoordinator`` builds over the C4 pool, assembled
  as ``DecodePreallocQueue._init_kv_manager`` does: host regions DRAM, then
  ``device[n_c4:]`` VRAM);
* state components: ``setup_state_kv_args`` -> ``state_types`` / ``state_item_lens``;
* ``get_pd_kv_layout`` (the string the decode compares at bootstrap).
"""

from __future__ import annotations

import json

import pytest

sglang = pytest.importorskip("sglang")
torch = pytest.importorskip("torch")

from helpers import BLACKWELL, HOPPER, flags_argv  # noqa: E402
from kvcheck.sglang.args import ServerArgs  # noqa: E402
from kvcheck.sglang.geometry import derive_geometry  # noqa: E402
from kvcheck.sglang.model import parse_model_config  # noqa: E402
from kvcheck.sides import Side  # noqa: E402

pytestmark = pytest.mark.runtime

GPUS = {"h200": HOPPER, "b200": BLACKWELL}

# DeepSeek-V4-Flash's KV shape (head_dim 512 = 448 nope + 64 rope, index_head_dim 128,
# sliding_window 128, ratios 0,0 then 4/128 alternating, a trailing 0 for the NextN layer)
# with 8 layers and tiny MoE/hidden sizes.
V4_SMALL = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 512, "num_hidden_layers": 8,
    "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 128,
    "o_lora_rank": 128, "o_groups": 8, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 512, "sliding_window": 128,
    "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 0], "num_nextn_predict_layers": 1, "moe_intermediate_size": 256,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "num_hash_layers": 1, "hc_mult": 4,
    "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "vocab_size": 1000, "max_position_embeddings": 4096, "rope_theta": 10000,
    "compress_rope_theta": 160000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 4096, "type": "yarn"},
    "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "hidden_act": "silu", "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "routed_scaling_factor": 1.5, "norm_topk_prob": True, "swiglu_limit": 10.0,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("dsv4")
    (root / "config.json").write_text(json.dumps(V4_SMALL))
    return root




@pytest.fixture
def runtime(monkeypatch, model_dir):
    """publish(role, flags, gpu, env) -> the runtime's resolved ServerArgs, published."""
    from sglang.srt.runtime_context import get_context, override_platform, reset_context
    from sglang.srt.server_args import prepare_server_args

    scopes = []

    def publish(role: str, flags: dict, gpu: str = "h200", env: dict | None = None):
        spec = GPUS[gpu]
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: spec["capability"])
        scope = override_platform(**spec["facts"])
        scope.install()
        scopes.append(scope)
        reset_context()
        argv = ["--model-path", str(model_dir), "--device", "cuda", "--disaggregation-mode", role,
                "--disaggregation-transfer-backend", "nixl"]
        sa = prepare_server_args(argv + flags_argv(flags))
        sa.resolve_once()
        get_context().set_server_args(sa)
        return sa

    yield publish
    for scope in reversed(scopes):
        scope.restore()
    reset_context()


def _side(model_dir, role: str, flags: dict, gpu: str = "h200", env: dict | None = None) -> Side:
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="nixl", **flags)
    model = parse_model_config(json.loads((model_dir / "config.json").read_text()))
    return Side(role=role, args=args, raw_args=dict(flags), model=model, origin="dsv4", gpu=gpu, gpu_source="--gpu", env=env or {})


def _pool(sa, *, draft: bool = False):
    """``KVCacheConfigurator._build_dsv4_kv_pool`` for the target (or the NextN draft),
    small sizes, on CPU."""
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool, select_dsv4_kv_layout
    from sglang.srt.mem_cache.kv_cache_configurator import _get_dsv4_compress_state_dtypes
    from sglang.srt.runtime_context import get_memory, max_speculative_num_draft_tokens

    # models/deepseek_v4_nextn.py: COMPRESS_RATIO_NEXTN_LAYER = 0 (the module itself
    # imports the scheduler stack, which needs packages this test env lacks).
    COMPRESS_RATIO_NEXTN_LAYER = 0
    mc = ModelConfig.from_server_args(sa)
    page = resolution_result(sa, "page_size")
    assert resolution_result(sa, "kv_cache_dtype") == "fp8_e4m3"
    c4_dtype, c128_dtype = _get_dsv4_compress_state_dtypes()
    from unittest import mock

    # select_dsv4_kv_layout asks torch whether this is an SM100 CUDA device (only there:
    # sglang's own is_cuda() must stay False on this CPU machine for its imports).
    with mock.patch.object(torch.cuda, "is_available", lambda: True), mock.patch.object(torch.version, "cuda", "12.8"):
        kv_layout, compressed = select_dsv4_kv_layout()
    layers = 1 if draft else mc.num_hidden_layers
    return DeepSeekV4TokenToKVPool(
        max_num_reqs=4, num_req_slots=5, swa_size=4 * page, c4_size=4 * page // 4, c128_size=8, c4_state_pool_size=64,
        c128_state_pool_size=64, page_size=page, swa_page_size=page, sliding_window=mc.window_size, dtype=torch.float8_e4m3fn,
        c4_state_dtype=c4_dtype, c128_state_dtype=c128_dtype, qk_nope_head_dim=mc.qk_nope_head_dim, qk_rope_head_dim=mc.qk_rope_head_dim,
        indexer_head_dim=mc.index_head_dim, layer_num=layers, device="cpu", enable_memory_saver=False,
        compression_ratios=[COMPRESS_RATIO_NEXTN_LAYER] * layers if draft else mc.compress_ratios, start_layer=0, end_layer=layers,
        enable_hisparse=get_memory().enable_hisparse and not draft, online_mtp_max_draft_tokens=max_speculative_num_draft_tokens() or 0,
        kv_source_layers=[], full_size=4 * page, is_draft_worker=draft, kv_layout=kv_layout, compressed_kv_layout=compressed,
    )


def _registered(sa, role: str, *, with_draft: bool = False):
    """(item lens, kinds, state types, state item lens, pd kv layout) as the role's
    ``_init_kv_manager`` + ``setup_state_kv_args`` assemble them."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.disaggregation.base.conn import KVArgs
    from sglang.srt.disaggregation.utils import get_kv_transfer_buf_infos, get_pd_kv_layout, setup_state_kv_args
    from sglang.srt.mem_cache.memory_pool_host import DeepSeekV4PagedHostPool
    from sglang.srt.runtime_context import get_memory

    pool = _pool(sa)
    draft = _pool(sa, draft=True) if with_draft else None
    _, _, items = get_kv_transfer_buf_infos(pool)
    kinds = ["VRAM"] * len(items)
    if role == "decode" and get_memory().enable_hisparse:
        # HiSparseCoordinator.__init__ (DSV4 branch) builds this host pool over the C4 pool;
        # DecodePreallocQueue._init_kv_manager registers it (DRAM), then device[c4_layers:].
        dev = pool.c4_kv_pool
        host = DeepSeekV4PagedHostPool(pool_name="dsv4_hisparse_c4", device_buffers=dev.kv_buffer, item_bytes=dev.bytes_per_page_padded,
                                       num_host_pages=4, slot_page_size=dev.page_size, layout="layer_first",
                                       pin_memory=False)  # no CUDA here: the runtime pins it
        _, _, host_items = host.get_contiguous_buf_infos()
        items = list(host_items) + list(items[host.layer_num:])
        kinds = ["DRAM"] * len(host_items) + ["VRAM"] * (len(items) - len(host_items))
    if draft is not None:
        _, _, draft_items = draft.get_contiguous_buf_infos()
        items = list(items) + list(draft_items)
        kinds += ["VRAM"] * len(draft_items)
    kv_args = KVArgs()
    setup_state_kv_args(kv_args, pool, draft, ModelConfig.from_server_args(sa).num_hidden_layers)
    return list(items), kinds, [t.value for t in kv_args.state_types], [list(x) for x in kv_args.state_item_lens], get_pd_kv_layout(pool)


def _compare(sa, side: Side, *, with_draft: bool = False):
    items, kinds, types, state_items, layout = _registered(sa, side.role, with_draft=with_draft)
    geo = derive_geometry(side)
    assert geo.pool == "DSV4", geo.not_modeled_reason
    assert geo.page_size == 256
    assert geo.item_lens == items
    assert geo.kinds == kinds
    assert geo.state_types == types
    assert geo.state_item_lens_by_type == state_items
    assert geo.kv_layout == layout
    return geo


@pytest.mark.parametrize("gpu", ["h200", "b200"])
@pytest.mark.parametrize("tp", [1, 4, 8])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_dsv4_pool(runtime, model_dir, role, tp, gpu):
    flags = dict(tp_size=tp)
    sa = runtime(role, flags, gpu)
    geo = _compare(sa, _side(model_dir, role, flags, gpu))
    # [C4 KV x3, C4 indexer x3, C128 KV x3]; the V4 layout pads 584 B/token pages to 576 B.
    assert geo.item_lens == [37440] * 3 + [8448] * 3 + [1728] * 3
    assert geo.state_types == ["swa", "c128_state"]


def test_dsv4_page_size_flag_is_overridden(runtime, model_dir):
    flags = dict(tp_size=4, page_size=64)
    sa = runtime("prefill", flags)
    geo = _compare(sa, _side(model_dir, "prefill", flags))
    assert geo.page_size == 256 and "overridden" in " ".join(geo.notes)


@pytest.mark.parametrize("tp", [4, 8])
def test_dsv4_hisparse_decode(runtime, model_dir, tp):
    flags = dict(tp_size=tp, enable_hisparse=True, disable_radix_cache=True)
    sa = runtime("decode", flags)
    geo = _compare(sa, _side(model_dir, "decode", flags))
    assert geo.kinds == ["DRAM"] * 3 + ["VRAM"] * 6


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_dsv4_nextn_draft(runtime, model_dir, role):
    flags = dict(tp_size=4, speculative_algorithm="EAGLE", speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=2)
    sa = runtime(role, flags)
    geo = _compare(sa, _side(model_dir, role, flags), with_draft=True)
    assert geo.state_types == ["swa", "c128_state", "swa"]
    assert geo.num_draft_regions == 0


@pytest.mark.parametrize("env", [
    {"SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bfloat16"},
    {"SGLANG_DSV4_KV_LAYOUT": "auto"},
])
def test_dsv4_env_variants_hopper(runtime, model_dir, env):
    flags = dict(tp_size=4)
    sa = runtime("prefill", flags, "h200", env)
    _compare(sa, _side(model_dir, "prefill", flags, "h200", env))


@pytest.mark.parametrize("env", [
    {"SGLANG_DSV4_KV_LAYOUT": "v41"},
    {"SGLANG_DSV4_KV_LAYOUT": "v41_new"},
    {"SGLANG_DSV4_KV_LAYOUT": "auto"},
    {"SGLANG_DSV4_KV_LAYOUT": "v41", "SGLANG_DSV4_COMPRESSED_KV_LAYOUT": "fp4"},
])
def test_dsv4_v41_layouts_blackwell(runtime, model_dir, env):
    flags = dict(tp_size=4)
    sa = runtime("decode", flags, "b200", env)
    geo = _compare(sa, _side(model_dir, "decode", flags, "b200", env))
    assert geo.kv_layout.startswith("v41")


def test_dsv4_online_c128_state(runtime, model_dir, monkeypatch):
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as dsv4_pool

    env = {"SGLANG_OPT_USE_ONLINE_COMPRESS": "1"}
    # ONLINE_C128 is read once at import (CUDA, not HIP).
    monkeypatch.setattr(dsv4_pool, "ONLINE_C128", True)
    flags = dict(tp_size=4)
    sa = runtime("prefill", flags, "h200", env)
    geo = _compare(sa, _side(model_dir, "prefill", flags, "h200", env))
    assert geo.state_item_lens("c128_state") == [3 * 512 * 4] * 3
