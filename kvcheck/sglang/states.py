"""The state components' transfer: SGLang 0.5.23's ``NixlKVManager.maybe_send_extra``, restated.

0.5.22 dispatches the same way (same senders, ``_get_mha_head_slice_blocks`` and
``compute_mamba_state_slice_byte_blocks``) without the prepared state plan: every
component takes the generic path (``StateInputs.prepared_state`` False).

A hybrid pool registers state components besides its KV regions
(``setup_state_kv_args`` in ``disaggregation/utils.py``): "swa" (the sliding-window
layers' K/V pages), "mamba" (per-request conv and temporal state of the linear-attention
layers), "block_scale"/"block_scale_swa" (MXFP8 scales), "minimax_index_k"/
"minimax_dense_kv" (MiniMax sparse), "dsa" (index-K, one whole item per page, paired by
layer id; its row widths are also checked with the KV regions). The
prefill sends them on a request's last chunk, in its transfer worker
(``transfer_worker`` -> ``maybe_send_extra``), component ``i`` into the decode's
component ``i``. An exception there is caught by the worker: the prefill logs
``Unexpected transfer worker error for room N`` with the traceback and fails the request
(``conclude_failure``); the decode reports the request failed. Every request fails; both
servers keep running.

Per component, as ``maybe_send_extra`` / ``_state_component_is_whole_slot`` /
``_prepare_state_xfer`` of 0.5.23 dispatch (``state TP`` is ``linear_attn_tp_size()``,
the attention TP size unless a linear-attention TP group is configured):

* mamba, equal state TP: one whole slot per entry (``_send_mamba_state``); the source
  item length is used on both sides.
* mamba, unequal state TP: ``_send_mamba_state_slice``: the TP-sharded axis is sliced
  (``compute_mamba_state_slice_byte_blocks``); bytes per sliced element are taken from
  each side's item length, and ``num_dims * src_bytes_per_dim`` bytes land at the decode's
  offset: unequal element sizes (``SGLANG_MAMBA_SSM_DTYPE`` / ``..._CONV_DTYPE``) corrupt.
* swa, non-MLA, unequal attention TP: ``_send_swa_state_slice`` ->
  ``CommonKVManager._get_mha_head_slice_blocks``, whose refusals (PP > 1 on the prefill,
  a non-NHD SWA layout, entry counts, item lengths not splitting into whole heads) are
  exceptions.
* block_scale/block_scale_swa (and swa on an MLA backend), unequal attention TP, non-MLA:
  ``PD Disaggregation does NOT support PD different TP sizes for non-MLA ... hybrid models yet.``
* minimax_*: PP > 1 on the prefill, or unequal attention TP: refused.
* whole-slot components (equal TP): on CUDA with the UCX backend and a prefill with
  PP = CP = DCP = 1 (and a decode with DCP = 1), ``_prepare_state_xfer`` builds a prepared
  plan at registration; unequal item lengths of paired entries there reject the peer and
  every transfer raises ``NIXL state layout rejected for <peer>: ...``. Elsewhere the
  generic path uses the source item length as the destination stride: unequal item
  lengths corrupt silently. On a non-MLA backend the generic path splits KV-shaped
  components (swa, block scales) into K and V halves and moves both with the K entry's
  length (``item_lens[layer_id]``): K and V of different sizes (MiMo's SWA layers, V head
  dim 128 vs K 192) corrupt the V entries on the generic path.

A PP>1 prefill: ``kvcheck.sglang.states_pp`` (``decide_pp_component``, ``merge_stages``).
The types and texts both share: ``kvcheck.sglang.states_base``.
"""

from __future__ import annotations

from typing import Any

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.pools.base import DSV4
from kvcheck.sglang.states_base import (
    _KV_SHAPED,
    _MEMBER_NAMES,
    DECIDED_STATE_TYPES,
    PEER,
    PREFILL_TRANSFER_WORKER,
    REQUEST_FAILS,
    StateDecision,
    StateInputs,
    _err,
    _lens,
)
from kvcheck.sglang.states_pp import (
    _EMPTY_STAGE,
    _ids,
    _Raised,
    _zero_division_text,
    decide_pp_component,
    entry_pairs,
    merge_stages,
    transfer_start_layer,
    unpaired_pp,
)

# Names that moved to states_base / states_pp, re-exported for the old import path.
__all__ = [
    "DECIDED_STATE_TYPES",
    "PEER",
    "PREFILL_TRANSFER_WORKER",
    "REQUEST_FAILS",
    "StateDecision",
    "StateInputs",
    "decide_pp_component",
    "decide_states",
    "entry_pairs",
    "fix_for",
    "legacy_hetero_tp_refusals",
    "mamba_conv_layout",
    "mamba_dims",
    "merge_stages",
    "prepared_path",
    "state_inputs",
    "transfer_start_layer",
    "unpaired_pp",
    "_zero_division_text",
]


def _layer_pairs(p: SideGeometry, d: SideGeometry, t: str) -> list[tuple[int, int]] | None:
    """``build_transfer_entry_pairs`` for one component on a PP=1 prefill: by (layer id,
    part) when both carry layer ids, else positional; None when the entries do not pair."""
    src = [(r.layer_id, r.part) for r in p.state_regions if r.state_type == t]
    dst = [(r.layer_id, r.part) for r in d.state_regions if r.state_type == t]
    if len(src) == len(dst):
        return list(zip(range(len(src)), range(len(dst)), strict=True))
    index = {k: j for j, k in enumerate(dst)}
    if all(k in index for k in src):
        return [(i, index[k]) for i, k in enumerate(src)]
    return None


def prepared_path(p: SideGeometry, d: SideGeometry, inp: StateInputs) -> bool:
    """``_prepared_state_component_indices`` + ``_prepare_state_xfer`` (0.5.23): CUDA, the
    UCX backend, a prefill with PP = CP = DCP = 1 and a decode with DCP = 1 (a 0.5.23 decode
    sends its pool data lengths)."""
    return (
        inp.prepared_state
        and inp.nixl_backend == "UCX"
        and inp.prefill_pp == 1
        and inp.prefill_cp == 1
        and inp.prefill_dcp == 1
        and inp.decode_dcp == 1
    )


def decide_states(
    prefill: SideGeometry, decode: SideGeometry, inp: StateInputs, *, pp_rank: int = 0
) -> list[StateDecision]:
    """The transfer of every state component of ``prefill`` (PP stage ``pp_rank``) into
    ``decode`` (what the decode rank paired with that stage registers: the whole model
    at decode PP 1, the same stage at decode PP = prefill PP), as SGLang 0.5.23's
    ``maybe_send_extra`` dispatches it (see the module docstring; a PP>1 prefill:
    ``decide_pp_component``).

    Components are paired by index; when the two ``state_types`` lists differ the pairing
    is the ``state-components-differ`` check's, and every component here is unchecked.
    Returns one ``StateDecision`` per prefill component, in ``state_types`` order."""
    out: list[StateDecision] = []
    same_list = prefill.state_types == decode.state_types
    tp_p, tp_d = prefill.attn_tp_size, decode.attn_tp_size
    mla = prefill.is_mla
    prepared = prepared_path(prefill, decode, inp)
    rejected: list[str] = []
    # DeepSeek V4 (DSV4 pool): its components carry no layer ids and a type can occur
    # twice (target and NextN draft "swa"); they are taken by component index.
    dsv4 = DSV4 in (prefill.pool, decode.pool)
    for i, t in enumerate(prefill.state_types):
        src = [r.item_len for r in prefill.component_regions(i)]
        dec = StateDecision(index=i, state_type=t, pp_rank=pp_rank, n_entries=len(src))
        out.append(dec)
        if not same_list:
            dec.unchecked = (
                f"state components differ (prefill {prefill.state_types}, decode {decode.state_types}): "
                f"component {i} is paired by index"
            )
            continue
        dst = [r.item_len for r in decode.component_regions(i)]
        if t in ("minimax_index_k", "minimax_dense_kv"):
            if inp.prefill_pp > 1:
                dec.error = _err("PD disagg: PP>1 not supported for MiniMax state yet.")
                continue
            if tp_p != tp_d:
                dec.error = _err("PD disagg: heterogeneous TP not supported for MiniMax state yet.")
                continue
        elif t == "mamba":
            if tp_p != tp_d:
                _mamba_slice(dec, prefill, decode, inp, pp_rank)
                continue
        elif t == "swa" and not mla and tp_p != tp_d:
            _swa_head_slice(dec, prefill, decode, inp)
            continue
        elif t in _KV_SHAPED and not mla and tp_p != tp_d:
            dec.error = _err(
                f"PD Disaggregation does NOT support PD different TP sizes for non-MLA {t.upper()} hybrid models yet."
            )
            continue
        elif t not in DECIDED_STATE_TYPES:
            dec.unchecked = f"state component {t!r} is not modeled"
            continue
        # Whole slots: equal TP (or MLA), one item per entry.
        if inp.prefill_pp > 1:
            if dsv4:
                dec.unchecked = (
                    "DeepSeek V4 state of a PP>1 prefill: the compressed-MLA ratio-grouped PP re-slicing "
                    "(_mla_slice_ptrs_for_pp) is not restated"
                )
            else:
                decide_pp_component(dec, prefill, decode, pp_rank)
            continue
        if dsv4:
            # _prepared_state_pairs: compressed-MLA entries pair positionally and only when
            # the counts agree; unequal counts go to the ratio-grouped PP re-slicing.
            pairs = list(zip(range(len(src)), range(len(dst)), strict=True)) if len(src) == len(dst) else None
        else:
            pairs = _layer_pairs(prefill, decode, t)
        if pairs is not None and t in _KV_SHAPED and not mla and len(src) != len(dst):
            pairs = None  # _prepared_state_pairs / the MHA K/V split pair positionally only
        if pairs is None:
            dec.unchecked = f"{t} entries do not pair (prefill {len(src)}, decode {len(dst)})"
            continue
        if prepared:
            bad = [(s, j) for s, j in pairs if src[s] and dst[j] and src[s] != dst[j]]
        else:
            # The generic path writes entry s with eff[s] bytes at stride eff[s] into the
            # decode's entry j. On a non-MLA backend the KV-shaped components are split into
            # K and V halves by get_mha_kv_ptrs_with_pp and both halves use item_lens[layer]:
            # the V entries move with the K entries' length.
            half = len(src) // 2
            split = t in _KV_SHAPED and not mla
            eff = [src[s - half] if split and s >= half else src[s] for s in range(len(src))]
            bad = [(s, j) for s, j in pairs if src[s] and dst[j] and eff[s] != dst[j]]
        if not bad:
            dec.path = "whole_prepared" if prepared else "whole_generic"
            continue
        s, j = bad[0]
        if prepared:
            rejected.append(
                f"NIXL prepared state component {i} (StateType.{_MEMBER_NAMES.get(t, t.upper())}) stride mismatch "
                f"for peer {PEER}: src[{s}]={src[s]}, dst[{j}]={dst[j]}"
            )
        else:
            dec.corruption = (
                f"{t} state entry {s} moves {eff[s]} bytes per item into decode entry {j} of {dst[j]} bytes (prefill "
                f"entry: {src[s]} bytes); "
                "the generic path writes each item with the prefill's length at the prefill's stride into the "
                "decode's slots" + (" (V entries take the K entries' length)" if eff[s] != src[s] else "")
            )
    if rejected:
        # _prepare_state_xfer rejects the peer with every mismatching component joined;
        # maybe_send_extra raises that before dispatching any component.
        err = _err(f"NIXL state layout rejected for {PEER}: " + "; ".join(rejected))
        for dec in out:
            if dec.unchecked is None:
                dec.path, dec.corruption, dec.error = None, None, err.model_copy()
    return out


def _mamba_slice(dec: StateDecision, p: SideGeometry, d: SideGeometry, inp: StateInputs, pp_rank: int = 0) -> None:
    """``_send_mamba_state_slice`` (unequal state TP): conv and temporal state are sliced
    on their head axis; an element size (bytes per sliced unit) that differs between the
    sides lands the prefill's bytes at the decode's offsets. A PP>1 prefill pairs the
    entries by layer id (``build_transfer_entry_pairs``, no positional fallback)."""
    pairs: list[tuple[int, int]] | None
    if inp.prefill_pp > 1:
        if not _lens(p, "mamba"):
            dec.unchecked = _EMPTY_STAGE.format(rank=pp_rank, t="mamba")
            return
        try:
            pairs = entry_pairs(
                _ids(p, "mamba"), _ids(d, "mamba"), len(_lens(p, "mamba")), len(_lens(d, "mamba")), positional=False
            )
        except _Raised as exc:
            dec.error = _err(exc.message, exc.type)
            return
    else:
        pairs = _layer_pairs(p, d, "mamba")
    if pairs is None:
        dec.unchecked = "Mamba entries do not pair"
        return
    src, dst = _lens(p, "mamba"), _lens(d, "mamba")
    bad_conv = _conv_misplaced(inp, p.attn_tp_size, d.attn_tp_size)
    if bad_conv and any(r.part == "conv" for r in p.state_regions if r.state_type == "mamba"):
        dec.corruption = bad_conv
        return
    # item_len x TP is the whole state's size; equal on both sides iff the element sizes agree.
    skew = [(s, j) for s, j in pairs if src[s] * p.attn_tp_size != dst[j] * d.attn_tp_size]
    if not skew:
        dec.path = "mamba_slice"
        return
    if inp.prefill_mamba_dtypes != inp.decode_mamba_dtypes:
        s, j = skew[0]
        dec.corruption = (
            f"Mamba state dtypes differ (prefill conv/ssm {inp.prefill_mamba_dtypes}, decode "
            f"{inp.decode_mamba_dtypes}): "
            f"with attention TP {p.attn_tp_size} -> {d.attn_tp_size} the slice transfer copies prefill entry {s} "
            f"({src[s]} bytes per slot) into decode entry {j} ({dst[j]} bytes per slot) at mismatched offsets"
        )
    else:
        dec.unchecked = (
            "Mamba state sizes do not scale with the attention TP size (grouped heads widened to TP); "
            "kvcheck cannot decide the slice"
        )


def _conv_misplaced(inp: StateInputs, tp_p: int, tp_d: int) -> str | None:
    """The conv state's channels under ``_send_mamba_state_slice`` /
    ``compute_mamba_state_slice_blocks`` (0.5.22/0.5.23) at unequal state TP: with the
    registered sub-blocks matching the prefill's axis (``use_subdims``) each sub-block is
    sliced on its own and every channel lands at its place iff both sides shard the same
    sub-blocks; otherwise the axis is sliced as one contiguous range, right only when it
    is a single sub-block on both sides. A Mamba2 conv state ([x | B | C], no registered
    sub-blocks) is therefore misplaced at every unequal TP: decode rank 0's B/C channels
    receive x channels (aggregation: the prefill ranks' [x | B | C] shards are stacked
    into the decode's x). Returns the corruption text, or None."""
    lay_p, lay_d, shard = inp.prefill_conv_layout, inp.decode_conv_layout, inp.conv_shard_groups
    if not lay_p or not lay_d:
        return None
    src_dim = sum(lay_p) // tp_p
    use_subdims = shard is not None and sum(shard) == src_dim * tp_p
    blocks_p, blocks_d = [x for x in lay_p if x], [x for x in lay_d if x]
    if use_subdims and lay_p == lay_d == shard:
        return None
    if not use_subdims and len(blocks_p) == 1 and blocks_p == blocks_d:
        return None
    how = "per registered sub-block " + str(shard) if use_subdims else "as one contiguous axis"
    return (
        f"the Mamba conv state's channel axis is sub-blocks {lay_p} on the prefill and {lay_d} on the decode, each "
        "sharded over "
        f"TP on its own, and the slice transfer (attention TP {tp_p} -> {tp_d}) cuts it {how}: decode channels receive "
        "channels of another sub-block or position (compute_mamba_state_slice_blocks)"
    )


def _swa_head_slice(dec: StateDecision, p: SideGeometry, d: SideGeometry, inp: StateInputs) -> None:
    """``_send_swa_state_slice`` -> ``CommonKVManager._get_mha_head_slice_blocks`` (0.5.23)."""
    if inp.prefill_pp > 1:
        dec.error = _err(
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models with pipeline "
            "parallelism yet."
        )
        return
    if inp.swa_layout != "nhd":
        dec.error = _err(f"Head-sliced PD transfer needs the NHD KV cache layout, got {inp.swa_layout}")
        return
    src, dst = _lens(p, "swa"), _lens(d, "swa")
    src_k = [r for r in p.state_regions if r.state_type == "swa" and r.part == "K"]
    if 2 * len(src_k) != len(src) or len(dst) < len(src):
        dec.error = _err(
            f"Head-sliced PD transfer needs matching per-layer K/V buffers: prefill has {len(src)} entries, decode "
            f"has {len(dst)}"
        )
        return
    total = inp.total_kv_heads
    if not total:
        dec.unchecked = "the model's KV head count is unknown"
        return
    page = p.page_size
    src_heads = max(1, total // p.attn_tp_size)
    dst_heads = max(1, total // d.attn_tp_size)
    # get_mha_kv_ptrs_with_pp pairs source K/V layer l with the decode's K/V layer l.
    n_layers = len(src) // 2
    d_half = len(dst) // 2
    dst_pair = dst[:n_layers] + dst[d_half : d_half + n_layers]
    for s_len, d_len in zip(src, dst_pair, strict=False):
        head_len = s_len // (page * src_heads)
        if head_len * page * src_heads != s_len or head_len * page * dst_heads != d_len:
            dec.error = _err(
                f"KV item lengths (prefill={s_len}, decode={d_len}) do not split into {src_heads} and {dst_heads} "
                "heads of "
                f"{total} total with page_size={page}"
            )
            return
    dec.path = "swa_head_slice"


def state_inputs(prefill, decode, prepared_state: bool = True) -> StateInputs:
    """``StateInputs`` of a prefill/decode ``Side`` pair: parallel sizes from the args,
    the NIXL backend from the prefill's ``SGLANG_DISAGGREGATION_NIXL_BACKEND`` (default
    UCX), the SWA layout from its ``SGLANG_USE_HND_KVCACHE``, the total KV heads of the
    model's sliding-window layers (``swa_num_key_value_heads`` when the config sets it,
    else ``num_key_value_heads``), and each side's Mamba dtype variables."""
    env_p = prefill.env or {}
    hnd = str(env_p.get("SGLANG_USE_HND_KVCACHE", "")).lower() in ("1", "true", "yes", "on")
    m = prefill.model
    heads = getattr(m, "swa_num_key_value_heads", None) or getattr(m, "num_key_value_heads", None)

    def dtypes(side) -> tuple[str | None, str | None]:
        env = side.env or {}
        return env.get("SGLANG_MAMBA_CONV_DTYPE"), env.get("SGLANG_MAMBA_SSM_DTYPE")

    lay_p = (
        mamba_conv_layout(prefill.model, prefill.args.attn_tp_size)
        if prefill.model.hybrid == "linear"
        else (None, None)
    )
    lay_d = (
        mamba_conv_layout(decode.model, decode.args.attn_tp_size) if decode.model.hybrid == "linear" else (None, None)
    )
    return StateInputs(
        prefill_conv_layout=lay_p[0],
        decode_conv_layout=lay_d[0],
        conv_shard_groups=lay_p[1],
        prepared_state=prepared_state,
        prefill_pp=prefill.args.pp_size,
        prefill_cp=prefill.args.attn_cp_size,
        prefill_dcp=prefill.args.dcp_size,
        decode_dcp=decode.args.dcp_size,
        nixl_backend=str(env_p.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX")),
        swa_layout="hnd" if hnd else "nhd",
        total_kv_heads=heads,
        prefill_mamba_dtypes=dtypes(prefill),
        decode_mamba_dtypes=dtypes(decode),
    )


def mamba_conv_layout(model, attn_tp: int) -> tuple[list[int], list[int] | None]:
    """The Mamba conv state's sliced (channel) axis at attention TP ``attn_tp``: (the full,
    unsharded dims of its sub-blocks, each sharded over TP on its own; the
    ``conv_shard_groups`` the runtime registers for the slice transfer, None when it
    registers none and slices the axis as one).

    GDN (Qwen3-Next / Qwen3.5, ``Qwen3NextConfig.mamba2_cache_params``): [query | key |
    value] = [key_dim, key_dim, value_dim], registered. KDA (``KimiLinearStateShape``):
    [heads x head_dim] x 3, registered. Mamba2 (Nemotron-H, Falcon-H1): the conv1d
    weight is loaded per rank as [x | B | C] (``mamba_v2_sharded_weight_loader`` with the
    intermediate and two group shard settings), groups widened to TP when TP does not
    divide them (``Mamba2StateShape.create``); the runtime registers no sub-blocks."""
    if getattr(model, "mamba_kind", None) == "kda":
        proj = (model.mamba_num_heads or 0) * (model.mamba_head_dim or 0)
        return [proj, proj, proj], [proj, proj, proj]
    from kvcheck.sglang.model_archs import LINEAR_INTERVAL_ARCHS

    inter, state, groups = model.mamba_intermediate_size or 0, model.mamba_state_size or 0, model.mamba_n_groups or 1
    if model.architecture in LINEAR_INTERVAL_ARCHS:
        key_dim = groups * state  # linear_key_head_dim x linear_num_key_heads
        if groups % attn_tp:
            groups = attn_tp
        return [groups * state, groups * state, inter], [key_dim, key_dim, inter]
    if groups % attn_tp:
        groups = attn_tp
    return [inter, groups * state, groups * state], None


def mamba_dims(model, attn_tp: int) -> dict[str, Any] | None:
    """``HybridLinearKVPool.get_state_dim_per_tensor`` per entry (conv entries of every
    Mamba layer, then temporal): the sliced axis' size per rank (conv channels / TP;
    temporal heads / TP). KDA (Kimi Linear) conv state is ``[K - 1, dim]``, sliced on its
    second axis: ``conv_outer`` = K - 1 rows (``get_state_slice_outer_counts``).
    ``conv_layout`` / ``conv_shard_groups``: ``mamba_conv_layout``."""
    layout, shard = mamba_conv_layout(model, attn_tp)
    if getattr(model, "mamba_kind", None) == "kda":
        nh, hd = model.mamba_num_heads or 0, model.mamba_head_dim or 0
        return {
            "conv": 3 * nh * hd // attn_tp,
            "temporal": nh // attn_tp,
            "conv_outer": (model.mamba_conv_kernel or 1) - 1,
            "conv_layout": layout,
            "conv_shard_groups": shard,
        }
    groups = model.mamba_n_groups or 1
    if groups % attn_tp:
        groups = attn_tp
    conv_dim = (model.mamba_intermediate_size or 0) + 2 * groups * (model.mamba_state_size or 0)
    return {
        "conv": conv_dim // attn_tp,
        "temporal": (model.mamba_num_heads or 0) // attn_tp,
        "conv_layout": layout,
        "conv_shard_groups": shard,
    }


def fix_for(d: StateDecision) -> str:
    """The fix naming the cause of a failing state decision (error or corruption)."""
    msg = (d.error.message if d.error else "") + (d.corruption or "")
    pp_pairing = (
        "prefill PP stage" in msg
        or "model layer" in msg
        or "Layer metadata" in msg
        or (d.error is not None and d.error.type in ("IndexError", "ZeroDivisionError"))
    )
    if pp_pairing and d.state_type == "mamba":
        return (
            "Run the decode at PP 1, or at the prefill's PP size with the same SGLANG_PP_LAYER_PARTITION: each "
            "prefill PP "
            "stage pairs its Mamba entries by layer id with the decode stage of the same rank."
        )
    if pp_pairing:
        return (
            "Run the prefill at --pp-size 1, or the decode at the prefill's PP size with the same "
            "SGLANG_PP_LAYER_PARTITION: "
            f"the {d.state_type} state carries no layer ids, and a PP>1 prefill stage pairs its entries positionally "
            "from its "
            "pool's start layer (0 for a sliding-window pool)."
        )
    if "NHD" in msg:
        return (
            "Unset SGLANG_USE_HND_KVCACHE on the prefill (the SWA head slice needs the NHD layout), or run the "
            "same attention TP size on both sides."
        )
    if "pipeline parallelism" in msg or "PP>1" in msg:
        return "Run the prefill with --pp-size 1, or the same attention TP size on both sides."
    if "non-MLA SWA hybrid models yet." in msg:
        return (
            "Run the same attention TP size on both sides, or SGLang 0.5.22 or newer on the prefill (it slices "
            "the SWA state by KV head)."
        )
    if "hybrid mamba models yet." in msg:
        return (
            "Run the same attention TP size on both sides, or SGLang 0.5.11 or newer on the prefill (it slices "
            "the Mamba state across TP ranks)."
        )
    if "heterogeneous TP" in msg or "different TP sizes" in msg:
        what = {"block_scale": "MXFP8 block scales", "block_scale_swa": "MXFP8 block scales of the SWA layers"}.get(
            d.state_type, f"{d.state_type} state"
        )
        return f"Run the same attention TP size on both sides: {what} are not sliced across TP ranks by SGLang 0.5.23."
    if "conv state's channel axis" in msg:
        return (
            "Run the same attention TP size on both sides: SGLang slices this Mamba conv state across TP sizes as one "
            "axis (a Mamba2 conv state is [x | B | C] per rank, sharded block by block), which misplaces its channels."
        )
    if d.state_type == "mamba":
        return (
            "Set the same SGLANG_MAMBA_SSM_DTYPE and SGLANG_MAMBA_CONV_DTYPE on both sides (and the same "
            "mamba_ssm_dtype in "
            "--json-model-override-args): the Mamba state slots must have the same element sizes."
        )
    if "heads" in msg:
        return (
            "The SWA item lengths do not split into whole KV heads: run the same model, --kv-cache-dtype and "
            "--page-size on both sides."
        )
    return (
        f"Run the same model, --kv-cache-dtype and --page-size on both sides so that the {d.state_type} state "
        "items have the same length."
    )


def legacy_hetero_tp_refusals(prefill: SideGeometry, decode: SideGeometry, release: str | None) -> list[StateDecision]:
    """The state refusals of ``NixlKVManager.maybe_send_extra`` in the releases before the
    SWA head slice (0.5.9 .. 0.5.21), for a prefill on ``release``: what the prefill's
    transfer worker raises on a request's last chunk when the prefill's and the decode's
    attention TP sizes differ. Empty when nothing is decided here (another release, equal
    TP, no such component).

    * SWA, non-MLA backend, unequal attention TP: 0.5.9 .. 0.5.21 raise ``RuntimeError:
      PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid
      models yet.`` (0.5.9 .. 0.5.12: one ``kv_args.state_type``; 0.5.12.post1 on: per
      component, ``st.upper()``). 0.5.22 adds ``_send_swa_state_slice``
      (sgl-project/sglang#38552: gpt-oss-120b, prefill TP 1 -> decode TP 4, 0.5.16).
    * Mamba (linear attention), unequal attention TP: 0.5.9 .. 0.5.10.post1 raise
      ``RuntimeError: PD Disaggregation does NOT support PD different TP sizes for hybrid
      mamba models yet.``; 0.5.11 adds ``_send_mamba_state_slice`` (sgl-project/sglang#22240).

    Releases before 0.5.9 have no state path in the NIXL connector at all (not decided
    here: the state-components check keeps them unchecked).
    """
    from kvcheck.sglang.releases import in_range

    if not release or prefill.attn_tp_size == decode.attn_tp_size or not in_range(release, "0.5.9", "0.5.22"):
        return []
    out: list[StateDecision] = []
    for i, st in enumerate(prefill.state_types):
        n = len(_lens(prefill, st))
        if st == "swa" and not prefill.is_mla:
            msg = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
        elif st == "mamba" and in_range(release, "0.5.9", "0.5.11"):
            msg = "PD Disaggregation does NOT support PD different TP sizes for hybrid mamba models yet."
        else:
            continue
        out.append(StateDecision(index=i, state_type=st, path=None, n_entries=n, error=_err(msg)))
    return out
