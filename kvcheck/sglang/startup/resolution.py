"""The PD, DSA, speculative, cache and HiSparse steps of argument resolution
(``handle_pd_disaggregation``, ``handle_decode_context_parallelism``, the DeepSeek/DSA model
overrides, ``handle_speculative_decoding``, ``handle_cache_compatibility``) and
``validate_hisparse``."""

from __future__ import annotations

from kvcheck.sglang.gpu import Gpu
from kvcheck.sglang.startup.base import (
    DEEPSEEK_V4_ARCHS,
    HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE,
    HISPARSE_KV_CACHE_DTYPES,
    MINIMAX_SPARSE_ARCHS,
    PAGE_TREE_SPEC_BACKENDS,
    Outcome,
    Refusal,
    Stop,
    _arch,
    _dsa_resolved_kv_dtype,
    _effective_transfer_backend,
    _env_bool,
    _is_dsa,
    _raw,
    _resolved_kv_dtype,
    _retraction_backup,
    dsa_pass,
    host_receive_on,
    release_at_least,
    resolved_speculative_algorithm,
)
from kvcheck.sides import Side


def pd_disaggregation(side: Side, gpu: Gpu) -> Outcome:
    """``handle_pd_disaggregation`` (arg_groups/pd_disaggregation_hook.py, SGLang 0.5.23).

    Environment-driven refusals (SGLANG_DISAGG_STAGING_BUFFER, SGLANG_RUST_SERVER) and
    the ``--enable-pd-role-switch`` feature list are not restated (treated as unset / off).
    """
    a = side.args
    hook = "handle_pd_disaggregation"
    backend = _effective_transfer_backend(side)
    if a.disaggregation_decode_allocation_policy == "prefill_complete":
        if a.enable_pd_role_switch:
            return Stop("--enable-pd-role-switch with prefill_complete: the role-switch checks are not restated")
        unsupported = []
        if a.disaggregation_mode not in ("prefill", "decode"):
            unsupported.append("aggregated serving")
        if backend != "mooncake":
            unsupported.append("transfer backends other than Mooncake")
        if a.pp_size != 1 or a.attn_cp_size != 1 or a.dcp_size != 1:
            unsupported.append("pipeline or attention context parallelism")
        # handle_deprecated_dp_attention has already turned enable_dp_attention off, so
        # the runtime's attention-DP size here is 1 and any tp_size > 1 is refused.
        if a.tp_size != 1:
            unsupported.append("attention tensor parallelism greater than one")
        if a.enable_pdmux or a.decoupled_spec_role != "null":
            unsupported.append("PD multiplexing or decoupled speculation")
        if a.encoder_only or a.language_only:
            unsupported.append("encoder disaggregation")
        if a.enable_hisparse:
            unsupported.append("HiSparse")
        if host_receive_on(side):
            unsupported.append("decode host KV buffering")
        if a.disaggregation_mode == "decode" and (
            a.disaggregation_decode_enable_radix_cache or a.enable_hierarchical_cache
        ):
            unsupported.append("decode radix cache or decode HiCache")
        if (
            a.disaggregation_mode == "prefill"
            and a.enable_hierarchical_cache
            and (a.hicache_storage_backend is not None or a.hicache_write_policy != "write_back")
        ):
            unsupported.append("prefill HiCache other than L2 write_back")
        if unsupported:
            return Refusal(
                "decode-allocation-policy",
                "_validate_prefill_complete",
                "ValueError",
                "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
                + ", ".join(unsupported),
            )
    t = a.disaggregation_decode_host_receive_threshold
    if not 0 <= t <= 1:
        return Refusal(
            "decode-host-receive-threshold",
            hook,
            "ValueError",
            "--disaggregation-decode-host-receive-threshold must be between 0 and 1",
        )
    if host_receive_on(side):
        if a.enable_hisparse or a.enable_pd_role_switch:
            return Refusal(
                "decode-host-receive-hisparse",
                hook,
                "ValueError",
                "Decode host receive does not yet support HiSparse or role switching",
            )
        if a.disaggregation_decode_retraction_backup == "cpu_tensor":
            return Refusal(
                "decode-host-receive-retraction",
                hook,
                "ValueError",
                "Decode host KV buffering requires host_pool retraction",
            )
    if a.disaggregation_mode == "decode" and a.disaggregation_decode_enable_radix_cache:
        if a.enable_hisparse:
            return Refusal(
                "decode-radix-cache-incompatible",
                hook,
                "ValueError",
                "--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse",
            )
        if backend == "fake":
            return Refusal(
                "decode-radix-cache-incompatible",
                hook,
                "ValueError",
                "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend "
                "fake",
            )
    if a.disaggregation_mode == "prefill" and backend == "fake" and release_at_least(side, "0.5.10"):  # from 0.5.10
        return Refusal(
            "prefill-fake-backend",
            hook,
            "AssertionError",
            "Prefill server does not support 'fake' as the transfer backend",
        )
    if a.disaggregation_mode in ("prefill", "decode"):
        if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER") and a.disaggregation_transfer_backend not in (
            "mooncake",
            "nixl",
        ):
            return Refusal(
                "staging-buffer",
                hook,
                "ValueError",
                "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', "
                f"got '{a.disaggregation_transfer_backend}'.",
            )
        if a.enable_pd_role_switch:
            return Stop("--enable-pd-role-switch: its feature list is not restated")
    return None


def decode_context_parallelism(side: Side, gpu: Gpu) -> Outcome:
    """``handle_decode_context_parallelism`` (arg_groups/parallel_hook.py, SGLang 0.5.23):
    the size and the prefill-CP combination (the --dcp-comm-backend checks are not restated)."""
    a = side.args
    hook = "handle_decode_context_parallelism"
    if a.dcp_size < 1:
        return Refusal(
            "dcp-size",
            hook,
            "ValueError",
            "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be >= 1, "
            f"but got dcp_size={a.dcp_size}.",
        )
    if a.dcp_size > 1 and a.enable_prefill_cp:
        return Refusal("dcp-size", hook, "ValueError", "--dcp-size > 1 does not support --enable-prefill-cp.")
    return None


def dsa_dcp(side: Side, gpu: Gpu) -> Outcome:
    """``_dsa_dcp_overrides`` (arg_groups/model_overrides/deepseek_v2.py, SGLang 0.5.23),
    declared by ``_deepseek_family_overrides`` for DSA models: DCP is refused with HiSparse
    or HiCache, and in any PD role."""
    a = side.args
    if not dsa_pass(side) or a.dcp_size <= 1:
        return None
    if _arch(side) in ("HYV4ForCausalLM", "HYV4ForCausalLMNextN"):
        return Stop("HYV4 with --dcp-size > 1: its own DCP refusal is not restated")
    if a.enable_hisparse or a.enable_hierarchical_cache:
        return Refusal("dsa-dcp", "_dsa_dcp_overrides", "ValueError", "DSA DCP does not support HiSparse or HiCache.")
    if a.disaggregation_mode != "null":
        return Refusal("dsa-dcp", "_dsa_dcp_overrides", "ValueError", "DSA DCP does not support PD disaggregation.")
    return None


def dsa_kv_cache_dtype(side: Side, gpu: Gpu) -> Outcome:
    """``_dsa_kv_cache_dtype_default`` (arg_groups/overrides.py, SGLang 0.5.23) on CUDA: a DSA
    model's KV cache must be bf16/bfloat16 or fp8_e4m3 (``auto`` resolves to one of them).
    This is where HiSparse's KV-dtype requirement bites on CUDA: ``validate_hisparse``'s own
    dtype check never sees anything else for a DSA model."""
    if not dsa_pass(side, kv_pass=True):
        return None
    if side.args.kv_cache_dtype in ("auto", "bf16", "bfloat16", "fp8_e4m3"):
        return None
    return Refusal(
        "dsa-kv-cache-dtype",
        "_dsa_kv_cache_dtype_default",
        "AssertionError",
        "DeepSeek NSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype"
        if not release_at_least(side, "0.5.8")
        else "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype",
    )  # "NSA" until 0.5.7


def dsa_hisparse_backends(side: Side, gpu: Gpu) -> Outcome:
    """The HiSparse arm of ``_dsa_split_backend_resolution`` and ``_check_dsa_backend_constraints``
    (arg_groups/overrides.py, SGLang 0.5.23) on CUDA: HiSparse defaults each unset DSA backend
    to flashmla_sparse (bfloat16) or flashmla_kv (fp8_e4m3); TileLang with FP8 KV and the
    ROCm-only triton backend are refused."""
    a = side.args
    if (
        dsa_pass(side, kv_pass=True)
        and not a.enable_hisparse
        and {"tilelang", "triton"} & {a.dsa_prefill_backend, a.dsa_decode_backend}
    ):
        # The non-HiSparse arm (learnable-sink and GLM SM12 FP8 early returns, then
        # _check_dsa_backend_constraints: ROCm-only triton, TileLang FP8 with both backends
        # tilelang, no DCP, SM89+) is not restated; measured: TileLang FP8 with one tilelang
        # backend is refused by 0.5.22 and 0.5.23 ("raw and scaled FP8 KV layouts cannot be mixed").
        return Stop(
            "a DSA model with a tilelang / triton DSA backend flag: _check_dsa_backend_constraints is not restated"
        )
    if not (dsa_pass(side, kv_pass=True) and a.enable_hisparse):
        return None
    kv = _dsa_resolved_kv_dtype(side, gpu)
    default = "flashmla_kv" if kv == "fp8_e4m3" else "flashmla_sparse"
    prefill = a.dsa_prefill_backend or default
    decode = a.dsa_decode_backend or default
    hook = "_dsa_split_backend_resolution"
    if kv == "fp8_e4m3" and "tilelang" in (prefill, decode):
        return Refusal("hisparse-dsa-backend", hook, "ValueError", "CUDA TileLang FP8 KV does not support HiSparse.")
    if "triton" in (prefill, decode):
        return Refusal(
            "hisparse-dsa-backend",
            "_check_dsa_backend_constraints",
            "ValueError",
            "The triton DSA backend is only supported on ROCm/HIP. Pick an alternative DSA backend "
            "for CUDA (flashmla_kv on Hopper, trtllm on Blackwell).",
        )
    return None


def speculative(side: Side, gpu: Gpu) -> Outcome:
    """``handle_speculative_decoding`` (arg_groups/speculative_hook.py, SGLang 0.5.23): a decode
    with ``--disaggregation-decode-enable-radix-cache`` refuses any resolved algorithm but
    EAGLE/EAGLE3/DSPARK (NEXTN resolves to EAGLE). For DSA models (page size forced to 64 x
    index_kpool on CUDA), ``_handle_eagle_family``'s checks on explicit EAGLE parameters."""
    a = side.args
    algo = resolved_speculative_algorithm(side)
    if algo == "EAGLE3" and side.draft_model is not None and side.draft_model.architecture.startswith("Gemma4"):
        return Stop("EAGLE3 with a Gemma4 assistant draft: the speculative alias refusal is not restated")
    if (
        a.disaggregation_mode == "decode"
        and a.disaggregation_decode_enable_radix_cache
        and algo not in (None, "DSPARK", "EAGLE", "EAGLE3")
    ):
        return Refusal(
            "decode-radix-cache-incompatible",
            "handle_speculative_decoding",
            "ValueError",
            "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding "
            f"(--speculative-algorithm {algo})",
        )
    if algo is None or not _is_dsa(side) or not a.enable_hisparse:
        return None
    # Only followed as far as HiSparse needs it (the topk check in validate_hisparse).
    if algo not in ("EAGLE", "EAGLE3"):
        return Stop(
            "HiSparse with a speculative algorithm other than EAGLE/EAGLE3: the speculative hook is not restated"
        )
    if not a.speculative_adaptive and a.speculative_num_steps is None:
        if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None:
            return Refusal("speculative-params", "_handle_eagle_family", "AssertionError", "")
        # _auto_choose_speculative_params: (steps 3, topk 1, draft 4) for every DSA architecture.
        if _arch(side) in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
            return Stop(
                "HiSparse speculation without --speculative-num-steps: the auto-chosen parameters are not restated"
            )
        return None
    topk = a.speculative_eagle_topk
    backend = a.attention_backend or "dsa"
    if topk is not None and topk > 1 and backend not in PAGE_TREE_SPEC_BACKENDS:
        return Refusal(
            "speculative-params",
            "_handle_eagle_family",
            "ValueError",
            "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
            f"{PAGE_TREE_SPEC_BACKENDS}; got attention_backend={backend!r}. "
            "Use page_size == 1 or one of those backends.",
        )
    return None


def cache_compatibility(side: Side, gpu: Gpu) -> Outcome:
    """``handle_cache_compatibility`` (arg_groups/kv_cache_hook.py, SGLang 0.5.23): the host-pool
    retraction backup (explicit, or declared by a host receive threshold < 1) is for a PD
    decode only, and not with DCP."""
    a = side.args
    if _retraction_backup(side) != "host_pool":
        return None
    if a.disaggregation_mode != "decode":
        return Refusal(
            "decode-host-pool-role",
            "handle_cache_compatibility",
            "ValueError",
            "--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode server.",
        )
    if a.dcp_size > 1:
        return Refusal(
            "decode-host-pool-dcp",
            "handle_cache_compatibility",
            "ValueError",
            "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
        )
    return None


def hicache_compatibility(side: Side, gpu: Gpu) -> Outcome:
    """The rest of ``handle_cache_compatibility`` (arg_groups/kv_cache_hook.py, SGLang 0.5.23)
    that PD flags reach: HiCache with the radix cache off, which a PD decode is unless
    ``--disaggregation-decode-enable-radix-cache`` (handle_pd_disaggregation turns it off),
    and ``--disaggregation-decode-enable-offload-kvcache``'s role/storage/host-pool rules."""
    a = side.args
    hook = "handle_cache_compatibility"
    if a.enable_hierarchical_cache and not a.radix_cache_enabled:
        return Refusal(
            "hicache-radix-cache",
            hook,
            "ValueError",
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
            "and cannot be used at the same time. Please use only one of them.",
        )
    if _raw(side, "disaggregation_decode_enable_offload_kvcache", False):
        if a.disaggregation_mode != "decode":
            return Refusal(
                "decode-offload-kvcache",
                hook,
                "ValueError",
                "The argument disaggregation-decode-enable-offload-kvcache is only supported for decode side.",
            )
        if a.hicache_storage_backend is None:
            return Refusal(
                "decode-offload-kvcache",
                hook,
                "ValueError",
                "The argument disaggregation-decode-enable-offload-kvcache is only supported when "
                "hicache-storage-backend is provided.",
            )
        if _retraction_backup(side) == "host_pool":
            return Refusal(
                "decode-offload-kvcache",
                hook,
                "ValueError",
                "The arguments disaggregation-decode-enable-offload-kvcache and "
                "disaggregation-decode-retraction-backup=host_pool are mutually exclusive: "
                "both build a decode host pool.",
            )
    return None


def validate_hisparse(side: Side, gpu: Gpu) -> Outcome:
    """``validate_hisparse`` (arg_groups/hisparse_hook.py, SGLang 0.5.23), run by
    ``check_server_args`` after resolution: model family, radix cache (a PD decode has
    turned it off by itself), mixed chunk, linear speculation, adaptive speculation, and the
    DSA backends allowed for the KV dtype (CUDA)."""
    a = side.args
    if not a.enable_hisparse:
        return None
    arch = _arch(side)
    if not release_at_least(side, "0.5.21") and (arch in DEEPSEEK_V4_ARCHS or arch in MINIMAX_SPARSE_ARCHS):
        return Stop(
            "HiSparse on DeepSeek V4 / MiniMax M3 before SGLang 0.5.21: that release's model checks are not restated"
        )
    # DeepseekV4ForCausalLM (is_deepseek_v4) passes the model assert and, on CUDA, takes the
    # DSA path's dtype/backend checks below with its own resolved KV dtype (fp8_e4m3 for auto).
    is_v4 = arch == "DeepseekV4ForCausalLM" and side.model.dsv4
    if (arch in DEEPSEEK_V4_ARCHS and not is_v4) or arch in MINIMAX_SPARSE_ARCHS:
        return Stop("HiSparse on DeepSeek V4 (NextN/DSpark/V4.1) / MiniMax M3: their start-up checks are not restated")
    if not _is_dsa(side) and not is_v4:
        return Refusal("hisparse-model", "validate_hisparse", "AssertionError", _hisparse_model_text(side))
    if a.radix_cache_enabled:
        return Refusal(
            "hisparse-radix-cache",
            "validate_hisparse",
            "AssertionError",
            "Hierarchical sparse attention currently requires --disable-radix-cache.",
        )
    algo = resolved_speculative_algorithm(side)
    enable_spec = algo is not None and algo != "NONE"
    if a.enable_mixed_chunk and release_at_least(side, "0.5.22"):  # validate_hisparse_feature_combos, from 0.5.22
        if enable_spec:
            return Stop(
                "HiSparse with --enable-mixed-chunk and speculation: whether the speculative hook turns mixed chunk "
                "off is not restated"
            )
        return Refusal(
            "hisparse-mixed-chunk",
            "validate_hisparse_feature_combos",
            "ValueError",
            "--enable-hisparse does not support --enable-mixed-chunk yet.",
        )
    if enable_spec and (a.speculative_eagle_topk or 1) != 1:
        return Refusal(
            "hisparse-spec-topk",
            "validate_hisparse",
            "ValueError",
            "The minimal HiSparse spec integration supports linear speculation only; use --speculative-eagle-topk 1.",
        )
    if enable_spec and a.speculative_adaptive:
        return Refusal(
            "hisparse-spec-adaptive",
            "validate_hisparse",
            "ValueError",
            "HiSparse speculative decoding uses statically sized swap state; --speculative-adaptive is not supported.",
        )
    if is_v4:
        kv = "fp8_e4m3" if a.kv_cache_dtype == "auto" else a.kv_cache_dtype
        if kv not in ("bfloat16", "auto", "fp8_e4m3"):
            return Stop(
                f"HiSparse on DeepSeek V4 with --kv-cache-dtype {kv}: refused by the V4 dtype assertion first (not "
                "restated)"
            )
    else:
        # The dtype string validate_hisparse reads: rewritten by _dsa_kv_cache_dtype_default only
        # for the architectures model_hook runs it for (not the DSA NextN architectures).
        kv = _resolved_kv_dtype(side, gpu)
        if (older := _hisparse_kv_dtype_before_0_5_14(side, kv)) is not None:
            return older
        if (
            release_at_least(side, "0.5.14")
            and kv not in ("bfloat16", "auto", "fp8_e4m3")
            and kv not in HISPARSE_KV_CACHE_DTYPES
        ):
            # validate_hisparse_kv_cache_dtype (hisparse_hook.py, from SGLang 0.5.14; same text
            # through 0.5.23). A DSA architecture in DSA_KV_PASS_ARCHS is refused earlier by
            # _dsa_kv_cache_dtype_default, so this is where the DSA NextN architectures
            # (DeepseekV3ForCausalLMNextN, GlmMoeDsaForCausalLMNextN, ...) with bf16/fp8_e5m2 stop.
            choices = " or ".join(f"--kv-cache-dtype={d}" for d in HISPARSE_KV_CACHE_DTYPES)
            return Refusal(
                "hisparse-kv-dtype",
                "validate_hisparse_kv_cache_dtype",
                "ValueError",
                f"HiSparse requires one of {HISPARSE_KV_CACHE_DTYPES} KV cache dtypes, "
                f"but got --kv-cache-dtype={kv}. Please use {choices}.",
            )
    allowed = sorted(
        HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE.get(kv, {"flashmla_sparse", "flashmla_kv", "flashinfer_sparse_mla"})
    )
    for backend, label in ((a.dsa_prefill_backend, "prefill"), (a.dsa_decode_backend, "decode")):
        if backend is not None and backend not in allowed:
            return Refusal(
                "hisparse-dsa-backend",
                "validate_hisparse_dsa_backend",
                "ValueError",
                f"HiSparse supports DSA {label} backend(s) {allowed} "
                f"on this platform with --kv-cache-dtype={kv}, "
                f"but got --dsa-{label}-backend={backend}. "
                f"Please use one of {allowed}, or omit the option "
                "to let SGLang pick a backend for this platform.",
            )
    return None


def _hisparse_model_text(side: Side) -> str:
    """The model-family assertion's text of the side's release (``check_server_args`` 0.5.10 ..
    0.5.11, ``hisparse_hook.validate_hisparse`` from 0.5.12)."""
    if not release_at_least(side, "0.5.12"):
        return (
            "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models now"
            "(e.g., DeepSeek V3.2, GLM-5). "
        )
    if not release_at_least(side, "0.5.21"):
        return (
            "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) "
            "models (e.g., DeepSeek V3.2, GLM-5) and DeepSeek V4 now. "
        )
    return (
        "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models "
        "(e.g., DeepSeek V3.2, GLM-5), DeepSeek V4, and MiniMax M3 now. "
    )


def _hisparse_kv_dtype_before_0_5_14(side: Side, kv: str) -> Outcome:
    """The KV dtype check of HiSparse before 0.5.14, on the dtype string after resolution:
    none in 0.5.10 .. 0.5.10.post1; 0.5.11 ``check_server_args``: bfloat16 only; 0.5.12 ..
    0.5.13 ``validate_hisparse``: bfloat16, auto or fp8_e4m3 (the DSA backend checks after it
    only read backend flags, left to ``gate.unrestated_steps`` before 0.5.22)."""
    if release_at_least(side, "0.5.14") or not release_at_least(side, "0.5.11"):
        return None
    if not release_at_least(side, "0.5.12"):
        if kv != "bfloat16":
            return Refusal(
                "hisparse-kv-dtype",
                "check_server_args",
                "ValueError",
                f"HiSparse requires bfloat16 KV cache, but got --kv-cache-dtype={kv}. "
                "Please use --kv-cache-dtype=bfloat16.",
            )
        return None
    if kv not in ("bfloat16", "auto", "fp8_e4m3"):
        return Refusal(
            "hisparse-kv-dtype",
            "validate_hisparse",
            "ValueError",
            f"HiSparse requires bfloat16 or fp8_e4m3 KV cache, but got --kv-cache-dtype={kv}. "
            "Please use --kv-cache-dtype=bfloat16 or fp8_e4m3.",
        )
    return None


# handle_page_major_kv_layout's allow-lists (arg_groups/kv_cache_hook.py, SGLang 0.5.23): the
# resolved (prefill, decode) attention backends a page-major (unified-memory) pool may run on.
PAGE_MAJOR_MLA_BACKENDS = frozenset({"triton", "fa3", "trtllm_mla", "flashinfer", "cutedsl_mla", "flashmla"})
PAGE_MAJOR_MHA_BACKENDS = frozenset({"triton", "fa3", "fa4", "flashinfer", "trtllm_mha"})


def page_major_unified_memory(side: Side, gpu: Gpu) -> Outcome:
    """``handle_page_major_kv_layout`` then ``handle_unified_memory_pool``
    (arg_groups/kv_cache_hook.py, SGLang 0.5.23; run right after ``handle_cache_compatibility``).

    * ``--enable-page-major-kv-layout`` without ``--enable-unified-memory``: AssertionError
      (the same text in 0.5.22);
    * ``--enable-unified-memory`` implies page-major; the resolved attention backends
      (``attention_backends_of``: prefill, decode) must be in the MLA or MHA allow-list;
    * in PD (every side kvcheck checks): the transfer backend must be ``mooncake``
      (``ServerArgs._unified_memory_pd_transfer_backends``; ``mooncake_tcp`` was rewritten to
      it), PP 1, no speculative decoding on Mooncake, lazy compaction on
      (``SGLANG_DISABLE_LAZY_COMPACTION`` unset), no HiSparse.

    Restated for plain MHA (K and V rows of one width) and MLA models on 0.5.23; a hybrid,
    DSA, DeepSeek V4 or asymmetric-KV model, 0.5.22's unified path, and what the hook checks
    after the PD asserts (decode KV offload, host-pool retraction, two-batch overlap,
    LMCache, the L3 linker, DCP) are a ``Stop``. Releases before 0.5.22 stop in
    ``gate.unrestated_steps``."""
    from kvcheck.sglang.pools import MHA, MLA, pool_of
    from kvcheck.sglang.startup.backends import final_attention_backends

    unified = bool(_raw(side, "enable_unified_memory", False))
    if not unified and not _raw(side, "enable_page_major_kv_layout", False):
        return None
    hook = "handle_page_major_kv_layout"
    if not unified:
        return Refusal(
            "unified-memory",
            hook,
            "AssertionError",
            "--enable-page-major-kv-layout without --enable-unified-memory is temporarily unsupported: the strided "
            "MHA K/V views were removed and the static-pool page-major layout awaits its per-layer-view "
            "reimplementation. Run with --enable-unified-memory, or drop --enable-page-major-kv-layout.",
        )
    if not release_at_least(side, "0.5.23"):
        return Stop("--enable-unified-memory: this release's page-major and unified-memory checks are not restated")
    model = side.model
    pool = pool_of(model)
    asymmetric = pool == MHA and (model.v_head_dim or model.head_dim) != model.head_dim
    if pool not in (MHA, MLA) or asymmetric:
        return Stop("--enable-unified-memory on a hybrid, DSA or asymmetric-KV model: its checks are not restated")
    attn, pre, dec = final_attention_backends(side, gpu)
    backends = {pre or attn, dec or attn} - {None}
    allowed = PAGE_MAJOR_MLA_BACKENDS if pool == MLA else PAGE_MAJOR_MHA_BACKENDS
    if not backends <= allowed:
        return Refusal(
            "unified-memory",
            hook,
            "AssertionError",
            f"--enable-page-major-kv-layout: the resolved attention backends {sorted(backends)} are not in the "
            f"allowed set {sorted(allowed)} for this configuration. Pass a compatible --attention-backend.",
        )
    hook = "handle_unified_memory_pool"
    backend = _effective_transfer_backend(side)
    refusal = None
    if backend != "mooncake":
        refusal = (
            "--enable-unified-memory with PD disaggregation supports only these transfer backends: mooncake; got "
            f"{backend!r}."
        )
    elif side.args.pp_size != 1:
        refusal = (
            "--enable-unified-memory with PD disaggregation does not support pipeline parallelism (whole-envelope "
            "transfer has no per-layer entries to subset)."
        )
    elif resolved_speculative_algorithm(side) is not None:
        refusal = (
            "--enable-unified-memory with PD disaggregation does not support speculative decoding with the "
            "Mooncake transfer backend."
        )
    elif _env_bool(side, "SGLANG_DISABLE_LAZY_COMPACTION"):
        refusal = (
            "--enable-unified-memory with PD disaggregation requires lazy compaction; unset "
            "SGLANG_DISABLE_LAZY_COMPACTION."
        )
    elif side.args.enable_hisparse:
        refusal = (
            "--enable-unified-memory with PD disaggregation is not compatible with --enable-hisparse: the "
            "decode-side HiSparse prealloc path ships host/C4 rows straight from the allocator, bypassing the "
            "virtual->physical translation the unified pool needs."
        )
    if refusal is not None:
        return Refusal("unified-memory", hook, "AssertionError", refusal)
    rest = (
        _raw(side, "disaggregation_decode_enable_offload_kvcache", False)
        or _retraction_backup(side) == "host_pool"
        or _raw(side, "enable_two_batch_overlap", False)
        or _raw(side, "enable_lmcache", False)
        or _raw(side, "enable_unified_cache_external_linker", False)
        or side.args.dcp_size > 1
    )
    if rest:
        return Stop(
            "--enable-unified-memory with decode KV offload, host-pool retraction, two-batch overlap, LMCache, the "
            "L3 linker or DCP: handle_unified_memory_pool's later checks are not restated"
        )
    return None
