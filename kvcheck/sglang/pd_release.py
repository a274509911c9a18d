"""What each SGLang release does on the PD (prefill/decode) path over NIXL.

One restatement of the runtime with release-dependent data: ``behaviour(version)`` returns
a ``PDBehaviour`` record derived from the release, and ``kvcheck.sglang.plan`` branches on
its fields. The facts come from each release's own source (``pd_facts.json``, written by
``scripts/gen_pd_facts.py`` from ``sglang/srt/disaggregation``), and each field below
names the release that introduced the behaviour it switches on.

A release that kvcheck has no facts for, or whose decode bootstrap checks
(``try_ensure_parallel_info`` + ``_resolve_rank_mapping``; before 0.5.10
``CommonKVReceiver.__init__`` on the v1 ``/route``) or prefill registration decision
(``_add_remote_peer`` -> ``_prepare_payload_xfer`` and helpers; before 0.5.13 the
per-request ``add_transfer_request`` -> ``send_kvcache`` / ``send_kvcache_slice``) hash
to code kvcheck has not restated, gets ``bootstrap_modeled`` / ``decision_modeled`` False: the
checks that need them report ``unchecked``, never the newest release's answer.

The static path reads only this module and a small JSON file (no SGLang import).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvcheck.release.manifest import NEWEST

_FACTS = Path(__file__).with_name("pd_facts.json")

# Digests (``scripts/gen_pd_facts.py``) of the decode bootstrap checks kvcheck restates,
# by the first release that shipped each variant.
BOOTSTRAP_VARIANTS = {
    # Before 0.5.10: CommonKVReceiver.__init__ on the v1 /route reply (plan.bootstrap_checks,
    # plan.bootstrap_unchecked).
    "1e272550f859": "0.5.5",  # 0.5.5 .. 0.5.6: no check at all (pairs with differing page or PP sizes: unchecked)
    "186d0d32a377": "0.5.6.post1",  # 0.5.6.post1 .. 0.5.7: the PP assert
    "9c5d928c27e6": "0.5.8",  # 0.5.8 .. 0.5.9: the page-size check (prefill_page_size in the reply) + the PP assert
    "945778c6f35c": "0.5.10",  # /route v2 + PrefillServerInfo; HiSparse decodes skip the page-size check
    "dc045247ed43": "0.5.13",  # page-size check for every decode (HiSparse bypass removed)
    "6e3e2338d013": "0.5.16",  # hybrid-MLA aware warnings; DSA cache layer split pulls all CP ranks
    "2f6e7590745f": "0.5.17",  # decode DCP checks; kv dtype compared with kv_cache_dtype_str
    "406cc8d82b80": "0.5.21",  # DeepSeek-V4.1 DSpark layout + same-TP checks
    "c309e7a558a7": "0.5.22",  # DSpark TP check admits prefill CP world size; MXFP8 unequal-TP refusal
    "3e02733f5424": "0.5.23",  # MiniMax TP, KV layout, DCP + KV sharding, MLA sharding TP assert
}
# Digests of the prefill registration decisions kvcheck restates.
DECISION_VARIANTS = {
    # Before 0.5.13 nothing is prepared at registration: descriptor lists are built per
    # request (``send_kvcache`` / ``send_kvcache_slice``; ``plan._decide_per_request``).
    # 0.5.5 .. 0.5.6: dst pointers sliced from the stage's start layer; item_lens[0] for every layer
    "pr-b4863b2ac7c7": "0.5.5",
    # 0.5.6.post1 .. 0.5.6.post2: equal region counts pair whole lists; per-layer item lengths
    "pr-e900fda31fd9": "0.5.6.post1",
    "pr-3c4e4a97e144": "0.5.7",  # 0.5.7: KV notifications carry the PP rank (PP prefills modeled)
    "pr-63a18abe22d7": "0.5.8",  # 0.5.8 .. 0.5.8.post1: MHA decode-only draft pointer offset
    "pr-2ff86396f7f1": "0.5.9",  # 0.5.9 .. 0.5.10.post1: _send_kvcache_generic, vectorised head slices (same lists)
    "pr-abb13440d955": "0.5.11",  # 0.5.11: head slices from total_kv_head_num (replication aware)
    "pr-e4f13faf2a27": "0.5.12",  # 0.5.12: transfer worker threads (errors fail the request), numpy pointer arrays
    "pr-eaee5dd8d9f7": "0.5.12",  # 0.5.12.post1: the same transfer (the stateless-hang fix is in the completion path)
    "31c2eba1c960": "0.5.15",  # 0.5.15 .. 0.5.16: memory kinds, mixed segments, region-count and item-stride guards
    "d8139a090cb7": "0.5.13",  # 0.5.13 .. 0.5.14: prepared VRAM lists, no kinds/segments/guards (plan._decide_0_5_13)
    # 0.5.17 .. 0.5.18: DCP relayout (whole-list geometry check), layer-id pairing, no PP-MLA offsets
    "527354b11456": "0.5.17",
    "dce7af4945e9": "0.5.19",  # as 0.5.17, plus DCP pack buffers allocated on the first DCP peer (no verdict change)
    "5d952a379341": "0.5.20",  # DCP geometry checked entry by entry, draft pages scaled by the decode DCP size
    "019799306a6b": "0.5.21",  # PP-MLA layer offsets (_build_transfer_dst_indices); no head-slice asserts yet
    "ce213302ef4a": "0.5.22",  # _prepare_payload_xfer as 0.5.23, without the aux-count log and prepared state
    "4969327b50e8": "0.5.23",
}


from kvcheck.release.version import at_least  # noqa: E402  (the one comparison)
from kvcheck.release.version import version_key as _vkey  # noqa: E402


@lru_cache(maxsize=1)
def _facts() -> dict:
    return json.loads(_FACTS.read_text())


def known_releases() -> list[str]:
    """Releases with extracted PD facts, oldest first."""
    return sorted(_facts(), key=_vkey)


@dataclass(frozen=True)
class PDBehaviour:
    """The PD-path behaviour of one SGLang release (see the module docstring).

    Route (decode -> prefill bootstrap server, first request):
      ``route``: "v2" (``/route?prefill_dp_rank=-1&prefill_cp_rank=-1&...`` into
      ``PrefillServerInfo(**json)``, 0.5.10) or "v1" (``/route?engine_rank=-1&...``, up to
      0.5.9); ``route_accepts``: the ``PrefillServerInfo`` fields a v2 decode accepts;
      ``route_sends``: the keys a v2 prefill sends; ``route_pops_when_none``: keys the
      prefill drops when unset (``dsv41_spec_layout`` 0.5.21, ``kv_layout`` 0.5.23).
    Registration (decode -> prefill bootstrap thread, ZMQ frames after ``GUARD``):
      ``registration_sends``: frame count; ``registration_reads``: highest frame index
      ``KVArgsRegisterInfo.from_zmq`` reads; ``gpu_id_frame``: 7 up to 0.5.8, 8 from 0.5.9
      (state pointers inserted at 7).
    """

    version: str
    known: bool
    route: str = "v2"
    route_accepts: tuple[str, ...] = ()
    route_sends: tuple[str, ...] = ()
    route_pops_when_none: tuple[str, ...] = ()
    registration_sends: int = 0
    registration_reads: int = 0
    gpu_id_frame: int = 8
    bootstrap_variant: str | None = None
    decision_variant: str | None = None

    # ---- decode bootstrap checks (CommonKVManager.try_ensure_parallel_info) ----
    @property
    def bootstrap_modeled(self) -> bool:
        return self.bootstrap_variant is not None

    @property
    def hisparse_skips_page_size(self) -> bool:
        """0.5.10 .. 0.5.12.post1: a decode with --enable-hisparse logs
        'HiSparse PD transfer mode: ...' instead of raising on a page-size mismatch."""
        return self.bootstrap_variant == "0.5.10"

    @property
    def decode_dcp_checks(self) -> bool:
        """0.5.17: 'PD decode DCP requires an MLA or hybrid-MLA KV pool.' and the prefill CP=1 check."""
        return self.bootstrap_variant is not None and at_least(self.bootstrap_variant, "0.5.17")

    @property
    def dsv41_checks(self) -> str | None:
        """0.5.21: DSpark layout and same-TP checks ("same_tp"); 0.5.22: a decode TP equal to
        the prefill's TP x CP is admitted for MLA ("tp_or_cp_world")."""
        if self.bootstrap_variant is None or not at_least(self.bootstrap_variant, "0.5.21"):
            return None
        return "same_tp" if self.bootstrap_variant == "0.5.21" else "tp_or_cp_world"

    @property
    def mxfp8_tp_check(self) -> bool:
        """0.5.22: MXFP8 block-scale state with unequal attention TP (non-MLA) is refused."""
        return self.bootstrap_variant is not None and at_least(self.bootstrap_variant, "0.5.22")

    @property
    def newest_bootstrap(self) -> bool:
        """0.5.23: MiniMax sparse TP check, KV layout check, DCP vs --enable-kv-cache-sharding,
        and the MLA KV-sharding equal-TP assert in ``_resolve_rank_mapping``."""
        return self.bootstrap_variant is not None and at_least(self.bootstrap_variant, "0.5.23")

    # ---- prefill registration decision (NixlKVManager._add_remote_peer) ----
    @property
    def decision_modeled(self) -> bool:
        return self.decision_variant is not None

    # Features of the prefill decision, each true from the release that introduced it
    # (``plan.decide_transfer`` branches on them; ``_decide_0_5_13`` handles 0.5.13/0.5.14).
    @property
    def dcp_relayout(self) -> bool:
        """0.5.17: ``_add_remote_peer`` calls ``requires_dcp_relayout`` (decode DCP > 1 on
        an MLA prefill relays the KV; other DCP pairs raise), the registration carries the
        decode's DCP size, and an empty prefill returns before the source-kind assert.
        Before it (0.5.15 .. 0.5.16) the decode's DCP is not sent at all."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.17")

    @property
    def dcp_geometry_per_entry(self) -> bool:
        """0.5.20: ``prepare_dcp_token_item_lens`` compares per-token bytes entry by entry
        (draft entries' decode pages hold ``page_size * dcp_size`` tokens); 0.5.17 .. 0.5.19
        compare the whole lists ('PD DCP source/destination KV geometry differs: src=[...], dst=[...]')."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.20")

    @property
    def layer_id_pairing(self) -> bool:
        """0.5.17: ``build_transfer_entry_pairs`` pairs regions (positionally only when the
        prefill's PP size is 1, else 'PP-heterogeneous transfer requires layer ids ...');
        0.5.15 .. 0.5.16 take the decode's first ``n_src`` regions whatever the PP size."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.17")

    @property
    def pp_mla_offsets(self) -> bool:
        """0.5.21: ``_build_transfer_dst_indices`` maps a plain-MLA prefill PP stage onto
        its layer span of a decode that registered the whole model."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.21")

    @property
    def head_group_replication(self) -> bool:
        """0.5.17: the heterogeneous-TP head groups divide by the decode's KV-head
        replication (``decode_tp // prefill_tp // dst_replication``); 0.5.15 .. 0.5.16 do not."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.17")

    @property
    def head_slice_asserts(self) -> bool:
        """0.5.22: ``_init_hetero_tp_prep_handle`` asserts that the head slices tile the
        source and destination items; before it a misfit is prepared without a word."""
        return self.decision_variant is not None and at_least(self.decision_variant, "0.5.22")

    @property
    def per_request_decision(self) -> bool:
        """0.5.5 .. 0.5.12.post1: the prefill prepares nothing when the decode registers;
        ``add_transfer_request`` builds the descriptor lists of every request (errors
        surface at the first request, not at registration)."""
        return self.decision_variant is not None and not at_least(self.decision_variant, "0.5.13")

    @property
    def aux_count_check(self) -> bool:
        """0.5.23: ``check_peer_aux_buffer_count`` logs a metadata-buffer count mismatch."""
        return self.decision_variant == "0.5.23"

    @property
    def states_modeled(self) -> bool:
        """0.5.22 and 0.5.23: the state components' transfer (``maybe_send_extra``; the
        prepared state plan from 0.5.23) is restated in ``kvcheck.sglang.states``; other
        releases stay unchecked. 0.5.17 .. 0.5.21 are not the same code: ``maybe_send_extra``
        has three other variants there (0.5.17 .. 0.5.19, 0.5.20 with a changed Mamba slice
        sender, 0.5.21), and the SWA head-slice sender (``_send_swa_state_slice``) and the
        generic sender of 0.5.22 are absent or different."""
        return self.decision_variant in ("0.5.22", "0.5.23")

    # ---- known defects of one release ----
    @property
    def nixl_stateless_hang(self) -> bool:
        """0.5.12 only: the NIXL sender skips the last chunk's completion (and the receiver
        waits for state notifications) when the model has no state buffers: every request
        of a model without hybrid state hangs. Fixed in 0.5.12.post1."""
        return self.version == "0.5.12"


@lru_cache(maxsize=64)
def behaviour(version: str | None) -> PDBehaviour:
    """The ``PDBehaviour`` of ``version`` (None: the newest modeled release, 0.5.23).

    An unknown release returns a record with ``known`` False and nothing modeled.
    """
    version = version or NEWEST
    facts = _facts().get(version)
    if facts is None:
        return PDBehaviour(version=version, known=False, bootstrap_variant=None, decision_variant=None)
    accepts = tuple(facts["route_accepts"] or ())
    return PDBehaviour(
        version=version,
        known=True,
        route=facts["route"],
        route_accepts=accepts,
        route_sends=tuple(facts["route_sends"] or ()),
        route_pops_when_none=tuple(facts["route_pops_when_none"]),
        registration_sends=facts["registration_sends"] or 0,
        registration_reads=max(facts["registration_reads"] or [0]),
        gpu_id_frame=facts["registration_gpu_id_frame"] or 8,
        bootstrap_variant=BOOTSTRAP_VARIANTS.get(facts["bootstrap_hash"] or ""),
        decision_variant=DECISION_VARIANTS.get(facts["decision_hash"]),
    )
