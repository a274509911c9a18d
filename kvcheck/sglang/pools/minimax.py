"""The MiniMax sparse pool (0.5.23): the K-only sparse layers' K and V as KV regions
(``get_sparse_kv_buf_infos``), their index K as the "minimax_index_k" component and the
dense layers' KV as "minimax_dense_kv". Index-value layers, HiSparse and the NVFP4 pool
are not modeled (the runtime refuses PD for index-value layers)."""

from __future__ import annotations

from kvcheck.sglang.kv_dtype import MODEL_DTYPE_BYTES
from kvcheck.sglang.pools.base import MINIMAX_SPARSE, NOT_MODELED, PoolInputs, PoolLayout
from kvcheck.sglang.pools.token import target_regions


def build(inp: PoolInputs) -> PoolLayout:
    """Regions and state components of one stage of a MiniMax sparse model."""
    model, side, args, page_size, dtype, nbytes = (
        inp.model,
        inp.side,
        inp.side.args,
        inp.page_size,
        inp.dtype,
        inp.nbytes,
    )
    sparse, dense = inp.in_stage(model.sparse_layer_ids), inp.in_stage(model.dense_layer_ids)
    k_only = [i for i in sparse if i in set(model.k_only_sparse_layer_ids)]
    if len(k_only) != len(sparse) or args.enable_hisparse or (model.quant_method or "").startswith("minimax_m3_nvfp4"):
        reason = (
            "MiniMax sparse pool with index-value layers: the runtime refuses PD for it ('PD disaggregation for "
            "MiniMax "
            "sparse layers with index value (index_kv_pool) is not yet supported; only K-only sparse layers are.')"
            if len(k_only) != len(sparse)
            else "MiniMax sparse pool with HiSparse or the NVFP4 pool"
        )
        return PoolLayout(pool=NOT_MODELED, not_modeled_reason=reason)
    out = PoolLayout(pool=MINIMAX_SPARSE)
    # get_sparse_kv_buf_infos: K then V of the sparse layers (main pool, per page).
    out.regions = target_regions(inp, sparse, dcp_size=args.dcp_size, v_head_dim=model.head_dim)
    # get_minimax_sparse_index_dtype: fp8 attn GEMM (fp8_e4m3 + trtllm_mha on SM100)
    # or Hopper with fp8_e4m3 KV keep the index K in the KV dtype, else the model dtype.
    gpu = inp.gpu
    fp8_gemm = (
        dtype == "fp8_e4m3"
        and inp.attention_backend == "trtllm_mha"
        and gpu.is_sm100
        and not side.env.get("SGLANG_DISABLE_M3_FP8_ATTN_GEMM")
    )
    if fp8_gemm or (gpu.is_hopper and dtype == "fp8_e4m3"):
        ibytes = nbytes
    else:
        mdtype = args.dtype if args.dtype != "auto" else model.torch_dtype
        ibytes = MODEL_DTYPE_BYTES.get(mdtype, 2)
    if k_only:
        out.states += [
            dict(
                state_type="minimax_index_k",
                item_len=page_size * (model.sparse_index_dim or 0) * ibytes,
                layer_id=lid,
                part="K",
            )
            for lid in k_only
        ]
        out.state_types.append("minimax_index_k")
    if dense:
        dense_regions = target_regions(inp, dense, dcp_size=args.dcp_size, v_head_dim=model.head_dim)
        out.states += [
            dict(state_type="minimax_dense_kv", item_len=r["item_len"], layer_id=r["layer_id"], part=r["part"])
            for r in dense_regions
        ]
        out.state_types.append("minimax_dense_kv")
    return out
