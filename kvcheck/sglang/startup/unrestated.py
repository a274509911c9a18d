"""Flag values whose start-up checks kvcheck does not restate, but which SGLang 0.5.23 refuses
at start-up on a plain PD server (measured, not guessed).

``benchmarks/measure_unrestated_flags.py`` gives every ``store_true`` flag and every choice of
a ``choices`` flag of 0.5.23's own parser, one at a time, to a plain PD prefill and decode
(Llama-3.1-8B and DeepSeek-V3, NIXL and Mooncake, H100), runs 0.5.23's own start-up
(``prepare_server_args`` -> ``resolve_once()`` -> ``check_server_args()``, as
``tests/startup_worker.py`` does) and keeps each value the runtime refuses where kvcheck's
restated steps (``kvcheck.sglang.startup.ORDER``) predicted a start. Many of these refusals
depend on other flags, the model or the GPU (``--retraction-policy priority`` needs
``--enable-priority-scheduling``; ``tokenspeed_mla`` needs Blackwell); kvcheck restates none of
them, so a side that sets one is ``startup-unchecked`` naming the flag (``unrestated_flag``),
never a pass. Numeric flags: ``UNRESTATED_REFUSING_NUMBERS`` (probe values, Llama-3.1-8B
NIXL, both roles). Flags with free text values (paths, JSON) are not covered.
"""

from __future__ import annotations

from typing import Any

from kvcheck.sglang.startup.base import Stop
from kvcheck.sides import Side

# dest -> the values (True for a store_true flag) 0.5.23 refused at start-up on a plain PD side
UNRESTATED_REFUSING_VALUES: dict[str, frozenset[Any]] = {
    "attention_backend": frozenset({"tokenspeed_mla"}),
    "dcp_comm_backend": frozenset({"a2a", "fi_a2a"}),
    "decode_attention_backend": frozenset({"tokenspeed_mla"}),
    "enable_amd_monokernel": frozenset({True}),
    "enable_cp_decode_attn_tp": frozenset({True}),
    "enable_deepseek_v4_fp4_indexer": frozenset({True}),
    "enable_dsa_cache_layer_split": frozenset({True}),
    "enable_encoder_swa_bounded_replay": frozenset({True}),
    "enable_eplb": frozenset({True}),
    "enable_http2": frozenset({True}),
    "enable_http_worker_reuseport": frozenset({True}),
    "enable_layernorm_sp": frozenset({True}),
    "enable_linear_replayssm": frozenset({True}),
    "enable_linear_replayssm_spec": frozenset({True}),
    "enable_linker_mla_dedup": frozenset({True}),
    "enable_lmcache": frozenset({True}),
    "enable_lora": frozenset({True}),
    "enable_mamba_cache_stochastic_rounding": frozenset({True}),
    "enable_megamoe_for_layernorm_sp": frozenset({True}),
    "enable_mis": frozenset({True}),
    "enable_nvidia_megakernel": frozenset({True}),
    "enable_pdmux": frozenset({True}),
    "enable_prefix_mm_cache": frozenset({True}),
    "enable_quant_communications": frozenset({True}),
    "enable_response_store": frozenset({True}),
    "enable_return_aux_hidden_states": frozenset({True}),
    "enable_ssl_refresh": frozenset({True}),
    "enable_unified_cache_external_linker": frozenset({True}),
    "enable_watermark": frozenset({True}),
    "encoder_only": frozenset({True}),
    "ep_dispatch_algorithm": frozenset({"lp", "static"}),
    "export_metrics_to_file": frozenset({True}),
    "flashinfer_a2a_dispatch_type": frozenset({"bf16", "mxfp8", "nvfp4"}),
    "hicache_host_memory_mode": frozenset({"buffer_only"}),
    "language_model_only": frozenset({True}),
    "language_only": frozenset({True}),
    "linear_attn_decode_backend": frozenset({"flashkda"}),
    "load_format": frozenset({"expert_pack"}),
    "mamba_backend": frozenset({"flashinfer"}),
    "mamba_radix_cache_strategy": frozenset({"extra_buffer", "extra_buffer_lazy"}),
    "moe_a2a_backend": frozenset({"deepep_v2", "flashinfer", "flashinfer_megamoe", "pplx"}),
    "moe_runner_backend": frozenset({"flashinfer_cutedsl", "lora_cutedsl", "lora_marlin", "lora_triton"}),
    "prefill_only_disable_kv_cache": frozenset({True}),
    "quantization": frozenset({"gptq", "mlx_q4", "mlx_q8", "mxfp4", "nvfp4_online"}),
    "quantize_and_serve": frozenset({True}),
    "radix_eviction_policy": frozenset({"tlru"}),
    "retraction_policy": frozenset({"priority"}),
    "sampling_backend": frozenset({"intel_xpu"}),
    "speculative_moe_a2a_backend": frozenset({"deepep_v2"}),
    "speculative_use_block_verification": frozenset({True}),
}

# Numeric flags: each was given the probe values below, one at a time (``--numeric`` in the
# script); dest -> (probes, the probes 0.5.23 refused). A value between two probes is judged by
# both neighbours, one beyond the probes by the outermost: refused if any of them was
# (``_numeric_refused``), so a range check is never passed by a value the probes bracket.
INT_PROBES: tuple[float, ...] = (-1, 0, 1, 2, 8)
FLOAT_PROBES: tuple[float, ...] = (-1.0, 0.0, 0.5, 1.0, 2.0)
UNRESTATED_REFUSING_NUMBERS: dict[str, tuple[tuple[float, ...], frozenset[float]]] = {
    "asr_max_buffer_seconds": (INT_PROBES, frozenset({-1, 0})),
    "asr_max_concurrent_sessions": (INT_PROBES, frozenset({-1, 0})),
    "base_gpu_id": (INT_PROBES, frozenset({-1})),
    "detokenizer_worker_num": (INT_PROBES, frozenset({-1, 0})),
    "dwdp_size": (INT_PROBES, frozenset({2, 8})),
    "elastic_ep_initial_size": (INT_PROBES, frozenset({-1, 0, 1, 2, 8})),
    "gpu_id_step": (INT_PROBES, frozenset({-1, 0})),
    "grpc_port": (INT_PROBES, frozenset({-1, 0})),
    "grpc_response_timeout_secs": (INT_PROBES, frozenset({-1, 0})),
    "hicache_host_memory_fraction": (FLOAT_PROBES, frozenset({-1.0, 0.0, 2.0})),
    "kv_canary_sweep_interval": (INT_PROBES, frozenset({1, 2, 8})),
    "mamba_cache_philox_rounds": (INT_PROBES, frozenset({-1})),
    "mamba_max_states_per_path": (INT_PROBES, frozenset({0})),
    "max_ep_size": (INT_PROBES, frozenset({-1, 0, 1, 2, 8})),
    "max_loras_per_batch": (INT_PROBES, frozenset({-1, 0})),
    "media_url_max_file_size_mb": (INT_PROBES, frozenset({-1})),
    "mm_io_worker_num": (INT_PROBES, frozenset({-1})),
    "mm_preprocess_cache_size_mb": (INT_PROBES, frozenset({-1})),
    "mm_processor_worker_num": (INT_PROBES, frozenset({-1})),
    "moe_dense_tp_size": (INT_PROBES, frozenset({-1, 0, 2, 8})),
    "moe_dp_size": (INT_PROBES, frozenset({-1, 0, 2, 8})),
    "nnodes": (INT_PROBES, frozenset({0})),
    "pp_max_micro_batch_size": (INT_PROBES, frozenset({-1, 0})),
    "prefill_decode_interval": (INT_PROBES, frozenset({-1})),
    "prefill_decode_interval_min_bs": (INT_PROBES, frozenset({-1})),
    "sampling_mask_max_tokens": (INT_PROBES, frozenset({-1, 0})),
    "schedule_conservativeness": (FLOAT_PROBES, frozenset({-1.0})),
    "shared_experts_tp_size": (INT_PROBES, frozenset({-1, 0, 1, 2, 8})),
    "speculative_draft_sink_size": (INT_PROBES, frozenset({-1, 0, 1, 2, 8})),
    "speculative_draft_window_size": (INT_PROBES, frozenset({-1, 0})),
    "swa_full_tokens_ratio": (FLOAT_PROBES, frozenset({-1.0, 0.0, 2.0})),
    "swa_prefix_tails": (INT_PROBES, frozenset({-1})),
    "tokenizer_worker_num": (INT_PROBES, frozenset({-1, 0})),
}


# Numeric flags whose whole rule is one range, read in the runtime's code: a value inside it
# passes that check, whatever the probes around it gave (the probe rule above would stop every
# value between a refused probe and an accepted one). dest -> (low, exclusive; high, inclusive).
# swa_full_tokens_ratio: "--swa-full-tokens-ratio should be in range (0, 1.0]." (0.5.8 ..
# 0.5.17 ServerArgs, 0.5.21 .. 0.5.23 arg_groups/kv_cache_hook.py _handle_cache_compatibility).
UNRESTATED_NUMBER_RANGES: dict[str, tuple[float, float]] = {"swa_full_tokens_ratio": (0.0, 1.0)}


def _ep_size_above_one(raw: dict[str, Any]) -> bool:
    ep = raw.get("ep_size")
    tp = raw.get("tp_size")
    deepep_spans_tp = (
        str(raw.get("moe_a2a_backend") or "").lower() == "deepep"
        and isinstance(tp, int)
        and not isinstance(tp, bool)
        and tp > 1
    )
    return (
        (isinstance(ep, int) and not isinstance(ep, bool) and ep > 1)
        or raw.get("ep_join_mode") == "scale"
        or deepep_spans_tp
    )


def _a2a_backend_set(raw: dict[str, Any]) -> bool:
    backend = raw.get("moe_a2a_backend")
    return isinstance(backend, str) and backend.lower() != "none"


# Refusals of the table above whose whole condition is read in 0.5.23's code: the side is
# outside it when the function says so (the value was refused on the plain servers measured,
# which lack what the condition asks). Kept to what the side's own flags show: a value the
# runtime would resolve by other means (an ep size derived from anything but deepep and the
# side's own TP size) still stops.
# - enable_eplb: parallel_hook._handle_eplb_and_dispatch, ``assert ep_size > 1`` unless
#   ``ep_join_mode == "scale"``. ``--moe-a2a-backend deepep`` sets ep_size to tp_size before
#   that assert in every release that has it: ``_handle_a2a_moe`` runs first in
#   ``__post_init__`` (0.5.1 .. 0.5.14: "The expert parallel size is adjusted to be the same
#   as the tensor parallel size"; 0.5.15 .. 0.5.22: ``overrides._a2a_ep_size``), and 0.5.23
#   starts such a side at TP 8 (tests/test_startup.py); so deepep at TP > 1 meets it.
# - ep_dispatch_algorithm static/lp: the same hook raises only when the MoE a2a backend
#   resolves to "none" ("... only holds up when an a2a backend routes each token ...").
UNRESTATED_UNLESS: dict[str, Any] = {
    "enable_eplb": _ep_size_above_one,
    "ep_dispatch_algorithm": _a2a_backend_set,
}


def _numeric_refused(value: float, probes: tuple[float, ...], refused: frozenset[float]) -> bool:
    if value in probes:
        return value in refused
    if value < probes[0]:
        return probes[0] in refused
    if value > probes[-1]:
        return probes[-1] in refused
    i = next(k for k in range(len(probes) - 1) if probes[k] < value < probes[k + 1])
    return probes[i] in refused or probes[i + 1] in refused


def modelopt_fp4_on_its_export(quant: str, model: Any) -> bool:
    """Whether ``--quantization modelopt_fp4`` names the checkpoint's own method: a ModelOpt
    export whose quant config says ``quant_method`` modelopt (or modelopt_fp4, as SGLang names
    an hf_quant_config.json export) with an FP4 ``quant_algo`` (NVFP4; not MIXED_PRECISION).

    ``ModelConfig._verify_quantization`` accepts it in every release from 0.4.6 to 0.5.23
    (read in each release's ``configs/model_config.py``): an override sets the checkpoint's
    method and the CLI value alike; otherwise the method is ``modelopt_fp4`` (parsed by
    ``_parse_modelopt_quant_config`` from 0.5.3.post1) or ``modelopt``, which
    ``compatible_quantization_methods["modelopt_fp4"]`` lists in every release. On 0.5.23 the
    explicit flag also resolves the same start-up (attention backend, page size, KV dtype) as
    leaving it unset (measured with ``prepare_server_args`` on SM90 and SM100). An FP8
    checkpoint is not one: ``modelopt_fp4`` accepts ``fp8`` only from 0.5.18."""
    algo = str(getattr(model, "checkpoint_quant_algo", None) or "").upper()
    method = str(getattr(model, "checkpoint_quant_method", None) or "").lower()
    return quant.lower() == "modelopt_fp4" and method in ("modelopt", "modelopt_fp4") and "FP4" in algo


def unrestated_flag(side: Side, gpu: Any = None) -> Stop | None:
    """A ``Stop`` naming the first flag of ``UNRESTATED_REFUSING_VALUES`` the side sets to a
    value listed there, else ``None``. Run after every restated start-up step (a refusal
    kvcheck restates is still named; the verdict is never a pass when one of these is set)."""
    raw = side.raw_args or {}
    quant, checkpoint = raw.get("quantization"), side.model.checkpoint_quant_method
    if (
        quant
        and checkpoint
        and str(quant).lower() != str(checkpoint).lower()
        and not modelopt_fp4_on_its_export(str(quant), side.model)
    ):
        # ModelConfig._verify_quantization: a --quantization other than the checkpoint's method
        # is refused unless an override maps one to the other (not restated)
        return Stop(
            f"--quantization {quant} on a checkpoint quantized with {checkpoint}: SGLang 0.5.23's "
            "_verify_quantization refuses a mismatch unless an override maps one to the other; kvcheck does not "
            "restate that check"
        )
    for dest, (probes, numbers) in UNRESTATED_REFUSING_NUMBERS.items():
        number = raw.get(dest)
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            continue
        accepted = UNRESTATED_NUMBER_RANGES.get(dest)
        if accepted is not None and accepted[0] < number <= accepted[1]:
            continue
        if _numeric_refused(number, probes, numbers):
            return Stop(
                f"--{dest.replace('_', '-')} {number}: SGLang 0.5.23 refuses this value at start-up on a plain PD "
                "server "
                "(or unless other flags allow it), and kvcheck does not restate that check"
            )
    for dest, values in UNRESTATED_REFUSING_VALUES.items():
        value = raw.get(dest)
        if value is None or value is False:
            continue
        # the TP size as kvcheck resolved it (a variable the deployment fills, e.g. OME's
        # $(PARALLELISM_SIZE), is absent from the raw flags)
        if dest in UNRESTATED_UNLESS and UNRESTATED_UNLESS[dest](
            {**raw, "tp_size": raw.get("tp_size") or side.args.tp_size}
        ):
            continue
        if value in values or (isinstance(value, str) and value.lower() in values):
            flag = "--" + dest.replace("_", "-")
            shown = flag if value is True else f"{flag} {value}"
            return Stop(
                f"{shown}: SGLang 0.5.23 refuses it at start-up on a plain PD server unless other flags, the model or "
                "the GPU allow it, and kvcheck does not restate that check"
            )
    return None
