"""The model a deployment file names, when ``--model-path`` is a path inside the image.

Published deployments often launch ``--model-path /model`` (srt-slurm), ``/model-cache/...``
or ``$(MODEL_PATH)`` (OME mounts the model there) and name the model elsewhere in the same
file. Those names are clues, tried in this order; the first that names a model kvcheck has
(the shipped catalog, by ``catalog_lookup``) wins over an in-image path, and the output says
which clue it was:

1. srt-slurm ``identity.model.repo`` (the hub repository the recipe pins, with a revision);
2. an OME ``ClusterBaseModel`` / ``BaseModel`` in the same file (``spec.storage.storageUri``
   ``hf://ORG/NAME``);
3. ``--served-model-name`` (the name clients use; recipes and runtimes set it to the hub id);
4. the container's ``HF_MODEL_ID`` / ``MODEL_ID`` / ``MODEL_NAME`` / ``MODEL_PATH`` /
   ``MODEL`` environment values (defaults included: ``${MODEL_PATH:-Qwen/Qwen3-8B}``);
5. srt-slurm's ``model.path`` alias (``dsr1``), through ``SRT_SLURM_ALIASES``.

A clue is only used when ``--model-path`` itself names nothing kvcheck can read (the
pipeline tries ``--model-path`` first: a local directory, the HF cache, the catalog).
"""

from __future__ import annotations

import re

# srt-slurm model.path aliases (site-defined in srtslurm.yaml ``model_paths``) as the
# published recipes use them, each mapped to the hub id the same recipes serve it as:
# NVIDIA/srt-slurm@c88ef731636890ff6385a783e152c1790e15b194 recipes/, the alias in
# ``model.path`` next to ``served-model-name`` (or ``identity.model.repo``) in every recipe
# that uses it. Aliases of quantized re-uploads (dsr1-fp4, dsfp4: NVIDIA FP4 weights served
# as deepseek-ai/DeepSeek-R1) are left out: their served name is not their repository.
SRT_SLURM_ALIASES = {
    "dsr1": "deepseek-ai/DeepSeek-R1",  # 29 recipes, served-model-name deepseek-ai/DeepSeek-R1
    "dsr1-fp8": "deepseek-ai/DeepSeek-R1",  # 47 recipes (DeepSeek-R1 ships FP8 weights)
    "dsfp8": "deepseek-ai/DeepSeek-R1",  # 15 recipes
    "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",  # 14 recipes
    "dsv4-pro": "deepseek-ai/DeepSeek-V4-Pro",  # 13 recipes
    "qwen3-32b": "Qwen/Qwen3-32B",  # 8 recipes
    "qwen3.5-nvfp4": "nvidia/Qwen3.5-397B-A17B-NVFP4",  # 9 recipes
    "kimi-k25-nvfp4": "nvidia/Kimi-K2.5-NVFP4",  # identity.model.repo
}

MODEL_ENV_NAMES = ("HF_MODEL_ID", "MODEL_ID", "MODEL_NAME", "MODEL_PATH", "MODEL", "HF_MODEL", "MODEL_REPO")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def known(name: str | None) -> str | None:
    """The catalog hub id ``name`` names (``catalog_lookup``), or None."""
    if not name or "$" in name or "<" in name or "{{" in name:
        return None
    from kvcheck.sources.models import catalog_lookup

    bare = name.removeprefix("hf://") if name.startswith("hf://") else name.removeprefix("hf:")
    try:
        hit = catalog_lookup(bare)
    except Exception:
        return None
    return hit[0] if hit else None


def pick(clues: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first ``(name, clue)`` whose name is a model kvcheck has -> ``(hub id, clue)``."""
    for name, clue in clues:
        hub = known(name)
        if hub is not None:
            return hub, clue if hub == name else f"{clue} ({name})"
    return None


# Precision words a model path or alias can carry (``dsr1-fp4``, ``qwen3-32b-fp8``), longest
# first so that ``nvfp4`` is read before ``fp4`` and ``w4afp8`` (SGLang's quant method of
# int4 experts with fp8 activations) before ``fp8``.
PRECISION_WORDS = ("nvfp4", "mxfp4", "w4afp8", "w4a16", "w4a8", "w8a8", "fp4", "fp8", "int4", "int8", "awq", "gptq")
# Words of an unquantized checkpoint (``llama-70b-bf16``): they conflict with an entry that
# shows any quantization (its weights, and a ModelOpt export's kv_cache_quant_algo FP8 KV
# cache, are not the re-upload's)
UNQUANTIZED_WORDS = ("bfloat16", "float16", "bf16", "fp16")


def _entry_precision(hub_id: str) -> str:
    """The catalog entry's hub id, expert dtype and quant config words (lower case), where a
    precision word would show: ``deepseek-ai/deepseek-r1  fp8 e4m3``."""
    from kvcheck.sources.models import load_catalog

    cfg = load_catalog().get(hub_id, {}).get("config", {})
    q = cfg.get("quantization_config") or cfg.get("text_config", {}).get("quantization_config") or {}
    words = [hub_id, str(cfg.get("expert_dtype") or "")]  # DeepSeek V4: FP4 experts under an fp8 config
    words += [str(q.get(k) or "") for k in ("quant_method", "quant_algo", "fmt", "moe_quant_algo")]
    return " ".join(words).lower()


def precision_conflict(named: str | None, hub_id: str) -> str | None:
    """The precision word the file's own model name carries that catalog entry ``hub_id`` does
    not show (``dsr1-fp4`` against ``deepseek-ai/DeepSeek-R1``, an FP8 checkpoint; ``bf16``
    against any quantized entry), or None.

    A served name is the name clients use: srt-slurm recipes serve NVIDIA's FP4 re-uploads of
    DeepSeek-R1 (``model.path: dsr1-fp4`` / ``dsfp4``) as ``deepseek-ai/DeepSeek-R1``. Such a
    clue names the family, not the checkpoint, so it is not used (the model stays unknown:
    its quantization, KV quantization and NextN layers are not the named entry's)."""
    if not named:
        return None
    low = named.lower()
    have = _entry_precision(hub_id)
    for word in PRECISION_WORDS:
        if word in low:
            return None if word in have or (word == "fp4" and "nvfp4" in have) else word
    quantized = bool(have[len(hub_id) :].strip())  # the entry shows an expert dtype or a quant config
    for word in UNQUANTIZED_WORDS:
        if word in low:
            return word if quantized and word not in hub_id.lower() else None
    return None


def alias_clue(alias: str | None) -> str | None:
    if not alias:
        return None
    return SRT_SLURM_ALIASES.get(alias.strip().lower())


def looks_like_hub_id(name: str) -> bool:
    """Whether ``name`` has the shape of a Hugging Face hub id (``ORG/NAME``)."""
    return bool(_HUB_ID.fullmatch(name.strip()))
