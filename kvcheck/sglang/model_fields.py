"""Reading one field of a ``config.json``: integers inside a plausible range, and the model dtype.

``FIELD_RANGES`` holds the plausible range of each count or dimension (inclusive; element
counts, layer counts); a value outside is a broken config.json and ``InputError`` (exit 2)
names the field. ``_dtype`` is the model dtype SGLang 0.5.23 runs under ``--dtype auto``
(``_get_and_verify_dtype``, ``configs/model_config.py``).
"""

from __future__ import annotations

from typing import Any, overload

from kvcheck.errors import InputError
from kvcheck.sglang.model_archs import MODEL_DTYPES, MODEL_DTYPES_ACCEPTED

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


def _sub_config(cfg: dict[str, Any], key: str, list_key: str, source: str, suffix: str = "") -> dict[str, Any]:
    """``cfg[key]``, a nested config mapping that must hold a list under ``list_key``;
    ``InputError`` naming ``key`` otherwise (``suffix`` ends the message)."""
    sub = cfg.get(key)
    if not isinstance(sub, dict) or not isinstance(sub.get(list_key), list):
        raise InputError(f"config.json needs {key!r} with a {list_key!r} list{suffix}", source=source, field=key)
    return sub
