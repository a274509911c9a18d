"""Start-up refusals the args alone reveal, in the order SGLang 0.5.23 raises them.

A server resolves its args once at start-up (``ServerArgs.resolve_once()``, which runs
``sglang.srt.arg_groups.pipeline.run_resolution_pipeline``) and then validates them
(``ServerArgs.check_server_args()`` -> ``arg_groups.validation_hook.check_server_args``),
both before the model is loaded (``Engine._launch_subprocesses``). The first refusal
ends start-up, so only the first one that applies is predicted; the functions below are
listed in the runtime's order.

Restated here (pure, no SGLang import), SGLang 0.5.23 on a CUDA GPU:

* ``pd_disaggregation_hook.handle_pd_disaggregation`` and its
  ``_validate_prefill_complete``;
* ``parallel_hook.handle_decode_context_parallelism``;
* ``model_overrides/deepseek_v2._dsa_dcp_overrides`` (DSA models, via
  ``model_hook.handle_model_specific_adjustments``);
* ``overrides._dsa_kv_cache_dtype_default`` and the HiSparse arm of
  ``overrides._dsa_split_backend_resolution`` (``_check_dsa_backend_constraints``);
* ``speculative_hook.handle_speculative_decoding`` (decode radix cache vs. the resolved
  speculative algorithm) and, for DSA models, ``_handle_eagle_family``'s checks on
  explicit EAGLE parameters;
* ``kv_cache_hook.handle_cache_compatibility`` (the decode host-pool retraction backup);
* ``hisparse_hook.validate_hisparse`` (run from ``check_server_args``).

Where the runtime's next decision depends on something kvcheck cannot know from the
flags (the GPU generation, an auto-chosen speculative parameter), prediction stops there:
``startup_error`` then returns ``None`` rather than guess a later refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from kvcheck.sglang.plan import RuntimeErrorPrediction
from kvcheck.sides import Side

OPERATOR_SEES = "the server exits during start-up with this error, before loading the model"


@dataclass(frozen=True)
class Refusal:
    """One predicted start-up refusal: the kvcheck id, the runtime function, the
    exception class name and its ``str()``."""

    id: str
    hook: str
    type: str
    message: str

    def prediction(self, side: Side) -> RuntimeErrorPrediction:
        stage = "argument validation" if self.hook.startswith("validate_hisparse") else "argument resolution"
        return RuntimeErrorPrediction(
            type=self.type,
            message=self.message,
            raised_by=f"{side.role}: server start-up ({stage}: {self.hook})",
            when="start-up",
            operator_sees=OPERATOR_SEES,
        )


class _Stop:
    """The runtime's next step depends on what the flags do not say: predict no further."""


STOP = _Stop()
Outcome = Union[Refusal, _Stop, None]

# ---------------------------------------------------------------- model families (0.5.23)

# configs/model_config.is_deepseek_v4 / is_minimax_sparse.
DEEPSEEK_V4_ARCHS = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"})
MINIMAX_SPARSE_ARCHS = frozenset({"MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"})
# model_overrides/deepseek_v2._deepseek_family_overrides is registered for these (it calls
# _dsa_dcp_overrides when the model is DSA).
DSA_OVERRIDE_ARCHS = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration", "HYV4ForCausalLM", "HYV4ForCausalLMNextN",
    "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM",
})
# model_hook.handle_model_specific_adjustments runs the DSA KV-dtype / split-backend passes
# for these DSA architectures (its list intersected with overrides._DEEPSEEK_FAMILY_ARCHS).
DSA_KV_PASS_ARCHS = DSA_OVERRIDE_ARCHS - {"LongcatFlashForCausalLMNextN"}

# speculative_hook._handle_eagle_family: topk > 1 with page_size > 1 needs one of these.
PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")
# hisparse_hook.HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE.
HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE = {
    "bfloat16": {"flashmla_sparse"},
    "fp8_e4m3": {"flashmla_kv", "flashinfer_sparse_mla"},
}
# The transfer backends argparse accepts (DISAGG_TRANSFER_BACKEND_CHOICES) all pass the
# decode-DCP backend check of handle_pd_disaggregation: it is unreachable from the flags.


def _is_dsa(side: Side) -> bool:
    return bool(side.model.dsa)


def _arch(side: Side) -> str:
    return side.model.architecture


def _effective_transfer_backend(side: Side) -> str:
    """``mooncake_tcp`` is rewritten to ``mooncake`` first thing in handle_pd_disaggregation."""
    b = side.args.disaggregation_transfer_backend
    return "mooncake" if b == "mooncake_tcp" else b


def resolved_speculative_algorithm(side: Side) -> Optional[str]:
    """handle_speculative_decoding: upper-cased, then ``_resolve_speculative_algorithm_alias``
    (NEXTN and EAGLE become EAGLE, or FROZEN_KV_MTP for a Gemma4 assistant draft)."""
    algo = side.args.speculative_algorithm
    if algo is None:
        return None
    algo = algo.upper()
    if algo in ("NEXTN", "EAGLE"):
        draft = side.draft_model.architecture if side.draft_model is not None else ""
        if draft in ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"):
            return "FROZEN_KV_MTP"
        return "EAGLE"
    return algo


def _retraction_backup(side: Side) -> Optional[str]:
    """handle_pd_disaggregation declares ``host_pool`` whenever the host receive threshold < 1."""
    a = side.args
    if a.disaggregation_decode_host_receive_threshold < 1:
        return "host_pool"
    return a.disaggregation_decode_retraction_backup


def _dsa_resolved_kv_dtype(side: Side) -> Optional[str]:
    """overrides._dsa_kv_cache_dtype_default on CUDA: ``bf16`` -> ``bfloat16``; ``auto`` ->
    ``fp8_e4m3`` on SM100+ else ``bfloat16`` (GPU-dependent: ``None`` here)."""
    kv = side.args.kv_cache_dtype
    if kv == "auto":
        return None
    return "bfloat16" if kv == "bf16" else kv


# ------------------------------------------------------------------ the refusals, in order


def pd_disaggregation(side: Side) -> Outcome:
    """``handle_pd_disaggregation`` (arg_groups/pd_disaggregation_hook.py, SGLang 0.5.23).

    Environment-driven refusals (SGLANG_DISAGG_STAGING_BUFFER, SGLANG_RUST_SERVER) and
    the ``--enable-pd-role-switch`` feature list are not restated (treated as unset / off).
    """
    a = side.args
    hook = "handle_pd_disaggregation"
    backend = _effective_transfer_backend(side)
    if a.disaggregation_decode_allocation_policy == "prefill_complete":
        if a.enable_pd_role_switch:
            return STOP
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
        if a.disaggregation_decode_host_receive_threshold < 1:
            unsupported.append("decode host KV buffering")
        if a.disaggregation_mode == "decode" and (a.disaggregation_decode_enable_radix_cache or a.enable_hierarchical_cache):
            unsupported.append("decode radix cache or decode HiCache")
        if a.disaggregation_mode == "prefill" and a.enable_hierarchical_cache and (
            a.hicache_storage_backend is not None or a.hicache_write_policy != "write_back"
        ):
            unsupported.append("prefill HiCache other than L2 write_back")
        if unsupported:
            return Refusal("decode-allocation-policy", "_validate_prefill_complete", "ValueError",
                           "--disaggregation-decode-allocation-policy prefill_complete does not yet support " + ", ".join(unsupported))
    t = a.disaggregation_decode_host_receive_threshold
    if not 0 <= t <= 1:
        return Refusal("decode-host-receive-threshold", hook, "ValueError",
                       "--disaggregation-decode-host-receive-threshold must be between 0 and 1")
    if t < 1:
        if a.enable_hisparse or a.enable_pd_role_switch:
            return Refusal("decode-host-receive-hisparse", hook, "ValueError",
                           "Decode host receive does not yet support HiSparse or role switching")
        if a.disaggregation_decode_retraction_backup == "cpu_tensor":
            return Refusal("decode-host-receive-retraction", hook, "ValueError",
                           "Decode host KV buffering requires host_pool retraction")
    if a.disaggregation_mode == "decode" and a.disaggregation_decode_enable_radix_cache:
        if a.enable_hisparse:
            return Refusal("decode-radix-cache-incompatible", hook, "ValueError",
                           "--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse")
        if backend == "fake":
            return Refusal("decode-radix-cache-incompatible", hook, "ValueError",
                           "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake")
    if a.disaggregation_mode == "prefill" and backend == "fake":
        return Refusal("prefill-fake-backend", hook, "AssertionError",
                       "Prefill server does not support 'fake' as the transfer backend")
    if a.enable_pd_role_switch and a.disaggregation_mode in ("prefill", "decode"):
        return STOP
    return None


def decode_context_parallelism(side: Side) -> Outcome:
    """``handle_decode_context_parallelism`` (arg_groups/parallel_hook.py, SGLang 0.5.23):
    the size and the prefill-CP combination (the --dcp-comm-backend checks are not restated)."""
    a = side.args
    hook = "handle_decode_context_parallelism"
    if a.dcp_size < 1:
        return Refusal("dcp-size", hook, "ValueError",
                       "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be >= 1, "
                       f"but got dcp_size={a.dcp_size}.")
    if a.dcp_size > 1 and a.enable_prefill_cp:
        return Refusal("dcp-size", hook, "ValueError", "--dcp-size > 1 does not support --enable-prefill-cp.")
    return None


def dsa_dcp(side: Side) -> Outcome:
    """``_dsa_dcp_overrides`` (arg_groups/model_overrides/deepseek_v2.py, SGLang 0.5.23),
    declared by ``_deepseek_family_overrides`` for DSA models: DCP is refused with HiSparse
    or HiCache, and in any PD role."""
    a = side.args
    if not (_is_dsa(side) and _arch(side) in DSA_OVERRIDE_ARCHS) or a.dcp_size <= 1:
        return None
    if _arch(side) in ("HYV4ForCausalLM", "HYV4ForCausalLMNextN"):
        return STOP  # HYV4's own DCP refusal runs first; not restated.
    if a.enable_hisparse or a.enable_hierarchical_cache:
        return Refusal("dsa-dcp", "_dsa_dcp_overrides", "ValueError", "DSA DCP does not support HiSparse or HiCache.")
    if a.disaggregation_mode != "null":
        return Refusal("dsa-dcp", "_dsa_dcp_overrides", "ValueError", "DSA DCP does not support PD disaggregation.")
    return None


def dsa_kv_cache_dtype(side: Side) -> Outcome:
    """``_dsa_kv_cache_dtype_default`` (arg_groups/overrides.py, SGLang 0.5.23) on CUDA: a DSA
    model's KV cache must be bf16/bfloat16 or fp8_e4m3 (``auto`` resolves to one of them).
    This is where HiSparse's KV-dtype requirement bites on CUDA: ``validate_hisparse``'s own
    dtype check never sees anything else for a DSA model."""
    if not (_is_dsa(side) and _arch(side) in DSA_KV_PASS_ARCHS):
        return None
    if side.args.kv_cache_dtype in ("auto", "bf16", "bfloat16", "fp8_e4m3"):
        return None
    return Refusal("dsa-kv-cache-dtype", "_dsa_kv_cache_dtype_default", "AssertionError",
                   "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype")


def dsa_hisparse_backends(side: Side) -> Outcome:
    """The HiSparse arm of ``_dsa_split_backend_resolution`` and ``_check_dsa_backend_constraints``
    (arg_groups/overrides.py, SGLang 0.5.23) on CUDA: HiSparse defaults each unset DSA backend
    to flashmla_sparse (bfloat16) or flashmla_kv (fp8_e4m3); TileLang with FP8 KV and the
    ROCm-only triton backend are refused."""
    a = side.args
    if not (_is_dsa(side) and _arch(side) in DSA_KV_PASS_ARCHS and a.enable_hisparse):
        return None
    kv = _dsa_resolved_kv_dtype(side)
    if kv is None:
        if a.dsa_prefill_backend is None and a.dsa_decode_backend is None:
            return None
        return STOP  # the default and the allowed set depend on the GPU generation
    default = "flashmla_kv" if kv == "fp8_e4m3" else "flashmla_sparse"
    prefill = a.dsa_prefill_backend or default
    decode = a.dsa_decode_backend or default
    hook = "_dsa_split_backend_resolution"
    if kv == "fp8_e4m3" and "tilelang" in (prefill, decode):
        return Refusal("hisparse-dsa-backend", hook, "ValueError", "CUDA TileLang FP8 KV does not support HiSparse.")
    if "triton" in (prefill, decode):
        return Refusal("hisparse-dsa-backend", "_check_dsa_backend_constraints", "ValueError",
                       "The triton DSA backend is only supported on ROCm/HIP. Pick an alternative DSA backend "
                       "for CUDA (flashmla_kv on Hopper, trtllm on Blackwell).")
    return None


def speculative(side: Side) -> Outcome:
    """``handle_speculative_decoding`` (arg_groups/speculative_hook.py, SGLang 0.5.23): a decode
    with ``--disaggregation-decode-enable-radix-cache`` refuses any resolved algorithm but
    EAGLE/EAGLE3/DSPARK (NEXTN resolves to EAGLE). For DSA models (page size forced to 64 x
    index_kpool on CUDA), ``_handle_eagle_family``'s checks on explicit EAGLE parameters."""
    a = side.args
    algo = resolved_speculative_algorithm(side)
    if algo == "EAGLE3" and side.draft_model is not None and side.draft_model.architecture.startswith("Gemma4"):
        return STOP  # _resolve_speculative_algorithm_alias refuses it; not restated
    if a.disaggregation_mode == "decode" and a.disaggregation_decode_enable_radix_cache and algo not in (None, "DSPARK", "EAGLE", "EAGLE3"):
        return Refusal("decode-radix-cache-incompatible", "handle_speculative_decoding", "ValueError",
                       "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding "
                       f"(--speculative-algorithm {algo})")
    if algo is None or not _is_dsa(side) or not a.enable_hisparse:
        return None
    # Only followed as far as HiSparse needs it (the topk check in validate_hisparse).
    if algo not in ("EAGLE", "EAGLE3"):
        return STOP
    if not a.speculative_adaptive and a.speculative_num_steps is None:
        if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None:
            return Refusal("speculative-params", "_handle_eagle_family", "AssertionError", "")
        return STOP  # topk is then chosen by _auto_choose_speculative_params
    topk = a.speculative_eagle_topk
    backend = a.attention_backend or "dsa"
    if topk is not None and topk > 1 and backend not in PAGE_TREE_SPEC_BACKENDS:
        return Refusal("speculative-params", "_handle_eagle_family", "ValueError",
                       "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                       f"{PAGE_TREE_SPEC_BACKENDS}; got attention_backend={backend!r}. "
                       "Use page_size == 1 or one of those backends.")
    return None


def cache_compatibility(side: Side) -> Outcome:
    """``handle_cache_compatibility`` (arg_groups/kv_cache_hook.py, SGLang 0.5.23): the host-pool
    retraction backup (explicit, or declared by a host receive threshold < 1) is for a PD
    decode only, and not with DCP."""
    a = side.args
    if _retraction_backup(side) != "host_pool":
        return None
    if a.disaggregation_mode != "decode":
        return Refusal("decode-host-pool-role", "handle_cache_compatibility", "ValueError",
                       "--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode server.")
    if a.dcp_size > 1:
        return Refusal("decode-host-pool-dcp", "handle_cache_compatibility", "ValueError",
                       "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.")
    return None


def validate_hisparse(side: Side) -> Outcome:
    """``validate_hisparse`` (arg_groups/hisparse_hook.py, SGLang 0.5.23), run by
    ``check_server_args`` after resolution: model family, radix cache (a PD decode has
    turned it off by itself), mixed chunk, linear speculation, adaptive speculation, and the
    DSA backends allowed for the KV dtype (CUDA)."""
    a = side.args
    if not a.enable_hisparse:
        return None
    arch = _arch(side)
    if arch in DEEPSEEK_V4_ARCHS or arch in MINIMAX_SPARSE_ARCHS:
        return STOP  # their own start-up checks are not restated
    if not _is_dsa(side):
        return Refusal("hisparse-model", "validate_hisparse", "AssertionError",
                       "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models "
                       "(e.g., DeepSeek V3.2, GLM-5), DeepSeek V4, and MiniMax M3 now. ")
    if a.radix_cache_enabled:
        return Refusal("hisparse-radix-cache", "validate_hisparse", "AssertionError",
                       "Hierarchical sparse attention currently requires --disable-radix-cache.")
    algo = resolved_speculative_algorithm(side)
    enable_spec = algo is not None and algo != "NONE"
    if a.enable_mixed_chunk:
        if enable_spec:
            return STOP  # the speculative hook may have turned mixed chunk off
        return Refusal("hisparse-mixed-chunk", "validate_hisparse_feature_combos", "ValueError",
                       "--enable-hisparse does not support --enable-mixed-chunk yet.")
    if enable_spec and (a.speculative_eagle_topk or 1) != 1:
        return Refusal("hisparse-spec-topk", "validate_hisparse", "ValueError",
                       "The minimal HiSparse spec integration supports linear speculation only; "
                       "use --speculative-eagle-topk 1.")
    if enable_spec and a.speculative_adaptive:
        return Refusal("hisparse-spec-adaptive", "validate_hisparse", "ValueError",
                       "HiSparse speculative decoding uses statically sized swap state; "
                       "--speculative-adaptive is not supported.")
    kv = _dsa_resolved_kv_dtype(side)
    if kv is None:
        return None if a.dsa_prefill_backend is None and a.dsa_decode_backend is None else STOP
    allowed = sorted(HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE.get(kv, {"flashmla_sparse", "flashmla_kv", "flashinfer_sparse_mla"}))
    for backend, label in ((a.dsa_prefill_backend, "prefill"), (a.dsa_decode_backend, "decode")):
        if backend is not None and backend not in allowed:
            return Refusal("hisparse-dsa-backend", "validate_hisparse_dsa_backend", "ValueError",
                           f"HiSparse supports DSA {label} backend(s) {allowed} "
                           f"on this platform with --kv-cache-dtype={kv}, "
                           f"but got --dsa-{label}-backend={backend}. "
                           f"Please use one of {allowed}, or omit the option "
                           "to let SGLang pick a backend for this platform.")
    return None


# In the runtime's order: resolve_once() (the pipeline), then check_server_args().
ORDER: tuple[Callable[[Side], Outcome], ...] = (
    pd_disaggregation,
    decode_context_parallelism,
    dsa_dcp,
    dsa_kv_cache_dtype,
    dsa_hisparse_backends,
    speculative,
    cache_compatibility,
    validate_hisparse,
)

# Every id a Refusal may carry (for the check's finding ids and --ignore).
REFUSAL_IDS = (
    "decode-allocation-policy",
    "decode-host-receive-threshold",
    "decode-host-receive-hisparse",
    "decode-host-receive-retraction",
    "decode-radix-cache-incompatible",
    "prefill-fake-backend",
    "dcp-size",
    "dsa-dcp",
    "dsa-kv-cache-dtype",
    "hisparse-dsa-backend",
    "speculative-params",
    "decode-host-pool-role",
    "decode-host-pool-dcp",
    "hisparse-model",
    "hisparse-radix-cache",
    "hisparse-mixed-chunk",
    "hisparse-spec-topk",
    "hisparse-spec-adaptive",
)


def first_refusal(side: Side) -> Optional[Refusal]:
    """The first start-up refusal this side's flags cause, or ``None`` (none, or not
    predictable past a GPU- or auto-choice-dependent step)."""
    for step in ORDER:
        out = step(side)
        if out is STOP:
            return None
        if out is not None:
            return out
    return None


def startup_error(side: Side) -> Optional[RuntimeErrorPrediction]:
    """The exception SGLang 0.5.23 raises while resolving this side's args at start-up
    (``ServerArgs.resolve_once()`` then ``check_server_args()``), or ``None``."""
    r = first_refusal(side)
    return r.prediction(side) if r is not None else None
