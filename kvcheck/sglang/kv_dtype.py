"""KV cache dtypes, as a side's release resolves them for its pool: bytes per element of
each ``--kv-cache-dtype`` (``configure_kv_cache_dtype``, 0.5.23), the string the peers
compare (``model_runner.kv_cache_dtype_str``), FP4 KV (what is modeled, what is not), the
DSA FP8 row layouts and the KV heads per attention-TP rank.
"""

from __future__ import annotations

from kvcheck.errors import InputError
from kvcheck.sglang.attention import side_gpu
from kvcheck.sglang.model import ModelConfig
from kvcheck.sides import Side

# Bytes per element of each --kv-cache-dtype (``configure_kv_cache_dtype``, 0.5.23).
KV_DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1,
}
MODEL_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "int8": 1,
    "uint8": 1,
}

# DSA (DeepSeek V3.2 / GLM-5) FP8 KV rows (``calculate_mla_kv_cache_dim``, 0.5.23) come in
# two layouts, chosen by the DSA backend of the side's own role (--dsa-prefill-backend on a
# prefill, --dsa-decode-backend on a decode):
#   scaled: nope (fp8) + a 4-byte scale per 128-wide block + rope kept in bf16
#           (512 + 16 + 128 = 656 bytes per token for DeepSeek V3.2); flashmla_* / fa3 / ...
#   raw:    kv_lora_rank + qk_rope_head_dim fp8 bytes (576): trtllm, or tilelang on both roles.
# Unset backends resolve by GPU (``_dsa_split_backend_resolution``): fp8 on Blackwell
# (SM>=10) -> trtllm (raw), on Hopper -> flashmla_kv (scaled); HiSparse -> flashmla_kv.
DSA_FP8_QUANT_BLOCK = 128
DSA_RAW_FP8_BACKENDS = frozenset({"trtllm"})

FP4_KV_DTYPES = frozenset({"nvfp4", "fp4_mx_block16"})
# --kv-cache-dtype fp4_e2m1: the FP4 recipe of SGLang 0.5.4.post3 .. 0.5.20 (argparse
# refuses it from 0.5.21 on); its pools are not modeled.
LEGACY_FP4_KV_DTYPES = frozenset({"fp4_e2m1"})
# The release whose FP4 pools kvcheck derives (verified against its pool classes).
FP4_VERIFIED_RELEASE = "0.5.23"


def resolved_kv_cache_dtype_flag(side: Side) -> str:
    """``--kv-cache-dtype`` after the start-up passes, as the side's release resolves it on
    its GPU (``kvcheck.sglang.resolved.server_args_dtype``: the DeepSeek DSA and V4
    rewrites, release by release). Other flags are kept."""
    from kvcheck.sglang.resolved import server_args_dtype

    return server_args_dtype(side)[0]


def kv_cache_dtype_str(side: Side) -> str:
    """``model_runner.kv_cache_dtype_str`` of the target, which ``_init_kv_manager``
    reports to the peer (``kv_args.kv_cache_dtype_str``): ``configure_kv_cache_dtype``'s
    resolved string (``auto`` on a checkpoint with an FP8 KV quant config ->
    fp8_e4m3), else the resolved server flag (``resolved_kv_cache_dtype_flag``)."""
    flag = resolved_kv_cache_dtype_flag(side)
    if flag == "auto" and (side.model.kv_cache_quant_algo or "").upper() == "FP8":
        return "fp8_e4m3"
    return flag


def kv_dtype_bytes(side: Side, model: ModelConfig, *, draft: bool = False) -> tuple[str, int]:
    """(resolved kv dtype string, bytes per element) as ``configure_kv_cache_dtype``
    resolves it after the start-up passes (0.5.23): ``auto`` follows an FP8 KV quant
    config, else the model dtype; on a DeepSeek DSA model ``auto`` becomes fp8_e4m3 on
    SM >= 10 and bfloat16 below (``_dsa_kv_cache_dtype_default``). FP4 KV (nvfp4,
    fp4_mx_block16) returns 0 bytes per element: two values per byte (packed uint8 data)
    plus block-scale buffers; ``_pool_regions(fp4=True)`` sizes its regions. ``mxfp8`` stores
    fp8 data (1 byte) with UE8M0 block scales registered as a state component.

    Raises ``InputError`` for a dtype SGLang rejects (``Unsupported kv_cache_dtype``).
    """
    flag = resolved_kv_cache_dtype_flag(side)
    if draft and side.args.speculative_draft_kv_cache_dtype:
        flag = side.args.speculative_draft_kv_cache_dtype
    if flag == "auto":
        if (model.kv_cache_quant_algo or "").upper() == "FP8":
            return "fp8_e4m3", 1
        dtype = side.args.dtype if side.args.dtype != "auto" else model.torch_dtype
        return dtype, MODEL_DTYPE_BYTES.get(dtype, 2)
    if flag in FP4_KV_DTYPES or flag in LEGACY_FP4_KV_DTYPES:
        return flag, 0
    if flag not in KV_DTYPE_BYTES:
        raise InputError(f"Unsupported kv_cache_dtype: {flag}.", source=side.origin, field="--kv-cache-dtype")
    return flag, KV_DTYPE_BYTES[flag]


def fp4_unmodeled_reason(side: Side, model: ModelConfig, dtype: str, *, draft: bool = False) -> str | None:
    """Why kvcheck does not derive the FP4 pool of ``model`` on ``side`` (``None``: it does).

    Modeled (SGLang 0.5.23 ``KVCacheConfigurator._build_token_to_kv_pool``): a plain MHA
    target/draft (``MHATokenToKVPool`` with an FP4 quant method), the full-attention
    sub-pool of an MHA linear-attention hybrid (``HybridLinearKVPool`` passes the quant
    method to its ``MHATokenToKVPool``; the Mamba state is unchanged) and a plain MLA one
    (``_build_mla_fp4_kv_pool`` -> ``MLATokenToKVPoolFP4``). Not modeled: DSA (its pool is
    not the FP4 one), the other hybrid pools (SWA, MLA linear hybrids, MiniMax sparse: their
    sub-pools are built with other classes), HiSparse host pools, KV-cache sharding (striped pools) and
    DCP (replicated MLA pools)."""
    what = "FP4 draft KV cache" if draft else "FP4 KV cache"
    if dtype in LEGACY_FP4_KV_DTYPES:
        return (
            f"{what} (--kv-cache-dtype {dtype}, the MHATokenToKVPoolFP4/MLATokenToKVPoolFP4 recipe of SGLang "
            "0.5.4.post3 "
            ".. 0.5.20, whose transfer buffers are the dequantized views: not modeled)"
        )
    from kvcheck.sglang.releases import side_release

    release, _ = side_release(side)
    if release != FP4_VERIFIED_RELEASE:
        return (
            f"{what} (--kv-cache-dtype {dtype}) on SGLang {release or '(unknown release)'} (kvcheck derives the "
            f"FP4 pools of {FP4_VERIFIED_RELEASE} only)"
        )
    if model.dsa:
        return f"{what} (--kv-cache-dtype {dtype}) on a DSA pool"
    if model.hybrid and not (model.hybrid == "linear" and not model.is_mla):
        return (
            f"{what} (--kv-cache-dtype {dtype}) on a {model.hybrid} hybrid pool (its sub-pools' FP4 layout is not "
            "verified)"
        )
    a = side.args
    if a.enable_hisparse or a.enable_kv_cache_sharding or a.dcp_size > 1:
        feature = "HiSparse" if a.enable_hisparse else "KV-cache sharding" if a.enable_kv_cache_sharding else "DCP"
        return f"{what} (--kv-cache-dtype {dtype}) with {feature}"
    return None


def dsa_fp8_layout(side: Side) -> tuple[str, str | None]:
    """("scaled" | "raw", note) for a DSA pool stored in fp8 on ``side``.

    Reads the side's own role backend (``--dsa-decode-backend`` on a decode,
    ``--dsa-prefill-backend`` on a prefill; a live ``/server_info`` carries the resolved
    one). Left unset, the runtime picks it from the GPU (``_dsa_split_backend_resolution``):
    fp8 on Blackwell (SM >= 10) -> trtllm (raw rows), on Hopper -> flashmla_kv (scaled);
    HiSparse keeps flashmla_kv whatever the GPU. When the side names no GPU, Hopper is
    assumed and the note says so.
    """
    raw = side.raw_args or {}
    own = raw.get("dsa_decode_backend" if side.role == "decode" else "dsa_prefill_backend")
    if own:
        if own in DSA_RAW_FP8_BACKENDS:
            return "raw", None
        if (
            own == "tilelang"
            and raw.get("dsa_prefill_backend") == "tilelang"
            and raw.get("dsa_decode_backend") == "tilelang"
        ):
            return "raw", None
        return "scaled", None
    if side.args.enable_hisparse:
        return "scaled", None
    gpu, assumed = side_gpu(side)
    layout = "raw" if gpu.capability[0] >= 10 else "scaled"
    if not assumed:
        return layout, None
    return layout, (
        f"DSA fp8 KV layout depends on the GPU when --dsa-{side.role}-backend is unset: Hopper "
        "(flashmla_kv) stores 656-byte scaled rows, Blackwell (trtllm) 576-byte raw rows; the GPU was not given, "
        "assumed Hopper"
    )


def _mla_row_bytes(model: ModelConfig, dtype: str, nbytes: int, dsa_layout: str = "scaled") -> int:
    row = (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)
    if model.dsa and dtype == "fp8_e4m3" and dsa_layout == "scaled":
        lora = model.kv_lora_rank or 0
        return lora + lora // DSA_FP8_QUANT_BLOCK * 4 + (model.qk_rope_head_dim or 0) * 2
    return row * nbytes


def kv_heads_per_rank(total_kv_heads: int, attn_tp: int, dcp_size: int = 1) -> int:
    """``ModelConfig.get_num_kv_heads(attn_tp_size, attn_dcp_size)``: DCP ranks replicate KV,
    so heads shard over attn_tp // dcp groups; with fewer heads than groups each rank keeps one."""
    groups = max(1, attn_tp // max(1, dcp_size))
    return max(1, total_kv_heads // groups)
