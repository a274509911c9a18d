"""The attention backend and page size a side resolves to (0.5.23 arg resolution and the
registered model overrides that pick them from the GPU), and the GPU a side runs on.
"""

from __future__ import annotations

from kvcheck.sglang.model import ModelConfig
from kvcheck.sglang.model_archs import DEEPSEEK_FAMILY_ARCHS
from kvcheck.sides import Side


def _backend_page_constraints(
    side: Side, page_size: int | None, backends: tuple[str | None, str | None, str | None] | None = None
) -> int | None:
    """The page size after ``_mla_backend_page_constraints`` (0.5.23 arg resolution):
    attention backends that only run certain page sizes replace the flag.
    ``backends``: resolved (attention, prefill, decode) backends; default: the flags."""
    a = side.args
    draft_backend = (side.raw_args or {}).get("speculative_draft_attention_backend")
    attn, prefill_b, decode_b = (
        backends
        if backends is not None
        else (a.attention_backend, a.prefill_attention_backend, a.decode_attention_backend)
    )
    ad = (attn, decode_b)
    adp = ad + (prefill_b,)
    if "flashmla" in ad:
        page_size = 64
    if "trtllm_mla" in ad and page_size not in (32, 64):
        page_size = 64
    if "cutedsl_mla" in adp and page_size not in (32, 64):
        page_size = 64
    if "trtllm_mha" in adp + (draft_backend,) and page_size not in (16, 32, 64, 128):
        page_size = 64
    if "hpc_ops" in adp and page_size != 64:
        page_size = 64
    return page_size


# Registered model overrides (arg_groups/model_overrides/*.py, 0.5.23) that pick the
# attention backend (and sometimes the page size) from the GPU.
_FA3_OR_TRTLLM_MHA = frozenset({"GptOssForCausalLM", "Llama4ForConditionalGeneration", "Llama4ForCausalLM"})
_QWEN_HYBRID = frozenset(
    {"Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration"}
)


def side_gpu(side: Side):
    """(``Gpu`` of the side, assumed?) — Hopper when the side names none."""
    from kvcheck.sglang.gpu import resolve_gpu

    assumed = side.gpu is None or (side.gpu_source or "").startswith("default")
    return resolve_gpu(side.gpu), assumed


def _default_attn_backend(side: Side, model: ModelConfig, gpu, page_size: int | None) -> str:
    """``get_default_attn_backend`` (arg_groups/model_override_base.py, 0.5.23) on CUDA.
    Hopper stands for ``is_hopper_with_cuda_12_3`` (CUDA >= 12.3 assumed)."""
    a = side.args
    raw = side.raw_args or {}
    topk = raw.get("speculative_eagle_topk")
    no_spec_or_topk1 = topk is None or (topk == 1 and page_size in (None, 1))
    if not model.is_mla:
        if gpu.is_hopper and no_spec_or_topk1:
            return "fa3"
        if (
            gpu.is_sm100
            and no_spec_or_topk1
            and (
                a.speculative_algorithm is None or topk is not None or str(a.speculative_algorithm).upper() == "DFLASH"
            )
        ):
            return "fa4" if model.has_asymmetric_kv else "trtllm_mha"
        return "triton" if model.attention_sinks else "flashinfer"
    if gpu.is_hopper:
        return "fa3"
    if gpu.is_sm100:
        return "flashinfer"
    return "triton"


def resolve_attention(
    side: Side, model: ModelConfig
) -> tuple[tuple[str | None, str | None, str | None], int | None, list[str]]:
    """((attention, prefill, decode) backends, page size or None, notes) as 0.5.23
    resolves them for ``side`` on its GPU: the model's registered overrides
    (DeepSeek family, gpt-oss, Llama 4, Qwen3-Next/3.5, Nemotron-H), then
    ``_attention_backend_default`` (``get_default_attn_backend``), then
    ``_mla_backend_page_constraints``. ``None`` page size means the flag stays unset
    (the pools then use 1). A DSA model on CUDA pins 64 * index_kpool.
    """
    a = side.args
    raw = side.raw_args or {}
    gpu, assumed = side_gpu(side)
    attn, prefill_b, decode_b = a.attention_backend, a.prefill_attention_backend, a.decode_attention_backend
    page = a.page_size
    notes: list[str] = []
    unset = attn is None and prefill_b is None and decode_b is None
    if a.kv_cache_dtype == "nvfp4" and gpu.vendor == "nvidia" and gpu.capability[0] in (10, 12):
        # handle_nvfp4_prefill_kv_dequant_dtype runs first and pins the split backends
        # (prefill flashinfer or trtllm_mha, decode trtllm_mha).
        from kvcheck.sglang.startup import nvfp4_backends

        prefill_b, decode_b = nvfp4_backends(side, gpu)
    arch = model.architecture
    gpu_decided = False
    if model.dsv4:
        # _deepseek_v4_overrides: attention backend dsv4 and page size 256 on CUDA, whatever the flags say.
        return ("dsv4", prefill_b, decode_b), 256, notes
    if model.dsa:
        if unset:
            attn = "dsa"
        page = 64 * max(1, model.index_kpool)
    elif arch in DEEPSEEK_FAMILY_ARCHS and model.is_mla:
        if gpu.is_sm100 and unset:
            attn, gpu_decided = "trtllm_mla", True
    elif arch in _FA3_OR_TRTLLM_MHA:
        if attn is None and (unset or arch not in ("GptOssForCausalLM",)):
            attn = "trtllm_mha" if gpu.is_sm100 else "fa3" if gpu.is_hopper else "triton"
            gpu_decided = True
    elif arch in _QWEN_HYBRID:
        if gpu.is_sm100 and attn is None:
            default = _default_attn_backend(side, model, gpu, page)
            extra_buffer = raw.get("mamba_radix_cache_strategy") == "extra_buffer"
            # A PD decode runs without the radix cache ("Radix cache is disabled for decode server").
            radix = not raw.get("disable_radix_cache") and side.role != "decode"
            use_trtllm = default == "trtllm_mha" and not (
                not extra_buffer and radix and a.speculative_algorithm is None
            )
            attn = "trtllm_mha" if use_trtllm else "triton"
            page = 64 if use_trtllm else 1
            gpu_decided = True
            if not use_trtllm and raw.get("mamba_radix_cache_strategy") in (None, "auto"):
                notes.append(
                    "Qwen3-Next/3.5 on Blackwell: the backend (triton, page 1, or trtllm_mha, page 64) follows the "
                    "Mamba radix-cache strategy resolved at start-up; assumed no extra buffer"
                )
    elif model.hybrid == "minimax_sparse" and unset:
        # model_overrides/minimax_m3.py (non-NVFP4, CUDA): sm100 -> trtllm_mha with
        # fp8_e4m3 KV (else fa4), sm90 -> fa3; unset page size -> 128 with those.
        gpu_decided = True
        if gpu.is_sm100:
            attn = (
                "trtllm_mha"
                if a.kv_cache_dtype == "fp8_e4m3" and not side.env.get("SGLANG_DISABLE_M3_FP8_ATTN_GEMM")
                else "fa4"
            )
        elif gpu.is_hopper:
            attn = "fa3"
        if page is None and attn in ("fa4", "trtllm_mha", "fa3"):
            page = 128
    elif arch == "NemotronHForCausalLM":
        if gpu.is_blackwell and unset:
            gpu_decided = True
            topk = raw.get("speculative_eagle_topk")
            if a.speculative_algorithm is not None:
                if gpu.is_sm100 and topk in (None, 1):
                    attn = "trtllm_mha"
                    page = 64 if page is None else page
                else:
                    attn = "triton"
            elif gpu.is_sm100:
                attn = "trtllm_mha"
    # _attention_backend_default
    if prefill_b is not None and prefill_b == decode_b:
        attn = prefill_b
    elif attn is None:
        attn = _default_attn_backend(side, model, gpu, page)
        gpu_decided = True
    forced = _backend_page_constraints(side, page, (attn, prefill_b, decode_b))
    # _attention_backend_fa3_fp8_fallback, then _fa4_page_constraint (0.5.23).
    if attn == "fa3" and a.kv_cache_dtype == "fp8_e5m2":
        attn = "triton"
    if (
        "fa4" in (attn, prefill_b, decode_b)
        and not model.is_mla
        and gpu.is_sm100
        and (raw.get("speculative_eagle_topk") or 0) <= 1
    ):
        forced = 128
    if gpu_decided and assumed:
        notes.append(
            f"the GPU was not given: attention backend {attn} (page size {forced or 1}) resolved for {gpu.name} "
            "(Hopper assumed)"
        )
    return (attn, prefill_b, decode_b), forced, notes


def resolve_page_size(side: Side, model: ModelConfig) -> tuple[int, bool, str | None]:
    """(page size in tokens, pinned?, note) as 0.5.23 resolves it on the side's GPU.

    ``pinned`` is True when the flag was given or a backend/model rule sets it; False
    when it stays unset and the pools use 1 (e.g. an MLA side on Hopper resolves to fa3
    and page size 1, not 64). Raises nothing.
    """
    args = side.args
    (_, _, _), forced, notes = resolve_attention(side, model)
    note = "; ".join(notes) or None
    if model.is_mla and model.dsa:
        expected = 64 * max(1, model.index_kpool)
        if args.page_size is not None and args.page_size != expected:
            return (
                expected,
                True,
                f"--page-size {args.page_size} is overridden: SGLang sets the page size to {expected} for DeepSeek "
                "DSA on CUDA",
            )
        return expected, True, note
    if args.page_size is not None:
        if forced != args.page_size:
            # forced is the backend-set page size here (resolve_attention)
            return forced, True, f"--page-size {args.page_size} is overridden to {forced} by the attention backend"  # type: ignore[return-value]
        return args.page_size, True, note
    if forced is not None:
        return forced, True, note
    return 1, False, note
