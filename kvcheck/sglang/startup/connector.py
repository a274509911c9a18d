"""After the model loads: the scheduler's PD queues and the NIXL KV manager
(``connector_outcome``), which refuse more once argument resolution has passed."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.sglang.gpu import Gpu
from kvcheck.sglang.startup.backends import resolved_page_size
from kvcheck.sglang.startup.base import (
    Refusal,
    Stop,
    _effective_transfer_backend,
    _env_bool,
    _raw,
    dp_layout,
    host_receive_on,
    release_at_least,
    side_gpu,
)
from kvcheck.sides import Side

OPERATOR_SEES_SCHEDULER = (
    "the server loads the model, then the scheduler exits during start-up with this error "
    '("Scheduler hit an exception" in its log); the server never serves'
)


@dataclass(frozen=True)
class ConnectorRefusal(Refusal):
    """A refusal raised while the scheduler builds its PD queue and KV manager (after the
    model and the KV pools are allocated), not while resolving args."""

    def raised_by(self, side: Side) -> str:
        return f"{side.role}: scheduler start-up ({self.hook})"

    def operator_sees(self) -> str:
        return OPERATOR_SEES_SCHEDULER


def _local_gpu_ids(side: Side) -> list[int]:
    """The GPU ids one node's ranks bind (``base_gpu_id + k * gpu_id_step``), in rank order."""
    a = side.args
    nnodes = int(_raw(side, "nnodes", 1)) or 1
    per_node = max(1, (a.tp_size * a.pp_size) // nnodes)
    base, step = int(_raw(side, "base_gpu_id", 0)), int(_raw(side, "gpu_id_step", 1))
    return [base + k * step for k in range(per_node)]


def ucx_device_list(side: Side) -> ConnectorRefusal | Stop | str | None:
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
            return ConnectorRefusal(
                "nixl-ib-device", "parse_ib_device_config", "ValueError", f"Invalid JSON mapping: {s}"
            )
        if not isinstance(mapping, dict):
            return ConnectorRefusal(
                "nixl-ib-device",
                "parse_ib_device_config",
                "ValueError",
                "Invalid format: expected a mapping from GPU id to IB device string",
            )
        norm: dict[int, str] = {}
        for k, v in mapping.items():
            if not str(k).isdigit() or not isinstance(v, str):
                return ConnectorRefusal(
                    "nixl-ib-device",
                    "parse_ib_device_config",
                    "ValueError",
                    "Invalid format: keys must be integers (or string representations of integers) "
                    "and values must be strings",
                )
            norm[int(k)] = v.strip()
        if not norm:
            return ConnectorRefusal(
                "nixl-ib-device", "parse_ib_device_config", "ValueError", "No valid GPU mappings found in JSON"
            )
        per_gpu = {}
        for gid in _local_gpu_ids(side):
            if gid not in norm:
                return ConnectorRefusal(
                    "nixl-ib-device",
                    where,
                    "ValueError",
                    f"No IB devices configured for GPU {gid}. Available GPUs: {list(norm.keys())}",
                )
            per_gpu[gid] = norm[gid]
    lists = []
    for devices in per_gpu.values():
        names = [n.strip() for n in devices.split(",")]
        if any(not n or ":" in n for n in names):
            return ConnectorRefusal(
                "nixl-ib-device",
                "_resolve_ucx_device_list",
                "ValueError",
                "NIXL UCX --disaggregation-ib-device requires HCA names without port suffixes "
                "(e.g. mlx5_0); NIXL appends port 1.",
            )
        lists.append(", ".join(names))
    return lists[0]


def connector_outcome(side: Side, gpu: Gpu | None = None) -> ConnectorRefusal | Stop | None:
    """The first refusal of the scheduler's PD start-up on this side, after argument resolution
    passed (SGLang 0.5.23): ``PrefillBootstrapQueue.__init__`` / ``DecodePreallocQueue.__init__``
    (``SGLANG_DISAGG_STAGING_BUFFER`` on an MLA model; on a prefill, a chunked-prefill size
    that is not a positive multiple of the page size (from 0.5.17), and PP (any backend in
    0.5.17; other than Mooncake from 0.5.18; earlier releases: a ``Stop``)), then ``NixlKVManager.__init__`` for the
    NIXL UCX backend:
    ``SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS`` (parsed by the ``nixl-backend-params``
    check) and the ``--disaggregation-ib-device`` device list (port suffixes, per-GPU JSON
    mappings, a ``device_list`` in the params that disagrees); then the decode's
    ``DecodePreallocQueue._init_kv_manager``: decode host receive (threshold < 1) needs a
    manager with ``supports_host_destination``, which none has in 0.5.23.
    ``UCX_NET_DEVICES`` makes the runtime ignore the ib device (a warning, see
    ``kvcheck.checks.nixl_env``). Computed once per side and GPU inside
    ``kvcheck.memo.side_memo()``."""
    from kvcheck.memo import remembered

    return remembered("connector_outcome", side, getattr(gpu, "name", gpu), lambda: _connector_outcome(side, gpu))


def _connector_outcome(side: Side, gpu: Gpu | None) -> ConnectorRefusal | Stop | None:
    a = side.args
    if a.disaggregation_mode not in ("prefill", "decode"):
        return None
    from kvcheck.sglang.releases import side_release
    from kvcheck.sglang.startup.gate import startup_verified

    version = side_release(side)[0]
    if not startup_verified(version):
        # fail closed: never another release's scheduler start-up (gate.STARTUP_VERIFIED_RELEASES)
        return Stop(f"SGLang {version or 'unknown'}: kvcheck has not verified this release's scheduler start-up")
    if _env_bool(side, "SGLANG_DISAGG_STAGING_BUFFER"):
        queue = (
            "PrefillBootstrapQueue.__init__" if a.disaggregation_mode == "prefill" else "DecodePreallocQueue.__init__"
        )
        if side.model.is_mla:
            return ConnectorRefusal(
                "staging-mla",
                queue,
                "RuntimeError",
                "SGLANG_DISAGG_STAGING_BUFFER is designed for non-MLA models (e.g. GQA, MHA). "
                "MLA models should not set this flag.",
            )
        if a.disaggregation_mode == "prefill":
            staged = _staging_prefill_chunk(side, gpu or side_gpu(side), queue)
            if staged is not None:
                return staged
        if a.disaggregation_mode == "prefill" and a.pp_size > 1:
            if not release_at_least(side, "0.5.17"):
                return Stop(
                    "SGLANG_DISAGG_STAGING_BUFFER with --pp-size > 1 before SGLang 0.5.17: that release's refusal is "
                    "not restated"
                )
            if not release_at_least(side, "0.5.18"):
                # 0.5.17 refused PP with staging whatever the backend.
                return ConnectorRefusal(
                    "staging-mla", queue, "RuntimeError", "SGLANG_DISAGG_STAGING_BUFFER does not support pp_size > 1."
                )
            if _effective_transfer_backend(side) != "mooncake":
                return ConnectorRefusal(
                    "staging-mla",
                    queue,
                    "RuntimeError",
                    "SGLANG_DISAGG_STAGING_BUFFER with pp_size > 1 is only supported by Mooncake.",
                )
    out = minimax_index_value(side)
    if out is not None:
        return out
    out = _nixl_manager_init(side)
    if out is not None:
        return out
    out = hisparse_host_pool_registration(side)
    if out is not None:
        return out
    if a.disaggregation_mode == "decode" and host_receive_on(side):
        # No KV manager of 0.5.23 sets supports_host_destination (BaseKVManager: False).
        return ConnectorRefusal(
            "decode-host-destination",
            "DecodePreallocQueue._init_kv_manager",
            "ValueError",
            "Transfer backend does not support decode host KV destinations",
        )
    return None


def minimax_index_value(side: Side) -> ConnectorRefusal | Stop | None:
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
        return ConnectorRefusal(
            "minimax-index-value",
            "setup_state_kv_args",
            "NotImplementedError",
            "PD disaggregation for MiniMax sparse layers with index value (index_kv_pool) is not yet "
            "supported; only K-only sparse layers are.",
        )
    return None


def resolved_chunked_prefill_size(side: Side) -> int | None:
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


def _staging_prefill_chunk(side: Side, gpu: Gpu, queue: str) -> ConnectorRefusal | None:
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
        return ConnectorRefusal(
            "staging-chunk-size",
            queue,
            "RuntimeError",
            "SGLANG_DISAGG_STAGING_BUFFER requires a positive chunked_prefill_size that is a "
            f"multiple of page_size ({page}); got {chunk}.",
        )
    return None


def _nixl_manager_init(side: Side) -> ConnectorRefusal | Stop | None:
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
        return ConnectorRefusal(
            "nixl-ib-device",
            "NixlKVManager.__init__",
            "ValueError",
            "Conflicting NIXL UCX device_list in SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS and "
            "--disaggregation-ib-device. Configure only one device selection or make them agree.",
        )
    return None


# The first NIXL release whose UCX backend refuses host memory registered as VRAM
# (``nixlUcxContext::memReg``: "VRAM memory is detected as host by UCX ... VRAM registration
# cannot proceed", ai-dynamo/nixl#1385): measured with nixl-cu12 0.10.1 (registers, warning
# "memory is detected as host") and 1.0.0 / 1.5.1 (``register_memory`` raises NIXL_ERR_BACKEND).
NIXL_REFUSES_HOST_AS_VRAM = "1.0.0"


def hisparse_host_pool_registration(side: Side) -> ConnectorRefusal | Stop | None:
    """A HiSparse decode's KV registration over NIXL before SGLang 0.5.15: the decode hands its
    HiSparse host pool (pinned host memory, ``hisparse_coordinator.mem_pool_host``) to the KV
    manager as its KV buffers (``DecodePreallocQueue._init_kv_manager``, 0.5.10 .. 0.5.14), and
    ``NixlKVManager.register_buffer_to_engine`` registers every KV buffer as ``"VRAM"`` (memory
    kinds come with sgl-project/sglang#27563 in 0.5.15). With NIXL >= 1.0.0 ``register_memory``
    raises ``nixlBackendError: NIXL_ERR_BACKEND`` and the decode's scheduler exits at start-up;
    with an older NIXL the registration only warns, and what the transfers then do is not known
    (a ``Stop``), as when the decode's NIXL release is not known."""
    a = side.args
    if a.disaggregation_mode != "decode" or not a.enable_hisparse or a.disaggregation_transfer_backend != "nixl":
        return None
    if release_at_least(side, "0.5.15") or not release_at_least(side, "0.5.10"):
        return None
    from kvcheck.sglang.server_nixl import nixl_in, server_nixl

    got = server_nixl(side)
    if nixl_in(got, [[NIXL_REFUSES_HOST_AS_VRAM, None]]) == "yes":
        return ConnectorRefusal(
            "hisparse-host-as-vram", "NixlKVManager.register_buffer_to_engine", "nixlBackendError", "NIXL_ERR_BACKEND"
        )
    runs = f"NIXL {got.describe()} ({got.source})" if got.known else f"an unknown NIXL ({got.source})"
    return Stop(
        "the HiSparse decode registers its host KV pool with NIXL as VRAM before SGLang 0.5.15 "
        "(sgl-project/sglang#27563 "
        f"adds DRAM destinations): NIXL >= {NIXL_REFUSES_HOST_AS_VRAM} refuses it at start-up (NIXL_ERR_BACKEND), an "
        "older "
        f"NIXL registers it with a warning and what its transfers do is not known; the decode runs {runs}"
    )


CONNECTOR_REFUSAL_IDS = (
    "staging-mla",
    "staging-chunk-size",
    "nixl-ib-device",
    "decode-host-destination",
    "hisparse-host-as-vram",
)
