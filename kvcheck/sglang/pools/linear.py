"""The linear-attention hybrid pool (``HybridLinearKVPool``, 0.5.23): the full-attention
layers' KV regions and the Mamba state component (conv, then temporal state per layer).
"""

from __future__ import annotations

from kvcheck.errors import InputError
from kvcheck.sglang.model import ModelConfig
from kvcheck.sglang.pools.base import HYBRID_LINEAR, PoolInputs, PoolLayout
from kvcheck.sglang.pools.token import target_regions

# torch element sizes of the Mamba state dtypes (mamba2_state_dtype).
_STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def mamba_state_item_lens(model: ModelConfig, attn_tp: int, env: dict[str, str] | None = None) -> tuple[int, int]:
    """(conv item bytes, temporal item bytes) of one request slot of one Mamba layer,
    per attention-TP rank: ``Mamba2StateShape.create`` (configs/mamba_utils.py, 0.5.23)
    with the dtypes of ``mamba2_state_dtype`` (conv: SGLANG_MAMBA_CONV_DTYPE, default
    bfloat16; temporal: SGLANG_MAMBA_SSM_DTYPE, else the config's mamba_ssm_dtype, else
    float32). Conv: (intermediate + 2 * groups * state) / tp x (kernel - 1), groups
    widened to tp when tp does not divide them; temporal: heads / tp x head_dim x state.

    Raises ``InputError`` when the TP size does not divide the state (the runtime's
    ``divide`` assert).
    """
    env = env or {}
    conv_dtype = env.get("SGLANG_MAMBA_CONV_DTYPE", "bfloat16")
    conv_bytes = _STATE_DTYPE_BYTES.get(conv_dtype, 2)
    ssm = env.get("SGLANG_MAMBA_SSM_DTYPE") or model.mamba_ssm_dtype
    ssm_bytes = _STATE_DTYPE_BYTES.get(ssm, 4)
    if model.mamba_kind == "kda":
        # KimiLinearStateShape.create: conv (K-1, (q + k + v) / tp) with q = k = v =
        # heads x head_dim; temporal (heads / tp, head_dim, head_dim).
        nh, hd = model.mamba_num_heads or 0, model.mamba_head_dim or 0
        if (nh * hd) % attn_tp or nh % attn_tp:
            raise InputError(
                f"{nh} KDA heads cannot be split over attention TP {attn_tp}", source=model.source, field="--tp-size"
            )
        conv = ((model.mamba_conv_kernel or 1) - 1) * 3 * (nh * hd // attn_tp) * conv_bytes
        return conv, nh // attn_tp * hd * hd * ssm_bytes
    groups = model.mamba_n_groups or 1
    if groups % attn_tp:
        groups = attn_tp  # n_groups + extra_groups_for_head_shards(n_groups, tp) = tp
    conv_dim = (model.mamba_intermediate_size or 0) + 2 * groups * (model.mamba_state_size or 0)
    heads = model.mamba_num_heads or 0
    if conv_dim % attn_tp or heads % attn_tp:
        raise InputError(
            f"{conv_dim if conv_dim % attn_tp else heads} is not divisible by {attn_tp}: the Mamba state of "
            f"{model.architecture} cannot be split over attention TP {attn_tp}",
            source=model.source,
            field="--tp-size",
        )
    conv = conv_dim // attn_tp * ((model.mamba_conv_kernel or 1) - 1) * conv_bytes
    temporal = heads // attn_tp * (model.mamba_head_dim or 0) * (model.mamba_state_size or 0) * ssm_bytes
    return conv, temporal


def build(inp: PoolInputs) -> PoolLayout:
    """Regions and the Mamba state component of one stage of a linear-attention hybrid."""
    model, args = inp.model, inp.side.args
    out = PoolLayout(pool=HYBRID_LINEAR)
    full, mamba = inp.in_stage(model.full_layer_ids), inp.in_stage(model.mamba_layer_ids)
    out.regions = target_regions(inp, full, dcp_size=args.dcp_size, fp4=inp.fp4)
    if inp.fp4:
        out.n_scales += len(out.regions)
    conv, temporal = mamba_state_item_lens(model, args.attn_tp_size, inp.side.env)
    out.states += [dict(state_type="mamba", item_len=conv, layer_id=lid, part="conv") for lid in mamba]
    out.states += [dict(state_type="mamba", item_len=temporal, layer_id=lid, part="temporal") for lid in mamba]
    out.state_types.append("mamba")
    return out
