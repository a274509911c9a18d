"""The state decision's types and texts: what it reads (``StateInputs``) and decides (``StateDecision``).

Shared by ``kvcheck.sglang.states`` (PP 1) and ``kvcheck.sglang.states_pp`` (a PP>1
prefill): the state types decided (``DECIDED_STATE_TYPES``, 0.5.22 and 0.5.23), the
exception the prefill's transfer worker raises (``_err``: SGLang 0.5.23's
``NixlKVManager.maybe_send_extra`` inside ``transfer_worker``, the request failed by
``conclude_failure``) and the item lengths of a component (``_lens``: bytes per item, one
per registered entry, in registration order).
"""

from __future__ import annotations

from pydantic import BaseModel

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan import RuntimeErrorPrediction

# The state types whose transfer this module decides (0.5.22, 0.5.23).
DECIDED_STATE_TYPES = (
    "swa",
    "mamba",
    "block_scale",
    "block_scale_swa",
    "minimax_index_k",
    "minimax_dense_kv",
    "dsa",
    "c128_state",
)
# StateType member names whose value differs from the upper-cased value (exception texts).
_MEMBER_NAMES = {"c128_state": "DSV4_REQUEST_STATE"}

PREFILL_TRANSFER_WORKER = "prefill: NIXL transfer worker (NixlKVManager.maybe_send_extra)"
REQUEST_FAILS = (
    "the prefill logs 'Unexpected transfer worker error for room N' with this traceback and "
    "'Prefill transfer failed for request ... with exception ...'; the client gets HTTP 500; the decode logs "
    "'Decode transfer failed for request ... KVTransferError' for the room; every request routed to this pair fails; "
    "both servers keep running"
)
# The decode's NIXL agent name (a uuid4 in the runtime) in exception texts.
PEER = "<decode agent>"
_KV_SHAPED = ("swa", "block_scale", "block_scale_swa")


class StateInputs(BaseModel):
    """What the state decision reads besides the geometries: ``pp_size``/``attn_cp_size``/
    ``dcp_size`` per side, the NIXL backend (``SGLANG_DISAGGREGATION_NIXL_BACKEND``,
    default UCX), the SWA KV layout of each side ("nhd", or "hnd" with
    ``SGLANG_USE_HND_KVCACHE``), ``prepared_state``: both sides run a release with the
    prepared state plan (0.5.23 prefill and a decode sending frame 23; 0.5.22 has none), the model's total KV heads of
    the SWA layers
    (``get_total_num_kv_heads``), the Mamba dtype variables of each side, and the Mamba
    conv state's sub-block layout of each side (``mamba_conv_layout``)."""

    prepared_state: bool = True
    prefill_pp: int = 1
    prefill_cp: int = 1
    prefill_dcp: int = 1
    decode_dcp: int = 1
    nixl_backend: str = "UCX"
    swa_layout: str = "nhd"
    total_kv_heads: int | None = None
    prefill_mamba_dtypes: tuple[str | None, str | None] = (None, None)
    decode_mamba_dtypes: tuple[str | None, str | None] = (None, None)
    # The Mamba conv state's sliced axis per side (``mamba_conv_layout``): the full dims of
    # its independently TP-sharded sub-blocks, and the sub-blocks the prefill registers
    # for the slice transfer (``conv_shard_groups``; None: sliced as one axis).
    prefill_conv_layout: list[int] | None = None
    decode_conv_layout: list[int] | None = None
    conv_shard_groups: list[int] | None = None


class StateDecision(BaseModel):
    """The decision for one state component (index ``index`` of ``state_types``).

    ``path``: "whole_prepared", "whole_generic", "mamba_slice", "swa_head_slice" or None
    when it fails; ``error``: the exception the prefill's transfer worker raises;
    ``corruption``: certain silent corruption (nothing raises, the decode reads garbage);
    ``unchecked``: why kvcheck cannot decide it; ``pp_rank``: the prefill PP stage decided."""

    index: int
    state_type: str
    pp_rank: int = 0
    path: str | None = None
    n_entries: int = 0
    error: RuntimeErrorPrediction | None = None
    corruption: str | None = None
    unchecked: str | None = None


def _err(message: str, type_: str = "RuntimeError") -> RuntimeErrorPrediction:
    return RuntimeErrorPrediction(
        type=type_,
        message=message,
        raised_by=PREFILL_TRANSFER_WORKER,
        when="first request",
        operator_sees=REQUEST_FAILS,
    )


def _lens(g: SideGeometry, t: str) -> list[int]:
    return [r.item_len for r in g.state_regions if r.state_type == t]
