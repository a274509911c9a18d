"""What each release's Mooncake path does (``MooncakeBehaviour``), the shared virtual
address space of the restated writes, and the texts of what the operator sees."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pd_release import NEWEST, at_least

# The virtual address space of ``simulate_writes`` (and of the runtime kernel's stubs).
SRC_BASE = 0x7F00_0000_0000
DST_BASE = 0x7E00_0000_0000
STRIDE = 1 << 32
NUM_SLOTS = 4
SRC_PAGE, DST_PAGE = 1, 2
ROOM = 7
DECODE_ENDPOINT = ("10.0.0.2", 17001)
SESSION = "10.0.0.2:15001"

# The oldest release whose Mooncake path is restated (the variants: 0.5.5 .. 0.5.6 slice
# every list from the stage's start layer; 0.5.7 adds the equal-length and decode-only-draft
# branches; 0.5.10 counts head slices from total_kv_head_num).
OLDEST = "0.5.5"

TRANSFER_WORKER = "prefill: Mooncake transfer worker thread (MooncakeKVManager.transfer_worker -> {fn})"
BOOTSTRAP_THREAD = "prefill: Mooncake bootstrap thread (MooncakeKVManager.start_prefill_thread, decode registration)"
WRITES = "prefill: Mooncake transfer worker thread (the RDMA/TCP writes of {fn})"
WORKER_DIES = (
    "the prefill logs 'Transfer thread failed because of ...' and that transfer worker thread exits; the server "
    "stays up, "
    "the requests queued to that worker (one of SGLANG_DISAGGREGATION_QUEUE_SIZE) are never sent, and the decode fails "
    "them after SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by default)"
)
REQUEST_FAILS = (
    "the request fails (KVPoll.Failed) with this reason on both sides, and the prefill marks the decode's Mooncake "
    "session "
    "failed: every later request to that decode fails with 'Decode instance could be dead, remote mooncake session "
    "<id> is "
    "not alive' (unless SGLANG_ENABLE_FAILED_SESSION_PROBE re-admits it), while both servers stay up"
)
BOOTSTRAP_DIES = (
    "the prefill's bootstrap thread dies with this traceback; no later registration or request reaches that prefill "
    "rank: "
    "requests stay in KVPoll.Bootstrapping and the decode times them out (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, "
    "300 s)"
)
CORRUPTS = (
    "nothing is logged: the transfer succeeds and the decode decodes from KV written at the wrong place "
    "(wrong layer, K/V half, heads or token offsets): output is garbage or degrades, with no error"
)


@dataclass(frozen=True)
class MooncakeBehaviour:
    """What a release's Mooncake path does; each field names the release that introduced it."""

    version: str
    modeled: bool
    layer_id_pairing: bool  # 0.5.17: build_transfer_entry_pairs over kv_layer_ids
    mla_draft_tail: bool  # 0.5.20: get_mla_kv_ptrs_with_pp appends the draft entries
    slice_layer_ids: bool  # 0.5.19: send_kvcache_slice pairs by layer id
    mha_layer_ids: bool  # 0.5.19: published ids take the flat (by-id) path on MHA too
    gqa_dst_replication: bool  # 0.5.16: decode ranks sharing a KV head map by integer division
    dcp: bool  # 0.5.17: requires_dcp_relayout / send_kvcache_dcp
    stride_check: bool  # 0.5.20: _state_stride_mismatch (state components)
    pp_branches: bool = True  # 0.5.7: equal-length fast paths, the K-layer range check, V item lengths
    draft_branch: bool = True  # 0.5.8: get_mha_kv_ptrs_with_pp's decode-only-draft branch
    total_heads: bool = True  # 0.5.10: head slices from total_kv_head_num (before: the pool's per-rank kv_head_num)


def behaviour(version: str | None) -> MooncakeBehaviour:
    v = version or NEWEST
    try:
        modeled = at_least(v, OLDEST) and at_least(NEWEST, v)
    except Exception:
        modeled = False

    def a(first: str) -> bool:
        return modeled and at_least(v, first)

    return MooncakeBehaviour(
        version=v,
        modeled=modeled,
        layer_id_pairing=a("0.5.17"),
        mla_draft_tail=a("0.5.20"),
        slice_layer_ids=a("0.5.19"),
        mha_layer_ids=a("0.5.19"),
        gqa_dst_replication=a("0.5.16"),
        dcp=a("0.5.17"),
        stride_check=a("0.5.20"),
        pp_branches=a("0.5.7"),
        draft_branch=a("0.5.8"),
        total_heads=a("0.5.10"),
    )


def publishes_layer_ids(g: SideGeometry, b: MooncakeBehaviour) -> bool:
    """``kv_args.kv_layer_ids`` non-empty: ``build_kv_layer_ids`` returns ids for a
    ``HybridLinearKVPool`` (and MiniMax M3's NVFP4 pool) only, from 0.5.17."""
    return b.layer_id_pairing and g.pool == "HYBRID_LINEAR"


def layer_ids(g: SideGeometry) -> list[int]:
    return [r.layer_id for r in g.regions]
