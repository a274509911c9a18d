"""The layer split and state parameters of hybrid models, as SGLang 0.5.23's config classes compute them.

Hybrid SWA (``_swa_split``: ``get_hybrid_layer_ids``, ``configs/model_config.py``): which
global layer ids sit in the sliding-window pool and which in the full pool. Linear
attention (``_linear_fields``: ``mamba2_cache_params`` of Qwen3-Next / Qwen3.5,
Nemotron-H, Falcon-H1 and Kimi Linear): the full-attention and Mamba layer ids, and the
Mamba2 / KDA state sizes (counts of elements; the SSM state dtype name).
"""

from __future__ import annotations

from typing import Any

from kvcheck.errors import InputError
from kvcheck.sglang.model_archs import (
    KDA_ARCHS,
    LINEAR_INTERVAL_ARCHS,
    MAMBA_STATE_DTYPES,
    NEMOTRON_H_ARCHS,
    SWA_EVERY_FOURTH_FULL_ARCHS,
    SWA_LAYER_TYPES_ARCHS,
    SWA_PATTERN_ARCHS,
    SWA_STEP_ARCHS,
)
from kvcheck.sglang.model_fields import _optional_int, _require_int, _sub_config


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


def _mamba2_params(
    cfg: dict[str, Any], source: str, *, heads: str, head_dim: str, groups: str, state: str, conv: str
) -> dict[str, Any]:
    """The Mamba2 state parameters a config class reads from its own keys (one per field,
    each a required integer): intermediate size = heads x head_dim, as
    ``Qwen3NextConfig`` / ``NemotronHConfig.mamba2_cache_params`` (0.5.23) compute it."""
    nh = _require_int(cfg, heads, source)
    hd = _require_int(cfg, head_dim, source)
    return dict(
        mamba_intermediate_size=nh * hd,
        mamba_n_groups=_require_int(cfg, groups, source),
        mamba_num_heads=nh,
        mamba_head_dim=hd,
        mamba_state_size=_require_int(cfg, state, source),
        mamba_conv_kernel=_require_int(cfg, conv, source),
    )


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
        params: dict[str, Any] = _mamba2_params(
            cfg,
            source,
            heads="linear_num_value_heads",
            head_dim="linear_value_head_dim",
            groups="linear_num_key_heads",
            state="linear_key_head_dim",
            conv="linear_conv_kernel_dim",
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
        params = _mamba2_params(
            cfg,
            source,
            heads="mamba_num_heads",
            head_dim="mamba_head_dim",
            groups="n_groups",
            state="ssm_state_size",
            conv="conv_kernel",
        )
    elif arch in KDA_ARCHS:
        lac = _sub_config(cfg, "linear_attn_config", "kda_layers", source, " for Kimi Linear")
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
