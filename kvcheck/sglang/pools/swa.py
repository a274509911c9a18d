"""The sliding-window hybrid pool (``SWAKVPool``, 0.5.23): the full-attention layers' KV
regions, the sliding-window layers as the "swa" state component (K then V), and, under
MXFP8 KV, the block scales of both sub-pools ("block_scale", "block_scale_swa")."""

from __future__ import annotations

from kvcheck.sglang.pools.base import SWA, PoolInputs, PoolLayout
from kvcheck.sglang.pools.token import _mxfp8_scale_states, target_regions


def build(inp: PoolInputs) -> PoolLayout:
    """Regions and state components of one stage of an SWA hybrid."""
    model, args, page_size = inp.model, inp.side.args, inp.page_size
    out = PoolLayout(pool=SWA)
    full, swa = inp.in_stage(model.full_layer_ids), inp.in_stage(model.swa_layer_ids)
    # SWAKVPool: both sub-pools get head_dim only (v = head_dim) unless the model
    # is a compressed-SWA one (MiMo V2: v_head_dim, swa_* dims, swa heads / attn TP).
    fv = model.v_head_dim if model.swa_compress else model.head_dim
    out.regions = target_regions(inp, full, dcp_size=args.dcp_size, v_head_dim=fv)
    if model.swa_compress:
        s_heads = max(1, (model.swa_num_key_value_heads or 1) // args.attn_tp_size)
        s_hd, s_vd = model.swa_head_dim, model.swa_v_head_dim
    else:
        s_heads, s_hd, s_vd = inp.heads, model.head_dim, model.head_dim
    swa_regions = target_regions(inp, swa, heads=s_heads, head_dim=s_hd, v_head_dim=s_vd)
    out.states += [
        dict(state_type="swa", item_len=r["item_len"], layer_id=r["layer_id"], part=r["part"]) for r in swa_regions
    ]
    out.state_types.append("swa")
    if inp.mxfp8:
        out.states += _mxfp8_scale_states(
            out.regions, page_size, inp.heads, model.head_dim or 0, fv or 0, "block_scale"
        )
        out.states += _mxfp8_scale_states(swa_regions, page_size, s_heads, s_hd or 0, s_vd or 0, "block_scale_swa")
        out.state_types += ["block_scale", "block_scale_swa"]
    inp.notes.append(
        f"SWA hybrid: {len(full)} full-attention layers registered as KV regions, {len(swa)} sliding-window layers "
        "as the 'swa' state component"
    )
    return out
