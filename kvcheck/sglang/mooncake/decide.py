"""The Mooncake prefill's decision for one decode: the registration (DCP relayout), then
the send path and the writes of a request, per prefill PP stage."""

from __future__ import annotations

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.mooncake.common import (
    BOOTSTRAP_DIES,
    BOOTSTRAP_THREAD,
    CORRUPTS,
    DECODE_ENDPOINT,
    NEWEST,
    OLDEST,
    REQUEST_FAILS,
    ROOM,
    TRANSFER_WORKER,
    WORKER_DIES,
    WRITES,
    behaviour,
)
from kvcheck.sglang.mooncake.pairing import rank_pairs
from kvcheck.sglang.mooncake.writes import SendFailed, WorkerDied, misplaced_write, simulate_writes
from kvcheck.sglang.plan import Plan, RuntimeErrorPrediction


def decide(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    decode_dcp_size: int = 1,
    prefill_dcp_size: int = 1,
    pp_rank: int = 0,
    total_kv_heads: int | None = None,
    release: str | None = None,
    bootstrap_port: int = 8998,
    staging: bool = False,
    unified_memory: bool = False,
    decode_hisparse: bool = False,
    writer=None,
) -> Plan:
    """The Mooncake prefill's handling of this decode (registration, then the transfer
    worker's send path and writes for a request), for prefill PP stage ``pp_rank``.

    Returns a ``Plan``: ``path`` (``equal_tp``, ``mla``, ``hetero_tp_slice``,
    ``nothing_to_transfer``, or ``not_modeled`` with ``not_modeled_reason``),
    ``dst_indices`` (the decode region each source region is written into), or ``error``:
    what the runtime raises or logs, where, and what the operator sees; writes that land
    in the wrong place are an error too (``type`` ``SilentCorruption``).

    ``writer``: what issues the writes of one request (``simulate_writes``' signature); by
    default this restatement, with ``--kernel runtime`` the release's own
    ``MooncakeKVManager.transfer_worker`` (``mooncake_runtime.runtime_writes``)."""
    b = behaviour(release)
    plan = Plan(path=None, n_src=prefill.n, n_dst=decode.n)
    if not b.modeled:
        return _not_modeled(
            plan, f"SGLang {b.version}'s Mooncake transfer is not restated (kvcheck restates {OLDEST} .. {NEWEST})"
        )
    # Registration: requires_dcp_relayout (0.5.17), in the bootstrap thread (uncaught).
    if prefill_dcp_size != decode_dcp_size:
        if not b.dcp:
            return _not_modeled(
                plan, f"decode DCP {decode_dcp_size}: SGLang {b.version}'s Mooncake registration carries no DCP size"
            )
        if prefill_dcp_size == 1 and decode_dcp_size > 1 and prefill.is_mla:
            return _not_modeled(plan, "the Mooncake DCP relayout (send_kvcache_dcp) is not restated")
        plan.error = RuntimeErrorPrediction(
            type="RuntimeError",
            message=f"Unsupported PD DCP topology: {prefill_dcp_size} -> {decode_dcp_size}",
            raised_by=BOOTSTRAP_THREAD,
            when="decode registration",
            operator_sees=BOOTSTRAP_DIES,
        )
        return plan
    if prefill_dcp_size > 1:
        return _not_modeled(
            plan, f"DCP {prefill_dcp_size} on both sides: which DCP rank sends which pages is not restated for Mooncake"
        )
    if prefill.n == 0:
        plan.path = "nothing_to_transfer"
        return plan
    flat = prefill.is_mla or prefill.attn_tp_size == decode.attn_tp_size
    if unified_memory:
        return _not_modeled(
            plan, "--enable-unified-memory's whole-envelope KV path (_validate_envelope_kv_layout) is not restated"
        )
    if decode_hisparse and flat:
        return _not_modeled(
            plan, "a HiSparse decode's host/device destination split (dst_device_kv_indices) is not restated"
        )
    if not flat and staging:
        return _not_modeled(
            plan,
            "SGLANG_DISAGG_STAGING_BUFFER sends unequal-TP KV through staging buffers (_do_staging_transfer), which "
            "kvcheck does not restate",
        )
    if not flat and not total_kv_heads:
        return _not_modeled(plan, "head-sliced transfer with an unknown KV head count")
    if prefill.pool == "MINIMAX_SPARSE":
        return _not_modeled(
            plan,
            "the MINIMAX_SPARSE pool's KV entries (published layer ids) are not restated for Mooncake",
        )
    if (prefill.pool == "DSV4") != (decode.pool == "DSV4"):
        return _not_modeled(plan, f"a {prefill.pool} prefill pool against a {decode.pool} decode pool")
    if prefill.pool == "DSV4" and (prefill.n != decode.n or prefill.pp_size != 1 or decode.pp_size != 1):
        # get_mla_kv_ptrs_with_pp (disaggregation/common/conn.py): equal entry counts take
        # the whole lists, i -> i; otherwise kv_args.mla_compression_ratios re-slice the
        # ratio groups per stage (_mla_slice_ptrs_for_pp), which is not restated.
        return _not_modeled(
            plan,
            f"DeepSeek V4's ratio-grouped KV entries re-sliced across {prefill.n} -> {decode.n} entries "
            "(_mla_slice_ptrs_for_pp) are not restated for Mooncake",
        )
    fn = "send_kvcache" if flat else "send_kvcache_slice"
    for src_rank, dst_rank in (
        rank_pairs(prefill.attn_tp_size, decode.attn_tp_size, total_kv_heads) if not flat else [(0, 0)]
    ):
        try:
            w = (writer or simulate_writes)(
                prefill,
                decode,
                pp_rank=pp_rank,
                total_kv_heads=total_kv_heads,
                src_rank=src_rank,
                dst_rank=dst_rank,
                b=b,
            )
        except SendFailed as exc:
            plan.error = RuntimeErrorPrediction(
                type="KVTransferError",
                message=f"Failed to send kv chunk of {ROOM} to {DECODE_ENDPOINT[0]}:{DECODE_ENDPOINT[1]}",
                raised_by=TRANSFER_WORKER.format(fn=fn) + f"; it logs: {exc}",
                when="first request",
                operator_sees=REQUEST_FAILS,
            )
            return plan
        except Exception as exc:
            text = (
                exc.message
                if isinstance(exc, WorkerDied)
                else f"Transfer thread failed because of {exc}. Prefill instance with "
                f"bootstrap_port={bootstrap_port} is dead."
            )
            plan.error = RuntimeErrorPrediction(
                type="RuntimeError",
                message=text,
                raised_by=TRANSFER_WORKER.format(fn=fn),
                when="first request",
                operator_sees=WORKER_DIES,
            )
            return plan
        bad = misplaced_write(prefill, decode, w, total_kv_heads=total_kv_heads, src_rank=src_rank, dst_rank=dst_rank)
        if bad is not None:
            plan.error = RuntimeErrorPrediction(
                type="SilentCorruption",
                message=bad,
                raised_by=WRITES.format(fn=fn),
                when="first request",
                operator_sees=CORRUPTS,
            )
            return plan
        if src_rank == 0 and dst_rank == 0 or not plan.dst_indices:
            plan.path = w.path
            plan.dst_indices = [j for _, j in w.pairs]
    return plan


def _not_modeled(plan: Plan, why: str) -> Plan:
    plan.path, plan.error, plan.dst_indices, plan.not_modeled_reason = "not_modeled", None, [], why
    return plan
