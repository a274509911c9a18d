"""The model's KV-shaping facts, read from a Hugging Face ``config.json`` the way SGLang 0.5.23 reads it.

Mirrors ``sglang.srt.configs.model_config.ModelConfig`` (attention_arch, head_dim,
get_total_num_kv_heads, is_deepseek_dsa) for the fields the KV pools use.
"""

from __future__ import annotations

from typing import Any, Literal

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
NOT_MODELED_ARCHITECTURES = {
    "DeepseekV4ForCausalLM": "DeepSeek V4 (compressed C4/C128 KV pools)",
    "DeepseekV4ForCausalLMNextN": "DeepSeek V4 (compressed C4/C128 KV pools)",
    "MiniMaxM3ForCausalLM": "MiniMax sparse KV pool",
    "MiniMaxM2ForCausalLM": "MiniMax sparse KV pool",
    "MiniMaxText01ForCausalLM": "MiniMax linear-attention hybrid",
    "Qwen3NextForCausalLM": "Mamba/linear-attention hybrid pool",
    "Qwen3_5ForConditionalGeneration": "Mamba/linear-attention hybrid pool",
    "NemotronHForCausalLM": "Mamba hybrid pool",
    "FalconH1ForCausalLM": "Mamba hybrid pool",
    "JambaForCausalLM": "Mamba hybrid pool",
    "KimiLinearForCausalLM": "linear-attention hybrid pool",
    "GptOssForCausalLM": "sliding-window (SWA) hybrid pool",
    "Gemma2ForCausalLM": "sliding-window (SWA) hybrid pool",
    "Gemma3ForCausalLM": "sliding-window (SWA) hybrid pool",
    "Gemma3ForConditionalGeneration": "sliding-window (SWA) hybrid pool",
    "Llama4ForConditionalGeneration": "chunked/sliding attention hybrid pool",
    "MiMoV2FlashForCausalLM": "sliding-window (SWA) hybrid pool",
    "Step3p5ForCausalLM": "sliding-window (SWA) hybrid pool",
}

# Architectures whose KV pool in SGLang 0.5.23 is the plain MHA token pool (K and V per
# layer): kvcheck's MHA geometry is verified for these. Another architecture that is
# neither MLA nor listed as not modeled is assumed to use it, and the report says so.
KNOWN_MHA_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Phi3ForCausalLM", "GemmaForCausalLM", "Glm4ForCausalLM",
        "Glm4MoeForCausalLM", "InternLM2ForCausalLM", "OlmoForCausalLM", "Olmo2ForCausalLM", "OlmoeForCausalLM",
        "GraniteForCausalLM", "GraniteMoeForCausalLM", "StarCoder2ForCausalLM", "CohereForCausalLM",
        "DeepseekForCausalLM", "ExaoneForCausalLM", "Ernie4_5_ForCausalLM", "Ernie4_5_MoeForCausalLM",
        "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration", "LlavaForConditionalGeneration", "MllamaForConditionalGeneration",
        "LlamaForCausalLMEagle", "LlamaForCausalLMEagle3", "Qwen3ForCausalLMEagle3", "SeedOssForCausalLM",
    }
)



class ModelConfig(BaseModel):
    """KV-shaping fields of one model.

    ``attention`` is ``"MHA"`` (MHA/GQA: the MHA token pool), ``"MLA"`` or
    ``"not_modeled"``; ``dsa`` is SGLang's ``is_deepseek_dsa`` (the DSA/NSA pool).
    Head dimensions are counts of elements; ``torch_dtype`` is the model dtype string.
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

    @property
    def is_mla(self) -> bool:
        return self.attention == "MLA"


def _text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """SGLang reads text models through ``hf_text_config`` (``text_config`` when present)."""
    text = raw.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        merged = dict(text)
        merged.setdefault("architectures", raw.get("architectures"))
        merged.setdefault("torch_dtype", raw.get("torch_dtype") or raw.get("dtype"))
        merged.setdefault("quantization_config", raw.get("quantization_config"))
        return merged
    return raw


# Largest value kvcheck takes for a count or dimension in config.json: past it the file
# is corrupt, not a model (and sizes derived from it would overflow).
MAX_MODEL_DIM = 1 << 20


def _require_int(cfg: dict[str, Any], key: str, source: str, *, minimum: int = 1) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_MODEL_DIM:
        raise InputError(
            f"config.json needs an integer {key!r} between {minimum} and {MAX_MODEL_DIM} to derive the KV geometry (got {value!r})",
            source=source,
            field=key,
        )
    return value


def parse_model_config(raw: Any, source: str = "config.json") -> ModelConfig:
    """Interpret a parsed ``config.json`` object.

    Raises ``InputError`` (exit 2) naming the file and field when a field the geometry
    needs is missing or of the wrong type.
    """
    if not isinstance(raw, dict):
        raise InputError("config.json must hold a JSON object", source=source)
    cfg = _text_config(raw)
    # Plausible ranges per field and a known dtype name (kvcheck.sources.limits).
    from kvcheck.sources.limits import check_model_config

    check_model_config(cfg, source)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise InputError("config.json needs a non-empty 'architectures' list", source=source, field="architectures")
    arch = archs[0]
    layers = _require_int(cfg, "num_hidden_layers", source)
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    quant = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else {}
    common = dict(
        architecture=arch,
        num_hidden_layers=layers,
        num_nextn_predict_layers=_require_int(cfg, "num_nextn_predict_layers", source, minimum=0) if cfg.get("num_nextn_predict_layers") else 0,
        torch_dtype=str(dtype),
        kv_cache_quant_algo=quant.get("kv_cache_quant_algo"),
        source=source,
    )
    if arch in NOT_MODELED_ARCHITECTURES or cfg.get("layer_types") and any(
        t not in ("full_attention", "attention") for t in cfg.get("layer_types") or []
    ):
        return ModelConfig(
            attention="not_modeled",
            not_modeled_reason=NOT_MODELED_ARCHITECTURES.get(arch, "hybrid attention layers (layer_types)"),
            **common,
        )
    if arch in MLA_ARCHITECTURES or (
        arch in ("PixtralForConditionalGeneration", "BailingMoeV2_5ForCausalLM") and cfg.get("kv_lora_rank") is not None
    ):
        return ModelConfig(
            attention="MLA",
            kv_lora_rank=_require_int(cfg, "kv_lora_rank", source),
            qk_rope_head_dim=_require_int(cfg, "qk_rope_head_dim", source),
            dsa=arch in DSA_ARCHITECTURES and cfg.get("index_topk") is not None,
            index_head_dim=cfg.get("index_head_dim"),
            index_kpool=int(cfg.get("index_kpool") or 1),
            num_attention_heads=cfg.get("num_attention_heads"),
            **common,
        )
    heads = _require_int(cfg, "num_attention_heads", source)
    kv_heads = cfg.get("num_key_value_heads", heads)
    if kv_heads is None:
        kv_heads = heads
    if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or not 0 < kv_heads <= MAX_MODEL_DIM:
        raise InputError(f"'num_key_value_heads' must be a positive integer (got {kv_heads!r})", source=source, field="num_key_value_heads")
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        hidden = _require_int(cfg, "hidden_size", source)
        if heads == 0:
            raise InputError("'num_attention_heads' must be positive", source=source, field="num_attention_heads")
        head_dim = hidden // heads
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or not 0 < head_dim <= MAX_MODEL_DIM:
        raise InputError(f"'head_dim' must be a positive integer (got {head_dim!r})", source=source, field="head_dim")
    return ModelConfig(
        attention="MHA",
        assumed_mha=arch not in KNOWN_MHA_ARCHITECTURES,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=cfg.get("v_head_dim") or head_dim,
        **common,
    )
