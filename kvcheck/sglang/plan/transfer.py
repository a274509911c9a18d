"""The prefill's decision when the decode registers, restated (0.5.13 on:
``NixlKVManager._add_remote_peer`` -> ``_prepare_payload_xfer``,
``_build_transfer_dst_indices``, ``_prep_equal_tp_dlist``, ``_kv_xfer_mem_segments``;
``build_transfer_entry_pairs`` in ``disaggregation/utils.py``), raised in the prefill's
bootstrap thread; older releases go to ``per_request``.
"""

from __future__ import annotations

from typing import cast

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan.model import (
    HANG_300S,
    PREFILL_BOOTSTRAP_THREAD,
    PREFILL_FAILS_TO_START,
    PREFILL_STARTUP,
    Plan,
    RuntimeErrorPrediction,
    Segment,
)
from kvcheck.sglang.plan.per_request import _decide_per_request
from kvcheck.sglang.pools.base import HYBRID_LINEAR, SWA


def mem_segments(src_kinds: list[str], dst_kinds: list[str]) -> list[Segment]:
    """Maximal runs of equal (source kind, destination kind) pairs (``_kv_xfer_mem_segments``)."""
    if len(src_kinds) != len(dst_kinds):
        raise ValueError(
            f"KV source/destination memory kind length mismatch: src={len(src_kinds)}, dst={len(dst_kinds)}"
        )
    segments: list[Segment] = []
    if not src_kinds:
        return segments
    start, cur = 0, (src_kinds[0], dst_kinds[0])
    for i, pair in enumerate(zip(src_kinds, dst_kinds, strict=False)):
        if pair != cur:
            segments.append(Segment(start=start, end=i, src_kind=cur[0], dst_kind=cur[1]))
            start, cur = i, pair
    segments.append(Segment(start=start, end=len(src_kinds), src_kind=cur[0], dst_kind=cur[1]))
    return segments


def _item_stride_error(src_lens: list[int], dst_lens: list[int], kind: str) -> str | None:
    """``_prep_equal_tp_dlist``: a destination item shorter than the bytes written into it."""
    for xfer_len, item_len in zip(src_lens, dst_lens, strict=False):
        if xfer_len > item_len:
            return (
                f"NIXL prepared dlist transfer length exceeds item stride: xfer_len={xfer_len}, "
                f"item_len={item_len}, mem_kind={kind}"
            )
    return None


def _dst_indices(
    prefill: SideGeometry, decode: SideGeometry, pp_rank: int, pp_mla_offsets: bool = True
) -> tuple[list[int] | None, str | None]:
    """``_build_transfer_dst_indices`` (0.5.21 on): (indices, RuntimeError text).
    ``pp_mla_offsets`` False: 0.5.17 .. 0.5.20, which call ``build_transfer_entry_pairs``
    directly (no layer span for a plain-MLA prefill PP stage)."""
    n_src, n_dst = prefill.n, decode.n
    use_pp_mla_offsets = pp_mla_offsets and prefill.pp_size > 1 and n_src != n_dst and prefill.is_mla
    if use_pp_mla_offsets:
        start = prefill.stage_layers[pp_rank][0]
        end = start + n_src
        if end <= n_dst:
            src_lens = prefill.item_lens
            dst_lens = [decode.regions[j].item_len for j in range(start, end)]
            if src_lens != dst_lens:
                return None, (
                    "PP-heterogeneous MLA transfer: decode KV cell geometry differs from "
                    f"prefill over layers [{start}, {end}): prefill item_lens="
                    f"{src_lens}, decode item_lens={dst_lens}"
                )
            return list(range(start, end)), None
    allow_positional = prefill.pp_size == 1 and not use_pp_mla_offsets
    if n_src == 0:
        return [], None
    if n_dst < n_src or (n_src != n_dst and not allow_positional):
        return None, f"PP-heterogeneous transfer requires layer ids on both peers; got src={n_src} dst={n_dst} entries"
    return list(range(n_src)), None


def _mha_slice_dst_indices(prefill: SideGeometry, n_dst: int, pp_rank: int) -> list[int]:
    """``get_mha_kv_ptrs_with_pp``: the decode regions the head slices of this prefill
    stage's K then V regions go to (``[K target, V target, K draft, V draft]`` on the
    decode; a draft pool whose layer count is a multiple of this stage's is mistaken
    for PP stages by the runtime, and kvcheck says what it does)."""
    start = prefill.stage_layers[pp_rank][0] if prefill.stage_layers else 0
    layers, dst_layers = prefill.n // 2, n_dst // 2
    end = start + layers
    dst = list(range(n_dst))
    if layers == dst_layers:
        k, v = dst[:dst_layers], dst[dst_layers:]
    elif layers < dst_layers and dst_layers % layers != 0:
        v_offset = layers * (dst_layers // layers)
        k, v = dst[start:end], dst[v_offset + start : v_offset + end]
    else:
        k, v = dst[start:end], dst[dst_layers + start : dst_layers + end]
    return k[:layers] + v[:layers]


def head_slice_error(prefill: SideGeometry, decode: SideGeometry, total_kv_heads: int) -> str | None:
    """The asserts of ``NixlKVManager._init_hetero_tp_prep_handle`` (0.5.22, 0.5.23) on
    rank 0 of each side, with ``compute_head_slice_params``
    (``disaggregation/common/staging_buffer.py``): the head slices (and, when the prefill
    TP is smaller, the head groups interleaved for the decode ranks) must tile the
    source item exactly. With KV heads replicated on both sides (``total_kv_heads`` below
    both TP sizes) the group count ``decode_tp // prefill_tp // replication`` can be 0.
    Returns ``str(AssertionError())`` (the asserts carry no message: ``""``) or None.
    """
    page = prefill.page_size
    p_tp, d_tp = prefill.attn_tp_size, decode.attn_tp_size
    if not prefill.regions or not decode.regions or page <= 0:
        return None
    dst_item = decode.regions[0].item_len  # frame 11: dst_kv_item_len = kv_item_lens[0]
    dst_heads = max(1, total_kv_heads // d_tp)
    bytes_per_head_slice = dst_item // page // dst_heads
    if p_tp > d_tp:
        heads_to_send, groups = max(1, total_kv_heads // p_tp), 1
    else:
        heads_to_send = dst_heads
        groups = d_tp // p_tp // max(1, d_tp // total_kv_heads)
    if page * groups * heads_to_send * bytes_per_head_slice != prefill.regions[0].item_len:
        return str(AssertionError())
    if page * (dst_item // page) != dst_item:
        return str(AssertionError())
    return None


def _src_dlist_overrun_0_5_13(
    prefill: SideGeometry, p_tp: int, d_tp: int, groups: int, bytes_per_token_to_send: int
) -> RuntimeErrorPrediction | None:
    """The source descriptor list ``_init_hetero_tp_prep_handle`` prepares (0.5.13 ..
    0.5.16) when the prefill's attention TP is smaller than the decode's: for every
    region, slot and token it lists ``groups = decode_tp // prefill_tp`` head groups of
    ``bytes_per_token_to_send`` bytes each, back to back from the token's start, and
    prepares them with ``agent.prep_xfer_dlist("", src_array, ...)`` in the bootstrap
    thread. When the decode replicates KV heads (decode attention TP > the model's KV
    heads), each decode rank still counts as one group, so the groups of one token span
    more bytes than the token holds (``groups * bytes_per_token_to_send >
    item_len / page_size``): the last token of the last slot addresses past the end of
    the registered KV region and NIXL raises ``nixlNotFoundError: NIXL_ERR_NOT_FOUND``
    (logged by NIXL as ``prepXferDlist: failed to prepare the descriptors ... for agent
    ''``). 0.5.17 divides the group count by the replication factor
    (``dst_replication``) and the list fits. Returns the prediction, or None when the
    list stays inside every region (or the prefill TP is not the smaller).
    Source: sgl-project/sglang#31295 (Qwen3.5, prefill attention TP 1 -> decode TP 4).
    """
    page = prefill.page_size
    if p_tp >= d_tp or page <= 0 or not prefill.regions:
        return None
    item = prefill.regions[0].item_len
    if groups * bytes_per_token_to_send <= item // page:
        return None
    return RuntimeErrorPrediction(
        type="nixlNotFoundError",
        message="NIXL_ERR_NOT_FOUND",
        raised_by="prefill: NIXL bootstrap thread (NixlKVManager._init_hetero_tp_prep_handle -> prep_xfer_dlist)",
        when="decode registration",
        operator_sees=HANG_300S,
    )


def _decide_0_5_13(
    prefill: SideGeometry,
    decode: SideGeometry,
    plan: Plan,
    *,
    decode_dcp_size: int,
    total_kv_heads: int | None,
    release: str = "0.5.13",
) -> Plan:
    """The 0.5.13 .. 0.5.14 prefill decision (``NixlKVManager._add_remote_peer`` ->
    ``_prepare_payload_xfer``, ``_init_equal_tp_prep_handle`` and
    ``_init_hetero_tp_prep_handle`` of ``disaggregation/nixl/conn.py``, 0.5.13, unchanged
    in 0.5.14), restated for the pairs whose outcome kvcheck can state.

    What differs from 0.5.22/0.5.23 (each added later): no memory kinds or segments (every
    descriptor list is prepared as VRAM; kinds and ``_kv_xfer_mem_segments`` come in
    0.5.15), no region-count, item-stride or PP-offset guard (0.5.15 .. 0.5.22), no DCP
    relayout (0.5.17), and no head-slice asserts (0.5.22). The equal-TP/MLA lists zip the
    decode's pointers with the prefill's item lengths, so the decode regions are paired
    positionally and strided by the prefill's item length; the heterogeneous-TP lists
    interleave ``decode_tp // prefill_tp`` head groups (no replication divisor): with KV
    heads replicated on the decode that list runs past the registered KV region and
    ``prep_xfer_dlist`` raises ``NIXL_ERR_NOT_FOUND`` (``_src_dlist_overrun_0_5_13``).
    Nothing else raises at registration. A pair whose transfer then depends on code kvcheck has not
    restated for these releases (fewer decode regions than prefill regions, unequal item
    lengths, prefill PP > 1, host or mixed memory kinds, decode DCP, head slices that do
    not tile the source item, unknown KV head count) gets ``path="not_modeled"``: the
    preflight reports ``unchecked`` for it, never a pass.

    ``release="0.5.15"``: a conservative all-VRAM subset of 0.5.15 .. 0.5.16 plus their
    region-count guard (``ValueError`` 'decode registered fewer KV regions'), kept for
    callers; ``decide_transfer`` no longer uses it: it decides 0.5.15 .. 0.5.16 with its own
    release branches (memory kinds, mixed segments, item-stride guard included).
    """
    n_src, n_dst = plan.n_src, plan.n_dst

    def unmodeled(why: str) -> Plan:
        return _not_modeled(plan, why)

    if any(k != "VRAM" for k in prefill.kinds + decode.kinds):
        return unmodeled("host (DRAM) or mixed memory kinds: SGLang 0.5.13/0.5.14 prepare every list as VRAM")
    if decode_dcp_size != 1:
        return unmodeled("decode DCP: SGLang 0.5.13/0.5.14 have no DCP relayout")
    if prefill.pp_size > 1:
        return unmodeled("prefill PP > 1: the prepared lists pair regions positionally from decode layer 0")
    if n_src == 0:
        return unmodeled("no KV regions on the prefill")
    if n_dst < n_src:
        if release == "0.5.15":  # 0.5.15: _prepare_payload_xfer checks the region counts first
            plan.error = RuntimeErrorPrediction(
                type="ValueError",
                message=f"NIXL PD transfer: decode registered fewer KV regions ({n_dst}) than prefill ({n_src}); "
                "unexpected geometry",
                raised_by=PREFILL_BOOTSTRAP_THREAD,
                when="decode registration",
                operator_sees=HANG_300S,
            )
            return plan
        return unmodeled(
            "the decode registers fewer KV regions than the prefill (no guard at registration; fails or corrupts at "
            "transfer)"
        )
    if prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size:
        if decode.item_lens[:n_src] != prefill.item_lens:
            return unmodeled("decode item lengths differ: the decode list is strided by the prefill's item lengths")
        plan.path = "equal_tp"
        plan.dst_indices = list(range(n_src))
        plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
        return plan
    if not total_kv_heads or n_dst != n_src or len(set(decode.item_lens)) != 1 or len(set(prefill.item_lens)) != 1:
        return unmodeled("heterogeneous-TP head slices whose geometry kvcheck cannot state")
    page, p_tp, d_tp = prefill.page_size, prefill.attn_tp_size, decode.attn_tp_size
    dst_item = decode.regions[0].item_len
    dst_heads = max(1, total_kv_heads // d_tp)
    per_head = dst_item // page // dst_heads if page > 0 else 0
    if p_tp > d_tp:
        heads_to_send, groups = max(1, total_kv_heads // p_tp), 1
    else:
        heads_to_send, groups = dst_heads, d_tp // p_tp
    overrun = _src_dlist_overrun_0_5_13(prefill, p_tp, d_tp, groups, heads_to_send * per_head)
    if overrun is not None:
        plan.error = overrun
        return plan
    if (
        page <= 0
        or page * groups * heads_to_send * per_head != prefill.regions[0].item_len
        or page * (dst_item // page) != dst_item
    ):
        return unmodeled(
            "heterogeneous-TP head slices that do not tile the source item (0.5.13/0.5.14 have no assert for it)"
        )
    plan.path = "hetero_tp_slice"
    plan.dst_indices = _mha_slice_dst_indices(prefill, n_dst, 0)
    plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
    return plan


def _not_modeled(plan: Plan, why: str) -> Plan:
    """Mark ``plan`` as a pair whose outcome kvcheck cannot state (reported unchecked)."""
    plan.path = "not_modeled"
    plan.error = None
    plan.segments = []
    plan.dst_indices = []
    plan.not_modeled_reason = why
    return plan


def _layer_pairing_gap(prefill: SideGeometry, decode: SideGeometry, b) -> str | None:
    """Why kvcheck cannot state which decode region each prefill region goes to, or None.

    - A hybrid linear-attention pool (``HybridLinearKVPool``) registers a global layer id
      per KV region (``build_kv_layer_ids``: its full-attention layers, K then V), and from
      0.5.17 the prefill pairs regions by those ids (``build_transfer_entry_pairs``).
      kvcheck restates positional pairing only, which is the same where both sides list
      the same target layers in the same order (PP 1, or the same PP layout; a draft's ids
      sit in a band above the target's). A PP>1 prefill stage against a decode of another
      PP layout is paired by id: not restated.
    - A PP>1 prefill stage of a sliding-window or hybrid linear pool with unequal attention
      TP slices heads from ``_transfer_start_layer`` (0 for ``SWAKVPool``, a
      full-attention-relative count for ``HybridLinearKVPool``; ``disaggregation/prefill.py``,
      0.5.23), not from the stage's first model layer: not restated.
    """
    hybrid_ids = HYBRID_LINEAR in (prefill.pool, decode.pool)
    # At PP 1, or stage by stage at the same PP layout, both sides list the same target
    # layers in the same order (a decode-only draft's ids sit in a band above them): the
    # ids pair positionally.
    same_layers = prefill.pp_size == decode.pp_size and prefill.stage_layers == decode.stage_layers
    if hybrid_ids and b.layer_id_pairing and prefill.pp_size > 1 and not same_layers:
        return (
            "the hybrid linear-attention pool registers a layer id per KV region and SGLang "
            f"{b.version} pairs a PP>1 prefill stage with a decode of another PP layout by those ids "
            "(build_transfer_entry_pairs), which kvcheck does not restate"
        )
    if (
        prefill.pool in (SWA, HYBRID_LINEAR)
        and prefill.pp_size > 1
        and not prefill.is_mla
        and prefill.attn_tp_size != decode.attn_tp_size
    ):
        return (
            f"a PP>1 prefill stage of a {prefill.pool} pool with unequal attention TP slices heads from the pool's "
            "transfer "
            "start layer (_transfer_start_layer), which kvcheck does not restate"
        )
    return None


def _older_release_gap(
    prefill: SideGeometry, decode: SideGeometry, b, *, decode_dcp_size: int, total_kv_heads: int | None
) -> str | None:
    """Why ``decide_transfer`` cannot state what release ``b``'s prefill does with this
    pair, or None. Only releases before a behaviour was introduced have gaps:

    - 0.5.15 .. 0.5.16 (no ``dcp_relayout``): a decode DCP > 1 is not sent in their 19
      registration frames (the transfer then ignores it). (A prefill PP stage
      with fewer regions than the decode, paired with the decode's first regions, is a
      gap of the equal-TP branch of ``decide_transfer``.)
    """
    if not b.dcp_relayout:
        v = f"SGLang {b.version}"
        if decode_dcp_size != 1:
            return (
                f"decode DCP {decode_dcp_size}: {v} does not read the decode's DCP size (its registration has no "
                "DCP frames) and has no DCP relayout"
            )
    return None


def _unasserted_head_slice_gap(
    prefill: SideGeometry, decode: SideGeometry, b, total_kv_heads: int | None
) -> str | None:
    """Releases before 0.5.22 prepare heterogeneous-TP head slices without asserting that
    they tile the items (``_init_hetero_tp_prep_handle``): kvcheck states the outcome only
    where the slices tile region 0 and every region has region 0's item length (the
    runtime strides every region by them). Head groups: ``decode_tp // prefill_tp``,
    divided by the decode's KV-head replication from 0.5.17. Returns why not, or None."""
    v = f"SGLang {b.version}"
    if not total_kv_heads:
        return f"heterogeneous-TP head slices with an unknown KV head count ({v} has no head-slice asserts)"
    if len(set(prefill.item_lens)) != 1 or len(set(decode.item_lens)) != 1:
        return (
            f"heterogeneous-TP head slices over regions of unequal item lengths ({v} strides every region by "
            "region 0's)"
        )
    page, p_tp, d_tp = prefill.page_size, prefill.attn_tp_size, decode.attn_tp_size
    if b.head_group_replication:
        fits = head_slice_error(prefill, decode, total_kv_heads) is None
    else:
        dst_item = decode.regions[0].item_len
        dst_heads = max(1, total_kv_heads // d_tp)
        per_head = dst_item // page // dst_heads if page > 0 else 0
        heads, groups = (max(1, total_kv_heads // p_tp), 1) if p_tp > d_tp else (dst_heads, d_tp // p_tp)
        fits = (
            page > 0
            and page * groups * heads * per_head == prefill.regions[0].item_len
            and page * (dst_item // page) == dst_item
        )
    if not fits:
        return (
            f"heterogeneous-TP head slices that do not tile the items ({v} has no assert for it; the transfer is "
            "prepared as is)"
        )
    return None


def decide_transfer(
    prefill: SideGeometry,
    decode: SideGeometry,
    *,
    decode_dcp_size: int = 1,
    pp_rank: int = 0,
    total_kv_heads: int | None = None,
    behaviour=None,
) -> Plan:
    """The prefill's decision when the decode registers (``_add_remote_peer`` ->
    ``_prepare_payload_xfer``), 0.5.15 .. 0.5.23 as one restatement whose branches follow
    the prefill's release (``PDBehaviour`` features, each naming the release that
    introduced it): memory kinds, mixed segments and the region-count/item-stride guards
    (0.5.15), DCP relayout and layer-id pairing (0.5.17), per-entry DCP geometry (0.5.20),
    PP-MLA layer offsets (0.5.21), head-slice asserts (0.5.22). 0.5.13 .. 0.5.14 go to
    ``_decide_0_5_13``. Pairs whose outcome a release leaves unguarded get
    ``path="not_modeled"`` (reported unchecked): decode DCP on 0.5.15 .. 0.5.16
    (``_older_release_gap``), a prefill PP stage paired positionally with a longer decode
    list on 0.5.15 .. 0.5.16, and head slices that do not tile the items before 0.5.22
    (``_unasserted_head_slice_gap``). 0.5.5 .. 0.5.12.post1, which decide nothing at
    registration and build each request's lists: ``_decide_per_request``.

    ``prefill`` is the geometry of prefill PP stage ``pp_rank``; ``decode`` the geometry
    the decode registers with it; ``total_kv_heads``: the model's KV heads (MHA; enables
    the head-slice asserts); ``behaviour``: the prefill's ``PDBehaviour``. Returns a
    ``Plan``: a path with segments, or the exception the runtime raises in the prefill's
    bootstrap thread. Raises ``ValueError`` when the release's decision is not modeled.
    """
    if behaviour is not None and not behaviour.decision_modeled:
        raise ValueError(f"the prefill registration decision of SGLang {behaviour.version} is not modeled")
    n_src, n_dst = prefill.n, decode.n
    plan = Plan(path=None, n_src=n_src, n_dst=n_dst)
    if behaviour is not None and behaviour.per_request_decision:  # 0.5.5 .. 0.5.12.post1
        return _decide_per_request(
            prefill,
            decode,
            plan,
            variant=behaviour.decision_variant,
            release=behaviour.version,
            decode_dcp_size=decode_dcp_size,
            pp_rank=pp_rank,
            total_kv_heads=total_kv_heads,
        )
    if behaviour is not None and behaviour.decision_variant == "0.5.13":
        return _decide_0_5_13(
            prefill,
            decode,
            plan,
            decode_dcp_size=decode_dcp_size,
            total_kv_heads=total_kv_heads,
            release=behaviour.decision_variant,
        )
    from kvcheck.sglang.pd_release import behaviour as _behaviour

    b = behaviour or _behaviour(None)

    def fail(type_: str, message: str) -> Plan:
        plan.error = RuntimeErrorPrediction(
            type=type_,
            message=message,
            raised_by=PREFILL_BOOTSTRAP_THREAD,
            when="decode registration",
            operator_sees=HANG_300S,
        )
        return plan

    src_kinds = prefill.kinds
    # NixlKVManager.__init__: a prefill's source kinds must be uniform (before any peer);
    # 0.5.15 .. 0.5.16 also refuse a prefill with no KV regions (_homogeneous_kv_mem_kind([])),
    # 0.5.17 skips the check for it.
    if len(set(src_kinds)) > 1 or (not src_kinds and not b.dcp_relayout):
        plan.error = RuntimeErrorPrediction(
            type="NotImplementedError",
            message=f"NIXL source mixed KV memory kinds are not implemented safely yet: {sorted(set(src_kinds))}",
            raised_by=PREFILL_STARTUP,
            when="start-up",
            operator_sees=PREFILL_FAILS_TO_START,
        )
        return plan
    gap = _older_release_gap(prefill, decode, b, decode_dcp_size=decode_dcp_size, total_kv_heads=total_kv_heads)
    if gap is not None:
        return _not_modeled(plan, gap)
    # _add_remote_peer -> requires_dcp_relayout (prefill DCP size 1), before the payload (0.5.17).
    if decode_dcp_size != 1 and not prefill.is_mla:
        return fail("RuntimeError", f"Unsupported PD DCP topology: 1 -> {decode_dcp_size}")
    # 0.5.15: the region-count guard.
    if n_dst < n_src:
        return fail(
            "ValueError",
            f"NIXL PD transfer: decode registered fewer KV regions ({n_dst}) than prefill ({n_src}); unexpected "
            "geometry",
        )
    if n_src == 0:  # 0.5.17: returns before the source-kind assert
        plan.path = "nothing_to_transfer"
        return plan
    gap = _layer_pairing_gap(prefill, decode, b)
    if gap is not None:
        return _not_modeled(plan, gap)
    src_kind = src_kinds[0]
    dst_kinds = decode.kinds
    dst_unique = sorted(set(dst_kinds))
    decode_only_spec = n_dst > n_src

    if decode_dcp_size > 1:
        # requires_dcp_relayout: the destination kinds of the paired regions must be uniform.
        paired = dst_kinds[:n_src]
        if len(set(paired)) != 1:
            return fail(
                "NotImplementedError",
                f"NIXL PD DCP destination mixed KV memory kinds are not implemented safely yet: {sorted(set(paired))}",
            )
        # prepare_dcp_token_item_lens: per-token bytes must match; from 0.5.20 entry by
        # entry, draft entries' decode pages holding page_size * dcp_size tokens.
        page, num_draft = prefill.page_size, prefill.num_draft_regions
        if not b.dcp_geometry_per_entry:  # 0.5.17 .. 0.5.19: the whole lists, pages unscaled
            src_tokens = [item // page for item in prefill.item_lens]
            dst_tokens = [decode.regions[i].item_len // page for i in range(n_src)]
            if src_tokens != dst_tokens:
                return fail(
                    "RuntimeError", f"PD DCP source/destination KV geometry differs: src={src_tokens}, dst={dst_tokens}"
                )
        for i in range(n_src if b.dcp_geometry_per_entry else 0):
            src_token = prefill.regions[i].item_len // page
            dst_item = decode.regions[i].item_len
            scale = page * (decode_dcp_size if i >= n_src - num_draft else 1)
            if dst_item // scale != src_token:
                return fail(
                    "RuntimeError",
                    "PD DCP source/destination KV geometry differs at entry "
                    f"{i}: src token bytes={src_token}, "
                    f"dst token bytes={dst_item // scale} "
                    f"(dst item_len={dst_item}, page scale={scale})",
                )
        plan.path = "dcp_relayout"
        plan.dst_indices = list(range(n_src))
        plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=paired[0])]
        return plan

    equal = prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size
    if equal:
        if len(dst_unique) != 1:
            if decode_only_spec:
                return fail(
                    "NotImplementedError",
                    "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding.",
                )
            segments = mem_segments(src_kinds, dst_kinds)
            for seg in segments:
                msg = _item_stride_error(
                    prefill.item_lens[seg.start : seg.end], decode.item_lens[seg.start : seg.end], seg.dst_kind
                )
                if msg:
                    return fail("ValueError", msg)
            plan.path = "mixed_segments"
            plan.segments = segments
            plan.dst_indices = list(range(n_src))
            return plan
        dst_kind = dst_unique[0]
        if decode_only_spec and dst_kind != "VRAM":
            return fail(
                "NotImplementedError",
                "NIXL PD transfer does not support HiSparse combined with decode-only speculative decoding.",
            )
        if b.layer_id_pairing:  # 0.5.17: build_transfer_entry_pairs (0.5.21: PP-MLA offsets)
            indices, error = _dst_indices(prefill, decode, pp_rank, pp_mla_offsets=b.pp_mla_offsets)
        else:  # 0.5.15 .. 0.5.16: the decode's first n_src regions, whatever the PP size
            if prefill.pp_size > 1 and n_dst != n_src:
                return _not_modeled(
                    plan,
                    f"prefill PP > 1: SGLang {b.version} pairs this stage's {n_src} regions with the decode's first "
                    f"{n_src} of {n_dst}",
                )
            indices, error = list(range(n_src)), None
        if error:
            return fail("RuntimeError", error)
        indices = cast(list[int], indices)  # set whenever error is None
        msg = _item_stride_error(prefill.item_lens, [decode.regions[j].item_len for j in indices], dst_kind)
        if msg:
            return fail("ValueError", msg)
        plan.path = "direct_to_host" if dst_kind == "DRAM" else "equal_tp"
        plan.dst_indices = indices
        plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind=dst_kind)]
        return plan

    if len(dst_unique) != 1:
        return fail(
            "NotImplementedError",
            f"NIXL destination mixed KV memory kinds are not implemented safely yet: {dst_unique}",
        )
    if dst_unique[0] != "VRAM":
        return fail(
            "NotImplementedError", "NIXL heterogeneous-TP direct-to-host KV transfer is not implemented safely yet"
        )
    if not b.head_slice_asserts:
        # 0.5.15 .. 0.5.16 (no replication divisor): a source list past the registered
        # region makes prep_xfer_dlist raise (sgl-project/sglang#31295).
        if (
            not b.head_group_replication
            and total_kv_heads
            and prefill.page_size > 0
            and prefill.regions
            and decode.regions
        ):
            p_tp, d_tp = prefill.attn_tp_size, decode.attn_tp_size
            dst_heads = max(1, total_kv_heads // d_tp)
            per_head = decode.regions[0].item_len // prefill.page_size // dst_heads
            overrun = _src_dlist_overrun_0_5_13(prefill, p_tp, d_tp, d_tp // max(1, p_tp), dst_heads * per_head)
            if overrun is not None:
                plan.error = overrun
                return plan
        # 0.5.15 .. 0.5.21: no asserts; a misfit is prepared silently (not modeled).
        why = _unasserted_head_slice_gap(prefill, decode, b, total_kv_heads)
        if why is not None:
            return _not_modeled(plan, why)
    elif total_kv_heads:  # 0.5.22
        msg = head_slice_error(prefill, decode, total_kv_heads)
        if msg is not None:
            return fail("AssertionError", msg)
    plan.path = "hetero_tp_slice"
    plan.dst_indices = _mha_slice_dst_indices(prefill, n_dst, pp_rank)
    plan.segments = [Segment(start=0, end=n_src, src_kind=src_kind, dst_kind="VRAM")]
    return plan
