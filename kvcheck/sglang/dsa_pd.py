"""The DSA index-K transfer of SGLang 0.5.5 .. 0.5.12.post1 over NIXL, restated.

A DSA model (DeepSeek V3.2, GLM-5) keeps its KV in ``NSATokenToKVPool``: one MLA latent
buffer per layer (the KV regions, sent by ``send_kvcache``'s MLA branch like any MLA pool:
``plan._decide_per_request``) and one index-K buffer per layer (``index_k_with_scale_buffer``,
uint8, ``page_size * (index_head_dim + index_head_dim // 128 * 4)`` bytes per page;
``get_state_buf_infos``), registered as the "nsa" state component
(``disaggregation/prefill.py`` / ``decode.py`` of each release; ``utils.setup_state_kv_args``
from 0.5.12). What each release's prefill does with the index-K on a request's last chunk:

* 0.5.5 .. 0.5.8: ``NixlKVManager`` has no state path at all (no ``maybe_send_extra``; the
  receiver's ``init`` takes the state indices and drops them): the index-K of the prompt's
  pages never reaches the decode. The decode's indexer then scores the prompt's tokens
  against index keys it never received (zeroed or another request's), so every prompt
  longer than the model's ``index_topk`` attends to the wrong tokens; nothing raises.
  sgl-project/sglang#18939 ("add nsa and swa disagg support with nixl") added the path.
* 0.5.9 .. 0.5.12.post1: ``maybe_send_extra`` -> ``_send_kvcache_generic`` over the state
  pointers (MLA branch: ``get_mla_kv_ptrs_with_pp`` pairs the whole lists when their lengths
  agree, else the decode's slice from the stage's start layer), strided by the prefill's
  ``state_item_lens`` on both sides (a decode entry of another size is written at the wrong
  stride). 0.5.9 .. 0.5.10 register the target's index-K only; from 0.5.11 a DSA draft
  (NextN) pool's index-K is appended (``prefill.py`` / ``decode.py`` 0.5.11,
  ``setup_state_kv_args`` 0.5.12). No release here elides shared-top-k layers (0.5.23's
  ``_should_elide_dsa_index_k``): every layer's entry has the full item.

Decided where the prefill's PP size is 1, both sides are in the same era (0.5.5 .. 0.5.8,
or 0.5.9 and later with the same draft rule) and the entries pair; anything else is
``unchecked``, never a pass.
"""

from __future__ import annotations

from kvcheck.release.version import at_least
from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.states import StateDecision

NIXL_STATE_FROM = "0.5.9"  # NixlKVManager.maybe_send_extra with the "nsa" branch (sglang#18939)
DRAFT_INDEX_K_FROM = "0.5.11"  # the draft DSA pool's index-K appended to the "nsa" component


def _entries(g: SideGeometry, release: str) -> list[int]:
    """The "nsa" component's item lengths as ``release`` registers them: the target's layers
    (every one with its full item: no elision before 0.5.13), then a DSA draft's from 0.5.11."""
    regions = [r for r in g.state_regions if r.state_type == "dsa"]
    full = max((r.item_len for r in regions), default=0)
    target = {lid for start, end in (g.stage_layers or []) for lid in range(start, end)}
    out = [full if r.item_len == 0 else r.item_len for r in regions if r.layer_id in target]
    if at_least(release, DRAFT_INDEX_K_FROM):
        out += [r.item_len for r in regions if r.layer_id not in target]
    return out


def _has_draft(g: SideGeometry) -> bool:
    target = {lid for start, end in (g.stage_layers or []) for lid in range(start, end)}
    return any(r.layer_id not in target for r in g.state_regions if r.state_type == "dsa")


def legacy_dsa_states(prefill: SideGeometry, decode: SideGeometry, b_p, b_d) -> list[StateDecision] | None:
    """The decision for the DSA index-K component of a prefill on a per-request release
    (``PDBehaviour.per_request_decision``: 0.5.5 .. 0.5.12.post1), or None when the pair is
    not two DSA pools on such a release. One ``StateDecision`` (index 0, "dsa")."""
    if not (b_p.per_request_decision and prefill.pool == decode.pool == "DSA"):
        return None
    if prefill.state_types != ["dsa"] or decode.state_types != ["dsa"]:
        return None
    p_rel, d_rel = b_p.version, b_d.version
    src = _entries(prefill, p_rel)
    d = StateDecision(index=0, state_type="dsa", n_entries=len(src))
    p_sends = at_least(p_rel, NIXL_STATE_FROM)
    if b_d.decision_variant is None or p_sends != at_least(d_rel, NIXL_STATE_FROM) or not b_d.per_request_decision:
        d.unchecked = (
            f"the DSA index-K between a SGLang {p_rel} prefill and a {d_rel} decode (their NIXL connectors "
            "register and send state differently; not restated for this mix)"
        )
        return [d]
    if not p_sends:
        item = src[0] if src else 0
        d.corruption = (
            f"SGLang {p_rel}'s NIXL connector has no state transfer (NixlKVManager has no maybe_send_extra before "
            f"{NIXL_STATE_FROM}; sgl-project/sglang#18939 added it): the DSA index-K of the prompt's pages ({len(src)} "
            f"per-layer entries of {item} bytes per page) never reaches the decode, whose indexer then ranks the "
            "prompt's tokens from index keys it never received: every prompt longer than the model's index_topk "
            "attends to the wrong tokens, and nothing raises"
        )
        return [d]
    if prefill.pp_size > 1:
        d.unchecked = (
            f"the DSA index-K of a prefill PP stage on SGLang {p_rel} (get_mla_kv_ptrs_with_pp over the "
            "state lists; not restated)"
        )
        return [d]
    if at_least(p_rel, DRAFT_INDEX_K_FROM) != at_least(d_rel, DRAFT_INDEX_K_FROM) and (
        _has_draft(prefill) or _has_draft(decode)
    ):
        d.unchecked = (
            f"a DSA draft's index-K between a SGLang {p_rel} prefill and a {d_rel} decode (one appends it, "
            "the other not)"
        )
        return [d]
    dst = _entries(decode, d_rel)
    paired = dst if len(dst) == len(src) else dst[: len(src)]  # get_mla_kv_ptrs_with_pp, start layer 0
    if len(paired) < len(src):
        d.unchecked = f"the decode registers fewer DSA index-K entries ({len(dst)}) than the prefill ({len(src)})"
        return [d]
    bad = [(i, s, t) for i, (s, t) in enumerate(zip(src, paired, strict=False)) if s != t]
    if bad:
        i, s, t = bad[0]
        d.corruption = (
            f"SGLang {p_rel} writes the DSA index-K with the prefill's item length: {len(bad)} of {len(src)} entries "
            "differ "
            f"(entry {i}: {s} bytes per page on the prefill, {t} on the decode), so the decode's index keys land at "
            "the "
            "wrong offsets (_send_kvcache_generic strides both sides by the prefill's state_item_lens)"
        )
        return [d]
    d.path = "whole_generic"
    return [d]
