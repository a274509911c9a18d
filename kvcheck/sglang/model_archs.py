"""Model architecture tables and dtype names, as SGLang 0.5.23 classifies a ``config.json``.

Which attention and pool each architecture gets: ``ModelConfig.__init__`` and
``is_deepseek_dsa`` (``sglang/srt/configs/model_config.py``), ``is_hybrid_swa_model`` /
``get_hybrid_layer_ids`` (hybrid SWA), the linear-attention config classes
(``configs/qwen3_next.py``, ``nemotron_h.py``, ``falcon_h1.py``, ``kimi_linear.py``), and
the model dtypes ``_get_and_verify_dtype`` accepts. Sets of architecture names (the first
entry of ``config.json``'s ``architectures``); dtype tables map a config's dtype name to
the torch dtype name SGLang runs. ``kvcheck.sglang.model`` reads a config through them.
"""

from __future__ import annotations

from kvcheck.sources.limits import MODEL_DTYPES as TORCH_DTYPE_NAMES

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
# Every dtype name a config may carry: the torch dtype names (``kvcheck.sources.limits.
# MODEL_DTYPES``, the one list) and the names above.
MODEL_DTYPES_ACCEPTED = frozenset(MODEL_DTYPES) | TORCH_DTYPE_NAMES
# Mamba SSM state dtypes (``mamba2_state_dtype``): unknown values fall back to float32.
MAMBA_STATE_DTYPES = ("float32", "bfloat16", "float16")
