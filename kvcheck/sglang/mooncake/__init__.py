"""Mooncake's KV transfer decision (``--disaggregation-transfer-backend mooncake``, SGLang's
default), restated per release as pure functions over the two sides' geometry.

Unlike NIXL, Mooncake prepares nothing when the decode registers: the prefill's bootstrap
thread (``MooncakeKVManager.start_prefill_thread``) stores the decode's
``KVArgsRegisterInfo`` (``build_receiver_registration_message`` on the decode: KV region
pointers, ``dst_attn_tp_size``, ``dst_kv_item_len`` = region 0's item length, layer ids
where the pool publishes them, DCP size/rank) and decides only the DCP relayout
(``requires_dcp_relayout``). Every chunk is then written by a transfer worker thread
(``transfer_worker``), which picks a send path per decode peer:

- ``send_kvcache`` (MLA / hybrid MLA, or equal attention TP): ``_send_kvcache_generic``
  pairs regions by layer id where either side publishes ids (``build_transfer_entry_pairs``;
  0.5.17 .. 0.5.18 on the MLA path only, 0.5.19 on also MHA), else by ``get_mla_kv_ptrs_with_pp`` (MLA: the stage's
  span of the decode
  list, plus the draft tail from 0.5.20) or ``get_mha_kv_ptrs_with_pp`` (MHA: K then V
  halves; decode-only drafts; the stage's start layer), and writes ``item_len`` bytes per
  page at ``dst_ptr + dst_page * item_len`` with the PREFILL's item length: a decode
  region of another item length is written at the wrong offsets (silent corruption);
- ``send_kvcache_slice`` (MHA/GQA, unequal attention TP): per token slot, the decode
  rank's heads (``compute_head_slice_params``, ``disaggregation/common/staging_buffer.py``,
  0.5.10 on; decode-side GQA replication by integer division from 0.5.16);
- the staging path (``SGLANG_DISAGG_STAGING_BUFFER``) and ``send_kvcache_dcp``: not
  restated (``not_modeled``).

An exception in the worker kills that worker thread ("Transfer thread failed because of
... is dead."): the server stays up, and the requests queued to that worker never finish;
a send that returns -1 fails the request and marks the decode's session failed, so every
later request to that decode fails too (``failed_sessions``; only
``SGLANG_ENABLE_FAILED_SESSION_PROBE`` lifts it).

``simulate_writes`` restates the writes of one one-page request (prefill page 1 -> decode
page 2) in a virtual address space shared with the runtime kernel
(``kvcheck.sglang.mooncake_runtime``), and ``misplaced_write`` judges every write against
what the regions hold (layer, K/V part, pool, heads, token): the conformance tests
compare both the writes and the verdict with SGLang's own code.

The package, by domain: ``common`` (what each release does, the shared address space and
the operator-facing texts), ``pairing`` (entry pairing helpers), ``writes`` (the writes of
one request and their judgement), ``decide`` (the registration and send decision) and
``states`` (``maybe_send_extra``). Everything is re-exported here: ``from
kvcheck.sglang import mooncake as mc`` keeps working.
"""

from __future__ import annotations

from kvcheck.sglang.mooncake.common import (
    BOOTSTRAP_DIES,
    BOOTSTRAP_THREAD,
    CORRUPTS,
    DECODE_ENDPOINT,
    DST_BASE,
    DST_PAGE,
    NUM_SLOTS,
    OLDEST,
    REQUEST_FAILS,
    ROOM,
    SESSION,
    SRC_BASE,
    SRC_PAGE,
    STRIDE,
    TRANSFER_WORKER,
    WORKER_DIES,
    WRITES,
    MooncakeBehaviour,
    behaviour,
    layer_ids,
    publishes_layer_ids,
)
from kvcheck.sglang.mooncake.decide import (
    decide,
)
from kvcheck.sglang.mooncake.pairing import (
    entry_pairs,
    head_slice_params,
    mha_halves,
    mla_span,
    rank_pairs,
)
from kvcheck.sglang.mooncake.states import (
    decide_states,
)
from kvcheck.sglang.mooncake.writes import (
    SendFailed,
    WorkerDied,
    Writes,
    misplaced_write,
    simulate_writes,
)

__all__ = [
    "SRC_BASE",
    "DST_BASE",
    "STRIDE",
    "NUM_SLOTS",
    "SRC_PAGE",
    "DST_PAGE",
    "ROOM",
    "DECODE_ENDPOINT",
    "SESSION",
    "OLDEST",
    "TRANSFER_WORKER",
    "BOOTSTRAP_THREAD",
    "WRITES",
    "WORKER_DIES",
    "REQUEST_FAILS",
    "BOOTSTRAP_DIES",
    "CORRUPTS",
    "MooncakeBehaviour",
    "behaviour",
    "publishes_layer_ids",
    "layer_ids",
    "entry_pairs",
    "mha_halves",
    "mla_span",
    "head_slice_params",
    "rank_pairs",
    "SendFailed",
    "WorkerDied",
    "Writes",
    "simulate_writes",
    "misplaced_write",
    "decide",
    "decide_states",
]
