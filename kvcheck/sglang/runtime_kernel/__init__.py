"""The ``runtime`` decision kernel: the installed SGLang's own decision code, run on CPU.

Same interface as the ``builtin`` kernel (``kvcheck.sglang.plan``): ``bootstrap_error``
and ``decide_transfer``. Instead of kvcheck's restatement, each drives the runtime's own
functions, written against SGLang 0.5.23 (``sglang.srt.disaggregation``), on managers
made with ``object.__new__`` so that no GPU, NIXL agent, ZMQ socket, thread or
``torch.distributed`` group is created:

``bootstrap_error`` drives, on a decode ``NixlKVManager``:
  ``CommonKVManager.try_ensure_parallel_info`` (page size, kv-cache dtype string, DCP
  checks) and through it ``_resolve_rank_mapping`` (KV-sharding, CP and PP asserts).
  The ``/route`` reply is built the way the prefill's bootstrap server builds it
  (``dataclasses.asdict`` of the runtime's ``PrefillServerInfo``) and handed to the
  decode through a stand-in for the one ``requests.get`` call; nothing touches a network.

``decide_transfer`` drives, on a prefill ``NixlKVManager``:
  ``_normalize_kv_mem_kinds``, ``_homogeneous_kv_mem_kind(..., "source")`` and
  ``num_kv_slots`` (what ``NixlKVManager.__init__`` computes for a prefill), then
  ``_add_remote_peer`` -> ``requires_dcp_relayout`` -> ``_prepare_payload_xfer`` (with
  ``_build_transfer_dst_indices``, ``build_transfer_entry_pairs``,
  ``resolve_dcp_dst_entry_indices``, ``prepare_dcp_token_item_lens``,
  ``_kv_xfer_mem_segments``, ``_init_equal_tp_prep_handle``,
  ``_init_mixed_equal_tp_prep_handles``, ``_prep_equal_tp_dlist``, ``_prep_xfer_dlist``)
  and ``_prepare_state_xfer``. The decode's registration is the real ZMQ frame list:
  ``NixlKVManager.build_receiver_registration_message`` on a decode manager, parsed by
  ``KVArgsRegisterInfo.from_zmq`` (the frames after ``GUARD``, as the bootstrap thread
  does). The NIXL agent is a recording stand-in: ``prep_xfer_dlist`` records the peer,
  the Nx5 strided descriptor runs and the memory kind, and returns a handle.
  Region pointers are fake, distinct integers; every region holds ``NUM_SLOTS`` pages.

The heterogeneous-TP head-slice setup ``_init_hetero_tp_prep_handle`` runs for real
(its asserts, ``compute_head_slice_params``, the strided descriptor runs) when the
caller passes the model's ``total_kv_heads``; a wrapper records which decode regions
the runtime's ``get_mha_kv_ptrs_with_pp`` pairs the slices with (``dst_indices``).
Without ``total_kv_heads`` only the pairing is recorded.

Releases: the bootstrap checks are driven on any release with
``try_ensure_parallel_info`` (0.5.10 on; 0.5.10 .. 0.5.16 read ``server_args``, which
the stand-in provides) and, before 0.5.10, through ``CommonKVReceiver.__init__`` on the
v1 ``/route`` reply (``_bootstrap_error_v1``). The prefill decision is driven on 0.5.5 ..
0.5.11 (one request through ``add_transfer_request``, whose ``send_kvcache`` /
``send_kvcache_slice`` descriptor lists are recorded by a stand-in agent and read back:
``_decide_per_request``; 0.5.12 .. 0.5.12.post1: one chunk through the release's own
``transfer_worker``), 0.5.13 .. 0.5.14 (17 registration
frames, no memory kinds), 0.5.15 .. 0.5.16 (19 frames: kinds and item lengths), 0.5.17 ..
0.5.22 (23 frames, DCP size and rank last; those decodes build them inline, the kernel
restates each list and the release's own ``from_zmq`` parses it) and 0.5.23
(``build_receiver_registration_message``); elsewhere ``KernelSetupError``.
0.5.15 .. 0.5.21 prepare one descriptor per slot (no strided runs): the destination
regions are read back from each region's slot-0 descriptor.

Not driven (said here, and handled honestly):
- DCP pack buffers (``_init_dcp_pack_buffers_once`` allocates device staging memory):
  marked as already allocated; the DCP decision and geometry checks run for real.
- The NIXL agent itself (no ``add_remote_agent`` metadata parsing, no registration).

Phases, one module each: `driver` (SGLang imported once, the recording agent),
`bootstrap` (decode), `transfer` (prefill, 0.5.13 on), `per_request` (0.5.5 ..
0.5.12.post1), `states` (state components). This package re-exports what callers use.

SGLang is imported lazily, on first use; the static path never imports it.
"""

from __future__ import annotations

from kvcheck.release.manifest import NEWEST as SGLANG_VERSION  # the release the kernel is written against
from kvcheck.sglang.runtime_kernel.bootstrap import (
    _decode_manager,
    _RouteResponse,
    bootstrap_error,
)
from kvcheck.sglang.runtime_kernel.driver import (
    NUM_SLOTS,
    KernelSetupError,
    _RecordingAgent,
    _sglang,
    _tolerate_reregistered_configs,
    nixlNotFoundError,
    runtime_version,
)
from kvcheck.sglang.runtime_kernel.states import decide_states
from kvcheck.sglang.runtime_kernel.transfer import decide_transfer

__all__ = [
    "NUM_SLOTS",
    "SGLANG_VERSION",
    "KernelSetupError",
    "_RecordingAgent",
    "_RouteResponse",
    "_decode_manager",
    "_sglang",
    "_tolerate_reregistered_configs",
    "bootstrap_error",
    "decide_states",
    "decide_transfer",
    "nixlNotFoundError",
    "runtime_version",
]
