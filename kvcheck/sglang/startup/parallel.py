"""HiCache with DCP, data / context parallelism, CP-TP group sharing, KV cache sharding, and
the layout checks of ``check_server_args`` (nodes, PP with speculation, chunked prefill vs
the page size)."""

from __future__ import annotations

from kvcheck.sglang.gpu import Gpu
from kvcheck.sglang.startup.backends import final_attention_backends, resolved_page_size
from kvcheck.sglang.startup.base import (
    CP_TP_GROUP_SHARING_ARCHS,
    Outcome,
    Refusal,
    Stop,
    _arch,
    _effective_transfer_backend,
    _env_bool,
    _is_dsa,
    _raw,
    dp_layout,
    release_at_least,
    resolved_speculative_algorithm,
    side_release_name,
)
from kvcheck.sides import Side


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
        return Refusal(
            "hicache-dcp",
            hook,
            "NotImplementedError",
            "HiCache with --dcp-size > 1 only supports DSPARK speculative decoding; other draft-model "
            "host pools have no DCP index translation.",
        )
    if _raw(side, "enable_lmcache", False):
        return Refusal(
            "hicache-dcp",
            hook,
            "NotImplementedError",
            "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation.",
        )
    if a.enable_hisparse:
        return Refusal(
            "hicache-dcp",
            hook,
            "NotImplementedError",
            "--enable-hisparse with --dcp-size > 1 is not supported: the HiSparse host pool is "
            "constructed without DCP translation.",
        )
    if not side.model.is_mla:
        return Refusal(
            "hicache-dcp",
            hook,
            "NotImplementedError",
            "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives "
            "in MLATokenToKVPoolHost, and the MHA host pool has none.",
        )
    return None


def data_parallelism(side: Side, gpu: Gpu) -> Outcome:
    """``parallel_hook.handle_data_parallelism`` (SGLang 0.5.23): data-parallel replicas
    (``--dp-size > 1``) cannot be combined with attention DP, and attention DP must divide
    ``--tp-size`` (a bare ``assert``: the exception text is empty)."""
    dp, attn_dp = dp_layout(side)
    hook = "handle_data_parallelism"
    if attn_dp > 1 and dp > 1:
        return Refusal(
            "dp-size",
            hook,
            "ValueError",
            f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with "
            "attention data parallelism are not supported.",
        )
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
            return Refusal(
                "tp-attn-dp-cp",
                "handle_context_parallelism",
                "AssertionError",
                "tp_size must be divisible by attn_cp_size",
            )
        if not release_at_least(side, "0.5.22"):
            # SGLang 0.5.9 .. 0.5.21 (_handle_context_parallelism): the raw --dp-size, its own text.
            if a.tp_size % (a.dp_size * cp) != 0:
                return Refusal(
                    "tp-attn-dp-cp",
                    "handle_context_parallelism",
                    "AssertionError",
                    "tp_size must be divisible by dp_size * attn_cp_size",
                )
        elif a.tp_size % (attn_dp * cp) != 0:
            return Refusal(
                "tp-attn-dp-cp",
                "handle_context_parallelism",
                "AssertionError",
                "tp_size must be divisible by attn_dp_size * attn_cp_size",
            )
    return None


def cp_tp_group_sharing(side: Side, gpu: Gpu) -> Refusal | None:
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
        return Refusal(
            "cp-tp-group-sharing",
            hook,
            "ValueError",
            "CP-TP group sharing requires --attn-cp-size == --tp-size, got "
            f"attn_cp_size={a.attn_cp_size}, tp_size={a.tp_size}.",
        )
    if _raw(side, "cp_strategy") != "zigzag":
        return Refusal("cp-tp-group-sharing", hook, "ValueError", "CP-TP group sharing requires --cp-strategy zigzag.")
    if a.speculative_algorithm is not None:
        return Refusal(
            "cp-tp-group-sharing",
            hook,
            "ValueError",
            "--speculative-algorithm is not supported with CP-TP group sharing.",
        )
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
            return Refusal(
                "cp-tp-group-sharing", hook, "ValueError", f"--{flag} is not supported with CP-TP group sharing."
            )
    if a.disaggregation_mode == "prefill" and _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        return Refusal(
            "staging-cp-tp-sharing",
            hook,
            "ValueError",
            "SGLANG_DISAGG_STAGING_BUFFER is not supported with CP-TP group sharing.",
        )
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
        return Stop(
            f"SGLang {side_release_name(side)} with --enable-kv-cache-sharding: that release's "
            "handle_kv_cache_sharding is not restated"
        )
    hook = "handle_kv_cache_sharding"
    if a.disaggregation_mode != "prefill":
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool holds only "
            "its stripe of every cached page, which is incompatible with local decode.",
        )
    if a.speculative_algorithm is not None:
        if not (
            a.speculative_algorithm == "EAGLE"
            and _arch(side) == "GlmMoeDsaForCausalLM"
            and side.model.num_nextn_predict_layers == 1
            and a.speculative_eagle_topk == 1
            and not _raw(side, "enable_multi_layer_eagle", False)
        ):
            return Refusal(
                "kv-sharding",
                hook,
                "ValueError",
                "KV sharding supports speculative decoding only for GLM DSA single-layer NextN MTP with EAGLE and "
                "topk=1.",
            )
    if a.dcp_size > 1:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding and decode context parallelism (--dcp-size) are mutually exclusive "
            "users of the widened allocator index space.",
        )
    if a.enable_hierarchical_cache and a.hicache_storage_backend is not None:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding supports HiCache host offload but not --hicache-storage-backend yet: "
            "the storage path reads and writes whole pages per rank, not each rank's own stripe.",
        )
    if a.enable_hierarchical_cache and _is_dsa(side):
        return Stop("KV sharding with HiCache on a DSA model: the host-memory-mode checks are not restated")
    if a.enable_hisparse:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding does not support --enable-hisparse: HiSparse selects a non-sharded "
            "allocator and assumes each rank owns complete KV pages.",
        )
    if _raw(side, "enable_dynamic_chunking", False) and a.pp_size > 1:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding does not support dynamic chunk sizing with pipeline parallelism: profiling "
            "and predicted chunks can exceed the fixed sharded scratch capacity. Disable --enable-dynamic-chunking.",
        )
    if _raw(side, "enable_two_batch_overlap", False):
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding does not support --enable-two-batch-overlap: the sharded pool's per-batch "
            "gather plan is a process-wide singleton, but TBO rebuilds attention metadata multiple times per extend "
            "forward and clobbers the plan.",
        )
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
            return Refusal(
                "kv-sharding",
                vhook,
                "ValueError",
                "--enable-kv-cache-sharding currently requires the fa3 prefill attention backend, or trtllm_mla "
                f"for plain-TP MLA; got {prefill_backend!r}.",
            )
        if not side.model.is_mla:
            return Refusal("kv-sharding", vhook, "ValueError", "KV sharding with trtllm_mla requires an MLA model.")
        if a.attn_cp_size > 1:
            return Refusal(
                "kv-sharding",
                vhook,
                "ValueError",
                "KV sharding with trtllm_mla only supports plain-TP MLA (attn_cp_size must be 1).",
            )
        if _raw(side, "disable_chunked_prefix_cache", False):
            return Refusal(
                "kv-sharding", vhook, "ValueError", "KV sharding with trtllm_mla requires chunked prefix caching."
            )
    backend = _effective_transfer_backend(side)
    if backend not in ("mooncake", "nixl"):
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding currently only supports the mooncake and nixl transfer backends: both "
            "route sends through CommonKVSender._prepare_send_indices and pair destinations by fancy index. "
            f"Got --disaggregation-transfer-backend {backend!r}.",
        )
    if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding is incompatible with SGLANG_DISAGG_STAGING_BUFFER (the staging path "
            "assumes contiguous send slices).",
        )
    _, attn_dp = dp_layout(side)
    if side.model.is_mla:
        if a.attn_cp_size <= 1:
            if attn_dp > 1:
                return Refusal(
                    "kv-sharding",
                    hook,
                    "ValueError",
                    "--enable-kv-cache-sharding for MLA models without prefill CP shards across attention-TP and "
                    "requires plain TP attention; set --attn-dp-size=1.",
                )
            if a.tp_size <= 1:
                return Refusal(
                    "kv-sharding",
                    hook,
                    "ValueError",
                    "--enable-kv-cache-sharding for MLA models without prefill CP shards across attention-TP ranks "
                    "and needs tp_size > 1.",
                )
    elif not a.enable_prefill_cp or a.attn_cp_size <= 1:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding for GQA models shards across attention-CP ranks and requires "
            "--enable-prefill-cp with attn_cp_size > 1.",
        )
    page = resolved_page_size(side, gpu)
    if page <= 1:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding requires a real page size (--page-size 64 recommended): the physical page "
            "is the P/D transfer descriptor and gather-copy unit; page_size=1 degenerates both into per-token "
            "operations.",
        )
    chunk = _raw(side, "chunked_prefill_size")
    if chunk is not None and int(chunk) <= 0:
        return Refusal(
            "kv-sharding",
            hook,
            "ValueError",
            "--enable-kv-cache-sharding requires chunked prefill (--chunked-prefill-size > 0).",
        )
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
    if not release_at_least(side, "0.5.22"):
        # check_server_args, SGLang 0.5.5 .. 0.5.21: --dp-size across nodes needs DP attention
        # (_handle_data_parallelism has turned --enable-dp-attention off when --dp-size is 1).
        if a.dp_size > 1 and int(_raw(side, "nnodes", 1)) != 1 and not a.enable_dp_attention:
            return Refusal(
                "nodes",
                "check_server_args",
                "AssertionError",
                "multi-node data parallel is not supported unless dp attention!",
            )
    elif dp > 1 and int(_raw(side, "nnodes", 1)) != 1:
        return Refusal(
            "nodes",
            "check_server_args",
            "AssertionError",
            "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes",
        )
    if a.speculative_algorithm is not None and a.enable_mixed_chunk:
        return Stop(
            "--enable-mixed-chunk with speculative decoding: SpeculativeAlgorithm.supports_mixed_chunk is not restated"
        )
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
        return Refusal(
            "chunked-prefill-page",
            "check_server_args",
            "AssertionError",
            "chunked_prefill_size must be divisible by page_size",
        )
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
    if not release_at_least(side, "0.5.11"):
        # check_server_args, SGLang 0.5.5 .. 0.5.10 (the PP handler has turned the overlap schedule off).
        if a.speculative_algorithm is not None or a.enable_mixed_chunk:
            return Refusal(
                "pp-speculative",
                "check_server_args",
                "AssertionError",
                "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked "
                "prefill.",
            )
        return None
    if not release_at_least(side, "0.5.21"):
        # check_server_args, SGLang 0.5.11 .. 0.5.20 (CUDA): no speculative decoding with PP.
        if a.speculative_algorithm is not None:
            return Refusal(
                "pp-speculative",
                "check_server_args",
                "AssertionError",
                "Pipeline parallelism is not compatible with overlap schedule, speculative decoding",
            )
        return None
    if algo == "DSPARK":
        if a.disaggregation_mode != "prefill":
            return Refusal(
                "pp-speculative",
                hook,
                "AssertionError",
                "Pipeline parallel DSPARK requires disaggregation-mode=prefill",
            )
        return None
    if algo is None:
        return None
    if algo != "EAGLE" or _raw(side, "enable_multi_layer_eagle", False):
        return Refusal(
            "pp-speculative",
            hook,
            "AssertionError",
            "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding",
        )
    if _env_bool(side, "SGLANG_ENABLE_PP_SPEC"):
        if a.disaggregation_mode != "null":
            return Refusal(
                "pp-speculative",
                hook,
                "AssertionError",
                "SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode",
            )
        return None
    if a.disaggregation_mode != "prefill":
        return Refusal(
            "pp-speculative",
            hook,
            "AssertionError",
            "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)",
        )
    return None


def two_batch_overlap(side: Side, gpu: Gpu) -> Outcome:
    """``check_server_args``' two-batch-overlap check, in each release's words:
    SGLang 0.5.7 .. 0.5.14 refuse ``--enable-two-batch-overlap`` with ``--moe-a2a-backend none``;
    0.5.15 .. 0.5.22 (``_check_two_batch_overlap`` / ``check_two_batch_overlap``) allow it with
    ``--enable-dp-attention`` (the DeepSeek-V4 non-EP DP path; ``--dp-size 1`` turns DP attention
    off); 0.5.23 asks for attention DP (``attn_dp_enabled_of``). 0.5.5 .. 0.5.6 have no check."""
    a = side.args
    if not _raw(side, "enable_two_batch_overlap", False) or (_raw(side, "moe_a2a_backend", "none") or "none") != "none":
        return None
    if not release_at_least(side, "0.5.7"):
        return None
    hook = "check_two_batch_overlap"

    def no_a2a_refusal(needed: str) -> Refusal:
        return Refusal(
            "two-batch-overlap",
            hook,
            "ValueError",
            "When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), "
            f"{needed} is required (DeepSeek-V4 non-EP DP TBO path).",
        )

    if not release_at_least(side, "0.5.15"):
        return Refusal(
            "two-batch-overlap",
            hook,
            "ValueError",
            "When enabling two batch overlap, moe_a2a_backend cannot be 'none'.",
        )
    if not release_at_least(side, "0.5.23"):
        if a.enable_dp_attention and a.dp_size > 1:
            return None
        return no_a2a_refusal("--enable-dp-attention")
    if dp_layout(side)[1] > 1:
        return None
    return no_a2a_refusal("attention DP (--attn-dp-size)")
