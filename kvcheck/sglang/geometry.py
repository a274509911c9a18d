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
MODEL_DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2": 1, "float8_e5m2fnuz": 1, "int8": 1, "uint8": 1,
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


StateType = Literal["swa", "mamba", "block_scale", "block_scale_swa", "dsa", "dsa_tail"]


class StateRegion(BaseModel):
    """One buffer of a state component (``kv_args.state_data_ptrs[i][j]``).

    ``state_type``: the component it belongs to (``StateType`` values of
    ``disaggregation/base/conn.py``, lower case: "swa", "mamba", "block_scale", ...);
    ``item_len``: bytes of one item (SWA: one page of ``page_size`` tokens of one layer's
    K or V; Mamba: one request slot of one layer's conv or temporal state; block scales:
    one page of one layer's K or V scales); ``layer_id``: global model layer; ``part``:
    "K"/"V" for KV-shaped buffers, "conv"/"temporal" for Mamba state.
    """

    index: int
    state_type: str
    kind: MemKind = "VRAM"
    item_len: int
    layer_id: int
    part: Literal["K", "V", "KV", "conv", "temporal"]
    # Index of the component in ``state_types`` when a type occurs twice (DeepSeek V4:
    # the target's and the NextN draft's "swa"); None: the only component of its type.
    component: int | None = None


class SideGeometry(BaseModel):
    """The KV regions one side (one rank of its first PP stage) registers.

    ``page_size`` is the resolved page size in tokens (``page_size_pinned`` False when
    the flag was left unset and the attention backend would choose); ``stage_layers``
    the [start, end) model layers of each PP stage; ``notes``: assumptions made.
    """

    role: Literal["prefill", "decode"]
    pool: Literal["MHA", "MLA", "DSA", "SWA", "HYBRID_LINEAR", "MINIMAX_SPARSE", "DSV4", "not_modeled"]
    not_modeled_reason: str | None = None
    is_mla: bool
    attn_tp_size: int
    pp_size: int
    page_size: int
    page_size_pinned: bool
    kv_cache_dtype: str
    bytes_per_element: int
    # model_runner.kv_cache_dtype_str (what the peers compare), see kv_cache_dtype_str().
    kv_cache_dtype_str: str | None = None
    regions: list[Region] = Field(default_factory=list)
    num_draft_regions: int = 0
    stage_layers: list[tuple[int, int]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # State components (``setup_state_kv_args``): component names in registration order,
    # and every buffer of them (``state_regions``, ``state_type`` says which component).
    state_types: list[str] = Field(default_factory=list)
    state_regions: list[StateRegion] = Field(default_factory=list)
    # The attention backends the side resolves to (``None``: not decided by kvcheck), the
    # GPU they were resolved for, and whether that GPU was given or assumed (Hopper).
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    gpu: str | None = None
    gpu_assumed: bool = False
    draft_page_size: int | None = None
    # FP4 KV (nvfp4, fp4_mx_block16): the block-scale buffers the pool allocates beside the
    # packed data (MHA: k/v_scale_buffer per layer; MLA: kv_scale_buffer per layer, target
    # and draft pools) that SGLang 0.5.23 registers with NIXL neither as KV regions nor as a
    # state component: the decode's scales for the received tokens are never written.
    unregistered_scale_buffers: int = 0
    # A DSA pool's fp8 row layout inputs (the DSA backend flags, HiSparse, the KV dtypes): two
    # sides with the same inputs on the same GPU resolve the same layout in every release,
    # whatever that release's own rule (``plan._dsa_layout_gap``). None for other pools.
    dsa_resolution: str | None = None
    # DeepSeekV4TokenToKVPool.pd_kv_layout (compared at bootstrap); None for other pools.
    kv_layout: str | None = None

    @property
    def n(self) -> int:
        return len(self.regions)

    @property
    def kinds(self) -> list[str]:
        return [r.kind for r in self.regions]

    @property
    def item_lens(self) -> list[int]:
        return [r.item_len for r in self.regions]

    def state_item_lens(self, state_type: str) -> list[int]:
        """``kv_args.state_item_lens`` of one component (bytes per item, in order)."""
        return [r.item_len for r in self.state_regions if r.state_type == state_type]

    def component_regions(self, index: int) -> list[StateRegion]:
        """The buffers of component ``index`` of ``state_types`` (by ``component`` when the
        regions carry it, else by state type)."""
        if any(r.component is not None for r in self.state_regions):
            return [r for r in self.state_regions if r.component == index]
        return [r for r in self.state_regions if r.state_type == self.state_types[index]]

    @property
    def state_item_lens_by_type(self) -> list[list[int]]:
        """``kv_args.state_item_lens``: one list per entry of ``state_types``."""
        return [[r.item_len for r in self.component_regions(i)] for i in range(len(self.state_types))]


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


def _backend_page_constraints(side: Side, page_size: int | None, backends: tuple[str | None, str | None, str | None] | None = None) -> int | None:
    """The page size after ``_mla_backend_page_constraints`` (0.5.23 arg resolution):
    attention backends that only run certain page sizes replace the flag.
    ``backends``: resolved (attention, prefill, decode) backends; default: the flags."""
    a = side.args
    draft_backend = (side.raw_args or {}).get("speculative_draft_attention_backend")
    attn, prefill_b, decode_b = backends if backends is not None else (a.attention_backend, a.prefill_attention_backend, a.decode_attention_backend)
    ad = (attn, decode_b)
    adp = ad + (prefill_b,)
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


# Registered model overrides (arg_groups/model_overrides/*.py, 0.5.23) that pick the
# attention backend (and sometimes the page size) from the GPU.
_DEEPSEEK_FAMILY = frozenset(
    {"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration", "MistralLarge3ForCausalLM",
     "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "Glm5NextForConditionalGeneration", "HYV4ForCausalLM",
     "HYV4ForCausalLMNextN", "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM"}
)
_FA3_OR_TRTLLM_MHA = frozenset({"GptOssForCausalLM", "Llama4ForConditionalGeneration", "Llama4ForCausalLM"})
_QWEN_HYBRID = frozenset(
    {"Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration"}
)


def side_gpu(side: Side):
    """(``Gpu`` of the side, assumed?) — Hopper when the side names none."""
    from kvcheck.sglang.gpu import resolve_gpu

    assumed = side.gpu is None or (side.gpu_source or "").startswith("default")
    return resolve_gpu(side.gpu), assumed


def _default_attn_backend(side: Side, model: ModelConfig, gpu, page_size: int | None) -> str:
    """``get_default_attn_backend`` (arg_groups/model_override_base.py, 0.5.23) on CUDA.
    Hopper stands for ``is_hopper_with_cuda_12_3`` (CUDA >= 12.3 assumed)."""
    a = side.args
    raw = side.raw_args or {}
    topk = raw.get("speculative_eagle_topk")
    no_spec_or_topk1 = topk is None or (topk == 1 and page_size in (None, 1))
    if not model.is_mla:
        if gpu.is_hopper and no_spec_or_topk1:
            return "fa3"
        if gpu.is_sm100 and no_spec_or_topk1 and (
            a.speculative_algorithm is None or topk is not None or str(a.speculative_algorithm).upper() == "DFLASH"
        ):
            return "fa4" if model.has_asymmetric_kv else "trtllm_mha"
        return "triton" if model.attention_sinks else "flashinfer"
    if gpu.is_hopper:
        return "fa3"
    if gpu.is_sm100:
        return "flashinfer"
    return "triton"


def resolve_attention(side: Side, model: ModelConfig) -> tuple[tuple[str | None, str | None, str | None], int | None, list[str]]:
    """((attention, prefill, decode) backends, page size or None, notes) as 0.5.23
    resolves them for ``side`` on its GPU: the model's registered overrides
    (DeepSeek family, gpt-oss, Llama 4, Qwen3-Next/3.5, Nemotron-H), then
    ``_attention_backend_default`` (``get_default_attn_backend``), then
    ``_mla_backend_page_constraints``. ``None`` page size means the flag stays unset
    (the pools then use 1). A DSA model on CUDA pins 64 * index_kpool.
    """
    a = side.args
    raw = side.raw_args or {}
    gpu, assumed = side_gpu(side)
    attn, prefill_b, decode_b = a.attention_backend, a.prefill_attention_backend, a.decode_attention_backend
    page = a.page_size
    notes: list[str] = []
    unset = attn is None and prefill_b is None and decode_b is None
    if a.kv_cache_dtype == "nvfp4" and gpu.vendor == "nvidia" and gpu.capability[0] in (10, 12):
        # handle_nvfp4_prefill_kv_dequant_dtype runs first and pins the split backends
        # (prefill flashinfer or trtllm_mha, decode trtllm_mha).
        from kvcheck.sglang.startup import nvfp4_backends

        prefill_b, decode_b = nvfp4_backends(side, gpu)
    arch = model.architecture
    gpu_decided = False
    if model.dsv4:
        # _deepseek_v4_overrides: attention backend dsv4 and page size 256 on CUDA, whatever the flags say.
        return ("dsv4", prefill_b, decode_b), 256, notes
    if model.dsa:
        if unset:
            attn = "dsa"
        page = 64 * max(1, model.index_kpool)
    elif arch in _DEEPSEEK_FAMILY and model.is_mla:
        if gpu.is_sm100 and unset:
            attn, gpu_decided = "trtllm_mla", True
    elif arch in _FA3_OR_TRTLLM_MHA:
        if attn is None and (unset or arch not in ("GptOssForCausalLM",)):
            attn = "trtllm_mha" if gpu.is_sm100 else "fa3" if gpu.is_hopper else "triton"
            gpu_decided = True
    elif arch in _QWEN_HYBRID:
        if gpu.is_sm100 and attn is None:
            default = _default_attn_backend(side, model, gpu, page)
            extra_buffer = raw.get("mamba_radix_cache_strategy") == "extra_buffer"
            # A PD decode runs without the radix cache ("Radix cache is disabled for decode server").
            radix = not raw.get("disable_radix_cache") and side.role != "decode"
            use_trtllm = default == "trtllm_mha" and not (not extra_buffer and radix and a.speculative_algorithm is None)
            attn = "trtllm_mha" if use_trtllm else "triton"
            page = 64 if use_trtllm else 1
            gpu_decided = True
            if not use_trtllm and raw.get("mamba_radix_cache_strategy") in (None, "auto"):
                notes.append("Qwen3-Next/3.5 on Blackwell: the backend (triton, page 1, or trtllm_mha, page 64) follows the Mamba radix-cache strategy resolved at start-up; assumed no extra buffer")
    elif model.hybrid == "minimax_sparse" and unset:
        # model_overrides/minimax_m3.py (non-NVFP4, CUDA): sm100 -> trtllm_mha with
        # fp8_e4m3 KV (else fa4), sm90 -> fa3; unset page size -> 128 with those.
        gpu_decided = True
        if gpu.is_sm100:
            attn = "trtllm_mha" if a.kv_cache_dtype == "fp8_e4m3" and not side.env.get("SGLANG_DISABLE_M3_FP8_ATTN_GEMM") else "fa4"
        elif gpu.is_hopper:
            attn = "fa3"
        if page is None and attn in ("fa4", "trtllm_mha", "fa3"):
            page = 128
    elif arch == "NemotronHForCausalLM":
        if gpu.is_blackwell and unset:
            gpu_decided = True
            topk = raw.get("speculative_eagle_topk")
            if a.speculative_algorithm is not None:
                if gpu.is_sm100 and topk in (None, 1):
                    attn = "trtllm_mha"
                    page = 64 if page is None else page
                else:
                    attn = "triton"
            elif gpu.is_sm100:
                attn = "trtllm_mha"
    # _attention_backend_default
    if prefill_b is not None and prefill_b == decode_b:
        attn = prefill_b
    elif attn is None:
        attn = _default_attn_backend(side, model, gpu, page)
        gpu_decided = True
    forced = _backend_page_constraints(side, page, (attn, prefill_b, decode_b))
    # _attention_backend_fa3_fp8_fallback, then _fa4_page_constraint (0.5.23).
    if attn == "fa3" and a.kv_cache_dtype == "fp8_e5m2":
        attn = "triton"
    if "fa4" in (attn, prefill_b, decode_b) and not model.is_mla and gpu.is_sm100 and (raw.get("speculative_eagle_topk") or 0) <= 1:
        forced = 128
    if gpu_decided and assumed:
        notes.append(f"the GPU was not given: attention backend {attn} (page size {forced or 1}) resolved for {gpu.name} (Hopper assumed)")
    return (attn, prefill_b, decode_b), forced, notes


def resolve_page_size(side: Side, model: ModelConfig) -> tuple[int, bool, str | None]:
    """(page size in tokens, pinned?, note) as 0.5.23 resolves it on the side's GPU.

    ``pinned`` is True when the flag was given or a backend/model rule sets it; False
    when it stays unset and the pools use 1 (e.g. an MLA side on Hopper resolves to fa3
    and page size 1, not 64). Raises nothing.
    """
    args = side.args
    (_, _, _), forced, notes = resolve_attention(side, model)
    note = "; ".join(notes) or None
    if model.is_mla and model.dsa:
        expected = 64 * max(1, model.index_kpool)
        if args.page_size is not None and args.page_size != expected:
            return expected, True, f"--page-size {args.page_size} is overridden: SGLang sets the page size to {expected} for DeepSeek DSA on CUDA"
        return expected, True, note
    if args.page_size is not None:
        if forced != args.page_size:
            return forced, True, f"--page-size {args.page_size} is overridden to {forced} by the attention backend"
        return args.page_size, True, note
    if forced is not None:
        return forced, True, note
    return 1, False, note


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
        return (f"{what} (--kv-cache-dtype {dtype}, the MHATokenToKVPoolFP4/MLATokenToKVPoolFP4 recipe of SGLang 0.5.4.post3 "
                ".. 0.5.20, whose transfer buffers are the dequantized views: not modeled)")
    from kvcheck.sglang.releases import side_release

    release, _ = side_release(side)
    if release != FP4_VERIFIED_RELEASE:
        return f"{what} (--kv-cache-dtype {dtype}) on SGLang {release or '(unknown release)'} (kvcheck derives the FP4 pools of {FP4_VERIFIED_RELEASE} only)"
    if model.dsa:
        return f"{what} (--kv-cache-dtype {dtype}) on a DSA pool"
    if model.hybrid and not (model.hybrid == "linear" and not model.is_mla):
        return f"{what} (--kv-cache-dtype {dtype}) on a {model.hybrid} hybrid pool (its sub-pools' FP4 layout is not verified)"
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
        if own == "tilelang" and raw.get("dsa_prefill_backend") == "tilelang" and raw.get("dsa_decode_backend") == "tilelang":
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
        "(flashmla_kv) stores 656-byte scaled rows, Blackwell (trtllm) 576-byte raw rows; the GPU was not given, assumed Hopper"
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
    *, dcp_size: int = 1, dsa_layout: str = "scaled", heads: int | None = None, head_dim: int | None = None,
    v_head_dim: int | None = None, fp4: bool = False,
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


def _mxfp8_scale_states(kv_regions: list[dict], page_size: int, heads: int, head_dim: int, v_head_dim: int, state_type: str) -> list[dict]:
    """UE8M0 scale buffers of an MXFP8 pool (``get_kv_scale_buf_infos``): K scales of
    every layer then V scales; one byte per 32 elements, ``page_size`` tokens per item."""
    out = []
    for r in kv_regions:
        dim = head_dim if r["part"] == "K" else v_head_dim
        out.append(dict(state_type=state_type, item_len=page_size * heads * (dim // MXFP8_SCALE_BLOCK), layer_id=r["layer_id"], part=r["part"]))
    return out


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
            raise InputError(f"{nh} KDA heads cannot be split over attention TP {attn_tp}", source=model.source, field="--tp-size")
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
            source=model.source, field="--tp-size",
        )
    conv = conv_dim // attn_tp * ((model.mamba_conv_kernel or 1) - 1) * conv_bytes
    temporal = heads // attn_tp * (model.mamba_head_dim or 0) * (model.mamba_state_size or 0) * ssm_bytes
    return conv, temporal


def dsa_index_item_len(model: ModelConfig, page_size: int) -> int:
    """Bytes of one page of one layer's DSA index-K buffer (uint8): page_size /
    index_kpool tokens x (index_head_dim + index_head_dim / 128 x 4 scale bytes)
    (``IndexKeyCache._buffer_shape``, 0.5.23)."""
    ihd = model.index_head_dim or 128
    return page_size // max(1, model.index_kpool) * (ihd + ihd // DSA_FP8_QUANT_BLOCK * 4)


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
        # A linear-attention hybrid's draft keeps one full-attention layer
        # (_build_hybrid_linear_kv_pool: full_attention_layer_ids=[0] for a draft).
        layers = 1 if model.hybrid == "linear" else model.num_nextn_predict_layers
        return model.model_copy(update={
            "num_hidden_layers": layers, "architecture": model.architecture + "NextN", "hybrid": None,
            "full_layer_ids": [], "swa_layer_ids": [], "mamba_layer_ids": [],
        })
    raise InputError(
        f"--speculative-algorithm {side.args.speculative_algorithm} needs a draft model: set --speculative-draft-model-path "
        f"(the model has no MTP layers: num_nextn_predict_layers is 0)",
        source=side.origin,
        field="--speculative-draft-model-path",
    )


def derive_geometry(side: Side, pp_rank: int = 0) -> SideGeometry:
    """Regions and state components one rank of ``side`` registers (stage ``pp_rank``),
    in registration order, as prefill/decode ``_init_kv_manager`` +
    ``setup_state_kv_args`` (0.5.23) assemble them.

    Target regions first (MHA: K of each layer, then V of each layer; MLA/DSA: one per
    layer; SWA hybrid: the full-attention layers' pool only; linear hybrid: the
    full-attention layers' KV), then the draft pool's, on the side that runs a draft
    worker (a prefill only on its last PP stage; a DCP decode's draft pages hold
    page_size x dcp_size tokens). A HiSparse decode registers its host pool: those
    regions are DRAM; draft regions stay VRAM. State components: "swa" (the
    sliding-window layers' K then V), "mamba" (conv then temporal state per layer, one
    item per request slot), "block_scale"/"block_scale_swa" (MXFP8 scales).
    Raises ``InputError`` for contradictory inputs (e.g. a bad PP partition).
    """
    model = side.model
    args = side.args
    page_size, pinned, note = resolve_page_size(side, model)
    (attn_b, prefill_b, decode_b), _, _ = resolve_attention(side, model)
    gpu, gpu_assumed = side_gpu(side)
    notes = [note] if note else []
    base = dict(
        kv_cache_dtype_str=kv_cache_dtype_str(side),
        role=side.role, attn_tp_size=args.attn_tp_size, pp_size=args.pp_size, page_size=page_size, page_size_pinned=pinned,
        attention_backend=attn_b, prefill_attention_backend=prefill_b, decode_attention_backend=decode_b,
        gpu=gpu.name, gpu_assumed=gpu_assumed,
    )
    if model.attention == "not_modeled":
        return SideGeometry(
            **base, pool="not_modeled", not_modeled_reason=model.not_modeled_reason, is_mla=False,
            kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=0, notes=notes,
        )
    if model.dsv4:
        from kvcheck.sglang.dsv4 import dsv4_geometry

        return dsv4_geometry(side, base, notes, pp_rank)
    dtype, nbytes = kv_dtype_bytes(side, model)
    fp4 = dtype in FP4_KV_DTYPES or dtype in LEGACY_FP4_KV_DTYPES
    if fp4 and (why := fp4_unmodeled_reason(side, model, dtype)):
        return SideGeometry(
            **base, pool="not_modeled", is_mla=model.is_mla, kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=0, notes=notes,
            not_modeled_reason=why,
        )
    n_scales = 0
    dsa_layout = "scaled"
    if model.dsa:
        if args.kv_cache_dtype == "auto" and gpu_assumed:
            notes.append(
                "--kv-cache-dtype auto on a DSA model depends on the GPU: Hopper keeps bf16, "
                "Blackwell (SM>=10) switches to fp8_e4m3; the GPU was not given, assumed Hopper"
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
    in_stage = lambda ids: [i for i in ids if start <= i < end]  # noqa: E731
    states: list[dict] = []
    state_types: list[str] = []
    mxfp8 = dtype == "mxfp8" and not model.is_mla
    heads = kv_heads_per_rank(model.num_key_value_heads or 1, args.attn_tp_size, args.dcp_size) if not model.is_mla else 0
    if model.hybrid == "swa":
        full, swa = in_stage(model.full_layer_ids), in_stage(model.swa_layer_ids)
        # SWAKVPool: both sub-pools get head_dim only (v = head_dim) unless the model
        # is a compressed-SWA one (MiMo V2: v_head_dim, swa_* dims, swa heads / attn TP).
        fv = model.v_head_dim if model.swa_compress else model.head_dim
        raw = _pool_regions(model, full, page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
                            dcp_size=args.dcp_size, v_head_dim=fv)
        if model.swa_compress:
            s_heads = max(1, (model.swa_num_key_value_heads or 1) // args.attn_tp_size)
            s_hd, s_vd = model.swa_head_dim, model.swa_v_head_dim
        else:
            s_heads, s_hd, s_vd = heads, model.head_dim, model.head_dim
        swa_regions = _pool_regions(model, swa, page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
                                    heads=s_heads, head_dim=s_hd, v_head_dim=s_vd)
        states += [dict(state_type="swa", item_len=r["item_len"], layer_id=r["layer_id"], part=r["part"]) for r in swa_regions]
        state_types.append("swa")
        if mxfp8:
            states += _mxfp8_scale_states(raw, page_size, heads, model.head_dim or 0, fv or 0, "block_scale")
            states += _mxfp8_scale_states(swa_regions, page_size, s_heads, s_hd or 0, s_vd or 0, "block_scale_swa")
            state_types += ["block_scale", "block_scale_swa"]
        pool = "SWA"
        notes.append(f"SWA hybrid: {len(full)} full-attention layers registered as KV regions, {len(swa)} sliding-window layers as the 'swa' state component")
    elif model.hybrid == "minimax_sparse":
        sparse, dense = in_stage(model.sparse_layer_ids), in_stage(model.dense_layer_ids)
        k_only = [i for i in sparse if i in set(model.k_only_sparse_layer_ids)]
        if len(k_only) != len(sparse) or args.enable_hisparse or (model.quant_method or "").startswith("minimax_m3_nvfp4"):
            reason = (
                "MiniMax sparse pool with index-value layers: the runtime refuses PD for it ('PD disaggregation for MiniMax "
                "sparse layers with index value (index_kv_pool) is not yet supported; only K-only sparse layers are.')"
                if len(k_only) != len(sparse) else "MiniMax sparse pool with HiSparse or the NVFP4 pool"
            )
            return SideGeometry(**base, pool="not_modeled", is_mla=False, kv_cache_dtype=args.kv_cache_dtype,
                                bytes_per_element=nbytes, notes=notes, not_modeled_reason=reason)
        # get_sparse_kv_buf_infos: K then V of the sparse layers (main pool, per page).
        raw = _pool_regions(model, sparse, page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
                            dcp_size=args.dcp_size, v_head_dim=model.head_dim)
        # get_minimax_sparse_index_dtype: fp8 attn GEMM (fp8_e4m3 + trtllm_mha on SM100)
        # or Hopper with fp8_e4m3 KV keep the index K in the KV dtype, else the model dtype.
        fp8_gemm = dtype == "fp8_e4m3" and attn_b == "trtllm_mha" and gpu.is_sm100 and not side.env.get("SGLANG_DISABLE_M3_FP8_ATTN_GEMM")
        if fp8_gemm or (gpu.is_hopper and dtype == "fp8_e4m3"):
            ibytes = nbytes
        else:
            mdtype = args.dtype if args.dtype != "auto" else model.torch_dtype
            ibytes = MODEL_DTYPE_BYTES.get(mdtype, 2)
        if k_only:
            states += [dict(state_type="minimax_index_k", item_len=page_size * (model.sparse_index_dim or 0) * ibytes, layer_id=lid, part="K")
                       for lid in k_only]
            state_types.append("minimax_index_k")
        if dense:
            dense_regions = _pool_regions(model, dense, page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
                                          dcp_size=args.dcp_size, v_head_dim=model.head_dim)
            states += [dict(state_type="minimax_dense_kv", item_len=r["item_len"], layer_id=r["layer_id"], part=r["part"]) for r in dense_regions]
            state_types.append("minimax_dense_kv")
        pool = "MINIMAX_SPARSE"
    elif model.hybrid == "linear":
        full, mamba = in_stage(model.full_layer_ids), in_stage(model.mamba_layer_ids)
        raw = _pool_regions(model, full, page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target", dcp_size=args.dcp_size,
                            fp4=fp4)
        if fp4:
            n_scales += len(raw)
        conv, temporal = mamba_state_item_lens(model, args.attn_tp_size, side.env)
        states += [dict(state_type="mamba", item_len=conv, layer_id=lid, part="conv") for lid in mamba]
        states += [dict(state_type="mamba", item_len=temporal, layer_id=lid, part="temporal") for lid in mamba]
        state_types.append("mamba")
        pool = "HYBRID_LINEAR"
    else:
        raw = _pool_regions(
            model, list(range(start, end)), page_size, args.attn_tp_size, dtype, nbytes, target_kind, "target",
            dcp_size=args.dcp_size, dsa_layout=dsa_layout, fp4=fp4,
        )
        if fp4:
            n_scales += len(raw)  # one scale buffer per registered data buffer (MHA K and V, MLA latent)
            notes.append(
                f"FP4 KV ({dtype}): {len(raw)} packed-data regions registered; their {len(raw)} block-scale buffers are not "
                "registered with NIXL (SGLang 0.5.23)"
            )
        if mxfp8:
            states += _mxfp8_scale_states(raw, page_size, heads, model.head_dim or 0, model.v_head_dim or model.head_dim or 0, "block_scale")
            state_types.append("block_scale")
        pool = "DSA" if model.dsa else ("MLA" if model.is_mla else "MHA")
        if model.dsa:
            # StateType.DSA: the index-K (+ scales) buffer of every layer
            # (IndexKeyCache.state_buf_infos); shared-topk layers hold 0 rows when
            # _should_elide_dsa_index_k (not HiSparse, not a draft).
            elide = set(model.dsa_skip_topk_layers) if not args.enable_hisparse else set()
            item = dsa_index_item_len(model, page_size)
            states += [dict(state_type="dsa", item_len=0 if lid in elide else item, layer_id=lid, part="KV") for lid in range(start, end)]
            state_types.append("dsa")
    n_draft = 0
    draft_page = None
    draft = draft_config(side)
    # The prefill's last PP stage (and every decode rank) carries the draft pool.
    if draft is not None and (side.role == "decode" or pp_rank == len(stages) - 1):
        ddtype, dbytes = kv_dtype_bytes(side, draft, draft=True)
        dfp4 = ddtype in FP4_KV_DTYPES or ddtype in LEGACY_FP4_KV_DTYPES
        if dfp4 and (why := fp4_unmodeled_reason(side, draft, ddtype, draft=True)):
            return SideGeometry(
                **base, pool="not_modeled", is_mla=model.is_mla, kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=0, notes=notes,
                not_modeled_reason=why,
            )
        draft_layers = list(range(model.num_hidden_layers, model.num_hidden_layers + draft.num_hidden_layers))
        # KVCacheConfigurator.loc_space_scale: a draft worker under DCP pages
        # page_size * dcp_size tokens. Drafts never join the DCP group.
        draft_page = page_size * args.dcp_size if args.dcp_size > 1 else page_size
        draft_regions = _pool_regions(
            draft, draft_layers, draft_page, args.attn_tp_size, ddtype, dbytes, "VRAM", "draft", dsa_layout=dsa_layout, fp4=dfp4,
        )
        if dfp4:
            n_scales += len(draft_regions)
        n_draft = len(draft_regions)
        raw += draft_regions
        if model.dsa and draft.dsa:
            # setup_state_kv_args appends the draft DSA pool's index buffers to the
            # target's "dsa" component (never elided for a draft).
            item = dsa_index_item_len(draft, draft_page)
            states += [dict(state_type="dsa", item_len=item, layer_id=lid, part="KV") for lid in draft_layers]
        if model.hybrid == "linear":
            notes.append("the MTP draft of a linear-attention hybrid is taken as one full-attention layer (K and V); not verified against the runtime")
    return SideGeometry(
        **base, pool=pool, is_mla=model.is_mla, kv_cache_dtype=args.kv_cache_dtype, bytes_per_element=nbytes,
        regions=[Region(index=i, **r) for i, r in enumerate(raw)], num_draft_regions=n_draft, stage_layers=stages, notes=notes,
        state_types=state_types, state_regions=[StateRegion(index=i, **r) for i, r in enumerate(states)], draft_page_size=draft_page,
        unregistered_scale_buffers=n_scales, dsa_resolution=_dsa_resolution(side) if model.dsa else None,
    )


def _dsa_resolution(side: Side) -> str:
    """The inputs each release's DSA backend / fp8 row layout resolution reads on ``side``
    besides the GPU (``_set_default_nsa_backends`` / ``calculate_mla_kv_cache_dim`` before
    0.5.15, ``_dsa_split_backend_resolution`` after): both backend flags, HiSparse, the KV
    dtypes."""
    raw, a = side.raw_args or {}, side.args
    backends = [raw.get(f"{p}_{r}_backend") for r in ("prefill", "decode") for p in ("dsa", "nsa")]  # --nsa-*: the older names
    return "|".join(str(x) for x in (*backends, bool(a.enable_hisparse),
                                     a.kv_cache_dtype, a.speculative_draft_kv_cache_dtype))
