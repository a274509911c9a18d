"""Values SGLang resolves before it compares or uses them, as each release resolves them.

The KV cache dtype string the decode's bootstrap check compares is not the raw
``--kv-cache-dtype`` flag:

1. The server-args post-processing rewrites it for DeepSeek DSA models (DeepSeek V3.2,
   GLM-5 ...; ``is_deepseek_dsa``: a listed architecture with ``index_topk``), by release:

   * 0.5.3 .. 0.5.4.post1 (``ServerArgs._handle_model_specific_adjustments``, any
     ``is_deepseek_nsa`` model): on a GPU of compute capability major >= 10 the dtype
     becomes ``fp8_e4m3`` whatever was asked; below it the flag stays as written.
   * 0.5.4.post2 .. 0.5.14 (the same method; from 0.5.10 in
     ``_set_default_nsa_kv_cache_dtype`` / ``_set_default_dsa_kv_cache_dtype``) and 0.5.15 ..
     0.5.23 (``arg_groups/overrides.py`` ``_dsa_kv_cache_dtype_default``): ``auto`` becomes
     ``fp8_e4m3`` on major >= 10 (SM100 and newer) and ``bfloat16`` below; ``bf16``
     becomes ``bfloat16``. From 0.5.20 a model with ``learnable_sink`` stays ``bfloat16``
     on ``auto`` at any GPU.
   * From 0.5.6 only some architectures take the rewrite (the ``model_arch in [...]`` gate,
     ``_DEEPSEEK_FAMILY_ARCHS`` from 0.5.15): ``DSA_REWRITE_ARCHS``. The architecture is
     the target's ``architectures[0]``.

2. The model runner's ``kv_cache_dtype_str`` then turns ``auto`` into ``fp8_e4m3`` for a
   checkpoint with an FP8 KV quant config (``kvcheck.sglang.geometry.kv_dtype_bytes``).

``kv_dtype(side)`` gives both strings for the side's GPU; ``kv_dtype_outcomes(side)``
gives them for every GPU the side may run on when its GPU was only assumed and the
rewrite depends on it, so a verdict never rests on the assumed GPU.
Standard library only (cold path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcheck.checks.base import PairFacts

# architectures[0] -> the first release whose gate lets it take the DSA dtype rewrite
# (read from each release's server_args.py / arg_groups/overrides.py; 0.5.3 .. 0.5.5.post3
# have no gate: every is_deepseek_nsa model, i.e. DeepseekV3/V32 with index_topk).
DSA_REWRITE_ARCHS: dict[str, str] = {
    "DeepseekV3ForCausalLM": "0.5.3",
    "MistralLarge3ForCausalLM": "0.5.6.post1",
    "PixtralForConditionalGeneration": "0.5.6.post1",
    "GlmMoeDsaForCausalLM": "0.5.9",
    "KimiK25ForConditionalGeneration": "0.5.9",
    "DeepseekV32ForCausalLM": "0.5.12",
    "LongcatFlashForCausalLM": "0.5.16",
    "LongcatFlashForCausalLMNextN": "0.5.16",
    "Dots3NoteForCausalLM": "0.5.19",
    "Glm5NextForConditionalGeneration": "0.5.20",
    "HYV4ForCausalLM": "0.5.20",
    "HYV4ForCausalLMNextN": "0.5.20",
}
_NO_GATE = ("0.5.3", "0.5.6")  # [lo, hi): any is_deepseek_nsa architecture takes it
_NSA_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN")
_FORCED_FP8 = ("0.5.3", "0.5.4.post2")  # [lo, hi): major >= 10 forces fp8_e4m3
_SINKS_FROM = "0.5.20"


@dataclass(frozen=True)
class KvDtype:
    """The KV cache dtype as the runtime holds it: ``server_args`` (after the server-args
    post-processing; 0.5.10 .. 0.5.16 compare this one), ``runner`` (the model runner's
    ``kv_cache_dtype_str``; 0.5.17 on compare this one), ``flag`` (as written), and
    ``rewrite``: the runtime's own reason when it differs from the flag, else ''."""

    flag: str
    server_args: str
    runner: str
    rewrite: str = ""


def _release(side) -> str:
    from kvcheck.sglang.releases import NEWEST_MODELED, side_release

    rel, _ = side_release(side)
    return rel or NEWEST_MODELED


def dsa_rewrites(side, release: str | None = None) -> bool:
    """Whether SGLang ``release`` rewrites this side's KV dtype as a DeepSeek DSA model."""
    from kvcheck.sglang.releases import in_range, release_key

    model = side.model
    if not getattr(model, "dsa", False):
        return False
    release = release or _release(side)
    arch = getattr(model, "architecture", "") or ""
    if in_range(release, *_NO_GATE):
        return arch in _NSA_ARCHS
    first = DSA_REWRITE_ARCHS.get(arch)
    return first is not None and release_key(first) <= release_key(release)


def _major(gpu_name: str | None) -> tuple[int, str]:
    from kvcheck.sglang.gpu import DEFAULT_GPU, resolve_gpu

    gpu = resolve_gpu(gpu_name or DEFAULT_GPU)
    return gpu.capability[0], gpu.name


def server_args_dtype(side, gpu_name: str | None = None, release: str | None = None) -> tuple[str, str]:
    """(``server_args.kv_cache_dtype`` after post-processing, the runtime's reason or '')
    for ``side`` on ``gpu_name`` (default: the side's GPU) under ``release``."""
    from kvcheck.sglang.releases import in_range

    flag = side.args.kv_cache_dtype
    release = release or _release(side)
    if getattr(side.model, "dsv4", False) and flag == "auto":
        # _deepseek_v4_kv_cache_dtype (CUDA; the DeepSeek V4 hook from 0.5.12.post1)
        return "fp8_e4m3", f"Setting KV cache dtype to fp8_e4m3 for {side.model.architecture} (SGLang {release})"
    if not dsa_rewrites(side, release):
        return flag, ""
    major, name = _major(gpu_name or side.gpu)
    if in_range(release, *_FORCED_FP8):
        if major >= 10:
            return "fp8_e4m3", f"SGLang {release} sets the KV cache dtype to fp8 for DeepSeek NSA on SM{major} ({name})"
        return flag, ""
    if flag == "auto":
        sinks = bool(getattr(side.model, "learnable_sink", False)) and in_range(release, _SINKS_FROM)
        out = "fp8_e4m3" if major >= 10 and not sinks else "bfloat16"
        return (
            out,
            f'SGLang {release} on {name}: "Setting KV cache dtype to {out} for DeepSeek DSA on SM{major} device."',
        )
    if flag == "bf16":
        return "bfloat16", f"SGLang {release} spells --kv-cache-dtype bf16 as bfloat16 for DeepSeek DSA"
    return flag, ""


def kv_dtype(side, gpu_name: str | None = None) -> KvDtype:
    """The side's KV dtype strings on ``gpu_name`` (default: its GPU)."""
    flag = side.args.kv_cache_dtype
    sa, why = server_args_dtype(side, gpu_name)
    runner = sa
    if (
        sa == "auto"
        and side.model.attention != "not_modeled"
        and (side.model.kv_cache_quant_algo or "").upper() == "FP8"
    ):
        runner = "fp8_e4m3"  # configure_kv_cache_dtype: auto follows an FP8 KV quant config
    return KvDtype(flag, sa, runner, why)


def resolved_kv_dtype_str(side) -> str:
    """``model_runner.kv_cache_dtype_str`` on the side's GPU (what the bootstrap server
    reports and the decode compares from 0.5.17 on)."""
    return kv_dtype(side).runner


def gpu_assumed(side) -> bool:
    """Whether the side's GPU was only assumed (no --gpu, manifest or kvcheck-gpu key)."""
    return getattr(side, "gpu", None) is None or str(getattr(side, "gpu_source", "")).startswith("default")


def gpu_dependent(side) -> bool:
    """Whether the side's GPU was only assumed and its KV dtype depends on it."""
    if not gpu_assumed(side):
        return False
    a, b = kv_dtype(side, "h100"), kv_dtype(side, "b200")
    return (a.runner, a.server_args) != (b.runner, b.server_args)


def kv_dtype_outcomes(side) -> dict[str, KvDtype]:
    """``{"below SM100": ..., "SM100 and newer": ...}`` when ``gpu_dependent(side)``,
    else ``{side.gpu: kv_dtype(side)}``."""
    if gpu_dependent(side):
        return {"below SM100 (Hopper)": kv_dtype(side, "h100"), "SM100 and newer (Blackwell)": kv_dtype(side, "b200")}
    return {str(side.gpu): kv_dtype(side)}


_GPU_KINDS = (("below SM100, e.g. Hopper", "h100"), ("SM100 and newer, e.g. Blackwell", "b200"))


def kv_dtype_compared(side, decode_behaviour, gpu_name: str | None = None) -> str | None:
    """The string the decode's bootstrap check compares for ``side`` (``kv_cache_dtype_str``
    from 0.5.17, ``server_args.kv_cache_dtype`` in 0.5.10 .. 0.5.16), None when the
    decode's release compares none (before 0.5.10) or its checks are not modeled."""
    from kvcheck.sglang.pd_release import at_least

    b = decode_behaviour
    if not getattr(b, "bootstrap_modeled", False) or getattr(b, "route", None) == "v1":
        return None
    k = kv_dtype(side, gpu_name)
    return k.runner if at_least(b.bootstrap_variant, "0.5.17") else k.server_args


def kv_dtype_over_gpus(prefill, decode, decode_behaviour) -> list[tuple[str, str | None, str | None]] | None:
    """Decide the KV dtype comparison on every GPU kind an assumed side may run on.

    Returns None when the answer does not rest on an assumed GPU (no side's GPU was assumed,
    its dtype does not depend on it, or every GPU kind gives the same answer: equal strings
    everywhere, or different everywhere). Else one row per GPU kind, (kind, prefill string,
    decode string): the comparison passes on some and fails on others. A side whose GPU is
    known keeps it; when both were assumed they vary together (one GPU kind for the pair)."""
    if not (gpu_dependent(prefill) or gpu_dependent(decode)):
        return None
    compared = kv_dtype_compared(prefill, decode_behaviour) is not None
    rows = []
    for label, gpu in _GPU_KINDS:
        pg, dg = (gpu if gpu_assumed(prefill) else None), (gpu if gpu_assumed(decode) else None)
        if compared:
            rows.append(
                (
                    label,
                    kv_dtype_compared(prefill, decode_behaviour, pg),
                    kv_dtype_compared(decode, decode_behaviour, dg),
                )
            )
        else:  # no dtype check (before 0.5.10): the KV bytes per element decide the item lengths
            rows.append((label, _bytes_text(prefill, pg), _bytes_text(decode, dg)))
    if len({p == d for _, p, d in rows}) == 1:
        return None
    return rows


def _bytes_text(side, gpu_name: str | None) -> str:
    """``"bfloat16, 2 bytes per element"`` for ``side`` on ``gpu_name`` (default: its GPU)."""
    from kvcheck.sglang.geometry import kv_dtype_bytes

    moved = side.model_copy(update={"gpu": gpu_name}) if gpu_name else side
    dtype, size = kv_dtype_bytes(moved, moved.model)
    return f"{dtype}, {size} bytes per element"


def dtype_detail(prefill, decode, decode_behaviour) -> str:
    """The kv-cache-dtype-mismatch detail in the runtime's own strings, with the
    release's rewrite of each side's flag when it made one."""
    parts = []
    for side in (prefill, decode):
        k = kv_dtype(side)
        got = kv_dtype_compared(side, decode_behaviour) or k.runner
        how = f" ({k.rewrite})" if k.rewrite else (f" (--kv-cache-dtype {k.flag})" if got != k.flag else "")
        parts.append(f"{side.role} kv_cache_dtype={got}{how}")
    return "the runtime compares the resolved KV cache dtype strings: " + "; ".join(parts)


def decide_kv_dtype_over_gpus(prefill, decode, decode_behaviour, extra: PairFacts) -> None:
    """Preflight hook: when the KV dtype comparison rests on an assumed GPU, drop the
    assumed GPU's ``kv-cache-dtype-mismatch`` prediction and record the per-GPU rows in
    ``extra["kv_dtype_over_gpus"]`` (the ``kv-dtype-gpu`` check makes the pair unchecked);
    otherwise quote the runtime's strings in the mismatch detail."""
    errors = extra.get("bootstrap_errors") or []
    rows = kv_dtype_over_gpus(prefill, decode, decode_behaviour)
    if rows is not None:
        extra["kv_dtype_over_gpus"] = rows
        extra["bootstrap_errors"] = [e for e in errors if e[0] != "kv-cache-dtype-mismatch"]
        return
    extra["bootstrap_errors"] = [
        (fid, rt, dtype_detail(prefill, decode, decode_behaviour))
        if fid == "kv-cache-dtype-mismatch"
        else (fid, rt, detail)
        for fid, rt, detail in errors
    ]
