"""Start-up refusals the inputs decide, in the order SGLang 0.5.23 raises them.

A server resolves its args once at start-up (``ServerArgs.resolve_once()``, which runs
``sglang.srt.arg_groups.pipeline.run_resolution_pipeline``) and then validates them
(``ServerArgs.check_server_args()`` -> ``arg_groups.validation_hook.check_server_args``),
both before the model is loaded (``Engine._launch_subprocesses``). After the model and the
KV pools are allocated, the scheduler builds its PD queue and KV manager
(``PrefillBootstrapQueue``/``DecodePreallocQueue`` -> ``NixlKVManager.__init__``), which
refuse more (``connector_outcome``). The first refusal ends start-up, so only the first one
that applies is predicted; ``ORDER`` lists the restated steps in the runtime's order:

* ``pd_disaggregation_hook.handle_pd_disaggregation`` (+ ``_validate_prefill_complete``,
  ``SGLANG_DISAGG_STAGING_BUFFER``'s backend);
* ``parallel_hook.handle_decode_context_parallelism``;
* the DeepSeek/DSA model overrides (``_dsa_dcp_overrides``, ``_dsa_kv_cache_dtype_default``,
  the HiSparse arm of ``_dsa_split_backend_resolution``), the attention backend they pick
  (``dsa``; ``trtllm_mla`` for DeepSeek V3 on SM100);
* ``kv_cache_hook.handle_nvfp4_prefill_kv_dequant_dtype``;
* ``attention_hook.handle_attention_backend_compatibility`` (trtllm_mla: Blackwell and the
  KV dtype strings ``fp8_e4m3``/``bf16``/``auto``; cutedsl_mla; trtllm_mha per GPU), with
  ``get_default_attn_backend`` restated for the GPU;
* ``handle_kv4_compatibility`` (NVFP4: SM100/SM120, and refused in PD on SM100) and
  ``handle_mxfp8_kv_cache_compatibility`` (Blackwell);
* ``hicache_hook.resolve_hicache_dcp_compatibility``;
* ``parallel_hook.handle_data_parallelism`` and ``handle_context_parallelism`` (TP vs
  attention DP x CP, DP replicas with attention DP);
* ``kv_shard_hook.handle_kv_cache_sharding`` (through the page-size check);
* ``speculative_hook.handle_speculative_decoding`` (decode radix cache; DSA EAGLE params);
* ``kv_cache_hook.handle_cache_compatibility`` (host pool, HiCache vs the radix cache a PD
  decode turns off, decode KV offload);
* ``check_server_args``: node split, ``check_pipeline_parallel_compat`` (PP + MTP only on a
  prefill), DP replicas across nodes, chunked prefill vs the resolved page size, and
  ``validate_hisparse``.

The GPU decides some of these: every step takes the side's ``Gpu`` (``Side.gpu``; Hopper
when not given). Where the next refusal depends on something kvcheck does not restate, a
step returns a ``Stop`` with the reason; the ``startup`` check reports it as ``unchecked``.
Verified against the runtime on a seeded corpus (tests/test_startup_corpus.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from kvcheck.sglang.gpu import Gpu, resolve_gpu
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
        validation = self.hook.startswith("validate_hisparse") or self.hook in ("check_pipeline_parallel_compat", "check_server_args")
        stage = "argument validation" if validation else "argument resolution"
        return RuntimeErrorPrediction(
            type=self.type,
            message=self.message,
            raised_by=f"{side.role}: server start-up ({stage}: {self.hook})",
            when="start-up",
            operator_sees=OPERATOR_SEES,
        )


@dataclass(frozen=True)
class Stop:
    """The runtime's next step depends on what the inputs do not say: predict no further.
    ``reason`` says what kvcheck would need to know (shown in an ``unchecked`` finding)."""

    reason: str


STOP = Stop("a start-up step kvcheck does not restate decides the next refusal")
_Stop = Stop
Outcome = Union[Refusal, Stop, None]

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
# hisparse_hook.HISPARSE_KV_CACHE_DTYPES (0.5.14 .. 0.5.23).
HISPARSE_KV_CACHE_DTYPES = ("bfloat16", "fp8_e4m3")
# cp_tp_group_sharing_hook._SUPPORTED_MODELS (0.5.23; 0.5.22 had Glm5Next only).
CP_TP_GROUP_SHARING_ARCHS = frozenset({"Glm5NextForConditionalGeneration", "Qwen4ExpForConditionalGeneration"})
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


def host_receive_on(side: Side) -> bool:
    """Whether decode host receive (``--disaggregation-decode-host-receive-threshold``) is
    on. SGLang 0.5.21 introduced the flag with default 0.0, on when > 0
    (``handle_pd_disaggregation``, ``DecodePreallocQueue._init_kv_manager`` of 0.5.21);
    0.5.22 inverted it: default 1.0, on when < 1 (0.5.22, 0.5.23). Releases before 0.5.21
    have no such flag (the args keep 1.0: off)."""
    from kvcheck.sglang.releases import in_range, side_release

    t = side.args.disaggregation_decode_host_receive_threshold
    version = side_release(side)[0]
    if version and in_range(version, "0.5.21", "0.5.22"):
        # off unless given: the release's own default (0.0) is off
        return "disaggregation_decode_host_receive_threshold" in (side.raw_args or {}) and t > 0
    return t < 1


def _retraction_backup(side: Side) -> Optional[str]:
    """handle_pd_disaggregation declares ``host_pool`` whenever decode host receive is on
    (``host_receive_on``)."""
    a = side.args
    if host_receive_on(side):
        return "host_pool"
    return a.disaggregation_decode_retraction_backup


def _dsa_resolved_kv_dtype(side: Side, gpu: Gpu) -> Optional[str]:
    """overrides._dsa_kv_cache_dtype_default on CUDA: ``bf16`` -> ``bfloat16``; ``auto`` ->
    ``fp8_e4m3`` on SM100+ (capability major >= 10) else ``bfloat16``."""
    kv = side.args.kv_cache_dtype
    if kv == "auto":
        return "fp8_e4m3" if gpu.capability[0] >= 10 else "bfloat16"
    return "bfloat16" if kv == "bf16" else kv


def _resolved_kv_dtype(side: Side, gpu: Gpu) -> str:
    """The KV dtype string the later hooks read: a DSA model's is rewritten by
    ``_dsa_kv_cache_dtype_default``; every other model keeps the flag's string."""
    if _is_dsa(side) and _arch(side) in DSA_KV_PASS_ARCHS:
        return _dsa_resolved_kv_dtype(side, gpu) or side.args.kv_cache_dtype
    return side.args.kv_cache_dtype


def _raw(side: Side, dest: str, default=None):
    """A flag kvcheck does not type (``Side.raw_args``), or its SGLang default."""
    v = side.raw_args.get(dest, default)
    return default if v is None else v


def _env_bool(side: Side, name: str) -> bool:
    """``sglang.srt.environ.EnvBool.parse``: true/1/yes/y (any case) is on; unset is off."""
    v = side.env.get(name)
    return v is not None and v.lower() in ("true", "1", "yes", "y")


def release_at_least(side: Side, first: str) -> bool:
    """Whether the side's SGLang release (``releases.side_release``: its ``sglang_version``,
    the newest modeled release when none was resolved) is ``first`` or later. Gates the
    start-up steps that exist from ``first`` on; a side on an unknown release is never
    judged (``unknown-release``), so ``False`` there is never read as a pass."""
    from kvcheck.sglang.releases import in_range, side_release

    version = side_release(side)[0]
    return version is not None and in_range(version, first)


def dp_layout(side: Side) -> tuple[int, int]:
    """(dp_size, attn_dp_size) after ``parallel_hook.handle_deprecated_dp_attention``
    (SGLang 0.5.23): ``--enable-dp-attention`` with ``--attn-dp-size 1`` moves
    ``dp_size`` into ``attn_dp_size`` and sets ``dp_size`` to 1."""
    a = side.args
    if a.enable_dp_attention and a.attn_dp_size == 1:
        return 1, a.dp_size
    return a.dp_size, a.attn_dp_size


# ------------------------------------------------------------------ the refusals, in order


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
    if host_receive_on(side):
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
    if a.disaggregation_mode in ("prefill", "decode"):
        if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER") and a.disaggregation_transfer_backend not in ("mooncake", "nixl"):
            return Refusal("staging-buffer", hook, "ValueError",
                           "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', "
                           f"got '{a.disaggregation_transfer_backend}'.")
        if a.enable_pd_role_switch:
            return Stop("--enable-pd-role-switch: its feature list is not restated")
    return None


def decode_context_parallelism(side: Side, gpu: Gpu) -> Outcome:
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


def dsa_dcp(side: Side, gpu: Gpu) -> Outcome:
    """``_dsa_dcp_overrides`` (arg_groups/model_overrides/deepseek_v2.py, SGLang 0.5.23),
    declared by ``_deepseek_family_overrides`` for DSA models: DCP is refused with HiSparse
    or HiCache, and in any PD role."""
    a = side.args
    if not (_is_dsa(side) and _arch(side) in DSA_OVERRIDE_ARCHS) or a.dcp_size <= 1:
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
    if not (_is_dsa(side) and _arch(side) in DSA_KV_PASS_ARCHS):
        return None
    if side.args.kv_cache_dtype in ("auto", "bf16", "bfloat16", "fp8_e4m3"):
        return None
    return Refusal("dsa-kv-cache-dtype", "_dsa_kv_cache_dtype_default", "AssertionError",
                   "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype")


def dsa_hisparse_backends(side: Side, gpu: Gpu) -> Outcome:
    """The HiSparse arm of ``_dsa_split_backend_resolution`` and ``_check_dsa_backend_constraints``
    (arg_groups/overrides.py, SGLang 0.5.23) on CUDA: HiSparse defaults each unset DSA backend
    to flashmla_sparse (bfloat16) or flashmla_kv (fp8_e4m3); TileLang with FP8 KV and the
    ROCm-only triton backend are refused."""
    a = side.args
    if not (_is_dsa(side) and _arch(side) in DSA_KV_PASS_ARCHS and a.enable_hisparse):
        return None
    kv = _dsa_resolved_kv_dtype(side, gpu)
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


def speculative(side: Side, gpu: Gpu) -> Outcome:
    """``handle_speculative_decoding`` (arg_groups/speculative_hook.py, SGLang 0.5.23): a decode
    with ``--disaggregation-decode-enable-radix-cache`` refuses any resolved algorithm but
    EAGLE/EAGLE3/DSPARK (NEXTN resolves to EAGLE). For DSA models (page size forced to 64 x
    index_kpool on CUDA), ``_handle_eagle_family``'s checks on explicit EAGLE parameters."""
    a = side.args
    algo = resolved_speculative_algorithm(side)
    if algo == "EAGLE3" and side.draft_model is not None and side.draft_model.architecture.startswith("Gemma4"):
        return Stop("EAGLE3 with a Gemma4 assistant draft: the speculative alias refusal is not restated")
    if a.disaggregation_mode == "decode" and a.disaggregation_decode_enable_radix_cache and algo not in (None, "DSPARK", "EAGLE", "EAGLE3"):
        return Refusal("decode-radix-cache-incompatible", "handle_speculative_decoding", "ValueError",
                       "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding "
                       f"(--speculative-algorithm {algo})")
    if algo is None or not _is_dsa(side) or not a.enable_hisparse:
        return None
    # Only followed as far as HiSparse needs it (the topk check in validate_hisparse).
    if algo not in ("EAGLE", "EAGLE3"):
        return Stop("HiSparse with a speculative algorithm other than EAGLE/EAGLE3: the speculative hook is not restated")
    if not a.speculative_adaptive and a.speculative_num_steps is None:
        if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None:
            return Refusal("speculative-params", "_handle_eagle_family", "AssertionError", "")
        # _auto_choose_speculative_params: (steps 3, topk 1, draft 4) for every DSA architecture.
        if _arch(side) in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
            return Stop("HiSparse speculation without --speculative-num-steps: the auto-chosen parameters are not restated")
        return None
    topk = a.speculative_eagle_topk
    backend = a.attention_backend or "dsa"
    if topk is not None and topk > 1 and backend not in PAGE_TREE_SPEC_BACKENDS:
        return Refusal("speculative-params", "_handle_eagle_family", "ValueError",
                       "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                       f"{PAGE_TREE_SPEC_BACKENDS}; got attention_backend={backend!r}. "
                       "Use page_size == 1 or one of those backends.")
    return None


def cache_compatibility(side: Side, gpu: Gpu) -> Outcome:
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


def hicache_compatibility(side: Side, gpu: Gpu) -> Outcome:
    """The rest of ``handle_cache_compatibility`` (arg_groups/kv_cache_hook.py, SGLang 0.5.23)
    that PD flags reach: HiCache with the radix cache off, which a PD decode is unless
    ``--disaggregation-decode-enable-radix-cache`` (handle_pd_disaggregation turns it off),
    and ``--disaggregation-decode-enable-offload-kvcache``'s role/storage/host-pool rules."""
    a = side.args
    hook = "handle_cache_compatibility"
    if a.enable_hierarchical_cache and not a.radix_cache_enabled:
        return Refusal("hicache-radix-cache", hook, "ValueError",
                       "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
                       "and cannot be used at the same time. Please use only one of them.")
    if _raw(side, "disaggregation_decode_enable_offload_kvcache", False):
        if a.disaggregation_mode != "decode":
            return Refusal("decode-offload-kvcache", hook, "ValueError",
                           "The argument disaggregation-decode-enable-offload-kvcache is only supported for decode side.")
        if a.hicache_storage_backend is None:
            return Refusal("decode-offload-kvcache", hook, "ValueError",
                           "The argument disaggregation-decode-enable-offload-kvcache is only supported when "
                           "hicache-storage-backend is provided.")
        if _retraction_backup(side) == "host_pool":
            return Refusal("decode-offload-kvcache", hook, "ValueError",
                           "The arguments disaggregation-decode-enable-offload-kvcache and "
                           "disaggregation-decode-retraction-backup=host_pool are mutually exclusive: "
                           "both build a decode host pool.")
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
    # DeepseekV4ForCausalLM (is_deepseek_v4) passes the model assert and, on CUDA, takes the
    # DSA path's dtype/backend checks below with its own resolved KV dtype (fp8_e4m3 for auto).
    is_v4 = arch == "DeepseekV4ForCausalLM" and side.model.dsv4
    if (arch in DEEPSEEK_V4_ARCHS and not is_v4) or arch in MINIMAX_SPARSE_ARCHS:
        return Stop("HiSparse on DeepSeek V4 (NextN/DSpark/V4.1) / MiniMax M3: their start-up checks are not restated")
    if not _is_dsa(side) and not is_v4:
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
            return Stop("HiSparse with --enable-mixed-chunk and speculation: whether the speculative hook turns mixed chunk off is not restated")
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
    if is_v4:
        kv = "fp8_e4m3" if a.kv_cache_dtype == "auto" else a.kv_cache_dtype
        if kv not in ("bfloat16", "auto", "fp8_e4m3"):
            return Stop(f"HiSparse on DeepSeek V4 with --kv-cache-dtype {kv}: refused by the V4 dtype assertion first (not restated)")
    else:
        # The dtype string validate_hisparse reads: rewritten by _dsa_kv_cache_dtype_default only
        # for the architectures model_hook runs it for (not the DSA NextN architectures).
        kv = _resolved_kv_dtype(side, gpu)
        if release_at_least(side, "0.5.14") and kv not in ("bfloat16", "auto", "fp8_e4m3") and kv not in HISPARSE_KV_CACHE_DTYPES:
            # validate_hisparse_kv_cache_dtype (hisparse_hook.py, from SGLang 0.5.14; same text
            # through 0.5.23). A DSA architecture in DSA_KV_PASS_ARCHS is refused earlier by
            # _dsa_kv_cache_dtype_default, so this is where the DSA NextN architectures
            # (DeepseekV3ForCausalLMNextN, GlmMoeDsaForCausalLMNextN, ...) with bf16/fp8_e5m2 stop.
            choices = " or ".join(f"--kv-cache-dtype={d}" for d in HISPARSE_KV_CACHE_DTYPES)
            return Refusal("hisparse-kv-dtype", "validate_hisparse_kv_cache_dtype", "ValueError",
                           f"HiSparse requires one of {HISPARSE_KV_CACHE_DTYPES} KV cache dtypes, "
                           f"but got --kv-cache-dtype={kv}. Please use {choices}.")
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


# ------------------------------------------------- attention backends, KV dtypes, the GPU

# kv_cache_hook._NVFP4_PREFILL_BACKEND inverted: the prefill backends NVFP4 can dequantize for.
NVFP4_PREFILL_DEQUANT_DTYPE = {"flashinfer": "fp8_e4m3", "trtllm_mha": "nvfp4"}
# overrides._mla_kv_cache_dtype_checks / _cutedsl_prefill_backend_fill (exact strings).
TRTLLM_MLA_KV_DTYPES = ("fp8_e4m3", "bf16", "auto")
CUTEDSL_MLA_KV_DTYPES = ("fp8_e4m3", "bf16", "bfloat16", "auto")


def _gpu_is(gpu: Gpu, *majors: int) -> bool:
    return gpu.vendor == "nvidia" and gpu.capability[0] in majors


def resolved_attention_backends(side: Side, gpu: Gpu) -> tuple[Optional[str], Optional[str], Optional[str]]:
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
    if attn is None and not side.model.is_mla and _gpu_is(gpu, 10):
        # get_default_attn_backend, MHA on SM100 without topk > 1 speculation.
        topk = a.speculative_eagle_topk
        if a.speculative_algorithm is None or (topk is not None and topk <= 1):
            attn = "trtllm_mha"
    return attn, pre, dec


def _model_override_backend(side: Side, gpu: Gpu) -> Optional[str]:
    """``--attention-backend`` after ``_deepseek_family_overrides`` (SGLang 0.5.23): ``dsa`` for
    a DSA model with no backend flag, ``trtllm_mla`` for a DeepSeek V3-family MLA model on
    SM100 with no backend flag."""
    a = side.args
    attn = a.attention_backend
    if side.model.dsv4:
        return "dsv4"  # _deepseek_v4_overrides: attention_backend "dsv4" whatever the flag (CUDA)
    if _arch(side) in DSA_OVERRIDE_ARCHS and attn is None and a.prefill_attention_backend is None and a.decode_attention_backend is None:
        if _is_dsa(side):
            return "dsa"
        if _gpu_is(gpu, 10):
            return "trtllm_mla"
    return attn


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
        if major == 10 and no_spec_or_topk_one and (
            a.speculative_algorithm is None or topk is not None or a.speculative_algorithm.upper() == "DFLASH"
        ):
            m = side.model
            asym = m.v_head_dim is not None and m.head_dim is not None and m.v_head_dim != m.head_dim
            return "fa4" if asym else "trtllm_mha"
        return "flashinfer"
    return {9: "fa3", 10: "flashinfer"}.get(major, "triton")


def _page_after_model_overrides(side: Side) -> Optional[int]:
    """``--page-size`` after ``_deepseek_family_overrides``: 64 x index_kpool for a DSA model on CUDA."""
    if _is_dsa(side) and _arch(side) in DSA_OVERRIDE_ARCHS:
        return 64 * max(1, side.model.index_kpool)
    if side.model.dsv4:
        return 256  # _deepseek_v4_overrides (CUDA)
    return side.args.page_size


def final_attention_backends(side: Side, gpu: Gpu) -> tuple[str, Optional[str], Optional[str]]:
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
    if "trtllm_mha" in (attn, dec, pre, _raw(side, "speculative_draft_attention_backend")) and page not in (16, 32, 64, 128):
        page = 64
    if "fa4" in (attn, dec, pre) and not side.model.is_mla and _gpu_is(gpu, 10) and (a.speculative_eagle_topk or 0) <= 1:
        page = 128
    return 1 if page is None else page


def _split(attn: Optional[str], pre: Optional[str], dec: Optional[str]) -> tuple[Optional[str], Optional[str]]:
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
            return Refusal("nvfp4-prefill-dequant", hook, "ValueError",
                           "--prefill-kv-cache-dequant-dtype applies only with --kv-cache-dtype=nvfp4.")
        return None
    if requested == "auto":
        explicit = a.prefill_attention_backend or _model_override_backend(side, gpu)
        if explicit in NVFP4_PREFILL_DEQUANT_DTYPE:
            requested = NVFP4_PREFILL_DEQUANT_DTYPE[explicit]
        elif explicit is not None:
            return Refusal("nvfp4-prefill-dequant", hook, "ValueError",
                           "NVFP4 prefill supports an FP8 E4M3 workspace or native NVFP4, but backend "
                           f"{explicit!r} provides neither.")
        else:
            requested = "nvfp4" if _gpu_is(gpu, 10) else "fp8_e4m3"
    if requested == "nvfp4" and not _gpu_is(gpu, 10):
        return Refusal("nvfp4-prefill-dequant", hook, "ValueError",
                       "Native NVFP4 prefill currently requires SM100; use "
                       "--prefill-kv-cache-dequant-dtype=fp8_e4m3 on this platform.")
    target = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}[requested]
    if a.prefill_attention_backend is not None and a.prefill_attention_backend != target:
        return Refusal("nvfp4-prefill-dequant", hook, "ValueError",
                       f"--prefill-kv-cache-dequant-dtype={requested} requires prefill backend {target!r}, but "
                       f"--prefill-attention-backend={a.prefill_attention_backend!r} was set. "
                       "Remove the backend option and select the KV dtype only.")
    if a.decode_attention_backend not in (None, "trtllm_mha"):
        return Refusal("nvfp4-prefill-dequant", hook, "ValueError",
                       f"NVFP4 decode requires --decode-attention-backend=trtllm_mha; got {a.decode_attention_backend!r}. "
                       "Remove the backend option; NVFP4 selects the supported decode implementation automatically.")
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
    if a.kv_cache_dtype == "nvfp4":
        # nvfp4_prefill_dequant passed: it pinned the split backends.
        pre, dec = nvfp4_backends(side, gpu)
        attn = _model_override_backend(side, gpu)
    else:
        attn, pre, dec = resolved_attention_backends(side, gpu)
    kv = _resolved_kv_dtype(side, gpu)
    hook = "handle_attention_backend_compatibility"
    if attn == "flex_attention" and a.speculative_algorithm is not None:
        return Refusal("attention-backend-gpu", hook, "AssertionError",
                       "Speculative decoding is currently not supported with Flex Attention backend")
    if "trtllm_mla" in (attn, dec):
        if not _gpu_is(gpu, 10, 11, 12):
            return Refusal("attention-backend-gpu", "_mla_kv_cache_dtype_checks", "ValueError",
                           "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). Please use a different backend.")
        if kv not in TRTLLM_MLA_KV_DTYPES:
            return Refusal("attention-kv-dtype", "_mla_kv_cache_dtype_checks", "ValueError",
                           "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.")
    if "cutedsl_mla" in (attn, pre, dec):
        if pre == "cutedsl_mla" and a.prefill_attention_backend == "cutedsl_mla":
            return Refusal("attention-backend-gpu", "_cutedsl_prefill_backend_fill", "AssertionError",
                           "CuteDSL MLA only supports decoding for now")
        if not _gpu_is(gpu, 10):
            return Refusal("attention-backend-gpu", "_cutedsl_prefill_backend_fill", "ValueError",
                           "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). Please use a different backend.")
        if kv not in CUTEDSL_MLA_KV_DTYPES:
            return Refusal("attention-kv-dtype", "_cutedsl_prefill_backend_fill", "ValueError",
                           "CuteDSL MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.")
        if a.prefill_attention_backend is None:
            pre = "trtllm_mla"
    p_b, d_b = _split(attn, pre, dec)
    if "trtllm_mha" in (p_b, d_b):
        ok = _gpu_is(gpu, 9, 10, 12)
        if p_b == "trtllm_mha" and not ok:
            return Refusal("attention-backend-gpu", hook, "ValueError",
                           "TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or SM120 GPUs. "
                           "Please use a different prefill backend.")
        if p_b == "trtllm_mha" and _gpu_is(gpu, 12) and (
            kv == "fp8_e4m3" or float(side.env.get("SGLANG_SKIP_SOFTMAX_PREFILL_THRESHOLD_SCALE_FACTOR") or 0) > 0
        ):
            return Refusal("attention-kv-dtype", hook, "ValueError",
                           "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax.")
        if d_b == "trtllm_mha" and not ok:
            return Refusal("attention-backend-gpu", hook, "ValueError",
                           "TRTLLM MHA backend for decode is only supported on Hopper (SM90), Blackwell (SM100) and (SM120) GPUs. "
                           "Please use a different decode backend.")
        if p_b == "trtllm_mha" and not _gpu_is(gpu, 10) and a.attn_cp_size > 1:
            return Refusal("attention-backend-gpu", hook, "ValueError",
                           "Prefill context parallelism with the TRTLLM MHA prefill backend requires SM100 (trtllm-gen context "
                           "kernel): the SM90/SM120 fmha_v2 prefill path does not implement CP shard masking.")
    return None


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
            return Refusal("kv-dtype-gpu", "handle_kv4_compatibility", "RuntimeError",
                           "--kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. "
                           "Use --kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe.")
        if _raw(side, "enable_unified_memory", False):
            return Refusal("kv-dtype-gpu", "handle_kv4_compatibility", "ValueError",
                           "FP4 KV cache does not yet support --enable-unified-memory: the unified MHA pool does not "
                           "allocate FP4 block scales or the prefill dequant workspace.")
        if kv == "fp4_mx_block16" or not _gpu_is(gpu, 10):
            return kv4_backend_lists(side, gpu)
        # SM100: the pinned decode backend is trtllm_mha, so the native-NVFP4 rules apply.
        a = side.args
        hook = "handle_kv4_compatibility"
        algo = a.speculative_algorithm.upper() if a.speculative_algorithm is not None else None
        if algo in ("DFLASH", "DSPARK"):
            return Refusal("kv-dtype-gpu", hook, "ValueError",
                           f"SM100 native NVFP4 speculative decoding does not yet support {algo}; use EAGLE/NEXTN or NGRAM.")
        if algo is not None and algo not in ("EAGLE", "EAGLE3", "NEXTN", "NGRAM"):
            return Refusal("kv-dtype-gpu", hook, "ValueError",
                           f"SM100 native NVFP4 speculative decoding supports EAGLE, EAGLE3, NEXTN, and breadth-1 NGRAM; got {algo}.")
        if algo == "NGRAM" and int(_raw(side, "speculative_ngram_max_bfs_breadth", 10)) != 1:
            return Refusal("kv-dtype-gpu", hook, "ValueError",
                           "SM100 native NVFP4 NGRAM speculative decoding requires --speculative-ngram-max-bfs-breadth=1 "
                           "because trtllm_mha supports linear target verification only; got "
                           f"{_raw(side, 'speculative_ngram_max_bfs_breadth', 10)}.")
        draft_backend = _raw(side, "speculative_draft_attention_backend")
        if algo not in (None, "NGRAM") and draft_backend not in (None, "trtllm_mha"):
            return Refusal("kv-dtype-gpu", hook, "ValueError",
                           "SM100 native NVFP4 speculative decoding requires --speculative-draft-attention-backend=trtllm_mha "
                           f"so the draft worker consumes its physical NVFP4 KV layout; got {draft_backend!r}.")
        if a.disaggregation_mode != "null":
            return Refusal("kv-dtype-gpu", hook, "ValueError",
                           "SM100 native NVFP4 with trtllm_mha does not yet support PD disaggregation because its physical "
                           "block-scale layout is not implemented by the KV transfer path.")
        return Stop("NVFP4 KV outside PD: not restated")
    if kv == "mxfp8" and not _gpu_is(gpu, 10, 11, 12):
        return Refusal("kv-dtype-gpu", "handle_mxfp8_kv_cache_compatibility", "ValueError",
                       "--kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the block-scaled operands "
                       "used by the FA4 MXFP8 attention path.")
    return None


# handle_kv4_compatibility's backend lists (arg_groups/kv_cache_hook.py, SGLang 0.5.23).
KV4_FA4_MLA_DECODE_BACKENDS = ["flashinfer", "trtllm_mla"]
KV4_FA4_MHA_DECODE_BACKENDS = ["triton", "torch_native", "flex_attention"]
KV4_MLA_BACKENDS = ["flashinfer", "trtllm_mla"]
KV4_MHA_BACKENDS = ["triton", "torch_native", "flex_attention", "trtllm_mha"]
# Architectures whose registered model override or hybrid hooks pick the attention backend
# in ways ``final_attention_backends`` does not restate (SWA/chunked, Qwen3-Next/3.5,
# Nemotron-H, MiniMax sparse): the FP4 backend lists are not decided for them.
_KV4_UNRESOLVED_ARCHS = frozenset({
    "GptOssForCausalLM", "Llama4ForConditionalGeneration", "Llama4ForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM",
}) | MINIMAX_SPARSE_ARCHS


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
        return Stop(f"FP4 KV on {_arch(side)}: the attention backend its model hooks pick is not restated for handle_kv4_compatibility")
    attn, pre, dec = final_attention_backends(side, gpu)
    p_b, d_b = _split(attn, pre, dec)
    hook = "handle_kv4_compatibility"
    mla = m.is_mla
    if p_b != d_b and p_b != "fa4":
        return None  # a warning only (or the mixed NVFP4 recipe)
    if p_b == "fa4":
        allowed, what = (KV4_FA4_MLA_DECODE_BACKENDS, "KV4 FA4 MLA") if mla else (KV4_FA4_MHA_DECODE_BACKENDS, "KV4 FA4 MHA")
        if d_b not in allowed:
            return Refusal("kv4-backend", hook, "AssertionError",
                           f"{what} expects decode_attention_backend to be one of {allowed}, but got {d_b}")
        return None
    allowed, what = (KV4_MLA_BACKENDS, "KV4 MLA") if mla else (KV4_MHA_BACKENDS, "KV4 MHA")
    if attn not in allowed:
        return Refusal("kv4-backend", hook, "AssertionError", f"{what} expects attention_backend to be one of {allowed}, but got {attn}")
    return None


# ------------------------------------------------------------- HiCache, DP, CP, sharding


def hicache_dcp(side: Side, gpu: Gpu) -> Outcome:
    """``hicache_hook.resolve_hicache_dcp_compatibility`` (SGLang 0.5.23), reached through
    ``handle_hicache``: HiCache with ``--dcp-size > 1`` supports only DSPARK speculation (the
    raw ``--speculative-algorithm`` string), no HiSparse, and MLA models only."""
    a = side.args
    if a.dcp_size <= 1 or not a.enable_hierarchical_cache:
        return None
    hook = "resolve_hicache_dcp_compatibility"
    if a.hicache_storage_backend is not None:
        return Stop("HiCache L3 storage with DCP: the host-memory-mode resolution is not restated")
    if a.speculative_algorithm not in (None, "DSPARK"):
        return Refusal("hicache-dcp", hook, "NotImplementedError",
                       "HiCache with --dcp-size > 1 only supports DSPARK speculative decoding; other draft-model "
                       "host pools have no DCP index translation.")
    if _raw(side, "enable_lmcache", False):
        return Refusal("hicache-dcp", hook, "NotImplementedError",
                       "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation.")
    if a.enable_hisparse:
        return Refusal("hicache-dcp", hook, "NotImplementedError",
                       "--enable-hisparse with --dcp-size > 1 is not supported: the HiSparse host pool is "
                       "constructed without DCP translation.")
    if not side.model.is_mla:
        return Refusal("hicache-dcp", hook, "NotImplementedError",
                       "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives "
                       "in MLATokenToKVPoolHost, and the MHA host pool has none.")
    return None


def data_parallelism(side: Side, gpu: Gpu) -> Outcome:
    """``parallel_hook.handle_data_parallelism`` (SGLang 0.5.23): data-parallel replicas
    (``--dp-size > 1``) cannot be combined with attention DP, and attention DP must divide
    ``--tp-size`` (a bare ``assert``: the exception text is empty)."""
    dp, attn_dp = dp_layout(side)
    hook = "handle_data_parallelism"
    if attn_dp > 1 and dp > 1:
        return Refusal("dp-size", hook, "ValueError",
                       f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with "
                       "attention data parallelism are not supported.")
    if attn_dp > 1 and side.args.tp_size % attn_dp != 0:
        return Refusal("tp-attn-dp-cp", hook, "AssertionError", "")
    return None


def context_parallelism(side: Side, gpu: Gpu) -> Outcome:
    """``parallel_hook.handle_context_parallelism`` (SGLang 0.5.23): with ``--attn-cp-size > 1``
    the TP size (the world size) must divide by attention CP, and by attention DP x CP.
    Prefill CP (``--enable-prefill-cp``) has model-specific resolution not restated."""
    a = side.args
    if a.enable_prefill_cp:
        shared = cp_tp_group_sharing(side, gpu)
        if shared is not None:
            return shared
        return Stop("--enable-prefill-cp: the prefill context-parallel resolution is not restated")
    _, attn_dp = dp_layout(side)
    cp = a.attn_cp_size
    if cp > 1:
        if a.tp_size % cp != 0:
            return Refusal("tp-attn-dp-cp", "handle_context_parallelism", "AssertionError",
                           "tp_size must be divisible by attn_cp_size")
        if a.tp_size % (attn_dp * cp) != 0:
            return Refusal("tp-attn-dp-cp", "handle_context_parallelism", "AssertionError",
                           "tp_size must be divisible by attn_dp_size * attn_cp_size")
    return None


def cp_tp_group_sharing(side: Side, gpu: Gpu) -> Optional[Refusal]:
    """``cp_tp_group_sharing_hook.resolve_cp_tp_group_sharing`` as SGLang 0.5.23 runs it from
    ``handle_context_parallelism`` (CUDA, after the HIP / DeepSeek V3.2 / MiMo prefill-CP
    checks, none of which a Qwen4Exp model meets), for ``Qwen4ExpForConditionalGeneration``
    with ``--enable-prefill-cp`` and ``--attn-cp-size > 1``: attention CP must equal TP, the
    CP strategy must be zigzag, no speculative decoding, none of the features it lists, and
    (new in 0.5.23) no ``SGLANG_DISAGG_STAGING_BUFFER`` on a PD prefill. The refusal, or
    ``None`` where the hook passes or is not restated (GLM-5 Next: its EP size is set by the
    MLA prefill-CP resolution before; releases before 0.5.23: the hook differs, 0.5.22 had
    GLM-5 Next only and refused every PD role)."""
    a = side.args
    arch = _arch(side)
    if arch not in CP_TP_GROUP_SHARING_ARCHS or a.attn_cp_size <= 1 or not release_at_least(side, "0.5.23"):
        return None
    if arch == "Glm5NextForConditionalGeneration":
        return None  # the MLA prefill-CP resolution before the hook sets its EP size: not restated (Stop)
    hook = "resolve_cp_tp_group_sharing"
    if a.attn_cp_size != a.tp_size:
        return Refusal("cp-tp-group-sharing", hook, "ValueError",
                       "CP-TP group sharing requires --attn-cp-size == --tp-size, got "
                       f"attn_cp_size={a.attn_cp_size}, tp_size={a.tp_size}.")
    if _raw(side, "cp_strategy") != "zigzag":
        return Refusal("cp-tp-group-sharing", hook, "ValueError", "CP-TP group sharing requires --cp-strategy zigzag.")
    if a.speculative_algorithm is not None:
        return Refusal("cp-tp-group-sharing", hook, "ValueError",
                       "--speculative-algorithm is not supported with CP-TP group sharing.")
    # In the runtime's dict order; the first one set refuses.
    unsupported = (
        ("enable-dsa-cache-layer-split", bool(_raw(side, "enable_dsa_cache_layer_split", False))),
        ("dcp-size > 1", a.dcp_size > 1),
        ("enable-mixed-chunk", bool(a.enable_mixed_chunk)),
        ("moe-dp-size > 1", int(_raw(side, "moe_dp_size", 1)) > 1),
        ("ep-size > 1", int(_raw(side, "ep_size", 1)) > 1),
        ("moe-a2a-backend", (_raw(side, "moe_a2a_backend", "none") or "none") != "none"),
        ("enable-waterfill", bool(_raw(side, "enable_waterfill", False))),
        ("pp-size > 1", a.pp_size > 1),
        ("disaggregation-mode decode", a.disaggregation_mode == "decode"),
    )
    for flag, enabled in unsupported:
        if enabled:
            return Refusal("cp-tp-group-sharing", hook, "ValueError", f"--{flag} is not supported with CP-TP group sharing.")
    if a.disaggregation_mode == "prefill" and _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        return Refusal("staging-cp-tp-sharing", hook, "ValueError",
                       "SGLANG_DISAGG_STAGING_BUFFER is not supported with CP-TP group sharing.")
    return None  # the linear-attention head checks and the rest of prefill CP are not restated


def kv_cache_sharding(side: Side, gpu: Gpu) -> Outcome:
    """The first checks of ``kv_shard_hook.handle_kv_cache_sharding`` (SGLang 0.5.23):
    ``--enable-kv-cache-sharding`` is for a PD prefill only; speculative decoding only as
    GLM DSA single-layer NextN EAGLE topk 1; not with DCP or HiSparse. The attention-backend
    and model checks after those are not restated."""
    a = side.args
    if not a.enable_kv_cache_sharding:
        return None
    if not release_at_least(side, "0.5.23"):
        # SGLang 0.5.22's handle_kv_cache_sharding refuses first on its Python-tree requirement
        # (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND) and has other speculative texts: not restated.
        return Stop(f"SGLang {side_release_name(side)} with --enable-kv-cache-sharding: that release's "
                    "handle_kv_cache_sharding is not restated")
    hook = "handle_kv_cache_sharding"
    if a.disaggregation_mode != "prefill":
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool holds only "
                       "its stripe of every cached page, which is incompatible with local decode.")
    if a.speculative_algorithm is not None:
        if not (a.speculative_algorithm == "EAGLE" and _arch(side) == "GlmMoeDsaForCausalLM"
                and side.model.num_nextn_predict_layers == 1 and a.speculative_eagle_topk == 1
                and not _raw(side, "enable_multi_layer_eagle", False)):
            return Refusal("kv-sharding", hook, "ValueError",
                           "KV sharding supports speculative decoding only for GLM DSA single-layer NextN MTP with EAGLE and topk=1.")
    if a.dcp_size > 1:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding and decode context parallelism (--dcp-size) are mutually exclusive "
                       "users of the widened allocator index space.")
    if a.enable_hierarchical_cache and a.hicache_storage_backend is not None:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding supports HiCache host offload but not --hicache-storage-backend yet: "
                       "the storage path reads and writes whole pages per rank, not each rank's own stripe.")
    if a.enable_hierarchical_cache and _is_dsa(side):
        return Stop("KV sharding with HiCache on a DSA model: the host-memory-mode checks are not restated")
    if a.enable_hisparse:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding does not support --enable-hisparse: HiSparse selects a non-sharded "
                       "allocator and assumes each rank owns complete KV pages.")
    if _raw(side, "enable_dynamic_chunking", False) and a.pp_size > 1:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding does not support dynamic chunk sizing with pipeline parallelism: profiling "
                       "and predicted chunks can exceed the fixed sharded scratch capacity. Disable --enable-dynamic-chunking.")
    if _raw(side, "enable_two_batch_overlap", False):
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding does not support --enable-two-batch-overlap: the sharded pool's per-batch "
                       "gather plan is a process-wide singleton, but TBO rebuilds attention metadata multiple times per extend "
                       "forward and clobbers the plan.")
    if side.model.attention == "not_modeled" or _arch(side).startswith(("Llama4", "Whisper", "Mllama")):
        return Stop("--enable-kv-cache-sharding on a model whose encoder/chunked-attention checks are not restated")
    # validate_kv_shard_attention_backend
    attn, pre, _ = final_attention_backends(side, gpu)
    prefill_backend = pre or attn
    vhook = "validate_kv_shard_attention_backend"
    if prefill_backend == "dsa":
        return Stop("DSA KV sharding: its prefill-CP / TRTLLM / Mooncake requirements are not restated")
    if _is_dsa(side):
        return Refusal("kv-sharding", vhook, "ValueError", "DSA KV sharding requires the dsa attention backend.")
    if prefill_backend != "fa3":
        if prefill_backend != "trtllm_mla":
            return Refusal("kv-sharding", vhook, "ValueError",
                           "--enable-kv-cache-sharding currently requires the fa3 prefill attention backend, or trtllm_mla "
                           f"for plain-TP MLA; got {prefill_backend!r}.")
        if not side.model.is_mla:
            return Refusal("kv-sharding", vhook, "ValueError", "KV sharding with trtllm_mla requires an MLA model.")
        if a.attn_cp_size > 1:
            return Refusal("kv-sharding", vhook, "ValueError",
                           "KV sharding with trtllm_mla only supports plain-TP MLA (attn_cp_size must be 1).")
        if _raw(side, "disable_chunked_prefix_cache", False):
            return Refusal("kv-sharding", vhook, "ValueError", "KV sharding with trtllm_mla requires chunked prefix caching.")
    backend = _effective_transfer_backend(side)
    if backend not in ("mooncake", "nixl"):
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding currently only supports the mooncake and nixl transfer backends: both "
                       "route sends through CommonKVSender._prepare_send_indices and pair destinations by fancy index. "
                       f"Got --disaggregation-transfer-backend {backend!r}.")
    if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding is incompatible with SGLANG_DISAGG_STAGING_BUFFER (the staging path "
                       "assumes contiguous send slices).")
    _, attn_dp = dp_layout(side)
    if side.model.is_mla:
        if a.attn_cp_size <= 1:
            if attn_dp > 1:
                return Refusal("kv-sharding", hook, "ValueError",
                               "--enable-kv-cache-sharding for MLA models without prefill CP shards across attention-TP and "
                               "requires plain TP attention; set --attn-dp-size=1.")
            if a.tp_size <= 1:
                return Refusal("kv-sharding", hook, "ValueError",
                               "--enable-kv-cache-sharding for MLA models without prefill CP shards across attention-TP ranks "
                               "and needs tp_size > 1.")
    elif not a.enable_prefill_cp or a.attn_cp_size <= 1:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding for GQA models shards across attention-CP ranks and requires "
                       "--enable-prefill-cp with attn_cp_size > 1.")
    page = resolved_page_size(side, gpu)
    if page <= 1:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding requires a real page size (--page-size 64 recommended): the physical page "
                       "is the P/D transfer descriptor and gather-copy unit; page_size=1 degenerates both into per-token operations.")
    chunk = _raw(side, "chunked_prefill_size")
    if chunk is not None and int(chunk) <= 0:
        return Refusal("kv-sharding", hook, "ValueError",
                       "--enable-kv-cache-sharding requires chunked prefill (--chunked-prefill-size > 0).")
    if chunk is not None and (int(chunk) // max(1, attn_dp)) % page != 0 and _raw(side, "mem_fraction_static") is None:
        return Stop("KV sharding rounds --chunked-prefill-size up to the page size against the GPU's memory")
    return None


def server_args_nodes(side: Side, gpu: Gpu) -> Outcome:
    """The first assertion of ``validation_hook.check_server_args`` (SGLang 0.5.23): the TP x PP
    world must split evenly across ``--nnodes``."""
    a = side.args
    nnodes = int(_raw(side, "nnodes", 1))
    if _raw(side, "ep_join_mode", "") != "scale" and nnodes > 0 and (a.tp_size * a.pp_size) % nnodes != 0:
        return Refusal("nodes", "check_server_args", "AssertionError", "tp_size must be divisible by number of nodes")
    return None


def server_args_layout(side: Side, gpu: Gpu) -> Outcome:
    """``check_server_args`` after the PP checks (SGLang 0.5.23): data-parallel replicas are
    single-node; a prefill's (or non-PD server's) chunked-prefill size, once divided by
    attention DP (``handle_data_parallelism``), must be a multiple of the resolved page size.
    Only an explicit ``--chunked-prefill-size`` is checked: the default comes from the GPU's
    memory (``handle_gpu_memory_settings``) and is a multiple of every page size the
    backends choose."""
    a = side.args
    dp, attn_dp = dp_layout(side)
    if dp > 1 and int(_raw(side, "nnodes", 1)) != 1:
        return Refusal("nodes", "check_server_args", "AssertionError",
                       "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes")
    if a.speculative_algorithm is not None and a.enable_mixed_chunk:
        return Stop("--enable-mixed-chunk with speculative decoding: SpeculativeAlgorithm.supports_mixed_chunk is not restated")
    chunk = _raw(side, "chunked_prefill_size")
    if chunk is None or a.disaggregation_mode == "decode":
        return None
    chunk = int(chunk)
    if attn_dp > 1:
        chunk //= attn_dp
    page = resolved_page_size(side, gpu)
    if chunk > 0 and chunk % page != 0:
        if a.enable_kv_cache_sharding:
            return Stop("KV sharding rounds --chunked-prefill-size up to the page size")
        return Refusal("chunked-prefill-page", "check_server_args", "AssertionError",
                       "chunked_prefill_size must be divisible by page_size")
    return None


def pipeline_parallel(side: Side, gpu: Gpu) -> Outcome:
    """``validation_hook.check_pipeline_parallel_compat`` (run by ``check_server_args`` when
    ``--pp-size > 1``, SGLang 0.5.23): speculative decoding with PP is EAGLE (non-multi-layer)
    only, and only on a PD prefill (DSPARK: prefill only) unless ``SGLANG_ENABLE_PP_SPEC``."""
    a = side.args
    if a.pp_size <= 1:
        return None
    algo = resolved_speculative_algorithm(side)
    hook = "check_pipeline_parallel_compat"
    if algo == "DSPARK":
        if a.disaggregation_mode != "prefill":
            return Refusal("pp-speculative", hook, "AssertionError", "Pipeline parallel DSPARK requires disaggregation-mode=prefill")
        return None
    if algo is None:
        return None
    if algo != "EAGLE" or _raw(side, "enable_multi_layer_eagle", False):
        return Refusal("pp-speculative", hook, "AssertionError",
                       "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding")
    if _env_bool(side, "SGLANG_ENABLE_PP_SPEC"):
        if a.disaggregation_mode != "null":
            return Refusal("pp-speculative", hook, "AssertionError", "SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode")
        return None
    if a.disaggregation_mode != "prefill":
        return Refusal("pp-speculative", hook, "AssertionError",
                       "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)")
    return None


# In the runtime's order: resolve_once() (run_resolution_pipeline), then check_server_args().
ORDER: tuple[Callable[[Side, Gpu], Outcome], ...] = (
    pd_disaggregation,          # handle_pd_disaggregation
    decode_context_parallelism,  # handle_decode_context_parallelism
    dsa_dcp,                    # handle_model_specific_adjustments: _deepseek_family_overrides
    dsa_kv_cache_dtype,         #   ... _dsa_kv_cache_dtype_default
    dsa_hisparse_backends,      #   ... _dsa_split_backend_resolution
    nvfp4_prefill_dequant,      # handle_nvfp4_prefill_kv_dequant_dtype
    attention_backend_gpu,      # handle_attention_backend_compatibility
    kv_dtype_gpu,               # handle_kv4_compatibility, handle_mxfp8_kv_cache_compatibility
    hicache_dcp,                # handle_hicache
    data_parallelism,           # handle_data_parallelism
    context_parallelism,        # handle_context_parallelism
    kv_cache_sharding,          # handle_kv_cache_sharding (0.5.22: Stop)
    speculative,                # handle_speculative_decoding
    cache_compatibility,        # handle_cache_compatibility
    hicache_compatibility,      #   (same hook, later checks)
    server_args_nodes,          # check_server_args: nnodes
    pipeline_parallel,          # check_server_args: check_pipeline_parallel_compat
    server_args_layout,         # check_server_args: DP replicas across nodes, chunked prefill vs page
    validate_hisparse,          # check_server_args: _hisparse_validation
)

# Every id a Refusal may carry (for the check's finding ids and --ignore).
REFUSAL_IDS = (
    "decode-allocation-policy",
    "decode-host-receive-threshold",
    "decode-host-receive-hisparse",
    "decode-host-receive-retraction",
    "decode-radix-cache-incompatible",
    "prefill-fake-backend",
    "staging-buffer",
    "cp-tp-group-sharing",
    "staging-cp-tp-sharing",
    "hisparse-kv-dtype",
    "dcp-size",
    "dsa-dcp",
    "dsa-kv-cache-dtype",
    "hisparse-dsa-backend",
    "nvfp4-prefill-dequant",
    "attention-backend-gpu",
    "attention-kv-dtype",
    "kv-dtype-gpu",
    "kv4-backend",
    "hicache-dcp",
    "dp-size",
    "tp-attn-dp-cp",
    "kv-sharding",
    "speculative-params",
    "decode-host-pool-role",
    "decode-host-pool-dcp",
    "hicache-radix-cache",
    "decode-offload-kvcache",
    "nodes",
    "pp-speculative",
    "chunked-prefill-page",
    "hisparse-model",
    "hisparse-radix-cache",
    "hisparse-mixed-chunk",
    "hisparse-spec-topk",
    "hisparse-spec-adaptive",
)

# Refusals whose verdict the GPU generation decides (the check says so when no GPU was given).
GPU_DEPENDENT_IDS = frozenset({"attention-backend-gpu", "attention-kv-dtype", "kv-dtype-gpu", "kv4-backend", "nvfp4-prefill-dequant",
                               "hisparse-dsa-backend", "dsa-kv-cache-dtype"})


def side_gpu(side: Side) -> Gpu:
    """The side's GPU (``Side.gpu``), Hopper (h100) when not given."""
    return resolve_gpu(side.gpu)


# The oldest SGLang release whose start-up refusals (``ORDER``) agree with that release's own
# ``prepare_server_args`` -> resolution -> ``check_server_args`` on the start-up corpus
# (tests/startup_worker.py, tests/test_startup_releases.py). Measured disagreements of the
# 0.5.23 restatement, per release (70 draws x 4 GPUs): 0.5.8 47/172, 0.5.10 39/192,
# 0.5.13 32/208, 0.5.16 80/280, 0.5.17 79/280, 0.5.20 57/280, 0.5.21 27/280, 0.5.22 32/280
# (all 32 on --enable-kv-cache-sharding: a Stop in ``kv_cache_sharding``). Before 0.5.22 the
# releases refuse differently: two-batch overlap without an a2a backend (check_two_batch_overlap,
# 0.5.8 .. 0.5.21), TRTLLM MHA prefill on SM100 only (.. 0.5.17), the DSA DCP / KV-dtype order
# and texts, the multi-node DP and PP texts, trtllm_mla's fp4_e2m1, PD decode DCP's own checks
# (0.5.17 .. 0.5.20): not restated, so a side of those releases whose flags reach one of them
# (``_older_release_differences``) is ``unchecked``; plain flag sets (TP, page size, NIXL or
# Mooncake, Hopper) agree on 0.5.8 .. 0.5.21 (40 draws each, 0 disagreements).
STARTUP_VERIFIED_FROM = "0.5.22"


@dataclass(frozen=True)
class ReleaseStop(Stop):
    """A ``Stop`` because the side's SGLang release refuses start-up differently from what
    kvcheck restates (``STARTUP_VERIFIED_FROM``) where the side's flags reach it; ``release``
    names it. The scheduler's connector checks (``connector_outcome``, with their own release
    gates) still run after it: the ``connector-startup`` check reads them."""

    release: str = ""


def release_gate(side: Side) -> Optional[ReleaseStop]:
    """A ``ReleaseStop`` for a side whose SGLang release is older than ``STARTUP_VERIFIED_FROM``
    (the 0.5.23 restatement would be that release's answer only by chance), else ``None``."""
    from kvcheck.sglang.releases import side_release

    version = side_release(side)[0]
    from kvcheck.release.manifest import NEWEST, newer_than_modeled

    if version is not None and newer_than_modeled(version):
        # Unknown releases fail closed in start-up as on the PD path (release manifest).
        return ReleaseStop(f"SGLang {version} is newer than the newest release kvcheck models ({NEWEST}): its start-up "
                           "refusals are not verified against its code", release=version)
    if version is None or release_at_least(side, STARTUP_VERIFIED_FROM):
        return None
    differs = _older_release_differences(side)
    if not differs:
        return None
    return ReleaseStop(
        f"SGLang {version}: its start-up refusals (argument resolution and check_server_args) differ from "
        f"{STARTUP_VERIFIED_FROM}+ where these flags reach them ({', '.join(differs)}) and kvcheck has not verified "
        "them for this release", release=version)


def _older_release_differences(side: Side) -> list[str]:
    """The inputs of a side that reach start-up steps in which releases before
    ``STARTUP_VERIFIED_FROM`` refuse differently (measured on the start-up corpus against
    0.5.8 .. 0.5.21's own code). A side with none of them (plain TP/page size, NIXL or
    Mooncake, no speculation, Hopper) agrees with the restated steps on every measured release."""
    a = side.args
    g = side_gpu(side)
    out = [name for name, on in (
        ("an attention backend flag", bool(a.attention_backend or a.prefill_attention_backend or a.decode_attention_backend)),
        ("a GPU other than Hopper", not (g.vendor == "nvidia" and g.capability[0] == 9)),
        ("--kv-cache-dtype", a.kv_cache_dtype not in (None, "auto")),
        ("a DSA model", _is_dsa(side)),
        ("DP / attention DP", a.dp_size > 1 or a.attn_dp_size > 1 or bool(a.enable_dp_attention)),
        ("CP / DCP", a.attn_cp_size > 1 or a.dcp_size > 1 or bool(a.enable_prefill_cp)),
        ("PP", a.pp_size > 1), ("--nnodes", int(_raw(side, "nnodes", 1) or 1) > 1),
        ("speculative decoding", a.speculative_algorithm is not None),
        ("HiSparse", bool(a.enable_hisparse)), ("HiCache", bool(a.enable_hierarchical_cache)),
        ("--disable-radix-cache", not a.radix_cache_enabled and a.disaggregation_mode != "decode"),
        ("the decode radix cache", bool(a.disaggregation_decode_enable_radix_cache)),
        ("KV sharding", bool(a.enable_kv_cache_sharding)),
        ("the fake transfer backend", a.disaggregation_transfer_backend == "fake"),
        ("--chunked-prefill-size", _raw(side, "chunked_prefill_size") is not None),
        ("decode retraction / host receive", a.disaggregation_decode_retraction_backup is not None
         or a.disaggregation_decode_host_receive_threshold < 1),
        ("--disaggregation-decode-allocation-policy", a.disaggregation_decode_allocation_policy != "early"),
        ("two-batch overlap", bool(_raw(side, "enable_two_batch_overlap", False))),
        ("SGLANG_DISAGG_STAGING_BUFFER", _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER")),
    ) if on]
    return out


def side_release_name(side: Side) -> str:
    """The side's release as ``releases.side_release`` resolves it (``"?"`` when unknown)."""
    from kvcheck.sglang.releases import side_release

    return side_release(side)[0] or "?"


def first_outcome(side: Side, gpu: Optional[Gpu] = None) -> Outcome:
    """The first start-up step that refuses (a ``Refusal``), or stops prediction (a ``Stop``),
    or ``None`` when every restated step passes. ``gpu`` defaults to ``side_gpu(side)``.
    A side on a release older than ``STARTUP_VERIFIED_FROM`` gets a ``ReleaseStop`` (unchecked),
    never 0.5.23's answer."""
    gate = release_gate(side)
    if gate is not None:
        return gate
    g = gpu or side_gpu(side)
    for step in ORDER:
        out = step(side, g)
        if out is not None:
            return out
    return None


def first_refusal(side: Side, gpu: Optional[Gpu] = None) -> Optional[Refusal]:
    """The first start-up refusal this side's flags cause, or ``None`` (none, or not
    predictable past a step kvcheck does not restate: see ``first_outcome``)."""
    out = first_outcome(side, gpu)
    return out if isinstance(out, Refusal) else None


def startup_error(side: Side, gpu: Optional[Gpu] = None) -> Optional[RuntimeErrorPrediction]:
    """The exception SGLang 0.5.23 raises while resolving this side's args at start-up
    (``ServerArgs.resolve_once()`` then ``check_server_args()``), or ``None``."""
    r = first_refusal(side, gpu)
    return r.prediction(side) if r is not None else None


# ------------------------------------------- after the model loads: the PD queues and NIXL

OPERATOR_SEES_SCHEDULER = (
    "the server loads the model, then the scheduler exits during start-up with this error "
    "(\"Scheduler hit an exception\" in its log); the server never serves"
)


@dataclass(frozen=True)
class ConnectorRefusal(Refusal):
    """A refusal raised while the scheduler builds its PD queue and KV manager (after the
    model and the KV pools are allocated), not while resolving args."""

    def prediction(self, side: Side) -> RuntimeErrorPrediction:
        return RuntimeErrorPrediction(
            type=self.type,
            message=self.message,
            raised_by=f"{side.role}: scheduler start-up ({self.hook})",
            when="start-up",
            operator_sees=OPERATOR_SEES_SCHEDULER,
        )


def _local_gpu_ids(side: Side) -> list[int]:
    """The GPU ids one node's ranks bind (``base_gpu_id + k * gpu_id_step``), in rank order."""
    a = side.args
    nnodes = int(_raw(side, "nnodes", 1)) or 1
    per_node = max(1, (a.tp_size * a.pp_size) // nnodes)
    base, step = int(_raw(side, "base_gpu_id", 0)), int(_raw(side, "gpu_id_step", 1))
    return [base + k * step for k in range(per_node)]


def ucx_device_list(side: Side) -> Union[ConnectorRefusal, Stop, str, None]:
    """``nixl/conn._resolve_ucx_device_list`` for the first rank whose mapping fails, restating
    ``mooncake_transfer_engine.parse_ib_device_config`` / ``get_ib_devices_for_gpu`` (SGLang
    0.5.23): the UCX ``device_list`` the ib device string gives, a refusal, or a ``Stop``
    (a JSON file on the server kvcheck cannot read)."""
    import json

    text = side.args.disaggregation_ib_device
    if text is None or not text.strip():
        return None
    s = text.strip()
    where = "get_ib_devices_for_gpu"
    if s.endswith(".json"):
        return Stop(f"--disaggregation-ib-device {s}: a JSON file on the server; kvcheck cannot read it")
    if not s.startswith("{"):
        per_gpu = {gid: s for gid in _local_gpu_ids(side)}
    else:
        try:
            mapping = json.loads(s)
        except json.JSONDecodeError:
            return ConnectorRefusal("nixl-ib-device", "parse_ib_device_config", "ValueError", f"Invalid JSON mapping: {s}")
        if not isinstance(mapping, dict):
            return ConnectorRefusal("nixl-ib-device", "parse_ib_device_config", "ValueError",
                                    "Invalid format: expected a mapping from GPU id to IB device string")
        norm: dict[int, str] = {}
        for k, v in mapping.items():
            if not str(k).isdigit() or not isinstance(v, str):
                return ConnectorRefusal("nixl-ib-device", "parse_ib_device_config", "ValueError",
                                        "Invalid format: keys must be integers (or string representations of integers) "
                                        "and values must be strings")
            norm[int(k)] = v.strip()
        if not norm:
            return ConnectorRefusal("nixl-ib-device", "parse_ib_device_config", "ValueError", "No valid GPU mappings found in JSON")
        per_gpu = {}
        for gid in _local_gpu_ids(side):
            if gid not in norm:
                return ConnectorRefusal("nixl-ib-device", where, "ValueError",
                                        f"No IB devices configured for GPU {gid}. Available GPUs: {list(norm.keys())}")
            per_gpu[gid] = norm[gid]
    lists = []
    for gid, devices in per_gpu.items():
        names = [n.strip() for n in devices.split(",")]
        if any(not n or ":" in n for n in names):
            return ConnectorRefusal("nixl-ib-device", "_resolve_ucx_device_list", "ValueError",
                                    "NIXL UCX --disaggregation-ib-device requires HCA names without port suffixes "
                                    "(e.g. mlx5_0); NIXL appends port 1.")
        lists.append(", ".join(names))
    return lists[0]


def connector_outcome(side: Side, gpu: Optional[Gpu] = None) -> Union[ConnectorRefusal, Stop, None]:
    """The first refusal of the scheduler's PD start-up on this side, after argument resolution
    passed (SGLang 0.5.23): ``PrefillBootstrapQueue.__init__`` / ``DecodePreallocQueue.__init__``
    (``SGLANG_DISAGG_STAGING_BUFFER`` on an MLA model; on a prefill, a chunked-prefill size
    that is not a positive multiple of the page size (from 0.5.17), and PP (any backend in
    0.5.17; other than Mooncake from 0.5.18; earlier releases: a ``Stop``)), then ``NixlKVManager.__init__`` for the NIXL UCX backend:
    ``SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS`` (parsed by the ``nixl-backend-params``
    check) and the ``--disaggregation-ib-device`` device list (port suffixes, per-GPU JSON
    mappings, a ``device_list`` in the params that disagrees); then the decode's
    ``DecodePreallocQueue._init_kv_manager``: decode host receive (threshold < 1) needs a
    manager with ``supports_host_destination``, which none has in 0.5.23.
    ``UCX_NET_DEVICES`` makes the runtime ignore the ib device (a warning, see
    ``kvcheck.checks.nixl_env``)."""
    import json

    a = side.args
    if a.disaggregation_mode not in ("prefill", "decode"):
        return None
    if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        queue = "PrefillBootstrapQueue.__init__" if a.disaggregation_mode == "prefill" else "DecodePreallocQueue.__init__"
        if side.model.is_mla:
            return ConnectorRefusal("staging-mla", queue, "RuntimeError",
                                    "SGLANG_DISAGG_STAGING_BUFFER is designed for non-MLA models (e.g. GQA, MHA). "
                                    "MLA models should not set this flag.")
        if a.disaggregation_mode == "prefill":
            staged = _staging_prefill_chunk(side, gpu or side_gpu(side), queue)
            if staged is not None:
                return staged
        if a.disaggregation_mode == "prefill" and a.pp_size > 1:
            if not release_at_least(side, "0.5.17"):
                return Stop("SGLANG_DISAGG_STAGING_BUFFER with --pp-size > 1 before SGLang 0.5.17: that release's refusal is not restated")
            if not release_at_least(side, "0.5.18"):
                # 0.5.17 refused PP with staging whatever the backend.
                return ConnectorRefusal("staging-mla", queue, "RuntimeError", "SGLANG_DISAGG_STAGING_BUFFER does not support pp_size > 1.")
            if _effective_transfer_backend(side) != "mooncake":
                return ConnectorRefusal("staging-mla", queue, "RuntimeError",
                                        "SGLANG_DISAGG_STAGING_BUFFER with pp_size > 1 is only supported by Mooncake.")
    out = minimax_index_value(side)
    if out is not None:
        return out
    out = _nixl_manager_init(side)
    if out is not None:
        return out
    if a.disaggregation_mode == "decode" and host_receive_on(side):
        # No KV manager of 0.5.23 sets supports_host_destination (BaseKVManager: False).
        return ConnectorRefusal("decode-host-destination", "DecodePreallocQueue._init_kv_manager", "ValueError",
                                "Transfer backend does not support decode host KV destinations")
    return None


def minimax_index_value(side: Side) -> Union[ConnectorRefusal, Stop, None]:
    """``setup_state_kv_args`` (disaggregation/utils.py, SGLang 0.5.23), which both roles'
    ``_init_kv_manager`` run before building the KV manager: a MiniMax sparse pool
    (``MiniMaxSparseKVPool``) with an index-value pool (a sparse layer whose
    ``sparse_disable_index_value`` entry is 0) raises ``NotImplementedError``. With HiSparse
    or the MiniMax M3 NVFP4 checkpoint the pool classes differ: not restated (``Stop``)."""
    m = side.model
    if m.hybrid != "minimax_sparse" or not release_at_least(side, "0.5.23"):
        return None
    if side.args.enable_hisparse or (m.quant_method or "").startswith("minimax_m3_nvfp4"):
        return Stop("MiniMax sparse pool with HiSparse or the NVFP4 pool: its state registration is not restated")
    if set(m.sparse_layer_ids) - set(m.k_only_sparse_layer_ids):
        return ConnectorRefusal("minimax-index-value", "setup_state_kv_args", "NotImplementedError",
                                "PD disaggregation for MiniMax sparse layers with index value (index_kv_pool) is not yet "
                                "supported; only K-only sparse layers are.")
    return None


def resolved_chunked_prefill_size(side: Side) -> Optional[int]:
    """The chunked-prefill size the scheduler reads (``get_schedule().chunked_prefill_size``,
    SGLang 0.5.23): ``--chunked-prefill-size`` divided by attention DP
    (``handle_data_parallelism``), -1 with ``--enable-mis`` (``_handle_multi_item_scoring``);
    ``None`` when unset (``handle_gpu_memory_settings`` picks a positive size from the GPU's
    memory, a multiple of the page size or ``check_server_args`` refuses first)."""
    if _raw(side, "enable_mis", False):
        return -1
    chunk = _raw(side, "chunked_prefill_size")
    if chunk is None:
        return None
    chunk = int(chunk)
    _, attn_dp = dp_layout(side)
    return chunk // attn_dp if attn_dp > 1 else chunk


def _staging_prefill_chunk(side: Side, gpu: Gpu, queue: str) -> Optional[ConnectorRefusal]:
    """``PrefillBootstrapQueue.__init__``'s staging grid check (from SGLang 0.5.17; the same
    text through 0.5.23): the chunked-prefill size (8192 when 0/unset) must be positive and
    a multiple of the allocator's page size (the resolved ``--page-size``)."""
    if not release_at_least(side, "0.5.17"):
        return None
    chunk = resolved_chunked_prefill_size(side)
    if chunk is None:
        return None  # the GPU-memory default: positive, and a multiple of the page (see above)
    page = resolved_page_size(side, gpu)
    cps = chunk or 8192
    if cps <= 0 or cps % page != 0:
        return ConnectorRefusal("staging-chunk-size", queue, "RuntimeError",
                                "SGLANG_DISAGG_STAGING_BUFFER requires a positive chunked_prefill_size that is a "
                                f"multiple of page_size ({page}); got {chunk}.")
    return None


def _nixl_manager_init(side: Side) -> Union[ConnectorRefusal, Stop, None]:
    """``NixlKVManager.__init__``'s refusals from the environment and the ib device string."""
    import json

    a = side.args
    if a.disaggregation_transfer_backend != "nixl":
        return None
    backend = side.env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND") or "UCX"
    try:
        params = json.loads(side.env.get("SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS") or "{}")
    except json.JSONDecodeError:
        return None  # the nixl-backend-params check predicts this one
    if not isinstance(params, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in params.items()):
        return None
    if backend != "UCX" or not a.disaggregation_ib_device or side.env.get("UCX_NET_DEVICES"):
        return None
    devices = ucx_device_list(side)
    if devices is None or not isinstance(devices, str):
        return devices
    existing = params.get("device_list")
    if existing is not None and ", ".join(n.strip() for n in existing.split(",")) != devices:
        return ConnectorRefusal("nixl-ib-device", "NixlKVManager.__init__", "ValueError",
                                "Conflicting NIXL UCX device_list in SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS and "
                                "--disaggregation-ib-device. Configure only one device selection or make them agree.")
    return None


CONNECTOR_REFUSAL_IDS = ("staging-mla", "staging-chunk-size", "nixl-ib-device", "decode-host-destination")
