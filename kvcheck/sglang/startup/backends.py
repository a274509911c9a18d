"""Attention backends, KV cache dtypes and the GPU: the backend each release picks for a
model and GPU, the page size that follows, and the refusals of
``handle_nvfp4_prefill_kv_dequant_dtype``, ``handle_attention_backend_compatibility``,
``handle_kv4_compatibility`` and ``handle_mxfp8_kv_cache_compatibility``."""

from __future__ import annotations

from kvcheck.sglang.gpu import Gpu
from kvcheck.sglang.startup.base import (
    DSA_OVERRIDE_ARCHS,
    MINIMAX_SPARSE_ARCHS,
    Outcome,
    Refusal,
    Stop,
    _arch,
    _is_dsa,
    _raw,
    _resolved_kv_dtype,
    dsa_pass,
    release_at_least,
)
from kvcheck.sides import Side

# kv_cache_hook._NVFP4_PREFILL_BACKEND inverted: the prefill backends NVFP4 can dequantize for.
NVFP4_PREFILL_DEQUANT_DTYPE = {"flashinfer": "fp8_e4m3", "trtllm_mha": "nvfp4"}
# overrides._mla_kv_cache_dtype_checks / _cutedsl_prefill_backend_fill (exact strings).
TRTLLM_MLA_KV_DTYPES = ("fp8_e4m3", "bf16", "auto")
CUTEDSL_MLA_KV_DTYPES = ("fp8_e4m3", "bf16", "bfloat16", "auto")


def _gpu_is(gpu: Gpu, *majors: int) -> bool:
    return gpu.vendor == "nvidia" and gpu.capability[0] in majors


def resolved_attention_backends(side: Side, gpu: Gpu) -> tuple[str | None, str | None, str | None]:
    """(attention_backend, prefill_attention_backend, decode_attention_backend) as
    ``handle_attention_backend_compatibility`` sees them on CUDA (SGLang 0.5.23), as far as
    the start-up refusals need them: a DSA model with no backend gets ``dsa``
    (``_deepseek_family_overrides``); a DeepSeek V3-family MLA model on SM100 with no
    backend flag gets ``trtllm_mla``; equal prefill/decode backends become the attention
    backend (``_attention_backend_default``). Left ``None`` where the GPU/model default
    (``get_default_attn_backend``) is none of the backends a refusal names."""
    a = side.args
    attn, pre, dec = _model_override_backend(side, gpu), a.prefill_attention_backend, a.decode_attention_backend
    if pre is not None and pre == dec:
        attn = pre
    if (
        attn is None
        and not side.model.is_mla
        and (_gpu_is(gpu, 10) or (_blackwell_mha_default(side) and _gpu_is(gpu, 11, 12)))
    ):
        # get_default_attn_backend, MHA on SM100 without topk > 1 speculation.
        topk = a.speculative_eagle_topk
        if a.speculative_algorithm is None or (topk is not None and topk <= 1):
            attn = "trtllm_mha"
    return attn, pre, dec


def _model_override_backend(side: Side, gpu: Gpu) -> str | None:
    """``--attention-backend`` after ``_deepseek_family_overrides`` (SGLang 0.5.23): ``dsa`` for
    a DSA model with no backend flag, ``trtllm_mla`` for a DeepSeek V3-family MLA model on
    SM100 with no backend flag."""
    a = side.args
    attn = a.attention_backend
    if side.model.dsv4:
        return "dsv4"  # _deepseek_v4_overrides: attention_backend "dsv4" whatever the flag (CUDA)
    if (
        _arch(side) in DSA_OVERRIDE_ARCHS
        and attn is None
        and a.prefill_attention_backend is None
        and a.decode_attention_backend is None
    ):
        if dsa_pass(side):
            return "dsa"
        if _is_dsa(side):  # a DSA model its release does not override: no backend override either
            return attn
            return "dsa"
        if _gpu_is(gpu, 10):
            return "trtllm_mla"
    return attn


def _blackwell_mha_default(side: Side) -> bool:
    """SGLang 0.5.6.post1 .. 0.5.6.post2 picked trtllm_mha for an MHA model on every Blackwell
    (``is_blackwell()``: SM10x/SM12x), which then refuses it off SM100; 0.5.7 narrowed the
    default to SM100 (``is_sm100_supported()``)."""
    from kvcheck.sglang.releases import in_range, side_release

    version = side_release(side)[0]
    if not version:
        return False
    return in_range(version, "0.5.6.post1", "0.5.7")


def default_attention_backend(side: Side, gpu: Gpu) -> str:
    """``model_override_base.get_default_attn_backend`` on an NVIDIA GPU (SGLang 0.5.23, with
    FlashInfer installed): MHA -> fa3 on Hopper, trtllm_mha on SM100 (fa4 when K and V
    widths differ), else flashinfer (triton with attention sinks); MLA -> fa3 on Hopper,
    flashinfer on SM100, else triton. Hopper/SM100 need no speculation or topk 1 with page
    size unset/1 (``is_no_spec_infer_or_topk_one``)."""
    a = side.args
    topk = a.speculative_eagle_topk
    page = _page_after_model_overrides(side)
    no_spec_or_topk_one = topk is None or (topk == 1 and page in (1, None))
    major = gpu.capability[0] if gpu.vendor == "nvidia" else 0
    if not side.model.is_mla:
        if major == 9 and no_spec_or_topk_one:
            return "fa3"
        if major in (11, 12) and no_spec_or_topk_one and _blackwell_mha_default(side):
            return "trtllm_mha"
        if (
            major == 10
            and no_spec_or_topk_one
            and (a.speculative_algorithm is None or topk is not None or a.speculative_algorithm.upper() == "DFLASH")
        ):
            m = side.model
            asym = m.v_head_dim is not None and m.head_dim is not None and m.v_head_dim != m.head_dim
            return "fa4" if asym else "trtllm_mha"
        return "flashinfer"
    return {9: "fa3", 10: "flashinfer"}.get(major, "triton")


def _page_after_model_overrides(side: Side) -> int | None:
    """``--page-size`` after ``_deepseek_family_overrides``: 64 x index_kpool for a DSA model on CUDA."""
    if dsa_pass(side):
        return 64 * max(1, side.model.index_kpool)
    if side.model.dsv4:
        return 256  # _deepseek_v4_overrides (CUDA)
    return side.args.page_size


def final_attention_backends(side: Side, gpu: Gpu) -> tuple[str, str | None, str | None]:
    """(attention, prefill, decode) backends once ``handle_attention_backend_compatibility``
    has run (SGLang 0.5.23): model overrides, NVFP4's pinned split backends, the GPU default
    (``default_attention_backend``), FA3 with fp8_e5m2 falling back to triton, CuteDSL's
    prefill fill (trtllm_mla)."""
    a = side.args
    attn = _model_override_backend(side, gpu)
    pre, dec = a.prefill_attention_backend, a.decode_attention_backend
    if a.kv_cache_dtype == "nvfp4":
        pre, dec = nvfp4_backends(side, gpu)
    if pre is not None and pre == dec:
        attn = pre
    if attn is None:
        attn = default_attention_backend(side, gpu)
    if "cutedsl_mla" in (attn, pre, dec) and pre is None:
        pre = "trtllm_mla"
    if attn == "fa3" and _resolved_kv_dtype(side, gpu) == "fp8_e5m2":
        attn = "triton"
    return attn, pre, dec


def resolved_page_size(side: Side, gpu: Gpu) -> int:
    """The page size after ``_mla_backend_page_constraints``, ``_fa4_page_constraint`` and
    ``_page_size_default`` (SGLang 0.5.23, CUDA): flashmla 64; trtllm_mla / cutedsl_mla keep
    32 or 64, else 64; trtllm_mha keeps 16/32/64/128, else 64; FA4 on an SM100 MHA model 128
    (speculative topk <= 1); unset -> 1."""
    a = side.args
    attn, pre, dec = final_attention_backends(side, gpu)
    page = _page_after_model_overrides(side)
    if "flashmla" in (attn, dec):
        page = 64
    if "trtllm_mla" in (attn, dec) and page not in (32, 64):
        page = 64
    if "cutedsl_mla" in (attn, dec, pre) and page not in (32, 64):
        page = 64
    mha_pages = (16, 32, 64, 128) if release_at_least(side, "0.5.17") else (16, 32, 64)  # 128 kept from 0.5.17
    if "trtllm_mha" in (attn, dec, pre, _raw(side, "speculative_draft_attention_backend")) and page not in mha_pages:
        page = 64
    if (
        "fa4" in (attn, dec, pre)
        and not side.model.is_mla
        and _gpu_is(gpu, 10)
        and (a.speculative_eagle_topk or 0) <= 1
    ):
        page = 128
    return 1 if page is None else page


def _split(attn: str | None, pre: str | None, dec: str | None) -> tuple[str | None, str | None]:
    """``attention_backends_of``: the prefill and decode backends (split flags win)."""
    return pre or attn, dec or attn


def nvfp4_prefill_dequant(side: Side, gpu: Gpu) -> Outcome:
    """``handle_nvfp4_prefill_kv_dequant_dtype`` (arg_groups/kv_cache_hook.py, SGLang 0.5.23):
    ``--kv-cache-dtype nvfp4`` maps the explicit prefill backend to a dequant dtype (only
    flashinfer and trtllm_mha have one); native NVFP4 prefill needs SM100; explicit
    split backends must be the ones NVFP4 selects."""
    a = side.args
    hook = "handle_nvfp4_prefill_kv_dequant_dtype"
    requested = _raw(side, "prefill_kv_cache_dequant_dtype", "auto")
    if a.kv_cache_dtype != "nvfp4":
        if requested != "auto":
            return Refusal(
                "nvfp4-prefill-dequant",
                hook,
                "ValueError",
                "--prefill-kv-cache-dequant-dtype applies only with --kv-cache-dtype=nvfp4.",
            )
        return None
    if requested == "auto":
        explicit = a.prefill_attention_backend or _model_override_backend(side, gpu)
        if explicit in NVFP4_PREFILL_DEQUANT_DTYPE:
            requested = NVFP4_PREFILL_DEQUANT_DTYPE[explicit]
        elif explicit is not None:
            return Refusal(
                "nvfp4-prefill-dequant",
                hook,
                "ValueError",
                "NVFP4 prefill supports an FP8 E4M3 workspace or native NVFP4, but backend "
                f"{explicit!r} provides neither.",
            )
        else:
            requested = "nvfp4" if _gpu_is(gpu, 10) else "fp8_e4m3"
    if requested == "nvfp4" and not _gpu_is(gpu, 10):
        return Refusal(
            "nvfp4-prefill-dequant",
            hook,
            "ValueError",
            "Native NVFP4 prefill currently requires SM100; use "
            "--prefill-kv-cache-dequant-dtype=fp8_e4m3 on this platform.",
        )
    target = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}[requested]
    if a.prefill_attention_backend is not None and a.prefill_attention_backend != target:
        return Refusal(
            "nvfp4-prefill-dequant",
            hook,
            "ValueError",
            f"--prefill-kv-cache-dequant-dtype={requested} requires prefill backend {target!r}, but "
            f"--prefill-attention-backend={a.prefill_attention_backend!r} was set. "
            "Remove the backend option and select the KV dtype only.",
        )
    if a.decode_attention_backend not in (None, "trtllm_mha"):
        return Refusal(
            "nvfp4-prefill-dequant",
            hook,
            "ValueError",
            f"NVFP4 decode requires --decode-attention-backend=trtllm_mha; got {a.decode_attention_backend!r}. "
            "Remove the backend option; NVFP4 selects the supported decode implementation automatically.",
        )
    return None


def nvfp4_backends(side: Side, gpu: Gpu) -> tuple[str, str]:
    """(prefill, decode) attention backends ``handle_nvfp4_prefill_kv_dequant_dtype`` pins for
    ``--kv-cache-dtype nvfp4`` once it accepts the flags: flashinfer (FP8 workspace) or
    trtllm_mha (native NVFP4, the SM100 default) for prefill; trtllm_mha for decode."""
    req = _raw(side, "prefill_kv_cache_dequant_dtype", "auto")
    if req == "auto":
        explicit = side.args.prefill_attention_backend or _model_override_backend(side, gpu)
        req = NVFP4_PREFILL_DEQUANT_DTYPE.get(explicit or "", "nvfp4" if _gpu_is(gpu, 10) else "fp8_e4m3")
    return {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}[req], "trtllm_mha"


def attention_backend_gpu(side: Side, gpu: Gpu) -> Outcome:
    """The refusals of ``handle_attention_backend_compatibility`` (arg_groups/attention_hook.py,
    SGLang 0.5.23) that the backend, the KV dtype string and the GPU decide:
    ``_mla_kv_cache_dtype_checks`` (trtllm_mla needs Blackwell and accepts only the strings
    ``fp8_e4m3``/``bf16``/``auto``: ``bfloat16`` is refused), ``_cutedsl_prefill_backend_fill``
    (decode-only, SM100, its KV dtypes) and the TRTLLM MHA GPU checks (SM90/SM100/SM120).
    NVFP4 (``handle_nvfp4_prefill_kv_dequant_dtype``) forces prefill/decode backends first."""
    a = side.args
    pre: str | None
    dec: str | None
    if a.kv_cache_dtype == "nvfp4":
        # nvfp4_prefill_dequant passed: it pinned the split backends.
        pre, dec = nvfp4_backends(side, gpu)
        attn = _model_override_backend(side, gpu)
    else:
        attn, pre, dec = resolved_attention_backends(side, gpu)
    kv = _resolved_kv_dtype(side, gpu)
    hook = "handle_attention_backend_compatibility"
    if attn == "flex_attention" and a.speculative_algorithm is not None:
        return Refusal(
            "attention-backend-gpu",
            hook,
            "AssertionError",
            "Speculative decoding is currently not supported with Flex Attention backend",
        )
    if "trtllm_mla" in (attn, dec):
        if not _gpu_is(gpu, 10, 11, 12):
            # is_blackwell_supported() in every release; the text named SM100 only before 0.5.9.
            where = "(SM100/SM12x)" if release_at_least(side, "0.5.9") else "(SM100)"
            return Refusal(
                "attention-backend-gpu",
                "_mla_kv_cache_dtype_checks",
                "ValueError",
                f"TRTLLM MLA backend is only supported on Blackwell GPUs {where}. Please use a different backend.",
            )
        allowed = trtllm_mla_kv_dtypes(side)
        if kv not in allowed:
            return Refusal(
                "attention-kv-dtype",
                "_mla_kv_cache_dtype_checks",
                "ValueError",
                f"TensorRT-LLM MLA backend only supports kv-cache-dtype of {', '.join(allowed[:-1])}, or "
                f"{allowed[-1]}.",
            )
    if "cutedsl_mla" in (attn, pre, dec):
        if pre == "cutedsl_mla" and a.prefill_attention_backend == "cutedsl_mla":
            return Refusal(
                "attention-backend-gpu",
                "_cutedsl_prefill_backend_fill",
                "AssertionError",
                "CuteDSL MLA only supports decoding for now",
            )
        if not _gpu_is(gpu, 10):
            return Refusal(
                "attention-backend-gpu",
                "_cutedsl_prefill_backend_fill",
                "ValueError",
                "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). Please use a different backend.",
            )
        if kv not in CUTEDSL_MLA_KV_DTYPES:
            return Refusal(
                "attention-kv-dtype",
                "_cutedsl_prefill_backend_fill",
                "ValueError",
                "CuteDSL MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.",
            )
        if a.prefill_attention_backend is None:
            pre = "trtllm_mla"
    p_b, d_b = _split(attn, pre, dec)
    if "trtllm_mha" in (attn, pre, dec) and not release_at_least(side, "0.5.10"):
        # _handle_attention_backend_compatibility, SGLang 0.5.5 .. 0.5.9: any trtllm_mha needs SM100.
        if not _gpu_is(gpu, 10):
            return Refusal(
                "attention-backend-gpu",
                "_handle_attention_backend_compatibility",
                "ValueError",
                "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). Please use a different backend.",
            )
    elif "trtllm_mha" in (p_b, d_b) and not release_at_least(side, "0.5.19"):
        # SGLang 0.5.10 .. 0.5.18: prefill on SM100 only; decode on SM90/SM100/SM120 (the 0.5.23 text).
        if p_b == "trtllm_mha" and not _gpu_is(gpu, 10):
            return Refusal(
                "attention-backend-gpu",
                "_handle_attention_backend_compatibility",
                "ValueError",
                "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
                "Please use a different prefill backend.",
            )
        if d_b == "trtllm_mha" and not _gpu_is(gpu, 9, 10, 12):
            return Refusal(
                "attention-backend-gpu",
                "_handle_attention_backend_compatibility",
                "ValueError",
                "TRTLLM MHA backend for decode is only supported on Hopper (SM90), Blackwell (SM100) and (SM120) GPUs. "
                "Please use a different decode backend.",
            )
    elif "trtllm_mha" in (p_b, d_b):
        ok = _gpu_is(gpu, 9, 10, 12)
        if p_b == "trtllm_mha" and not ok:
            return Refusal(
                "attention-backend-gpu",
                hook,
                "ValueError",
                "TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or SM120 GPUs. "
                "Please use a different prefill backend.",
            )
        if (
            p_b == "trtllm_mha"
            and _gpu_is(gpu, 12)
            and (kv == "fp8_e4m3" or float(side.env.get("SGLANG_SKIP_SOFTMAX_PREFILL_THRESHOLD_SCALE_FACTOR") or 0) > 0)
        ):
            return Refusal(
                "attention-kv-dtype",
                hook,
                "ValueError",
                "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax.",
            )
        if d_b == "trtllm_mha" and not ok:
            return Refusal(
                "attention-backend-gpu",
                hook,
                "ValueError",
                "TRTLLM MHA backend for decode is only supported on Hopper (SM90), Blackwell (SM100) and (SM120) GPUs. "
                "Please use a different decode backend.",
            )
        if p_b == "trtllm_mha" and not _gpu_is(gpu, 10) and a.attn_cp_size > 1 and trtllm_mha_cp_check(side):
            return Refusal(
                "attention-backend-gpu",
                hook,
                "ValueError",
                "Prefill context parallelism with the TRTLLM MHA prefill backend requires SM100 (trtllm-gen context "
                "kernel): the SM90/SM120 fmha_v2 prefill path does not implement CP shard masking.",
            )
    if "fa4" in (attn, dec) and not release_at_least(side, "0.5.8"):
        # _handle_attention_backend_compatibility, SGLang 0.5.5 .. 0.5.7: FA4 was prefill-only.
        return Refusal(
            "attention-backend-gpu",
            "_handle_attention_backend_compatibility",
            "ValueError",
            "FA4 backend is only supported for prefill. Please use `--prefill-attention-backend fa4` instead.",
        )
    return None


def trtllm_mla_kv_dtypes(side: Side) -> tuple[str, ...]:
    """The ``--kv-cache-dtype`` strings ``trtllm_mla`` accepts, in the order its refusal names them:
    SGLang 0.5.5 .. 0.5.6 ``fp8_e4m3, fp4_e2m1, auto``; 0.5.7 .. 0.5.20 adds ``bf16``; from 0.5.21
    ``fp8_e4m3, bf16, auto`` (``_mla_kv_cache_dtype_checks``)."""
    if release_at_least(side, "0.5.21"):
        return TRTLLM_MLA_KV_DTYPES
    if release_at_least(side, "0.5.7"):
        return ("fp8_e4m3", "fp4_e2m1", "bf16", "auto")
    return ("fp8_e4m3", "fp4_e2m1", "auto")


def trtllm_mha_cp_check(side: Side) -> bool:
    """Whether the side's release refuses prefill CP with a TRTLLM MHA prefill off SM100: the
    check is in SGLang 0.5.19 and 0.5.23, not in 0.5.20 .. 0.5.22 (each release's attention
    hook); before 0.5.19 the SM100-only prefill rule refuses first."""
    from kvcheck.sglang.releases import in_range, side_release

    version = side_release(side)[0] or ""
    return bool(version) and not in_range(version, "0.5.20", "0.5.23")


def kv_dtype_gpu(side: Side, gpu: Gpu) -> Outcome:
    """``handle_kv4_compatibility`` and ``handle_mxfp8_kv_cache_compatibility``
    (arg_groups/kv_cache_hook.py, SGLang 0.5.23): ``nvfp4`` needs SM100 or SM120; FP4 KV
    (``nvfp4``/``fp4_mx_block16``) refuses ``--enable-unified-memory``; on SM100 native
    NVFP4 (decode pinned to trtllm_mha) has its speculative-decoding rules and refuses PD;
    otherwise the FP4 backend lists are asserted (``kv4_backend_lists``). ``mxfp8`` needs
    Blackwell."""
    kv = side.args.kv_cache_dtype
    if kv in ("nvfp4", "fp4_mx_block16"):
        if gpu.vendor != "nvidia":
            return Stop("FP4 KV on a non-NVIDIA GPU: handle_kv4_compatibility's platform branch is not restated")
        if kv == "nvfp4" and not _gpu_is(gpu, 10, 12):
            return Refusal(
                "kv-dtype-gpu-refused",
                "handle_kv4_compatibility",
                "RuntimeError",
                "--kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. "
                "Use --kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe.",
            )
        if _raw(side, "enable_unified_memory", False):
            return Refusal(
                "kv-dtype-gpu-refused",
                "handle_kv4_compatibility",
                "ValueError",
                "FP4 KV cache does not yet support --enable-unified-memory: the unified MHA pool does not "
                "allocate FP4 block scales or the prefill dequant workspace.",
            )
        if kv == "fp4_mx_block16" or not _gpu_is(gpu, 10):
            return kv4_backend_lists(side, gpu)
        # SM100: the pinned decode backend is trtllm_mha, so the native-NVFP4 rules apply.
        a = side.args
        hook = "handle_kv4_compatibility"
        algo = a.speculative_algorithm.upper() if a.speculative_algorithm is not None else None
        if algo in ("DFLASH", "DSPARK"):
            return Refusal(
                "kv-dtype-gpu-refused",
                hook,
                "ValueError",
                f"SM100 native NVFP4 speculative decoding does not yet support {algo}; use EAGLE/NEXTN or NGRAM.",
            )
        if algo is not None and algo not in ("EAGLE", "EAGLE3", "NEXTN", "NGRAM"):
            return Refusal(
                "kv-dtype-gpu-refused",
                hook,
                "ValueError",
                "SM100 native NVFP4 speculative decoding supports EAGLE, EAGLE3, NEXTN, and breadth-1 NGRAM; got "
                f"{algo}.",
            )
        if algo == "NGRAM" and int(_raw(side, "speculative_ngram_max_bfs_breadth", 10)) != 1:
            return Refusal(
                "kv-dtype-gpu-refused",
                hook,
                "ValueError",
                "SM100 native NVFP4 NGRAM speculative decoding requires --speculative-ngram-max-bfs-breadth=1 "
                "because trtllm_mha supports linear target verification only; got "
                f"{_raw(side, 'speculative_ngram_max_bfs_breadth', 10)}.",
            )
        draft_backend = _raw(side, "speculative_draft_attention_backend")
        if algo not in (None, "NGRAM") and draft_backend not in (None, "trtllm_mha"):
            return Refusal(
                "kv-dtype-gpu-refused",
                hook,
                "ValueError",
                "SM100 native NVFP4 speculative decoding requires --speculative-draft-attention-backend=trtllm_mha "
                f"so the draft worker consumes its physical NVFP4 KV layout; got {draft_backend!r}.",
            )
        if a.disaggregation_mode != "null":
            return Refusal(
                "kv-dtype-gpu-refused",
                hook,
                "ValueError",
                "SM100 native NVFP4 with trtllm_mha does not yet support PD disaggregation because its physical "
                "block-scale layout is not implemented by the KV transfer path.",
            )
        return Stop("NVFP4 KV outside PD: not restated")
    if kv == "mxfp8" and not _gpu_is(gpu, 10, 11, 12):
        return Refusal(
            "kv-dtype-gpu-refused",
            "handle_mxfp8_kv_cache_compatibility",
            "ValueError",
            "--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the block-scaled operands "
            "used by the FA4 MXFP8 attention path.",
        )
    return None


# handle_kv4_compatibility's backend lists (arg_groups/kv_cache_hook.py, SGLang 0.5.23).
KV4_FA4_MLA_DECODE_BACKENDS = ["flashinfer", "trtllm_mla"]
KV4_FA4_MHA_DECODE_BACKENDS = ["triton", "torch_native", "flex_attention"]
KV4_MLA_BACKENDS = ["flashinfer", "trtllm_mla"]
KV4_MHA_BACKENDS = ["triton", "torch_native", "flex_attention", "trtllm_mha"]
# Architectures whose registered model override or hybrid hooks pick the attention backend
# in ways ``final_attention_backends`` does not restate (SWA/chunked, Qwen3-Next/3.5,
# Nemotron-H, MiniMax sparse): the FP4 backend lists are not decided for them.
_KV4_UNRESOLVED_ARCHS = (
    frozenset(
        {
            "GptOssForCausalLM",
            "Llama4ForConditionalGeneration",
            "Llama4ForCausalLM",
            "Qwen3NextForCausalLM",
            "Qwen3_5MoeForConditionalGeneration",
            "Qwen3_5ForConditionalGeneration",
            "NemotronHForCausalLM",
        }
    )
    | MINIMAX_SPARSE_ARCHS
)


def kv4_backend_lists(side: Side, gpu: Gpu) -> Outcome:
    """The tail of ``handle_kv4_compatibility`` (SGLang 0.5.23) for FP4 KV that is not SM100
    native NVFP4: with split prefill/decode backends (prefill not fa4) it only warns; with an
    fa4 prefill the decode backend must be in the FA4 list (MLA: flashinfer/trtllm_mla; MHA:
    triton/torch_native/flex_attention); otherwise the resolved ``--attention-backend`` must be
    in the KV4 list (MLA: flashinfer/trtllm_mla; MHA: triton/torch_native/flex_attention/
    trtllm_mha). Each refusal is an ``AssertionError`` whose text names the list as a Python
    list. Backends are ``final_attention_backends``; models whose overrides pick backends
    kvcheck does not restate stop prediction."""
    m = side.model
    if m.hybrid or _arch(side) in _KV4_UNRESOLVED_ARCHS or _is_dsa(side):
        return Stop(
            f"FP4 KV on {_arch(side)}: the attention backend its model hooks pick is not restated for "
            "handle_kv4_compatibility"
        )
    attn, pre, dec = final_attention_backends(side, gpu)
    p_b, d_b = _split(attn, pre, dec)
    hook = "handle_kv4_compatibility"
    mla = m.is_mla
    if p_b != d_b and p_b != "fa4":
        return None  # a warning only (or the mixed NVFP4 recipe)
    if p_b == "fa4":
        allowed, what = (
            (KV4_FA4_MLA_DECODE_BACKENDS, "KV4 FA4 MLA") if mla else (KV4_FA4_MHA_DECODE_BACKENDS, "KV4 FA4 MHA")
        )
        if d_b not in allowed:
            return Refusal(
                "kv4-backend",
                hook,
                "AssertionError",
                f"{what} expects decode_attention_backend to be one of {allowed}, but got {d_b}",
            )
        return None
    allowed, what = (KV4_MLA_BACKENDS, "KV4 MLA") if mla else (KV4_MHA_BACKENDS, "KV4 MHA")
    if attn not in allowed:
        return Refusal(
            "kv4-backend",
            hook,
            "AssertionError",
            f"{what} expects attention_backend to be one of {allowed}, but got {attn}",
        )
    return None
