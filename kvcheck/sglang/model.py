"""The model's KV-shaping facts, read from a Hugging Face ``config.json`` the way SGLang 0.5.23 reads it.

Mirrors ``sglang.srt.configs.model_config.ModelConfig`` (attention_arch, head_dim,
get_total_num_kv_heads, is_deepseek_dsa) for the fields the KV pools use.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from pydantic import BaseModel

from kvcheck.errors import InputError

# ModelConfig.__init__ sets AttentionArch.MLA for these architectures (0.5.23).
MLA_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "Glm4MoeLiteForCausalLM",
        "Glm4MoeLiteForCausalLMNextN",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
        "DotsVLMForCausalLM",
        "Dots3NoteForCausalLM",
        "Dots3NoteForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "MistralLarge3ForCausalLMEagle",
        "KimiK25ForConditionalGeneration",
        "Eagle3DeepseekV2ForCausalLM",
        "GigaChat35ForCausalLM",
        "GigaChat35ForCausalLMNextN",
        "MiniCPM3ForCausalLM",
        "DeepseekVL2ForCausalLM",
        "KimiVLForConditionalGeneration",
        "SarvamMLAForCausalLM",
    }
)

# sglang.srt.configs.model_config.is_deepseek_dsa: these architectures with index_topk set.
DSA_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "Glm5NextForConditionalGenerationNextN",
        "Glm5NextForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "Dots3NoteForCausalLM",
        "Dots3NoteForCausalLMNextN",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
    }
)

# Pools kvcheck does not model yet: named so the report can say so instead of guessing.
# The architectures SGLang 0.5.23 registers model_overrides/deepseek_v2._deepseek_family_overrides
# for (arg_groups/model_overrides: it picks the attention backend from the GPU, and calls
# _dsa_dcp_overrides when the model is DSA).
DEEPSEEK_FAMILY_ARCHS = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "Glm5NextForConditionalGeneration",
        "HYV4ForCausalLM",
        "HYV4ForCausalLMNextN",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
        "Dots3NoteForCausalLM",
    }
)

NOT_MODELED_ARCHITECTURES = {
    # The NextN layers alone (as a target model); DeepseekV4ForCausalLM is modeled
    # (kvcheck.sglang.dsv4) and runs its NextN layers as the draft.
    "DeepseekV4ForCausalLMNextN": "DeepSeek V4 NextN layers served as a target model",
    "DeepseekV4ForCausalLMDSpark": "DeepSeek V4 DSpark draft served as a target model",
    # Not an architecture SGLang 0.5.23 registers (its MiniMax M3 classes are *Sparse*).
    "MiniMaxM3ForCausalLM": "MiniMax M3 checkpoint under an architecture name SGLang 0.5.23 does not register "
    "(MiniMaxM3Sparse*)",
    # Linear-attention / Mamba hybrids SGLang 0.5.23 does not serve: no class under
    # sglang/srt/models and no hybrid pool config (configs/hybrid_arch.mambaish_config);
    # model_loader.utils.resolve_transformers_arch decides at model load, with the
    # transformers release 0.5.23 pins (5.19.0). tests/test_model_unserved.py holds these.
    "MiniMaxText01ForCausalLM": (
        "MiniMax-Text-01 lightning-attention hybrid that SGLang 0.5.23 does not serve (no native class, no "
        "linear-attention "
        "pool config; the Transformers fallback finds no such class and, with an auto_map naming only "
        "AutoModelForCausalLM, "
        "the model load refuses it: 'Cannot find model module. ...')"
    ),
    "MiniMaxM1ForCausalLM": (
        "MiniMax-M1 lightning-attention hybrid that SGLang 0.5.23 does not serve (no native class, no "
        "linear-attention pool "
        "config; the Transformers fallback finds no such class and the model load refuses it)"
    ),
    "MiniMaxForCausalLM": (
        "MiniMax lightning-attention hybrid with no native SGLang 0.5.23 class: it would run on the Transformers "
        "backend, "
        "whose pool for the linear-attention layers is not modeled"
    ),
    "JambaForCausalLM": (
        "Jamba Mamba hybrid that SGLang 0.5.23 does not serve (no native class, no Mamba pool config; the Transformers "
        "fallback refuses it at model load: transformers 5.19 marks JambaForCausalLM incompatible, 'JambaForCausalLM "
        "has no "
        "SGlang implementation and the Transformers implementation is not compatible with SGLang.')"
    ),
}

# Architectures whose KV pool in SGLang 0.5.23 is the plain MHA token pool (K and V per
# layer): kvcheck's MHA geometry is verified for these. Another architecture that is
# neither MLA nor listed as not modeled is assumed to use it, and the report says so.
KNOWN_MHA_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Phi3ForCausalLM",
        "GemmaForCausalLM",
        "Glm4ForCausalLM",
        "Glm4MoeForCausalLM",
        "InternLM2ForCausalLM",
        "OlmoForCausalLM",
        "Olmo2ForCausalLM",
        "OlmoeForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "StarCoder2ForCausalLM",
        "CohereForCausalLM",
        "DeepseekForCausalLM",
        "ExaoneForCausalLM",
        "Ernie4_5_ForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "LlavaForConditionalGeneration",
        "MllamaForConditionalGeneration",
        "LlamaForCausalLMEagle",
        "LlamaForCausalLMEagle3",
        "Qwen3ForCausalLMEagle3",
        "SeedOssForCausalLM",
        # Gemma 2/3: sliding layers, but model_overrides/gemma2_gemma3.py sets
        # disable_hybrid_swa_memory, so every layer lives in the plain MHA pool.
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        # MiniMax M2: full GQA attention in the plain MHA pool (no is_minimax_sparse).
        "MiniMaxM2ForCausalLM",
    }
)


# ``configs/model_config.py`` SWA_SINK_ARCHS / MIMO_V2_MODEL_ARCHS and is_hybrid_swa_model
# (0.5.23): architectures whose KV lives in ``SWAKVPool`` (full-attention layers' pool
# + sliding-window layers' pool), and how get_hybrid_layer_ids splits their layers.
SWA_LAYER_TYPES_ARCHS = frozenset({"GptOssForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM"})
SWA_EVERY_FOURTH_FULL_ARCHS = frozenset({"Llama4ForConditionalGeneration"})
SWA_PATTERN_ARCHS = frozenset({"MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})  # hybrid_layer_pattern, swa_* dims
SWA_STEP_ARCHS = frozenset({"Step3p5ForCausalLM"})
ATTENTION_SINK_ARCHS = SWA_LAYER_TYPES_ARCHS | SWA_PATTERN_ARCHS | SWA_STEP_ARCHS

# Mamba / linear-attention hybrids with a ``mamba2_cache_params`` of the Mamba2 shape
# (configs/qwen3_next.py, qwen3_5.py, nemotron_h.py, falcon_h1.py): KV of the
# full-attention layers in ``HybridLinearKVPool``, conv/temporal states in ``MambaPool``.
LINEAR_INTERVAL_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
    }
)
NEMOTRON_H_ARCHS = frozenset({"NemotronHForCausalLM"})
FALCON_H1_ARCHS = frozenset({"FalconH1ForCausalLM"})
# MiniMax M3 sparse (configs/model_config.py is_minimax_sparse): MiniMaxSparseKVPool.
MINIMAX_SPARSE_ARCHS = frozenset({"MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"})
# Kimi Linear (configs/kimi_linear.py): MLA full-attention layers + KDA state.
KDA_ARCHS = frozenset({"KimiLinearForCausalLM"})

# Model dtypes SGLang accepts for ``torch_dtype`` (``_get_and_verify_dtype``).
MODEL_DTYPES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
}
# Every torch dtype name a config may carry (kvcheck.sources.limits.MODEL_DTYPES).
MODEL_DTYPES_ACCEPTED = frozenset(MODEL_DTYPES) | {
    "float64",
    "double",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "int8",
    "uint8",
    "auto",
}
# Mamba SSM state dtypes (``mamba2_state_dtype``): unknown values fall back to float32.
MAMBA_STATE_DTYPES = ("float32", "bfloat16", "float16")


class ModelConfig(BaseModel):
    """KV-shaping fields of one model.

    ``attention`` is ``"MHA"`` (MHA/GQA K and V rows), ``"MLA"`` or ``"not_modeled"``;
    ``dsa`` is SGLang's ``is_deepseek_dsa`` (the DSA/NSA pool). ``hybrid`` names a hybrid
    pool around the attention rows: ``"swa"`` (``SWAKVPool``: ``full_layer_ids`` in the
    full pool, ``swa_layer_ids`` in the sliding-window pool) or ``"linear"``
    (``HybridLinearKVPool``: KV for ``full_layer_ids``, Mamba2 conv/temporal state for
    ``mamba_layer_ids``). Head dimensions are counts of elements; ``torch_dtype`` is the
    model dtype string; layer ids are global model layer numbers.
    """

    architecture: str
    num_hidden_layers: int
    attention: Literal["MHA", "MLA", "not_modeled"]
    not_modeled_reason: str | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    dsa: bool = False
    index_head_dim: int | None = None
    index_kpool: int = 1
    num_nextn_predict_layers: int = 0
    torch_dtype: str = "bfloat16"
    kv_cache_quant_algo: str | None = None
    assumed_mha: bool = False
    source: str = ""
    # hybrid pools
    hybrid: Literal["swa", "linear", "minimax_sparse"] | None = None
    attention_sinks: bool = False
    full_layer_ids: list[int] = []
    swa_layer_ids: list[int] = []
    sliding_window: int | None = None
    swa_compress: bool = False
    swa_num_key_value_heads: int | None = None
    swa_head_dim: int | None = None
    swa_v_head_dim: int | None = None
    mamba_layer_ids: list[int] = []
    mamba_intermediate_size: int | None = None
    mamba_n_groups: int | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int | None = None
    mamba_state_size: int | None = None
    mamba_conv_kernel: int | None = None
    mamba_ssm_dtype: str = "float32"
    mamba_kind: Literal["mamba2", "kda"] = "mamba2"
    # MiniMax sparse: dense layers, sparse layers, sparse layers without an index value
    # (K-only index), the index head dim, and the checkpoint's quantization method.
    dense_layer_ids: list[int] = []
    sparse_layer_ids: list[int] = []
    k_only_sparse_layer_ids: list[int] = []
    sparse_index_dim: int | None = None
    quant_method: str | None = None
    # DSA layers that reuse the previous layer's top-k (``dsa_layer_skips_topk``): their
    # index-K buffer has 0 rows when SGLang elides it.
    dsa_skip_topk_layers: list[int] = []
    # DeepSeek V4 (``DeepseekV4ForCausalLM``, model_type deepseek_v4): its compressed
    # C4/C128 pools and SWA pool (``DeepSeekV4TokenToKVPool``), one compress ratio per
    # layer (``compress_ratios``; entries past ``num_hidden_layers`` are the NextN layers').
    dsv4: bool = False
    compress_ratios: list[int] = []

    @property
    def is_mla(self) -> bool:
        return self.attention == "MLA"

    @property
    def has_asymmetric_kv(self) -> bool:
        """``ModelConfig.has_asymmetric_kv``: K and V rows differ in width."""
        v = self.v_head_dim or self.head_dim
        sv = self.swa_v_head_dim or self.swa_head_dim
        return (self.head_dim != v) or (self.swa_head_dim or self.head_dim) != (sv or v)


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """SGLang reads text models through ``hf_text_config`` (``text_config`` when present)."""
    text = raw.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        merged = dict(text)
        merged["architectures"] = raw.get("architectures") or text.get("architectures")
        merged.setdefault("torch_dtype", raw.get("torch_dtype") or raw.get("dtype"))
        merged.setdefault("quantization_config", raw.get("quantization_config"))
        return merged
    return raw


# Largest value kvcheck takes for a count or dimension in config.json: past it the file
# is corrupt, not a model (and sizes derived from it would overflow).
MAX_MODEL_DIM = 1 << 20
# Plausible ranges per field (inclusive): a value outside is a broken config.json, and
# kvcheck says so (exit 2) instead of deriving sizes from it.
FIELD_RANGES: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 4096),
    "num_attention_heads": (1, 16384),
    "num_key_value_heads": (1, 16384),
    "swa_num_key_value_heads": (1, 16384),
    "head_dim": (1, 65536),
    "v_head_dim": (1, 65536),
    "swa_head_dim": (1, 65536),
    "swa_v_head_dim": (1, 65536),
    "hidden_size": (1, MAX_MODEL_DIM),
    "kv_lora_rank": (1, 65536),
    "qk_rope_head_dim": (1, 65536),
    "index_head_dim": (1, 65536),
    "index_kpool": (1, 1024),
    "num_nextn_predict_layers": (0, 64),
    "mtp_num_hidden_layers": (0, 64),
    "sliding_window": (1, 1 << 31),
    "attention_chunk_size": (1, 1 << 31),
    "full_attention_interval": (1, 4096),
    "linear_num_key_heads": (1, 16384),
    "linear_num_value_heads": (1, 16384),
    "linear_key_head_dim": (1, 65536),
    "linear_value_head_dim": (1, 65536),
    "linear_conv_kernel_dim": (2, 1024),
    "mamba_num_heads": (1, 16384),
    "mamba_head_dim": (1, 65536),
    "n_groups": (1, 16384),
    "ssm_state_size": (1, 65536),
    "conv_kernel": (2, 1024),
    "mamba_d_ssm": (1, MAX_MODEL_DIM),
    "mamba_n_heads": (1, 16384),
    "mamba_d_head": (1, 65536),
    "mamba_n_groups": (1, 16384),
    "mamba_d_state": (1, 65536),
    "mamba_d_conv": (2, 1024),
    "mamba_expand": (1, 64),
    "num_heads": (1, 16384),
    "short_conv_kernel_size": (2, 1024),
    "sparse_index_dim": (1, 65536),
}


def _range(key: str, minimum: int | None = None) -> tuple[int, int]:
    lo, hi = FIELD_RANGES.get(key, (1, MAX_MODEL_DIM))
    return (lo if minimum is None else minimum), hi


def _require_int(cfg: dict[str, Any], key: str, source: str, *, minimum: int | None = None) -> int:
    """``cfg[key]`` as an int inside its plausible range; ``InputError`` naming the field."""
    lo, hi = _range(key, minimum)
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(
            f"config.json needs an integer {key!r} between {lo} and {hi} to derive the KV geometry (got {value!r})",
            source=source,
            field=key,
        )
    return value


@overload
def _optional_int(cfg: dict[str, Any], key: str, source: str, default: int, *, zero_is_unset: bool = False) -> int: ...
@overload
def _optional_int(
    cfg: dict[str, Any], key: str, source: str, default: None = None, *, zero_is_unset: bool = False
) -> int | None: ...
def _optional_int(
    cfg: dict[str, Any], key: str, source: str, default: int | None = None, *, zero_is_unset: bool = False
) -> int | None:
    """``cfg[key]`` when present (range-checked), else ``default``; ``None``/absent -> default."""
    value = cfg.get(key)
    if value is None or (zero_is_unset and value == 0):
        return default
    return _require_int(cfg, key, source)


def apply_model_override_args(raw: Any, overrides: Any, source: str = "--json-model-override-args") -> Any:
    """Apply ``--json-model-override-args`` to a parsed ``config.json`` the way SGLang
    0.5.23's ``get_config`` does (``utils/hf_transformers/config.py``): each key is set on
    the top-level config, except a dict value for a key holding a sub-config (e.g.
    ``text_config``), which is merged into it. ``overrides`` is the JSON text or a dict.

    Raises ``InputError`` (exit 2) when the text is not a JSON object.
    """
    if overrides is None or overrides == "" or overrides == {}:
        return raw
    if isinstance(overrides, str):
        import json

        try:
            overrides = json.loads(overrides)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", source=source, field="--json-model-override-args") from None
    if not isinstance(overrides, dict):
        raise InputError("must be a JSON object", source=source, field="--json-model-override-args")
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    for key, value in overrides.items():
        current = out.get(key)
        if (
            isinstance(value, dict)
            and isinstance(current, dict)
            and key.endswith("_config")
            and key != "quantization_config"
        ):
            out[key] = {**current, **value}
        else:
            out[key] = value
    return out


def _dtype(cfg: dict[str, Any], source: str) -> str:
    """The model dtype SGLang runs under ``--dtype auto`` (``_get_and_verify_dtype``,
    configs/model_config.py 0.5.23): the config's ``dtype``/``torch_dtype``; a float32
    or missing one is downcast to float16 (bfloat16 for Gemma model types).
    Raises ``InputError`` naming ``torch_dtype`` for a name that is not a torch dtype."""
    value = cfg.get("dtype") or cfg.get("torch_dtype")
    if value is None:
        name = "float32"
    elif not isinstance(value, str) or value.removeprefix("torch.") not in MODEL_DTYPES_ACCEPTED:
        raise InputError(
            f"config.json 'torch_dtype' must be one of {', '.join(sorted(MODEL_DTYPES_ACCEPTED))} (got {value!r})",
            source=source,
            field="torch_dtype",
        )
    else:
        name = MODEL_DTYPES.get(value.removeprefix("torch."), value.removeprefix("torch."))
    if name in ("float32", "float64", "auto"):
        return "bfloat16" if str(cfg.get("model_type") or "").startswith("gemma") else "float16"
    return name


def _layer_types(cfg: dict[str, Any], key: str, layers: int, source: str) -> list[str]:
    types = cfg.get(key)
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise InputError(
            f"config.json needs a list of strings {key!r} for this hybrid model (got {types!r})",
            source=source,
            field=key,
        )
    if len(types) < layers:
        raise InputError(
            f"config.json {key!r} lists {len(types)} layers but num_hidden_layers is {layers}", source=source, field=key
        )
    return types


def _swa_split(arch: str, cfg: dict[str, Any], layers: int, source: str) -> tuple[list[int], list[int]]:
    """(swa_layer_ids, full_layer_ids) as ``get_hybrid_layer_ids`` (0.5.23) splits them."""
    if arch in SWA_EVERY_FOURTH_FULL_ARCHS:
        return [i for i in range(layers) if (i + 1) % 4 != 0], [i for i in range(layers) if (i + 1) % 4 == 0]
    if arch in SWA_PATTERN_ARCHS or (
        arch not in SWA_LAYER_TYPES_ARCHS | SWA_STEP_ARCHS and cfg.get("hybrid_layer_pattern") is not None
    ):
        pattern = cfg.get("hybrid_layer_pattern")
        if not isinstance(pattern, list) or len(pattern) < layers or any(p not in (0, 1) for p in pattern[:layers]):
            raise InputError(
                f"config.json needs 'hybrid_layer_pattern': a 0/1 list of at least {layers} entries (got {pattern!r})",
                source=source,
                field="hybrid_layer_pattern",
            )
        return [i for i in range(layers) if pattern[i] == 1], [i for i in range(layers) if pattern[i] == 0]
    types = _layer_types(cfg, "layer_types", layers, source)
    if arch in SWA_STEP_ARCHS:
        types = types[:layers]
    unknown = sorted({t for t in types if t not in ("sliding_attention", "full_attention")})
    if unknown:
        raise InputError(
            f"config.json 'layer_types' holds {unknown}, neither sliding_attention nor full_attention",
            source=source,
            field="layer_types",
        )
    return [i for i, t in enumerate(types) if t == "sliding_attention"], [
        i for i, t in enumerate(types) if t == "full_attention"
    ]


def _linear_fields(arch: str, cfg: dict[str, Any], layers: int, source: str) -> dict[str, Any]:
    """Layer split and Mamba2 state parameters of a linear-attention hybrid, as the
    model's SGLang config class computes ``mamba2_cache_params`` (0.5.23):
    Qwen3-Next / Qwen3.5 (GDN: intermediate = linear_value_head_dim *
    linear_num_value_heads, groups = linear_num_key_heads, state = linear_key_head_dim),
    Nemotron-H (mamba_num_heads * mamba_head_dim, n_groups, ssm_state_size) and
    Falcon-H1 (mamba_d_ssm, mamba_n_groups, mamba_d_state; attention on every layer)."""
    ssm = cfg.get("mamba_ssm_dtype")
    ssm_dtype = ssm if ssm in MAMBA_STATE_DTYPES else "float32"
    if arch in LINEAR_INTERVAL_ARCHS:
        interval = _optional_int(cfg, "full_attention_interval", source, 4)
        full = [i for i in range(layers) if (i + 1) % interval == 0]
        mamba = [i for i in range(layers) if (i + 1) % interval != 0]
        vh = _require_int(cfg, "linear_num_value_heads", source)
        vd = _require_int(cfg, "linear_value_head_dim", source)
        params: dict[str, Any] = dict(
            mamba_intermediate_size=vh * vd,
            mamba_n_groups=_require_int(cfg, "linear_num_key_heads", source),
            mamba_num_heads=vh,
            mamba_head_dim=vd,
            mamba_state_size=_require_int(cfg, "linear_key_head_dim", source),
            mamba_conv_kernel=_require_int(cfg, "linear_conv_kernel_dim", source),
        )
    elif arch in NEMOTRON_H_ARCHS:
        pattern = cfg.get("hybrid_override_pattern")
        block_types = cfg.get("layers_block_type")
        if isinstance(block_types, list) and all(isinstance(t, str) for t in block_types):
            pattern = "".join({"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}.get(t, "?") for t in block_types)
        if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E"):
            raise InputError(
                f"config.json needs 'hybrid_override_pattern' of M/*/-/E characters (got {pattern!r})",
                source=source,
                field="hybrid_override_pattern",
            )
        layers = len(pattern)  # NemotronHConfig.num_hidden_layers = len(layers_block_type)
        full = [i for i, c in enumerate(pattern) if c == "*"]
        mamba = [i for i, c in enumerate(pattern) if c == "M"]
        nh = _require_int(cfg, "mamba_num_heads", source)
        hd = _require_int(cfg, "mamba_head_dim", source)
        params = dict(
            mamba_intermediate_size=nh * hd,
            mamba_n_groups=_require_int(cfg, "n_groups", source),
            mamba_num_heads=nh,
            mamba_head_dim=hd,
            mamba_state_size=_require_int(cfg, "ssm_state_size", source),
            mamba_conv_kernel=_require_int(cfg, "conv_kernel", source),
        )
    elif arch in KDA_ARCHS:
        lac = cfg.get("linear_attn_config")
        if not isinstance(lac, dict) or not isinstance(lac.get("kda_layers"), list):
            raise InputError(
                "config.json needs 'linear_attn_config' with a 'kda_layers' list for Kimi Linear",
                source=source,
                field="linear_attn_config",
            )
        kda = set(lac["kda_layers"])
        full = [i for i in range(layers) if (i + 1) not in kda]
        mamba = [i for i in range(layers) if (i + 1) in kda]
        nh = _require_int(lac, "num_heads", source)
        hd = _require_int(lac, "head_dim", source)
        # KimiLinearCacheParams reads no config dtype: mamba2_state_dtype(None).
        ssm_dtype = "float32"
        params = dict(
            mamba_kind="kda",
            mamba_intermediate_size=nh * hd,
            mamba_n_groups=nh,
            mamba_num_heads=nh,
            mamba_head_dim=hd,
            mamba_state_size=hd,
            mamba_conv_kernel=_require_int(lac, "short_conv_kernel_size", source),
        )
    else:  # Falcon-H1: FalconH1Config defaults (configs/falcon_h1.py, 0.5.23)
        full = list(range(layers))
        mamba = list(range(layers))
        if "mamba_d_ssm" in cfg and cfg.get("mamba_d_ssm") is None:
            d_ssm = (_optional_int(cfg, "mamba_expand", source, 2) or 2) * _require_int(cfg, "hidden_size", source)
        else:
            d_ssm = _optional_int(cfg, "mamba_d_ssm", source, 1024)
        n_heads = _optional_int(cfg, "mamba_n_heads", source, 128)
        d_head = cfg.get("mamba_d_head", "auto")
        d_head = d_ssm // n_heads if d_head in ("auto", None) else _require_int(cfg, "mamba_d_head", source)
        if d_head * n_heads != d_ssm:
            raise InputError(
                f"mamba_d_head x mamba_n_heads ({d_head} x {n_heads}) must equal the Mamba intermediate size {d_ssm}",
                source=source,
                field="mamba_n_heads",
            )
        params = dict(
            mamba_intermediate_size=d_ssm,
            mamba_n_groups=_optional_int(cfg, "mamba_n_groups", source, 1),
            mamba_num_heads=n_heads,
            mamba_head_dim=d_head,
            mamba_state_size=_optional_int(cfg, "mamba_d_state", source, 256),
            mamba_conv_kernel=_optional_int(cfg, "mamba_d_conv", source, 4),
        )
    return dict(
        hybrid="linear",
        num_hidden_layers=layers,
        full_layer_ids=full,
        mamba_layer_ids=mamba,
        mamba_ssm_dtype=ssm_dtype,
        **params,
    )


def _kv_cache_quant_algo(quant: dict[str, Any]) -> str | None:
    """The checkpoint's KV quant algorithm: ``kv_cache_quant_algo``, or for ModelOpt /
    MXFP8 checkpoints a ``kv_cache_scheme`` of 8-bit floats -> "FP8"
    (``ModelOptFp4Config.from_config``, ``_parse_modelopt_quant_config``, 0.5.23)."""
    algo = quant.get("kv_cache_quant_algo")
    if algo is not None:
        return str(algo)
    method = str(quant.get("quant_method") or "")
    scheme = quant.get("kv_cache_scheme")
    if (method.startswith("modelopt") or method == "mxfp8") and isinstance(scheme, dict):
        if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
            return "FP8"
    return None


def _dsa_skip_topk_layers(cfg: dict[str, Any], layers: int, source: str) -> list[int]:
    """Layers for which ``dsa_layer_skips_topk`` (configs/model_config.py, 0.5.23) is True:
    ``indexer_types`` "shared", else every layer not a multiple of ``cli_factor``, else
    ``index_topk_pattern`` "S", else ``index_topk_freq`` (with ``index_skip_topk_offset``)."""
    types = cfg.get("indexer_types")
    if isinstance(types, list):
        return [i for i in range(layers) if i < len(types) and types[i] == "shared"]
    cli = cfg.get("cli_factor") or 1
    if isinstance(cli, int) and cli > 1:
        return [i for i in range(layers) if i % cli != 0]
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, (list, str)):
        return [i for i in range(layers) if i < len(pattern) and pattern[i] == "S"]
    freq = cfg.get("index_topk_freq") or 1
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise InputError(
            f"config.json 'index_topk_freq' must be a positive integer (got {freq!r})",
            source=source,
            field="index_topk_freq",
        )
    offset = cfg.get("index_skip_topk_offset")
    if offset is not None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
            raise InputError(
                f"config.json 'index_skip_topk_offset' must be a positive integer (got {offset!r})",
                source=source,
                field="index_skip_topk_offset",
            )
        return [i for i in range(layers) if max(i - offset + 1, 0) % freq != 0]
    return [i for i in range(layers) if max(i - 1, 0) % freq != 0]


def parse_model_config(raw: Any, source: str = "config.json", *, override_args: Any = None) -> ModelConfig:
    """Interpret a parsed ``config.json`` object (after ``--json-model-override-args``,
    given as ``override_args``, is applied the way ``get_config`` applies it).

    Raises ``InputError`` (exit 2) naming the file and field when a field the geometry
    needs is missing, of the wrong type, or outside its plausible range
    (``FIELD_RANGES``; ``torch_dtype`` must be a dtype SGLang knows).
    """
    if not isinstance(raw, dict):
        raise InputError("config.json must hold a JSON object", source=source)
    raw = apply_model_override_args(raw, override_args)
    cfg = _text_config(raw)
    # Plausible ranges per field and a known dtype name (kvcheck.sources.limits).
    from kvcheck.sources.limits import check_model_config

    check_model_config(cfg, source)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise InputError("config.json needs a non-empty 'architectures' list", source=source, field="architectures")
    arch = archs[0]
    layers = (
        _require_int(cfg, "num_hidden_layers", source)
        if arch not in NEMOTRON_H_ARCHS or "num_hidden_layers" in cfg
        else 1
    )
    dtype = _dtype(cfg, source)
    q = cfg.get("quantization_config")
    quant: dict[str, Any] = q if isinstance(q, dict) else {}
    nextn = _optional_int(cfg, "num_nextn_predict_layers", source, 0) or 0
    if not nextn and arch in LINEAR_INTERVAL_ARCHS:
        nextn = _optional_int(cfg, "mtp_num_hidden_layers", source, 0) or 0
    common: dict[str, Any] = dict(
        architecture=arch,
        num_hidden_layers=layers,
        num_nextn_predict_layers=nextn,
        torch_dtype=dtype,
        kv_cache_quant_algo=_kv_cache_quant_algo(quant),
        source=source,
    )
    hybrid: dict[str, Any] = {}
    if arch in SWA_LAYER_TYPES_ARCHS | SWA_EVERY_FOURTH_FULL_ARCHS | SWA_PATTERN_ARCHS | SWA_STEP_ARCHS or (
        cfg.get("is_hybrid_swa") is True and cfg.get("hybrid_layer_pattern") is not None
    ):
        swa, full = _swa_split(arch, cfg, layers, source)
        window = _optional_int(cfg, "sliding_window", source, None) or _optional_int(
            cfg, "attention_chunk_size", source, None
        )
        hybrid = dict(
            hybrid="swa",
            swa_layer_ids=swa,
            full_layer_ids=full,
            sliding_window=window,
            attention_sinks=arch in ATTENTION_SINK_ARCHS,
        )
        if arch in SWA_PATTERN_ARCHS:
            hybrid.update(
                swa_compress=True,
                swa_num_key_value_heads=_require_int(cfg, "swa_num_key_value_heads", source),
                swa_head_dim=_optional_int(cfg, "swa_head_dim", source, None),
                swa_v_head_dim=_optional_int(cfg, "swa_v_head_dim", source, None),
            )
    elif arch in MINIMAX_SPARSE_ARCHS:
        sc = cfg.get("sparse_attention_config")
        if not isinstance(sc, dict) or not isinstance(sc.get("sparse_attention_freq"), list):
            raise InputError(
                "config.json needs 'sparse_attention_config' with a 'sparse_attention_freq' list",
                source=source,
                field="sparse_attention_config",
            )
        freq = sc["sparse_attention_freq"]
        disable = sc.get("sparse_disable_index_value") or []
        if not isinstance(disable, list):
            raise InputError(
                "'sparse_disable_index_value' must be a list", source=source, field="sparse_attention_config"
            )
        sparse = [i for i, f in enumerate(freq) if f != 0]
        hybrid = dict(
            hybrid="minimax_sparse",
            dense_layer_ids=[i for i, f in enumerate(freq) if f == 0],
            sparse_layer_ids=sparse,
            k_only_sparse_layer_ids=[i for i in sparse if i < len(disable) and disable[i] != 0],
            sparse_index_dim=_require_int(sc, "sparse_index_dim", source),
            quant_method=quant.get("quant_method"),
        )
    elif arch in LINEAR_INTERVAL_ARCHS | NEMOTRON_H_ARCHS | FALCON_H1_ARCHS | KDA_ARCHS:
        hybrid = _linear_fields(arch, cfg, layers, source)
        common["num_hidden_layers"] = hybrid.pop("num_hidden_layers")
    # layer_types decide the pool in 0.5.23 only for the hybrid-SWA allowlist, is_hybrid_swa
    # and linear attention (is_hybrid_swa_model / is_linear_attention_model,
    # configs/model_config.py); a DSA model's "deepseek_sparse_attention" layers (e.g. the
    # NVFP4 GLM-5.x exports) are its ordinary MLA layers.
    plain_layer_kinds = ("full_attention", "attention") + (
        ("deepseek_sparse_attention",) if arch in DSA_ARCHITECTURES else ()
    )
    if (
        arch in NOT_MODELED_ARCHITECTURES
        or not hybrid
        and cfg.get("layer_types")
        and arch not in KNOWN_MHA_ARCHITECTURES
        and any(t not in plain_layer_kinds for t in cfg.get("layer_types") or [])
    ):
        return ModelConfig(
            attention="not_modeled",
            not_modeled_reason=NOT_MODELED_ARCHITECTURES.get(arch, "hybrid attention layers (layer_types)"),
            **common,
        )
    if arch == "DeepseekV4ForCausalLM":
        return _deepseek_v4_config(cfg, common, source)
    if arch in KDA_ARCHS:
        # ModelConfig: KimiLinear runs MLA attention (kv_lora_rank + qk_rope_head_dim rows).
        return ModelConfig(
            attention="MLA",
            kv_lora_rank=_require_int(cfg, "kv_lora_rank", source),
            qk_rope_head_dim=_require_int(cfg, "qk_rope_head_dim", source),
            num_attention_heads=_optional_int(cfg, "num_attention_heads", source, None),
            **common,
            **hybrid,
        )
    if arch in MLA_ARCHITECTURES or (
        arch in ("PixtralForConditionalGeneration", "BailingMoeV2_5ForCausalLM") and cfg.get("kv_lora_rank") is not None
    ):
        dsa = arch in DSA_ARCHITECTURES and cfg.get("index_topk") is not None
        if dsa and (_optional_int(cfg, "index_kpool", source, 1) or 1) > 1 and cfg.get("index_kpool_compress"):
            return ModelConfig(
                attention="not_modeled",
                not_modeled_reason=(
                    "DSA pool with compressed index key pooling (index_kpool_compress): its dsa_tail state component "
                    "(per-request K/score rings of index_kpool + speculative draft-token slots) moves live ring "
                    "segments per request (build_dsa_tail_transfer_blocks), which kvcheck does not restate"
                ),
                **common,
            )
        return ModelConfig(
            attention="MLA",
            dsa_skip_topk_layers=_dsa_skip_topk_layers(cfg, layers, source) if dsa else [],
            kv_lora_rank=_require_int(cfg, "kv_lora_rank", source),
            qk_rope_head_dim=_require_int(cfg, "qk_rope_head_dim", source),
            dsa=dsa,
            index_head_dim=_require_int(cfg, "index_head_dim", source)
            if dsa
            else _optional_int(cfg, "index_head_dim", source, None),
            index_kpool=_optional_int(cfg, "index_kpool", source, 1) or 1,
            num_attention_heads=_optional_int(cfg, "num_attention_heads", source, None),
            **common,
        )
    heads = _require_int(cfg, "num_attention_heads", source)
    kv_heads = _optional_int(cfg, "num_key_value_heads", source, heads)
    head_dim = _optional_int(cfg, "head_dim", source, None)
    if head_dim is None:
        head_dim = _require_int(cfg, "hidden_size", source) // heads
        if head_dim < 1:
            raise InputError("'hidden_size' is smaller than 'num_attention_heads'", source=source, field="hidden_size")
    v_head_dim = _optional_int(cfg, "v_head_dim", source, None, zero_is_unset=True) or head_dim
    if hybrid.get("swa_compress"):
        hybrid["swa_head_dim"] = hybrid.get("swa_head_dim") or head_dim
        hybrid["swa_v_head_dim"] = hybrid.get("swa_v_head_dim") or hybrid["swa_head_dim"]
    return ModelConfig(
        attention="MHA",
        assumed_mha=not hybrid and arch not in KNOWN_MHA_ARCHITECTURES,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        **common,
        **hybrid,
    )


# Compress ratios ``collect_sources_by_ratio`` accepts (deepseek_v4_memory_pool.py, 0.5.23).
DSV4_COMPRESS_RATIOS = (0, 1, 2, 4, 128)


def _deepseek_v4_config(cfg: dict[str, Any], common: dict[str, Any], source: str) -> ModelConfig:
    """DeepSeek V4 as SGLang 0.5.23's ``ModelConfig`` reads it: ``qk_nope_head_dim =
    head_dim - qk_rope_head_dim``, ``window_size = sliding_window``, ``index_head_dim``,
    ``compress_ratios`` (one per layer, 0 = SWA only, 4 = C4 + indexer, 128 = C128).
    The pool is an MLA-like one for PD (``is_mla_backend`` is True for
    ``DeepSeekV4TokenToKVPool``). DeepSeek-V4.1 (model_type ``deepseek_v41``: ratio-1/2
    layers with kv_source pools, DSpark, request windows) stays not modeled.
    Raises ``InputError`` naming the field when one is missing or malformed."""
    if cfg.get("model_type") == "deepseek_v41" or cfg.get("kv_source_layer_ids"):
        return ModelConfig(
            attention="not_modeled",
            not_modeled_reason="DeepSeek-V4.1 pool (ratio-1/2 kv_source layers, DSpark draft rings)",
            **common,
        )
    ratios = cfg.get("compress_ratios")
    layers = common["num_hidden_layers"]
    if not isinstance(ratios, list) or any(isinstance(r, bool) or not isinstance(r, int) for r in ratios):
        raise InputError(
            "config.json 'compress_ratios' must be a list of integers (one per layer)",
            source=source,
            field="compress_ratios",
        )
    if len(ratios) < layers:
        raise InputError(
            f"config.json 'compress_ratios' has {len(ratios)} entries, fewer than num_hidden_layers={layers}",
            source=source,
            field="compress_ratios",
        )
    bad = [r for r in ratios[:layers] if r not in DSV4_COMPRESS_RATIOS]
    if bad:
        raise InputError(f"Unsupported compression ratio: {bad[0]}", source=source, field="compress_ratios")
    if any(r in (1, 2) for r in ratios[:layers]):
        return ModelConfig(
            attention="not_modeled",
            not_modeled_reason="DeepSeek V4 with ratio-1/2 compressed layers (kv_source pools)",
            **common,
        )
    head_dim = _require_int(cfg, "head_dim", source)
    rope = _require_int(cfg, "qk_rope_head_dim", source)
    if rope >= head_dim:
        raise InputError(
            f"'qk_rope_head_dim' ({rope}) must be smaller than 'head_dim' ({head_dim})",
            source=source,
            field="qk_rope_head_dim",
        )
    return ModelConfig(
        attention="MLA",
        dsv4=True,
        compress_ratios=list(ratios),
        head_dim=head_dim,
        qk_rope_head_dim=rope,
        index_head_dim=_require_int(cfg, "index_head_dim", source),
        sliding_window=_require_int(cfg, "sliding_window", source),
        num_attention_heads=_optional_int(cfg, "num_attention_heads", source, None),
        num_key_value_heads=1,
        **common,
    )
