"""The prefill's per-request transfer, restated (0.5.5 .. 0.5.12.post1): the descriptor
lists ``NixlKVManager.add_transfer_request`` builds with ``send_kvcache`` /
``send_kvcache_slice`` (0.5.12: in ``transfer_worker``, which fails the request).
"""

from __future__ import annotations

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pd_release import at_least
from kvcheck.sglang.plan.model import (
    PREFILL_REQUEST_FAILS,
    PREFILL_SCHEDULER_DIES,
    PREFILL_SEND,
    PREFILL_WORKER,
    Plan,
    RuntimeErrorPrediction,
    Segment,
)
from kvcheck.sglang.pools.base import DSA, MHA, MLA


def _mha_pairs_per_request(variant: str, n_src: int, n_dst: int, start: int) -> tuple[list[int], list[int], int]:
    """``CommonKVManager.get_mha_kv_ptrs_with_pp`` of 0.5.5 .. 0.5.12.post1 on region
    indices: (decode regions of the K half, of the V half, layers of this stage).

    0.5.5: K from ``start_layer``, V from ``D + start_layer`` (D: half the decode's
    regions); 0.5.6.post1: equal halves pair whole; 0.5.8: a decode whose half is not a
    multiple of the stage's (a decode-only draft) takes V from ``L * (D // L) + start``."""
    layers, half = n_src // 2, n_dst // 2
    dst = list(range(n_dst))
    end = start + layers
    if variant != "0.5.5" and layers == half:
        return dst[:half], dst[half:], layers
    if at_least(variant, "0.5.8") and layers < half and half % layers != 0:
        off = layers * (half // layers)
        return dst[start:end], dst[off + start : off + end], layers
    return dst[start:end], dst[half + start : half + end], layers


def _index_error(variant: str, index: int, size: int) -> tuple[str, str]:
    """The IndexError of reading pointer ``index`` of a ``size``-long list (0.5.12 converts
    the pointer lists to numpy arrays, whose message differs)."""
    if at_least(variant, "0.5.12"):
        return "IndexError", f"index {index} is out of bounds for axis 0 with size {size}"
    return "IndexError", "list index out of range"


def _decide_per_request(
    prefill: SideGeometry,
    decode: SideGeometry,
    plan: Plan,
    *,
    variant: str,
    release: str,
    decode_dcp_size: int,
    pp_rank: int,
    total_kv_heads: int | None,
) -> Plan:
    """The prefill's transfer of SGLang 0.5.5 .. 0.5.12.post1, restated: nothing is checked
    or prepared when the decode registers (``_add_remote_peer`` only stores the peer); each
    request's descriptor lists are built by ``NixlKVManager.add_transfer_request`` (0.5.12:
    ``transfer_worker``) -> ``send_kvcache`` (MLA or equal attention TP) or
    ``send_kvcache_slice`` (MHA, unequal TP), pairing regions with
    ``CommonKVManager.get_mla_kv_ptrs_with_pp`` / ``get_mha_kv_ptrs_with_pp``
    (``disaggregation/nixl/conn.py`` and ``common/conn.py`` of each release).

    ``variant`` is the first release of the prefill's code variant
    (``pd_release.DECISION_VARIANTS``). What the branches restate, by release:

    - every list is VRAM on both sides (``get_xfer_descs(..., "VRAM")``): memory kinds come
      in 0.5.15; a host (DRAM) region on either side is ``not_modeled``;
    - MLA / equal TP: source region i is written into decode region ``dst[i]`` (MLA: the
      whole list when both sides register as many regions, 0.5.6.post1; else the slice
      from the stage's start layer; MHA: the K and V halves of ``get_mha_kv_ptrs_with_pp``),
      at offset page x item length, with the prefill's item length on both sides
      (0.5.5 .. 0.5.6: ``kv_item_lens[0]`` for every layer; 0.5.6.post1: layer i's, also
      for its V region). A decode region longer or shorter than that item is written at
      the wrong stride and nothing checks it (silent corruption, reported by
      ``item-length-larger``; a shorter one's last pages also run past the region); a
      source region strided by another region's item length is ``not_modeled``;
    - MHA unequal TP (``send_kvcache_slice``): per token, ``heads_to_send x
      bytes_per_head`` bytes from region i into decode region ``dst[i]``; up to 0.5.10 the
      decode's heads per rank are ``kv_head_num * prefill_tp // decode_tp``, 0 when the
      decode replicates KV heads -> ``ZeroDivisionError``; from 0.5.11
      ``max(1, total_kv_head_num // tp)`` each. Modeled (for every rank, not only rank 0)
      when one TP size divides the other, the heads split evenly over both and the
      slices tile both sides' tokens; else ``not_modeled``;
    - a pointer list shorter than the stage's layers raises ``IndexError`` when the list
      is read (0.5.12: numpy's text);
    - prefill PP > 1 is modeled from 0.5.7 (KV notifications carry the PP rank);
    - raised where: 0.5.5 .. 0.5.11 in the prefill's scheduler (the prefill server exits);
      0.5.12 .. 0.5.12.post1 in the transfer worker (the request fails). Always at the
      first request (``when="first request"``), never at registration.

    Pools other than plain MHA/MLA, state components, decode DCP, unknown KV head counts
    for unequal TP, and no source regions are ``not_modeled`` (``unchecked``).
    """
    n_src, n_dst = plan.n_src, plan.n_dst
    worker = at_least(variant, "0.5.12")

    def unmodeled(why: str) -> Plan:
        plan.path, plan.error, plan.segments, plan.dst_indices, plan.write_lens = "not_modeled", None, [], [], []
        plan.not_modeled_reason = f"{why} (SGLang {release} builds the transfer per request)"
        return plan

    def fail(type_: str, message: str, fn: str) -> Plan:
        plan.error = RuntimeErrorPrediction(
            type=type_,
            message=message,
            raised_by=(PREFILL_WORKER if worker else PREFILL_SEND).format(fn=fn),
            when="first request",
            operator_sees=PREFILL_REQUEST_FAILS if worker else PREFILL_SCHEDULER_DIES,
        )
        return plan

    if any(k != "VRAM" for k in prefill.kinds + decode.kinds):
        return unmodeled("host (DRAM) or mixed memory kinds: every descriptor list is VRAM before 0.5.15")
    # A DSA pool (NSATokenToKVPool) is an MLA pool for the KV regions: send_kvcache's MLA
    # branch; its index-K ("nsa" state) is decided by kvcheck.sglang.dsa_pd.legacy_dsa_states.
    dsa = prefill.pool == decode.pool == DSA and prefill.is_mla and decode.is_mla
    if not dsa and (prefill.pool not in (MHA, MLA) or decode.pool not in (MHA, MLA) or prefill.is_mla != decode.is_mla):
        return unmodeled(f"a {prefill.pool} prefill pool with a {decode.pool} decode pool")
    dsa_states_only = dsa and set(prefill.state_types) <= {"dsa"} and set(decode.state_types) <= {"dsa"}
    if (
        ((prefill.state_types or decode.state_types) and not dsa_states_only)
        or getattr(prefill, "kv_layout", None)
        or getattr(decode, "kv_layout", None)
    ):
        return unmodeled("state components or a DSV4 KV layout")
    if dsa and (why := _dsa_layout_gap(prefill, decode)):
        return unmodeled(why)
    if decode_dcp_size != 1:
        return unmodeled("decode DCP")
    if n_src == 0 or n_dst == 0:
        return unmodeled("no KV regions on one side")
    if prefill.pp_size > 1 and not at_least(variant, "0.5.7"):
        return unmodeled("prefill PP > 1 before 0.5.7 (KV notifications without the PP rank)")
    stages = prefill.stage_layers or [(0, n_src)]
    start = stages[min(pp_rank, len(stages) - 1)][0] if prefill.pp_size > 1 else stages[0][0]
    src_items = prefill.item_lens

    if prefill.is_mla or decode.attn_tp_size == prefill.attn_tp_size:
        fn = "send_kvcache"
        if prefill.is_mla:  # get_mla_kv_ptrs_with_pp
            dst = (
                list(range(n_dst))
                if variant != "0.5.5" and n_src == n_dst
                else list(range(n_dst))[start : start + n_src]
            )
            if len(dst) < n_src:
                return fail(*_index_error(variant, len(dst), len(dst)), fn)
            pairs = [(i, dst[i], src_items[0] if variant == "0.5.5" else src_items[i]) for i in range(n_src)]
        else:
            if n_src % 2:
                return unmodeled("an odd number of MHA regions")
            k, v, layers = _mha_pairs_per_request(variant, n_src, n_dst, start)
            if len(k) < layers:
                return fail(*_index_error(variant, len(k), len(k)), fn)
            if len(v) < layers:
                return fail(*_index_error(variant, len(v), len(v)), fn)
            used = [src_items[0] if variant == "0.5.5" else src_items[i] for i in range(layers)]
            pairs = [(i, k[i], used[i]) for i in range(layers)] + [(layers + i, v[i], used[i]) for i in range(layers)]
        for i, _j, item in pairs:
            if item != src_items[i]:
                return unmodeled(f"prefill region {i} ({src_items[i]} bytes per page) is strided by {item} bytes")
        plan.path = "equal_tp"
        plan.dst_indices = [j for _, j, _ in pairs]
        plan.write_lens = [item for _, _, item in pairs]
        plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
        return plan

    fn = "send_kvcache_slice"
    if not total_kv_heads:
        return unmodeled("heterogeneous-TP head slices of a model whose KV head count kvcheck does not know")
    if n_src % 2:
        return unmodeled("an odd number of MHA regions")
    p_tp, d_tp, page = prefill.attn_tp_size, decode.attn_tp_size, prefill.page_size
    src_item, dst_item = src_items[0], decode.item_lens[0]  # kv_item_lens[0]; frame 10/11: dst_kv_item_len
    if at_least(variant, "0.5.11"):  # total_kv_head_num (0.5.11), replication aware
        src_heads, dst_heads = max(1, total_kv_heads // p_tp), max(1, total_kv_heads // d_tp)
    else:  # kv_head_num = the prefill pool's heads per rank
        src_heads = max(1, total_kv_heads // p_tp)
        dst_heads = src_heads * p_tp // d_tp
        if dst_heads == 0:
            return fail("ZeroDivisionError", "integer division or modulo by zero", fn)
    if page <= 0:
        return unmodeled("page size 0")
    per_head = dst_item // page // dst_heads
    k, v, layers = _mha_pairs_per_request(variant, n_src, n_dst, start)
    if len(k) < layers:
        return fail(*_index_error(variant, len(k), len(k)), fn)
    if len(v) < layers:
        return fail(*_index_error(variant, len(v), len(v)), fn)
    tiles = (
        max(p_tp, d_tp) % min(p_tp, d_tp) == 0  # CommonKVReceiver maps decode ranks to prefill ranks by the TP ratio
        and total_kv_heads % p_tp == 0
        and total_kv_heads % d_tp == 0
        and src_item % page == 0
        and dst_item % page == 0
        and per_head * src_heads == src_item // page
        and per_head * dst_heads == dst_item // page
        and len(set(src_items)) == 1
        and len(set(decode.item_lens)) == 1
    )
    if not tiles:
        return unmodeled(
            "heterogeneous-TP head slices with replicated KV heads or slices that do not tile both sides' tokens"
        )
    heads_to_send = src_heads if p_tp > d_tp else dst_heads
    plan.path = "hetero_tp_slice"
    plan.dst_indices = k[:layers] + v[:layers]
    plan.write_lens = [heads_to_send * per_head] * (2 * layers)
    plan.segments = [Segment(start=0, end=n_src, src_kind="VRAM", dst_kind="VRAM")]
    return plan


def _dsa_layout_gap(prefill: SideGeometry, decode: SideGeometry) -> str | None:
    """Why kvcheck cannot tell whether two DSA pools' fp8 KV rows have one layout on a
    release before 0.5.13, or None. Each release resolves the rows from the GPU, the KV dtype,
    HiSparse and the DSA backend flags by its own rule (0.5.9 .. 0.5.12.post1
    ``ModelRunner.calculate_mla_kv_cache_dim``: raw 576-byte rows when either NSA backend of
    the server is trtllm, after ``ServerArgs._set_default_nsa_backends`` defaults them per
    GPU; 0.5.5 .. 0.5.8 ``NSATokenToKVPool``: always the scaled 656-byte rows for fp8), which
    kvcheck restates only for 0.5.23. Two sides with the same inputs on the same named GPU
    resolve the same rows (decided); bf16 rows have one layout; differing dtypes differ in
    bytes whatever the rule (the item-length checks decide them)."""
    if prefill.bytes_per_element != 1 or decode.bytes_per_element != 1:  # not fp8 on both (the resolved dtype)
        return None
    if prefill.gpu_assumed or decode.gpu_assumed or prefill.gpu != decode.gpu:
        return (
            "fp8 DSA KV rows on GPUs kvcheck was not given (their layout follows the GPU, by each release's own rule)"
        )
    if prefill.dsa_resolution != decode.dsa_resolution:
        return (
            "fp8 DSA KV rows whose sides set different DSA backends / HiSparse / KV dtype flags (the row layout "
            "follows them by each release's own rule, restated for 0.5.23 only)"
        )
    return None
