"""The transfer plan: SGLang's own PD decisions, restated as pure functions, per release.

Release-dependent branches read a ``PDBehaviour`` (``kvcheck.sglang.pd_release``); each
names the release that introduced it. Unmodeled releases raise ``ValueError`` here and
the preflight reports ``unchecked``.

Two decision points, in the order the runtime reaches them:

1. ``bootstrap_checks`` / ``bootstrap_error``: the decode's first contact with the prefill bootstrap server
   (``CommonKVManager.try_ensure_parallel_info`` and ``_resolve_rank_mapping`` in
   ``disaggregation/common/conn.py``), raised in the decode's scheduler on the first request.
2. ``decide_transfer``: the prefill's handling of the decode's registration
   (``NixlKVManager._add_remote_peer`` -> ``_prepare_payload_xfer``,
   ``_build_transfer_dst_indices``, ``_prep_equal_tp_dlist`` and ``_kv_xfer_mem_segments``
   in ``disaggregation/nixl/conn.py``, plus ``build_transfer_entry_pairs`` in
   ``disaggregation/utils.py``), raised in the prefill's bootstrap thread.

Exception texts are ``str(exception)`` byte for byte; asserts whose message is a
one-element tuple keep the tuple's repr, as the runtime prints it.

Modules, by phase: ``model`` (error locations, ``Plan``, ``PairInfo``), ``bootstrap``
(1), ``transfer`` (2, 0.5.13 on) and ``per_request`` (2, 0.5.5 .. 0.5.12.post1). This
package is the ``builtin`` decision kernel (``kvcheck.sglang.kernel.DecisionKernel``): it
re-exports what callers use and adds ``decide_states`` (``kvcheck.sglang.states``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcheck.sglang.plan.bootstrap import BOOTSTRAP_CHECK_IDS, bootstrap_checks, bootstrap_error, bootstrap_unchecked
from kvcheck.sglang.plan.model import (
    DECODE_FIRST_REQUEST,
    DECODE_RECEIVER_V1,
    DECODE_SCHEDULER,
    GUARD_ASSERT,
    HANG_300S,
    PREFILL_BOOTSTRAP_THREAD,
    PREFILL_FAILS_TO_START,
    PREFILL_REQUEST_FAILS,
    PREFILL_SCHEDULER_DIES,
    PREFILL_SEND,
    PREFILL_STARTUP,
    PREFILL_WORKER,
    PairInfo,
    Plan,
    RuntimeErrorPrediction,
    Segment,
    When,
)
from kvcheck.sglang.plan.per_request import _decide_per_request
from kvcheck.sglang.plan.transfer import _decide_0_5_13, decide_transfer, head_slice_error, mem_segments

if TYPE_CHECKING:
    from kvcheck.sglang.geometry import SideGeometry
    from kvcheck.sglang.states import StateDecision

__all__ = [
    "BOOTSTRAP_CHECK_IDS",
    "DECODE_FIRST_REQUEST",
    "DECODE_RECEIVER_V1",
    "DECODE_SCHEDULER",
    "GUARD_ASSERT",
    "HANG_300S",
    "PREFILL_BOOTSTRAP_THREAD",
    "PREFILL_FAILS_TO_START",
    "PREFILL_REQUEST_FAILS",
    "PREFILL_SCHEDULER_DIES",
    "PREFILL_SEND",
    "PREFILL_STARTUP",
    "PREFILL_WORKER",
    "PairInfo",
    "Plan",
    "RuntimeErrorPrediction",
    "Segment",
    "When",
    "_decide_0_5_13",
    "_decide_per_request",
    "bootstrap_checks",
    "bootstrap_error",
    "bootstrap_unchecked",
    "decide_states",
    "decide_transfer",
    "head_slice_error",
    "mem_segments",
]


def decide_states(
    prefill: SideGeometry,
    decode: SideGeometry,
    inp: Any,
    *,
    prefill_dims: dict | None = None,
    decode_dims: dict | None = None,
    pp_rank: int = 0,
) -> list[StateDecision]:
    """The state components' transfer, restated (``kvcheck.sglang.states.decide_states``).
    The builtin restatement reads the state dimensions from the geometry, so
    ``prefill_dims``/``decode_dims`` (the runtime kernel's fake buffers) are not used."""
    from kvcheck.sglang.states import decide_states as restated

    return restated(prefill, decode, inp, pp_rank=pp_rank)
