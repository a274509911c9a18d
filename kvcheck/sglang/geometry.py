"""KV regions each side registers with NIXL, derived as SGLang 0.5.23 would.

Mirrors ``get_contiguous_buf_infos()`` of the KV pools (``MHATokenToKVPool``,
``MLATokenToKVPool``/``DSATokenToKVPool``, ``MLATokenToKVPoolHost`` for HiSparse) and
how ``disaggregation/prefill.py`` and ``decode.py`` (``_init_kv_manager``) append the
draft pool and choose one memory kind per region.

Shapes: a side's ``regions`` is a list in registration order; ``item_len`` is bytes per
page (page_size tokens) of one region.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kvcheck.errors import InputError
from kvcheck.sglang.model import ModelConfig
from kvcheck.sides import Side

MemKind = Literal["VRAM", "DRAM"]

# Bytes per element of each --kv-cache-dtype (``configure_kv_cache_dtype``, 0.5.23).
KV_DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1,
}
MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

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


class Region(BaseModel):
    """One KV region ("entry"): one registered buffer, addressed per page.

    ``item_len``: bytes of one page of this region; ``layer_id``: model layer (draft layers
    numbered after the target's); ``part``: "K", "V" or "KV" (MLA latent).
    """

    index: int
    kind: MemKind
    item_len: int
    layer_id: int
    part: Literal["K", "V", "KV"]
    pool: Literal["target", "draft"]


class SideGeometry(BaseModel):
    """The KV regions one side (one rank of its first PP stage) registers.

    ``page_size`` is the resolved page size in tokens (``page_size_pinned`` False when
    the flag was left unset and the attention backend would choose); ``stage_layers``
    the [start, end) model layers of each PP stage; ``notes``: assumptions made.
    """

    role: Literal["prefill", "decode"]
    pool: Literal["MHA", "MLA", "DSA", "not_modeled"]
    not_modeled_reason: str | None = None
    is_mla: bool
    attn_tp_size: int
    pp_size: int
    page_size: int
    page_size_pinned: bool
    kv_cache_dtype: str
    bytes_per_element: int
    regions: list[Region] = Field(default_factory=list)
    num_draft_regions: int = 0
    stage_layers: list[tuple[int, int]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.regions)

    @property
    def kinds(self) -> list[str]:
        return [r.kind for r in self.regions]

    @property
    def item_lens(self) -> list[int]:
        return [r.item_len for r in self.regions]


def pp_stage_layers(num_layers: int, pp_size: int, partition: str | None, source: str = "") -> list[tuple[int, int]]:
    """[start, end) layers of each PP stage (``sglang.srt.distributed.utils.get_pp_indices``).

    ``partition`` is ``SGLANG_PP_LAYER_PARTITION`` (comma-separated counts), ignored at pp 1.
    Raises ``InputError`` with the runtime's wording when it does not fit.
    """
    if pp_size <= 1:
        return [(0, num_layers)]
    if partition:
        try:
            parts = [int(x) for x in partition.split(",")]
        except ValueError:
            raise InputError(f"Invalid partition string: {partition}", source=source, field="SGLANG_PP_LAYER_PARTITION") from None
        if len(parts) != pp_size:
            raise InputError(f"len(partitions)={len(parts)} does not match pp_size={pp_size}.", source=source, field="SGLANG_PP_LAYER_PARTITION")
        if sum(parts) != num_layers:
            raise InputError(f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}.", source=source, field="SGLANG_PP_LAYER_PARTITION")
        out, start = [], 0
        for p in parts:
            out.append((start, start + p))
            start += p
        return out
    base, rem = divmod(num_layers, pp_size)
    out, start = [], 0
    for rank in range(pp_size):
        count = base + (1 if rank >= pp_size - rem else 0)
        out.append((start, start + count))
        start += count
    return out


def _backend_page_constraints(side: Side, page_size: int | None) -> int | None:
    """The page size after ``_mla_backend_page_constraints`` (0.5.23 arg resolution):
    explicit attention backends that only run certain page sizes replace the flag."""
    a = side.args
    draft_backend = (side.raw_args or {}).get("speculative_draft_attention_backend")
    ad = (a.attention_backend, a.decode_attention_backend)
    adp = ad + (a.prefill_attention_backend,)
    if "flashmla" in ad:
        page_size = 64
    if "trtllm_mla" in ad and page_size not in (32, 64):
        page_size = 64
    if "cutedsl_mla" in adp and page_size not in (32, 64):
        page_size = 64
    if "trtllm_mha" in adp + (draft_backend,) and page_size not in (16, 32, 64, 128):
        page_size = 64
    if "hpc_ops" in adp and page_size != 64:
        page_size = 64
    return page_size


def resolve_page_size(side: Side, model: ModelConfig) -> tuple[int, bool, str | None]:
    """(page size in tokens, pinned?, note). Unset page sizes are chosen by the attention
    backend on the GPU at start-up; kvcheck assumes the usual choice and says so."""
    args = side.args
    if model.is_mla and model.dsa:
        # deepseek_v2 model override (0.5.23): on CUDA a DSA model's page size is set to
        # 64 * index_kpool whatever --page-size says (ROCm 1, XPU 128: not modeled).
        forced = 64 * max(1, model.index_kpool)
        if args.page_size is not None and args.page_size != forced:
            return forced, True, f"--page-size {args.page_size} is overridden: SGLang sets the page size to {forced} for DeepSeek DSA on CUDA"
        return forced, True, None
    if args.page_size is not None:
        forced = _backend_page_constraints(side, args.page_size)
        if forced != args.page_size:
            return forced, True, f"--page-size {args.page_size} is overridden to {forced} by the attention backend"
        return args.page_size, True, None
    forced = _backend_page_constraints(side, None)
    if forced is not None:
        return forced, True, None
    if model.is_mla:
        backend = side.args.decode_attention_backend if side.role == "decode" else side.args.prefill_attention_backend
        backend = backend or side.args.attention_backend
        guess = {"flashmla": 64, "trtllm_mla": 64, "cutlass_mla": 128}.get(backend or "", 64)
        return guess, False, f"page size unset: the MLA backend chooses it on the GPU (flashmla 64, trtllm_mla 32/64, cutlass_mla 128); assumed {guess}"
    return 1, False, "page size unset: the attention backend chooses it at start-up; assumed 1"


def kv_dtype_bytes(side: Side, model: ModelConfig, *, draft: bool = False) -> tuple[str, int]:
    """(resolved kv dtype string, bytes per element) as ``configure_kv_cache_dtype`` resolves it."""
    flag = side.args.kv_cache_dtype
    if draft and side.args.speculative_draft_kv_cache_dtype:
        flag = side.args.speculative_draft_kv_cache_dtype
    if flag == "auto":
        if (model.kv_cache_quant_algo or "").upper() == "FP8":
            return "fp8_e4m3", 1
        dtype = side.args.dtype if side.args.dtype != "auto" else model.torch_dtype
        return dtype, MODEL_DTYPE_BYTES.get(dtype, 2)
    if flag in ("nvfp4", "fp4_mx_block16"):
        raise InputError(f"--kv-cache-dtype {flag} packs two values per byte; kvcheck does not model FP4 pools yet", source=side.origin, field="--kv-cache-dtype")
    if flag not in KV_DTYPE_BYTES:
        raise InputError(f"Unsupported kv_cache_dtype: {flag}.", source=side.origin, field="--kv-cache-dtype")
    return flag, KV_DTYPE_BYTES[flag]


def dsa_fp8_layout(side: Side) -> tuple[str, str | None]:
    """("scaled" | "raw", note) for a DSA pool stored in fp8 on ``side``.

    Reads the side's own role backend (``--dsa-decode-backend`` on a decode,
    ``--dsa-prefill-backend`` on a prefill; a live ``/server_info`` carries the resolved
    one). Left unset, the runtime picks it from the GPU, which kvcheck does not see: it
    assumes Hopper (flashmla_kv, scaled) and says so, except under HiSparse, whose default
    (flashmla_kv) does not depend on the GPU.
    """
    raw = side.raw_args or {}
    own = raw.get("dsa_decode_backend" if side.role == "decode" else "dsa_prefill_backend")
    if own:
        if own in DSA_RAW_FP8_BACKENDS:
            return "raw", None
        if own == "tilelang" and raw.get("dsa_prefill_backend") == "tilelang" and raw.get("dsa_decode_backend") == "tilelang":
            return "raw", None
        return "scaled", None
    if side.args.enable_hisparse:
        return "scaled", None
    return "scaled", (
        f"DSA fp8 KV layout depends on the GPU when --dsa-{side.role}-backend is unset: Hopper "
        "(flashmla_kv) stores 656-byte scaled rows, Blackwell (trtllm) 576-byte raw rows; assumed Hopper"
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


def _pool_regions(
    model: ModelConfig, layers: list[int], page_size: int, attn_tp: int, dtype: str, nbytes: int, kind: str, pool: str,
    *, dcp_size: int = 1, dsa_layout: str = "scaled",
) -> list[dict]:
    if model.is_mla:
        item = page_size * _mla_row_bytes(model, dtype, nbytes, dsa_layout)
        return [dict(kind=kind, item_len=item, layer_id=lid, part="KV", pool=pool) for lid in layers]
    kv_heads = kv_heads_per_rank(model.num_key_value_heads or 1, attn_tp, dcp_size)
    k_item = page_size * kv_heads * (model.head_dim or 0) * nbytes
    v_item = page_size * kv_heads * (model.v_head_dim or model.head_dim or 0) * nbytes
    ks = [dict(kind=kind, item_len=k_item, layer_id=lid, part="K", pool=pool) for lid in layers]
    vs = [dict(kind=kind, item_len=v_item, layer_id=lid, part="V", pool=pool) for lid in layers]
    return ks + vs


def draft_config(side: Side) -> ModelConfig | None:
    """The draft worker's model config: a separate draft model, or the target's own
    MTP/NextN layers (``num_nextn_predict_layers``) when no draft path is given."""
    if not side.args.has_draft_worker:
        return None
    if side.draft_model is not None:
        return side.draft_model
    model = side.model
    if model.num_nextn_predict_layers > 0:
        # ModelConfig(is_draft_model=True): *NextN arch; the draft pool holds
        # num_nextn_predict_layers layers (layer_setup._compute_model_num_layers).
        return model.model_copy(update={"num_hidden_layers": model.num_nextn_predict_layers, "architecture": model.architecture + "NextN"})
    raise InputError(
        f"--speculative-algorithm {side.args.speculative_algorithm} needs a draft model: set --speculative-draft-model-path "
        f"(the model has no MTP layers: num_nextn_predict_layers is 0)",
        source=side.origin,
        field="--speculative-draft-model-path",
    )


def derive_geometry(side: Side, pp_rank: int = 0) -> SideGeometry:
    """Regions one rank of ``side`` registers (stage ``pp_rank``), in registration order.

    Target regions first (MHA: K of each layer, then V of each layer; MLA/DSA: one per
    layer), then the draft pool's, on the side that runs a draft worker. A HiSparse
    decode registers its host pool: those regions are DRAM; draft regions stay VRAM.
    Raises ``InputError`` for contradictory inputs (e.g. a bad PP partition).
    """
    model = side.model
    args = side.args
    page_size, pinned, note = resolve_page_size(side, model)
    notes = [note] if note else []
    if model.attention == "not_modeled":
        return SideGeometry(
            role=side.role, pool="not_modeled", not_modeled_reason=model.not_modeled_reason, is_mla=False,
            attn_tp_size=args.attn_tp_size, pp_size=args.pp_size, page_size=page_size, page_size_pinned=pinned,
            kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=0, notes=notes,
        )
    dtype, nbytes = kv_dtype_bytes(side, model)
    dsa_layout = "scaled"
    if model.dsa:
        if args.kv_cache_dtype == "auto":
            notes.append(
                "--kv-cache-dtype auto on a DSA model depends on the GPU: Hopper keeps bf16, "
                "Blackwell (SM>=10) switches to fp8_e4m3; assumed Hopper"
            )
        # The layout follows the role's DSA backend; it matters only for fp8 pools
        # (the target's, or a draft's under --speculative-draft-kv-cache-dtype).
        dsa_layout, dsa_note = dsa_fp8_layout(side)
        if dsa_note and "fp8_e4m3" in (dtype, args.speculative_draft_kv_cache_dtype):
            notes.append(dsa_note)
    stages = pp_stage_layers(model.num_hidden_layers, args.pp_size, side.env.get("SGLANG_PP_LAYER_PARTITION"), side.origin)
    start, end = stages[min(pp_rank, len(stages) - 1)]
    hisparse_decode = side.role == "decode" and args.enable_hisparse
    target_kind = "DRAM" if hisparse_decode else "VRAM"
    raw = _pool_regions(
        model, list(range(start, end)), page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
        dcp_size=args.dcp_size, dsa_layout=dsa_layout,
    )
    n_draft = 0
    draft = draft_config(side)
    # The prefill's last PP stage (and every decode rank) carries the draft pool.
    if draft is not None and (side.role == "decode" or pp_rank == len(stages) - 1):
        ddtype, dbytes = kv_dtype_bytes(side, draft, draft=True)
        draft_layers = list(range(model.num_hidden_layers, model.num_hidden_layers + draft.num_hidden_layers))
        # Drafts never join the DCP group (get_num_kv_heads ignores dcp for is_draft_model).
        draft_regions = _pool_regions(
            draft, draft_layers, page_size, args.attn_tp_size, ddtype, dbytes, "VRAM", "draft", dsa_layout=dsa_layout,
        )
        n_draft = len(draft_regions)
        raw += draft_regions
    pool = "DSA" if model.dsa else ("MLA" if model.is_mla else "MHA")
    return SideGeometry(
        role=side.role, pool=pool, is_mla=model.is_mla, attn_tp_size=args.attn_tp_size, pp_size=args.pp_size,
        page_size=page_size, page_size_pinned=pinned, kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=nbytes,
        regions=[Region(index=i, **r) for i, r in enumerate(raw)], num_draft_regions=n_draft, stage_layers=stages, notes=notes,
    )
