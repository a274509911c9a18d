"""Start-up refusals the inputs decide, in the order SGLang 0.5.23 raises them, with a
branch per release that introduced or changed a step (0.5.5 .. 0.5.23).

Modules by phase: ``base`` (outcome types, shared resolved values), ``resolution`` (PD, DSA,
speculative, cache, HiSparse), ``backends`` (attention backends, KV dtypes, the GPU, page
size), ``parallel`` (DP, CP, KV sharding, ``check_server_args``' layout checks, two-batch
overlap), ``connector`` (the scheduler's PD queues and NIXL manager), ``gate`` (the releases
whose start-up is verified, ``STARTUP_VERIFIED_RELEASES``, and the steps a release before
0.5.22 runs that are not restated for it, ``unrestated_steps``). Older releases ran the same
checks from ``ServerArgs.__post_init__`` (before 0.5.19's arg_groups); the release branches in
each step carry their texts and conditions (``release_at_least``), measured per release by
``benchmarks/measure_startup_releases.py``.

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
* ``kv_cache_hook.handle_page_major_kv_layout`` and ``handle_unified_memory_pool``
  (page-major without unified memory; unified memory's attention backends and, in PD, its
  Mooncake-only transfer);
* ``check_server_args``: node split, ``check_pipeline_parallel_compat`` (PP + MTP only on a
  prefill), DP replicas across nodes, chunked prefill vs the resolved page size, and
  ``validate_hisparse``.

Last, ``unrestated.unrestated_flag``: a flag value that 0.5.23 refuses at start-up by a check
kvcheck does not restate (measured one flag at a time on plain PD servers) stops prediction
(``startup-unchecked``) rather than pass.

The GPU decides some of these: every step takes the side's ``Gpu`` (``Side.gpu``; Hopper
when not given). Where the next refusal depends on something kvcheck does not restate, a
step returns a ``Stop`` with the reason; the ``startup`` check reports it as ``unchecked``.
Verified against the runtime on a seeded corpus (tests/test_startup_corpus.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kvcheck.sglang.gpu import Gpu
from kvcheck.sglang.plan import RuntimeErrorPrediction
from kvcheck.sglang.startup.backends import (  # noqa: F401
    CUTEDSL_MLA_KV_DTYPES,
    KV4_FA4_MHA_DECODE_BACKENDS,
    KV4_FA4_MLA_DECODE_BACKENDS,
    KV4_MHA_BACKENDS,
    KV4_MLA_BACKENDS,
    NVFP4_PREFILL_DEQUANT_DTYPE,
    TRTLLM_MLA_KV_DTYPES,
    attention_backend_gpu,
    default_attention_backend,
    final_attention_backends,
    kv4_backend_lists,
    kv_dtype_gpu,
    nvfp4_backends,
    nvfp4_prefill_dequant,
    resolved_attention_backends,
    resolved_page_size,
)

# The public names of the phase modules, importable from the package as before the split.
from kvcheck.sglang.startup.base import (  # noqa: F401
    CP_TP_GROUP_SHARING_ARCHS,
    DEEPSEEK_V4_ARCHS,
    DSA_KV_PASS_ARCHS,
    DSA_OVERRIDE_ARCHS,
    HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE,
    HISPARSE_KV_CACHE_DTYPES,
    MINIMAX_SPARSE_ARCHS,
    OPERATOR_SEES,
    PAGE_TREE_SPEC_BACKENDS,
    STOP,
    Outcome,
    Refusal,
    Stop,
    _env_bool,
    _is_dsa,
    _raw,
    dp_layout,
    host_receive_on,
    release_at_least,
    resolved_speculative_algorithm,
    side_gpu,
    side_release_name,
)
from kvcheck.sglang.startup.connector import (  # noqa: F401
    CONNECTOR_REFUSAL_IDS,
    OPERATOR_SEES_SCHEDULER,
    ConnectorRefusal,
    connector_outcome,
    minimax_index_value,
    resolved_chunked_prefill_size,
    ucx_device_list,
)
from kvcheck.sglang.startup.gate import (  # noqa: F401
    STARTUP_RESTATED_FROM,
    STARTUP_VERIFIED_FROM,
    STARTUP_VERIFIED_RELEASES,
    ReleaseStop,
    release_gate,
    startup_verified,
    unrestated_steps,
)
from kvcheck.sglang.startup.parallel import (  # noqa: F401
    context_parallelism,
    cp_tp_group_sharing,
    data_parallelism,
    hicache_dcp,
    kv_cache_sharding,
    pipeline_parallel,
    server_args_layout,
    server_args_nodes,
    two_batch_overlap,
)
from kvcheck.sglang.startup.resolution import (
    cache_compatibility,
    decode_context_parallelism,
    dsa_dcp,
    dsa_hisparse_backends,
    dsa_kv_cache_dtype,
    hicache_compatibility,
    page_major_unified_memory,
    pd_disaggregation,
    speculative,
    validate_hisparse,
)
from kvcheck.sglang.startup.unrestated import UNRESTATED_REFUSING_VALUES, unrestated_flag  # noqa: F401
from kvcheck.sides import Side

# In the runtime's order: resolve_once() (run_resolution_pipeline), then check_server_args().
ORDER: tuple[Callable[[Side, Gpu], Outcome], ...] = (
    pd_disaggregation,  # handle_pd_disaggregation
    decode_context_parallelism,  # handle_decode_context_parallelism
    dsa_dcp,  # handle_model_specific_adjustments: _deepseek_family_overrides
    dsa_kv_cache_dtype,  #   ... _dsa_kv_cache_dtype_default
    dsa_hisparse_backends,  #   ... _dsa_split_backend_resolution
    nvfp4_prefill_dequant,  # handle_nvfp4_prefill_kv_dequant_dtype
    attention_backend_gpu,  # handle_attention_backend_compatibility
    kv_dtype_gpu,  # handle_kv4_compatibility, handle_mxfp8_kv_cache_compatibility
    hicache_dcp,  # handle_hicache
    data_parallelism,  # handle_data_parallelism
    context_parallelism,  # handle_context_parallelism
    kv_cache_sharding,  # handle_kv_cache_sharding (0.5.22: Stop)
    speculative,  # handle_speculative_decoding
    cache_compatibility,  # handle_cache_compatibility
    hicache_compatibility,  #   (same hook, later checks)
    page_major_unified_memory,  # handle_page_major_kv_layout, handle_unified_memory_pool
    server_args_nodes,  # check_server_args: nnodes
    pipeline_parallel,  # check_server_args: check_pipeline_parallel_compat
    server_args_layout,  # check_server_args: DP replicas across nodes, chunked prefill vs page
    validate_hisparse,  # check_server_args: _hisparse_validation
    two_batch_overlap,  # check_server_args: check_two_batch_overlap (0.5.7+)
    unrestated_flag,  # last: a flag value 0.5.23 refuses by a check kvcheck does not restate -> Stop
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
    "kv-dtype-gpu-refused",
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
    "unified-memory",
    "nodes",
    "pp-speculative",
    "chunked-prefill-page",
    "hisparse-model",
    "hisparse-radix-cache",
    "hisparse-mixed-chunk",
    "hisparse-spec-topk",
    "hisparse-spec-adaptive",
    "two-batch-overlap",
)
# Refusals whose verdict the GPU generation decides (the check says so when no GPU was given).
GPU_DEPENDENT_IDS = frozenset(
    {
        "attention-backend-gpu",
        "attention-kv-dtype",
        "kv-dtype-gpu-refused",
        "kv4-backend",
        "nvfp4-prefill-dequant",
        "hisparse-dsa-backend",
        "dsa-kv-cache-dtype",
    }
)


def first_outcome(side: Side, gpu: Gpu | None = None) -> Outcome:
    """The first start-up step that refuses (a ``Refusal``), or stops prediction (a ``Stop``),
    or ``None`` when every restated step passes. ``gpu`` defaults to ``side_gpu(side)``.
    A side on a release whose start-up kvcheck has not verified (``STARTUP_VERIFIED_RELEASES``:
    older than 0.5.5, newer than the newest modeled, or not modeled), or whose flags reach a
    step its release runs differently from the restatement (``gate.unrestated_steps``), gets a
    ``ReleaseStop`` (unchecked), never another release's answer. Computed once per side
    and GPU inside ``kvcheck.memo.side_memo()``."""
    from kvcheck.memo import remembered

    return remembered("first_outcome", side, getattr(gpu, "name", gpu), lambda: _first_outcome(side, gpu))


def _first_outcome(side: Side, gpu: Gpu | None) -> Outcome:
    gate = release_gate(side)
    if gate is not None:
        return gate
    g = gpu or side_gpu(side)
    for step in ORDER:
        out = step(side, g)
        if out is not None:
            return out
    return None


def first_refusal(side: Side, gpu: Gpu | None = None) -> Refusal | None:
    """The first start-up refusal this side's flags cause, or ``None`` (none, or not
    predictable past a step kvcheck does not restate: see ``first_outcome``)."""
    out = first_outcome(side, gpu)
    return out if isinstance(out, Refusal) else None


def startup_error(side: Side, gpu: Gpu | None = None) -> RuntimeErrorPrediction | None:
    """The exception SGLang 0.5.23 raises while resolving this side's args at start-up
    (``ServerArgs.resolve_once()`` then ``check_server_args()``), or ``None``."""
    r = first_refusal(side, gpu)
    return r.prediction(side) if r is not None else None
