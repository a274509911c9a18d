"""Token pools (``MHATokenToKVPool``, ``MLATokenToKVPool``/``DSATokenToKVPool`` and their FP4
and MXFP8 variants, 0.5.23): the regions ``get_contiguous_buf_infos`` registers, the MXFP8
block-scale state components and the DSA index-K buffers.
"""

from __future__ import annotations

from typing import Any

from kvcheck.sglang.kv_dtype import DSA_FP8_QUANT_BLOCK, _mla_row_bytes, kv_heads_per_rank
from kvcheck.sglang.model import ModelConfig
from kvcheck.sglang.pools.base import DSA, MHA, MLA, PoolInputs, PoolLayout


def _pool_regions(
    model: ModelConfig,
    layers: list[int],
    page_size: int,
    attn_tp: int,
    dtype: str,
    nbytes: int,
    kind: str,
    pool: str,
    *,
    dcp_size: int = 1,
    dsa_layout: str = "scaled",
    heads: int | None = None,
    head_dim: int | None = None,
    v_head_dim: int | None = None,
    fp4: bool = False,
) -> list[dict]:
    """Regions of one MHA/MLA/DSA token pool over ``layers`` (``get_contiguous_buf_infos``):
    MLA/DSA one latent buffer per layer; MHA the K buffer of every layer, then the V
    buffer of every layer. ``heads``/``head_dim``/``v_head_dim`` override the model's
    (the SWA sub-pool of a compressed-SWA model).

    ``fp4``: the FP4 pools of 0.5.23 register only their packed uint8 data (two values
    per byte): ``MLATokenToKVPoolFP4`` rows of (kv_lora_rank + qk_rope_head_dim) / 2
    bytes; the MHA pool built with an FP4 ``KVCacheQuantMethod`` (``NVFP4KVCacheMethod``/
    ``FP4MXBlock16KVCacheMethod.create_buffers``) K and V rows of heads x head_dim / 2
    bytes each (V sized by head_dim: the quant method is given no V head dim)."""
    if model.is_mla:
        if fp4:
            item = page_size * (((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)) // 2)
        else:
            item = page_size * _mla_row_bytes(model, dtype, nbytes, dsa_layout)
        return [dict(kind=kind, item_len=item, layer_id=lid, part="KV", pool=pool) for lid in layers]
    kv_heads = heads if heads is not None else kv_heads_per_rank(model.num_key_value_heads or 1, attn_tp, dcp_size)
    hd = head_dim if head_dim is not None else (model.head_dim or 0)
    vd = v_head_dim if v_head_dim is not None else (model.v_head_dim or model.head_dim or 0)
    if fp4:
        k_item = v_item = page_size * kv_heads * (hd // 2)
    else:
        k_item = page_size * kv_heads * hd * nbytes
        v_item = page_size * kv_heads * vd * nbytes
    ks = [dict(kind=kind, item_len=k_item, layer_id=lid, part="K", pool=pool) for lid in layers]
    vs = [dict(kind=kind, item_len=v_item, layer_id=lid, part="V", pool=pool) for lid in layers]
    return ks + vs


MXFP8_SCALE_BLOCK = 32  # MHATokenToKVPoolMXFP8.MXFP8_SCALE_BLOCK_SIZE (0.5.23)


def _mxfp8_scale_states(
    kv_regions: list[dict], page_size: int, heads: int, head_dim: int, v_head_dim: int, state_type: str
) -> list[dict]:
    """UE8M0 scale buffers of an MXFP8 pool (``get_kv_scale_buf_infos``): K scales of
    every layer then V scales; one byte per 32 elements, ``page_size`` tokens per item."""
    out = []
    for r in kv_regions:
        dim = head_dim if r["part"] == "K" else v_head_dim
        out.append(
            dict(
                state_type=state_type,
                item_len=page_size * heads * (dim // MXFP8_SCALE_BLOCK),
                layer_id=r["layer_id"],
                part=r["part"],
            )
        )
    return out


def dsa_index_item_len(model: ModelConfig, page_size: int) -> int:
    """Bytes of one page of one layer's DSA index-K buffer (uint8): page_size /
    index_kpool tokens x (index_head_dim + index_head_dim / 128 x 4 scale bytes)
    (``IndexKeyCache._buffer_shape``, 0.5.23)."""
    ihd = model.index_head_dim or 128
    return page_size // max(1, model.index_kpool) * (ihd + ihd // DSA_FP8_QUANT_BLOCK * 4)


def target_regions(inp: PoolInputs, layers: list[int], **kw: Any) -> list[dict]:
    """``_pool_regions`` of the target model over ``layers``, at this side's page size,
    attention TP, KV dtype and memory kind (``kw``: the pool's own overrides)."""
    return _pool_regions(
        inp.model, layers, inp.page_size, inp.side.args.attn_tp_size, inp.dtype, inp.nbytes, inp.kind, "target", **kw
    )


def build(inp: PoolInputs) -> PoolLayout:
    """MHA, MLA and DSA token pools: every layer of the stage as KV regions (MHA: K of each
    layer, then V; MLA/DSA: one latent buffer per layer); MXFP8 block scales as the
    "block_scale" component; DSA: the index-K buffer of every layer as the "dsa" component
    (``IndexKeyCache.state_buf_infos``)."""
    model, args, page_size = inp.model, inp.side.args, inp.page_size
    start, end = inp.layers
    out = PoolLayout(pool=DSA if model.dsa else (MLA if model.is_mla else MHA))
    out.regions = target_regions(
        inp, list(range(start, end)), dcp_size=args.dcp_size, dsa_layout=inp.dsa_layout, fp4=inp.fp4
    )
    if inp.fp4:
        out.n_scales += len(out.regions)  # one scale buffer per registered data buffer (MHA K and V, MLA latent)
        inp.notes.append(
            f"FP4 KV ({inp.dtype}): {len(out.regions)} packed-data regions registered; their {len(out.regions)} "
            "block-scale buffers are not registered with NIXL (SGLang 0.5.23)"
        )
    if inp.mxfp8:
        out.states += _mxfp8_scale_states(
            out.regions,
            page_size,
            inp.heads,
            model.head_dim or 0,
            model.v_head_dim or model.head_dim or 0,
            "block_scale",
        )
        out.state_types.append("block_scale")
    if model.dsa:
        # StateType.DSA: the index-K (+ scales) buffer of every layer
        # (IndexKeyCache.state_buf_infos); shared-topk layers hold 0 rows when
        # _should_elide_dsa_index_k (not HiSparse, not a draft).
        elide = set(model.dsa_skip_topk_layers) if not args.enable_hisparse else set()
        item = dsa_index_item_len(model, page_size)
        out.states += [
            dict(state_type="dsa", item_len=0 if lid in elide else item, layer_id=lid, part="KV")
            for lid in range(start, end)
        ]
        out.state_types.append("dsa")
    return out
