"""The model's KV-shaping facts, read from a Hugging Face ``config.json`` the way SGLang 0.5.23 reads it.

Mirrors ``sglang.srt.configs.model_config.ModelConfig`` (attention_arch, head_dim,
get_total_num_kv_heads, is_deepseek_dsa) for the fields the KV pools use.

Beside it: ``model_archs`` (which architectures get which attention and pool; dtype
names), ``model_fields`` (one field read in its plausible range; the model dtype),
``model_hybrid`` (layer splits and state sizes of hybrid SWA and linear-attention models).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from kvcheck.errors import InputError
from kvcheck.sglang.model_archs import (
    ATTENTION_SINK_ARCHS,
    DEEPSEEK_FAMILY_ARCHS,
    DSA_ARCHITECTURES,
    FALCON_H1_ARCHS,
    KDA_ARCHS,
    KNOWN_MHA_ARCHITECTURES,
    LINEAR_INTERVAL_ARCHS,
    MAMBA_STATE_DTYPES,
    MINIMAX_SPARSE_ARCHS,
    MLA_ARCHITECTURES,
    MODEL_DTYPES,
    MODEL_DTYPES_ACCEPTED,
    NEMOTRON_H_ARCHS,
    NOT_MODELED_ARCHITECTURES,
    SWA_EVERY_FOURTH_FULL_ARCHS,
    SWA_LAYER_TYPES_ARCHS,
    SWA_PATTERN_ARCHS,
    SWA_STEP_ARCHS,
)
from kvcheck.sglang.model_fields import FIELD_RANGES, MAX_MODEL_DIM, _dtype, _optional_int, _require_int, _sub_config
from kvcheck.sglang.model_hybrid import _linear_fields, _swa_split

# The tables and field readers moved to model_archs / model_fields, re-exported here.
__all__ = [
    "ATTENTION_SINK_ARCHS",
    "DEEPSEEK_FAMILY_ARCHS",
    "DSA_ARCHITECTURES",
    "DSV4_COMPRESS_RATIOS",
    "FALCON_H1_ARCHS",
    "FIELD_RANGES",
    "KDA_ARCHS",
    "KNOWN_MHA_ARCHITECTURES",
    "LINEAR_INTERVAL_ARCHS",
    "MAMBA_STATE_DTYPES",
    "MAX_MODEL_DIM",
    "MINIMAX_SPARSE_ARCHS",
    "MLA_ARCHITECTURES",
    "MODEL_DTYPES",
    "MODEL_DTYPES_ACCEPTED",
    "ModelConfig",
    "NEMOTRON_H_ARCHS",
    "NOT_MODELED_ARCHITECTURES",
    "SWA_EVERY_FOURTH_FULL_ARCHS",
    "SWA_LAYER_TYPES_ARCHS",
    "SWA_PATTERN_ARCHS",
    "SWA_STEP_ARCHS",
    "apply_model_override_args",
    "parse_model_config",
]


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
    # quantization_config.quant_method of the checkpoint, any architecture (0.5.23
    # ModelConfig._verify_quantization compares --quantization with it)
    checkpoint_quant_method: str | None = None
    # ``quant_algo`` of that quant config (ModelOpt exports: NVFP4, FP8, MIXED_PRECISION...)
    checkpoint_quant_algo: str | None = None
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
        checkpoint_quant_method=str(quant["quant_method"]) if quant.get("quant_method") else None,
        checkpoint_quant_algo=str(quant["quant_algo"]) if quant.get("quant_algo") else None,
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
        sc = _sub_config(cfg, "sparse_attention_config", "sparse_attention_freq", source)
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
