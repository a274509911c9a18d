"""Checks of pairs whose prefill does not run NIXL: Mooncake's own transfer decision
(``kvcheck.sglang.mooncake``), Mooncake's start-up refusals, and the backends kvcheck does
not model (MORI, Ascend, fake), which are ``unchecked``, never passed.

``decide_transfer_for_backend`` is the one hook the preflight calls (``kvcheck.preflight``,
marked "backend hook"): it returns the plan of the pair's own backend and the NIXL-only
checks to skip, or None for a NIXL prefill (the NIXL decision runs as before). The decode's
bootstrap checks (``bootstrap``) run for every backend and are untouched.
"""

from __future__ import annotations

import json
from typing import Any

from kvcheck.checks.base import CheckContext, Finding, PairFacts, Severity, check
from kvcheck.sglang.plan import Plan, RuntimeErrorPrediction
from kvcheck.sides import Side

# Checks that restate NIXL's connector: they do not run when the prefill is not NIXL (the
# bootstrap checks, start-up refusals and model findings keep running).
# (connector-startup, hisparse-draft-nixl and hetero-tp-performance stay: the PD queues'
# refusals, the NIXL decode's own refusal and the common connector's warning hold for any
# prefill backend.)
NIXL_ONLY_CHECKS = frozenset(
    {
        "transfer-decision",
        "nixl-backend",
        "nixl-backend-params",
        "item-length-larger",
        "nixl-stateless-hang",
        "hetero-tp-kv-misrouted",
        "state-components-differ",
        "agents",
        "probe",
    }
)
UNMODELED_BACKENDS = {
    "mori": "MORI (MoriKVManager, disaggregation/mori/conn.py)",
    "ascend": "Ascend (AscendKVManager over Mooncake's ascend transport, disaggregation/ascend/conn.py)",
    "fake": "the fake backend (FakeKVSender/FakeKVReceiver: no KV moves; for warm-up and tests)",
}
TRUE = ("1", "true", "yes", "on")


def _backend(side: Side) -> str:
    return side.args.disaggregation_transfer_backend


def decide_transfer_for_backend(prefill: Side, decode: Side, pg, dg, extra: PairFacts) -> Plan | None:
    """The pair's plan by the prefill's own backend, or None when the prefill runs NIXL.

    Sets ``extra["skip_checks"]`` (the NIXL-only checks) and ``extra["backend_stages"]``
    (Mooncake: one ``Plan`` per prefill PP stage) for the checks below."""
    pb, db = _backend(prefill), _backend(decode)
    if pb == "nixl":
        return None
    # transfer-backend restates what a NIXL prefill does with another backend's decode;
    # backend-unchecked / backend-mismatch below say it for the other prefills.
    extra["skip_checks"] = NIXL_ONLY_CHECKS | {"transfer-backend"}
    if pb != "mooncake" or db != "mooncake":
        return None
    # NIXL's state restatement (maybe_send_extra of NixlKVManager, its legacy unequal-TP
    # refusals) is not Mooncake's: mooncake-transfer reports decide_states' outcome.
    extra["skip_checks"] = extra["skip_checks"] | {"state-transfer"}
    from kvcheck.sglang import mooncake as mc
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sglang.mooncake.states import state_fix

    heads = prefill.model.num_key_value_heads if prefill.model.attention == "MHA" else None
    writer, kernel_unchecked = _runtime_writer(prefill, extra)
    staging = str(prefill.env.get("SGLANG_DISAGG_STAGING_BUFFER", "")).lower() in TRUE
    unified = bool((prefill.raw_args or {}).get("enable_unified_memory")) or bool(
        (decode.raw_args or {}).get("enable_unified_memory")
    )
    same_pp = decode.args.pp_size == prefill.args.pp_size
    stages: list[Plan] = []
    states: list = []
    state_fixes: list[str] = []
    for rank in range(max(1, prefill.args.pp_size)):
        sp = pg if rank == 0 else derive_geometry(prefill, pp_rank=rank)
        sd = dg if rank == 0 or not same_pp else derive_geometry(decode, pp_rank=rank)
        unmodeled = kernel_unchecked
        if prefill.args.attn_cp_size > 1 or prefill.args.enable_kv_cache_sharding:
            # Which prefill CP ranks / KV shards send which pages (the decode's rank
            # mapping, _get_dsa_cache_transfer_skip_flags, filter_kv_indices_for_shard_rank)
            # is not restated for Mooncake.
            unmodeled = (
                "a prefill with attention context parallelism or KV cache sharding: which of its ranks send "
                "which pages is not restated for Mooncake"
            )
        if unmodeled:
            stages.append(Plan(path="not_modeled", n_src=sp.n, n_dst=sd.n, not_modeled_reason=unmodeled))
            states.append((None, None))
            continue
        try:
            plan = mc.decide(
                sp,
                sd,
                decode_dcp_size=decode.args.dcp_size,
                prefill_dcp_size=prefill.args.dcp_size,
                pp_rank=rank,
                total_kv_heads=heads,
                release=prefill.sglang_version,
                bootstrap_port=prefill.args.disaggregation_bootstrap_port,
                staging=staging,
                unified_memory=unified,
                decode_hisparse=decode.args.enable_hisparse,
                writer=writer,
            )
        except Exception as exc:  # the runtime kernel's stand-in manager could not drive this release's worker
            if writer is None:
                raise
            plan = Plan(
                path="not_modeled",
                n_src=sp.n,
                n_dst=sd.n,
                not_modeled_reason=(
                    "--kernel runtime: SGLang's own Mooncake transfer worker could not be driven "
                    f"({type(exc).__name__}: {exc})"
                ),
            )
        plan.kernel = "runtime" if writer is not None else "builtin"
        if plan.error is not None and rank > 0:
            plan.error.raised_by += f" on prefill PP stage {rank}"
        stages.append(plan)
        state_fixes.append(state_fix(sp, sd))
        states.append(
            mc.decide_states(
                sp,
                sd,
                release=prefill.sglang_version,
                bootstrap_port=prefill.args.disaggregation_bootstrap_port,
                pp_rank=rank,
            )
        )
    extra["backend_stages"] = stages
    extra["backend_states"] = states
    extra["backend_state_fixes"] = state_fixes
    # The state components of a Mooncake pair are decided (or said unchecked, with the
    # reason) by mooncake-transfer from decide_states: the NIXL state-components check
    # must not keep a pair unchecked that Mooncake's own send decides.
    extra["states_decided"] = True
    shown = next((p for p in stages if p.error is not None), None) or next(
        (p for p in stages if p.path == "not_modeled"), stages[0]
    )
    out = shown.model_copy(deep=True)
    out.not_modeled_reason = None  # reported by mooncake-transfer, not by the NIXL release check
    return out


def _runtime_writer(prefill: Side, extra: Any):
    """``--kernel runtime`` (``extra["kernel"]``): the installed SGLang's own
    ``MooncakeKVManager.transfer_worker`` issues the writes (``mooncake_runtime.runtime_writes``)
    when it is the prefill's release; otherwise the Mooncake transfer is unchecked with the
    reason, never answered by the builtin restatement in its place. (writer, unchecked reason)."""
    if extra.get("kernel") != "runtime":
        return None, None
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:  # the installed release, read without importing SGLang (seconds)
            if version("sglang") != prefill.sglang_version:
                return None, (
                    f"--kernel runtime drives the installed SGLang {version('sglang')}, but the prefill runs "
                    f"{prefill.sglang_version}: "
                    "that release's own Mooncake code is not in this Python (use --kernel builtin, or run kvcheck "
                    "where SGLang "
                    f"{prefill.sglang_version} is installed)"
                )
        except PackageNotFoundError:
            pass
        from kvcheck.sglang import mooncake_runtime

        installed = mooncake_runtime.runtime_version()
    except Exception as exc:
        return (
            None,
            f"--kernel runtime: the installed SGLang's Mooncake code does not import ({type(exc).__name__}: {exc})",
        )
    if installed != prefill.sglang_version:
        return None, (
            f"--kernel runtime drives the installed SGLang {installed}, but the prefill runs {prefill.sglang_version}: "
            "that release's own Mooncake code is not in this Python (use --kernel builtin, or run kvcheck where "
            f"SGLang {prefill.sglang_version} is installed)"
        )
    return mooncake_runtime.runtime_writes, None


_FIX = {
    "SilentCorruption": "Run both servers with the same model, --kv-cache-dtype, --page-size and a PP layout whose "
    "stages split the layers "
    "the same way on both sides (or decode PP 1 with an even prefill split); kvcheck names the region written wrongly.",
    "RuntimeError": "Align the two sides' KV layouts (PP split, speculative draft, layer ids) so that every prefill "
    "region has its decode region.",
    "KVTransferError": "Align the two sides' region layouts (attention TP, PP split, item lengths) so that the "
    "Mooncake send path fits.",
}


@check(
    "mooncake-transfer",
    Severity.ERROR,
    "Mooncake's prefill writes every KV region where the decode keeps it",
    what=(
        "The Mooncake prefill's send path for this decode (send_kvcache: equal TP / MLA, by layer id or K/V halves "
        "and the stage's "
        "start layer; send_kvcache_slice: head slices for unequal attention TP), checked write by write for a "
        "one-page request."
    ),
    why=(
        "Mooncake prepares nothing at registration: a region that has no decode counterpart kills a transfer worker "
        "thread or fails "
        "every request to that decode, and a decode region of another item length or meaning is written silently at "
        "the wrong place."
    ),
    fix="Align the named flag on both servers.",
)
def mooncake_transfer(chk, ctx: CheckContext) -> list[Finding]:
    stages = ctx.extra.get("backend_stages")
    if not stages:
        return []
    out: list[Finding] = []
    seen: set[str] = set()
    for rank, plan in enumerate(stages):
        where = f" (prefill PP stage {rank})" if len(stages) > 1 else ""
        if plan.error is not None and plan.error.message not in seen:
            seen.add(plan.error.message)
            fid = {
                "SilentCorruption": "mooncake-silent-corruption",
                "KVTransferError": "mooncake-send-fails",
                "RuntimeError": "mooncake-worker-dies",
            }.get(plan.error.type, "mooncake-runtime-error")
            if "DCP topology" in plan.error.message:
                fid = "mooncake-dcp-topology"
            corrupt = plan.error.type == "SilentCorruption"  # nothing is raised: the finding is the error
            msg = plan.error.message + where + (f" ({plan.error.operator_sees})" if corrupt else "")
            out.append(
                Finding(
                    id=fid,
                    severity=Severity.ERROR,
                    message=msg,
                    fix=_FIX.get(plan.error.type, chk.fix),
                    runtime_error=None if corrupt else plan.error.model_copy(),
                )
            )
        elif plan.path == "not_modeled" and plan.not_modeled_reason not in seen:
            seen.add(plan.not_modeled_reason)
            out.append(
                Finding(
                    id="mooncake-unchecked",
                    severity=Severity.UNCHECKED,
                    message=f"Mooncake transfer not checked{where}: {plan.not_modeled_reason}",
                    fix="Check this pair on a staging deployment, or pass --allow-unchecked to accept it knowingly.",
                )
            )
    fixes = ctx.extra.get("backend_state_fixes") or []
    for rank, (err, why) in enumerate(ctx.extra.get("backend_states") or []):
        where = f" (prefill PP stage {rank})" if len(stages) > 1 else ""
        if err is not None and err.message not in seen and err.type == "SilentCorruption":
            seen.add(err.message)  # nothing is raised: the finding is the error
            out.append(
                Finding(
                    id="mooncake-silent-corruption",
                    severity=Severity.ERROR,
                    message=f"Mooncake state transfer{where}: {err.message} ({err.operator_sees})",
                    fix=fixes[rank] if rank < len(fixes) else "Run both servers with the same state layout.",
                    runtime_error=None,
                )
            )
        elif err is not None and err.message not in seen:
            seen.add(err.message)
            out.append(
                Finding(
                    id="mooncake-worker-dies",
                    severity=Severity.ERROR,
                    message=err.message + where,
                    fix="Run both servers at the same attention TP size (and PP 1 for MiniMax sparse attention).",
                    runtime_error=err,
                )
            )
        elif why is not None and why not in seen:
            seen.add(why)
            out.append(
                Finding(
                    id="mooncake-unchecked",
                    severity=Severity.UNCHECKED,
                    message=f"Mooncake state transfer not checked{where}: {why}; the KV regions were checked",
                    fix="Check this pair on a staging deployment, or pass --allow-unchecked to accept it knowingly.",
                )
            )
    return out


def _ib_findings(side: Side) -> list[str]:
    """``get_ib_devices_for_gpu`` / ``parse_ib_device_config`` (``mooncake_transfer_engine.py``,
    0.5.10 .. 0.5.23) on this side's ``--disaggregation-ib-device``, for the GPUs of its
    first node; the texts the server raises at start-up."""
    raw = side.args.disaggregation_ib_device
    if raw is None or not raw.strip() or side.env.get("MC_FORCE_TCP") == "1":
        return []
    s = raw.strip()
    if not s.endswith(".json") and not s.startswith("{"):
        return []
    if s.endswith(".json"):
        return []  # a file on the server's disk: kvcheck cannot read it (said by the caller)
    try:
        mapping = json.loads(s)
    except json.JSONDecodeError:
        return [f"ValueError: Invalid JSON mapping: {s}"]
    if not isinstance(mapping, dict):
        return ["ValueError: Invalid format: expected a mapping from GPU id to IB device string"]
    ids = {}
    for k, v in mapping.items():
        if not str(k).isdigit() or not isinstance(v, str):
            return [
                "ValueError: Invalid format: keys must be integers (or string representations of integers) and "
                "values must be strings"
            ]
        ids[int(k)] = v.strip()
    if not ids:
        return ["ValueError: No valid GPU mappings found in JSON"]
    raw_args = side.raw_args or {}
    base, step, nnodes = (
        int(raw_args.get("base_gpu_id") or 0),
        int(raw_args.get("gpu_id_step") or 1),
        int(raw_args.get("nnodes") or 1),
    )
    per_node = max(1, side.args.tp_size * side.args.pp_size // max(1, nnodes))
    for g in (base + k * step for k in range(per_node)):
        if g not in ids:
            return [f"ValueError: No IB devices configured for GPU {g}. Available GPUs: {list(ids.keys())}"]
    return []


def startup_refusals(side: Side) -> list[tuple[str, str]]:
    """(finding id, ``Type: text``) of what a Mooncake server refuses at start-up
    (``MooncakeKVManager.__init__`` and ``MooncakeTransferEngine.__init__``, 0.5.23; the
    EFA checks from 0.5.21, the failed-session probe from 0.5.23)."""
    from kvcheck.sglang.pd_release import at_least

    v = side.sglang_version or "0.5.23"
    env = {**side.env}
    out: list[tuple[str, str]] = [("mooncake-ib-device", m) for m in _ib_findings(side)]
    pool = env.get("SGLANG_MOONCAKE_CUSTOM_MEM_POOL")
    ptype = "NVLINK" if pool and pool.lower() == "true" else pool
    enabled = ptype in ("NVLINK", "BAREX", "INTRA_NODE_NVLINK")
    if at_least(v, "0.5.21") and env.get("MOONCAKE_PROTOCOL", "rdma").lower() == "efa":
        if enabled and ptype in ("NVLINK", "BAREX"):
            out.append(
                (
                    "mooncake-efa",
                    f"ValueError: SGLANG_MOONCAKE_CUSTOM_MEM_POOL={ptype} is incompatible with "
                    "MOONCAKE_PROTOCOL=efa. Mooncake "
                    "custom memory pools use CUDA VMM allocations, which the current libfabric EFA provider cannot "
                    "transfer. Unset SGLANG_MOONCAKE_CUSTOM_MEM_POOL.",
                )
            )
        for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            fields = [f.partition(":") for f in env.get(var, "").split(",")]
            if any(k.strip() == "expandable_segments" and val.strip().lower() == "true" for k, _, val in fields):
                out.append(
                    (
                        "mooncake-efa",
                        f"ValueError: {var} enables expandable_segments, which is incompatible with "
                        "MOONCAKE_PROTOCOL=efa because "
                        "the current libfabric EFA provider cannot transfer CUDA VMM allocations. Disable "
                        "expandable_segments.",
                    )
                )
                break
    if at_least(v, "0.5.23") and env.get("SGLANG_ENABLE_FAILED_SESSION_PROBE", "").lower() in TRUE:
        try:
            interval = float(env.get("SGLANG_FAILED_SESSION_PROBE_INTERVAL_S", 5))
            cap = float(env.get("SGLANG_FAILED_SESSION_PROBE_MAX_INTERVAL_S", 60))
            idle = float(env.get("SGLANG_FAILED_SESSION_IDLE_TIMEOUT_S", 600))
        except ValueError:
            interval, cap, idle = 1, 1, 1
        if not 0 < interval <= cap:
            out.append(
                (
                    "mooncake-session-probe",
                    "ValueError: Need 0 < SGLANG_FAILED_SESSION_PROBE_INTERVAL_S <= "
                    "SGLANG_FAILED_SESSION_PROBE_MAX_INTERVAL_S",
                )
            )
        if idle <= 0:
            out.append(("mooncake-session-probe", "ValueError: SGLANG_FAILED_SESSION_IDLE_TIMEOUT_S must be positive"))
    if side.role == "prefill":
        try:
            pool_size = env.get("SGLANG_DISAGGREGATION_THREAD_POOL_SIZE")
            queues = int(env.get("SGLANG_DISAGGREGATION_QUEUE_SIZE", 4))
            if pool_size is not None and int(pool_size) < queues:
                out.append(
                    (
                        "mooncake-thread-pool",
                        "AssertionError: The environment variable "
                        f"SGLANG_DISAGGREGATION_THREAD_POOL_SIZE={int(pool_size)} must be "
                        f"greater than or equal to SGLANG_DISAGGREGATION_QUEUE_SIZE={queues}.",
                    )
                )
        except ValueError:
            pass
    return out


@check(
    "mooncake-startup",
    Severity.ERROR,
    "A Mooncake server starts with its transfer engine settings",
    what=(
        "--disaggregation-ib-device (a device list, a JSON mapping GPU id -> devices, or a JSON file), "
        "MOONCAKE_PROTOCOL, "
        "SGLANG_MOONCAKE_CUSTOM_MEM_POOL (NVLINK, BAREX, INTRA_NODE_NVLINK), the failed-session probe and the "
        "transfer thread pool."
    ),
    why="MooncakeKVManager.__init__ and MooncakeTransferEngine.__init__ raise these at start-up: the server does not "
    "come up.",
    fix="Fix the named setting on that server.",
)
def mooncake_startup(chk, ctx: CheckContext) -> list[Finding]:
    sides = [s for s in (ctx.prefill, ctx.decode) if _backend(s) == "mooncake"]
    out: list[Finding] = []
    for side in sides:
        for fid, text in startup_refusals(side):
            t, _, msg = text.partition(": ")
            out.append(
                Finding(
                    id=fid,
                    severity=Severity.ERROR,
                    message=f"{side.role}: {msg}",
                    fix=chk.fix,
                    runtime_error=RuntimeErrorPrediction(
                        type=t,
                        message=msg,
                        raised_by=f"{side.role}: MooncakeKVManager / MooncakeTransferEngine start-up",
                        when="start-up",
                        operator_sees=f"the {side.role} fails to start with this traceback",
                    ),
                )
            )
        raw = side.args.disaggregation_ib_device
        if raw and raw.strip().endswith(".json") and side.env.get("MC_FORCE_TCP") != "1":
            out.append(
                Finding(
                    id="mooncake-ib-device-file",
                    severity=Severity.WARNING,
                    message=f"{side.role}: --disaggregation-ib-device {raw.strip()} is a file on the server; kvcheck "
                    "cannot read it "
                    f"(the server fails with 'File {raw.strip()} does not exist.' or 'No IB devices configured for "
                    "GPU <id>' when it is wrong)",
                    fix="Check that the file exists on every node and maps every GPU id the server uses.",
                )
            )
        pool = side.env.get("SGLANG_MOONCAKE_CUSTOM_MEM_POOL")
        if pool is not None and pool.lower() != "true" and pool not in ("NVLINK", "BAREX", "INTRA_NODE_NVLINK"):
            out.append(
                Finding(
                    id="mooncake-custom-pool",
                    severity=Severity.WARNING,
                    message=f"{side.role}: SGLANG_MOONCAKE_CUSTOM_MEM_POOL={pool} is not a pool type SGLang knows "
                    "(NVLINK, BAREX, INTRA_NODE_NVLINK); "
                    "the server silently runs without a custom memory pool",
                    fix="Use NVLINK, BAREX or INTRA_NODE_NVLINK (or 'true' for NVLINK), or unset it.",
                )
            )
        proto = side.env.get("MOONCAKE_PROTOCOL", "rdma").lower()
        if side.env.get("MC_FORCE_TCP") == "1" and proto == "rdma":
            out.append(
                Finding(
                    id="mooncake-tcp",
                    severity=Severity.INFO,
                    message=f"{side.role}: MC_FORCE_TCP=1: --disaggregation-ib-device is ignored (no RDMA devices "
                    "are passed to the transfer engine)",
                    fix="Unset MC_FORCE_TCP to use RDMA.",
                )
            )
    if len(sides) == 2:
        pools = [s.env.get("SGLANG_MOONCAKE_CUSTOM_MEM_POOL") or "unset" for s in sides]
        if pools[0] != pools[1]:
            out.append(
                Finding(
                    id="mooncake-custom-pool",
                    severity=Severity.WARNING,
                    message=f"SGLANG_MOONCAKE_CUSTOM_MEM_POOL differs: prefill {pools[0]}, decode {pools[1]}; with "
                    "NVLINK the prefill sends the "
                    "metadata (aux) buffers over TCP and the KV over Mooncake's NVLink transport, which needs both "
                    "sides' KV in NVLink-allocated memory",
                    fix="Set the same SGLANG_MOONCAKE_CUSTOM_MEM_POOL on both servers.",
                )
            )
        # MC_FORCE_TCP=1 (also what --disaggregation-transfer-backend mooncake_tcp sets) makes the
        # engine install TcpTransport whatever MOONCAKE_PROTOCOL says (MooncakeTransferEngine, 0.5.23)
        protos = [
            "tcp (MC_FORCE_TCP=1)"
            if s.env.get("MC_FORCE_TCP") == "1"
            else s.env.get("MOONCAKE_PROTOCOL", "rdma").lower()
            for s in sides
        ]
        if protos[0].split()[0] != protos[1].split()[0]:
            out.append(
                Finding(
                    id="mooncake-protocol",
                    severity=Severity.UNCHECKED,
                    message=f"Mooncake transport differs: prefill {protos[0]}, decode {protos[1]}; each transfer "
                    "engine installs the transports "
                    "of its own protocol, and whether the prefill's engine can write into the decode's segment then "
                    "depends on "
                    "Mooncake's transport selection, which kvcheck does not restate (a probe on the serving nodes "
                    "answers it)",
                    fix="Set the same MOONCAKE_PROTOCOL (and MC_FORCE_TCP, or mooncake_tcp) on both servers.",
                )
            )
    return out


@check(
    "backend-unchecked",
    Severity.UNCHECKED,
    "kvcheck decides the pair's transfer backend",
    what="A side uses a transfer backend kvcheck does not restate (MORI, Ascend, fake). (Two sides on different "
    "backends: backend-mismatch, or transfer-backend when the prefill runs NIXL.)",
    why="Every backend has its own connector threads, messages and transfer rules: answering with NIXL's or "
    "Mooncake's would be a guess.",
    fix="Check this pair on a staging deployment, or pass --allow-unchecked to accept it knowingly.",
)
def backend_unchecked(chk, ctx: CheckContext) -> list[Finding]:
    pb, db = _backend(ctx.prefill), _backend(ctx.decode)
    out: list[Finding] = []
    for role, b in (("prefill", pb), ("decode", db)):
        if b in UNMODELED_BACKENDS and (role == "prefill" or pb == db):
            out.append(
                chk.finding(
                    f"{role}: --disaggregation-transfer-backend {b}: {UNMODELED_BACKENDS[b]} is not restated by "
                    "kvcheck; the KV transfer is not checked "
                    "(the decode's bootstrap checks, which every backend runs, were)"
                )
            )
    return out


@check(
    "backend-mismatch",
    Severity.ERROR,
    "A prefill that does not run NIXL and its decode use one transfer backend",
    what="The prefill runs a transfer backend other than NIXL (Mooncake, SGLang's default when the flag is unset; "
    "MORI, Ascend, fake) and the decode another --disaggregation-transfer-backend. (A NIXL prefill with another "
    "backend's decode: transfer-backend.)",
    why="Each backend's connector reads only its own bootstrap messages: a NIXL decode's first ZMQ message "
    "(b'NixlMsgGuard', ...) reaches a Mooncake prefill's bootstrap thread, which takes the guard for a room id "
    "and dies on it; KV never moves and every request to that prefill rank times out in KVPoll.Bootstrapping.",
    fix="Set the same --disaggregation-transfer-backend on both servers (SGLang's default is mooncake).",
)
def backend_mismatch(chk, ctx: CheckContext) -> list[Finding]:
    pb, db = _backend(ctx.prefill), _backend(ctx.decode)
    if pb != db and pb != "nixl":
        return [chk.finding(backend_mismatch_text(pb, db))]
    return []


def backend_mismatch_text(prefill_backend: str, decode_backend: str) -> str:
    """The ``backend-mismatch`` finding's message: a prefill on ``prefill_backend`` (not
    NIXL) and a decode on another backend, and what the prefill's connector does with the
    decode's first message (SGLang 0.5.23 ``MooncakeKVManager`` bootstrap thread for a
    NIXL decode)."""
    what = {
        ("mooncake", "nixl"): (
            "the NIXL decode's first ZMQ message (b'NixlMsgGuard', ...) reaches the Mooncake prefill's bootstrap "
            "thread, which takes the guard for a room id and dies on it (int() of a non-number); every later request "
            "to that prefill rank stays in KVPoll.Bootstrapping and times out"
        ),
    }.get(
        (prefill_backend, decode_backend),
        f"the {decode_backend} decode's registration is not a message the {prefill_backend} prefill's connector "
        "reads: KV never moves and requests time out",
    )
    return f"transfer backends differ: prefill {prefill_backend}, decode {decode_backend}: {what}"
