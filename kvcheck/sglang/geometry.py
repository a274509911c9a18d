"""KV regions each side registers with NIXL, derived as SGLang 0.5.23 would.

Mirrors ``get_contiguous_buf_infos()`` of the KV pools (``MHATokenToKVPool``,
``MLATokenToKVPool``/``DSATokenToKVPool``, ``MLATokenToKVPoolHost`` for HiSparse) and
how ``disaggregation/prefill.py`` and ``decode.py`` (``_init_kv_manager``) append the
draft pool and choose one memory kind per region.

Shapes: a side's ``regions`` is a list in registration order; ``item_len`` is bytes per
page (page_size tokens) of one region.

Where the parts live: the pools, one module each (``kvcheck.sglang.pools``: names,
``pool_of`` and a builder per pool; DeepSeek V4: ``kvcheck.sglang.dsv4``), KV dtypes
(``kvcheck.sglang.kv_dtype``), attention backend, page size and GPU
(``kvcheck.sglang.attention``). This module resolves a side's inputs once, dispatches to
the pool's builder, appends the draft pool and re-exports the moved names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kvcheck.errors import InputError
from kvcheck.sglang.attention import (  # noqa: F401  (re-exported)
    _backend_page_constraints,
    _default_attn_backend,
    resolve_attention,
    resolve_page_size,
    side_gpu,
)
from kvcheck.sglang.kv_dtype import (  # noqa: F401  (re-exported)
    DSA_FP8_QUANT_BLOCK,
    DSA_RAW_FP8_BACKENDS,
    FP4_KV_DTYPES,
    FP4_VERIFIED_RELEASE,
    KV_DTYPE_BYTES,
    LEGACY_FP4_KV_DTYPES,
    MODEL_DTYPE_BYTES,
    _mla_row_bytes,
    dsa_fp8_layout,
    fp4_unmodeled_reason,
    kv_cache_dtype_str,
    kv_dtype_bytes,
    kv_heads_per_rank,
    resolved_kv_cache_dtype_flag,
)
from kvcheck.sglang.model import ModelConfig
from kvcheck.sglang.pools import DSV4, HYBRID_LINEAR, NOT_MODELED, PoolInputs, PoolName, builder_for, pool_of
from kvcheck.sglang.pools.linear import mamba_state_item_lens  # noqa: F401  (re-exported)
from kvcheck.sglang.pools.token import (  # noqa: F401  (re-exported)
    MXFP8_SCALE_BLOCK,
    _mxfp8_scale_states,
    _pool_regions,
    dsa_index_item_len,
)
from kvcheck.sides import Side

MemKind = Literal["VRAM", "DRAM"]


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
    pool: PoolName  # kvcheck.sglang.pools.POOLS
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
    # The inputs the state buffers' item lengths derive from in the side's release (a
    # DeepSeek V4 pool: speculative decoding, online C128 compression...): name -> (the
    # value as the release reads it, as the side writes it), so that a state mismatch
    # names the inputs that differ (``kvcheck.sglang.mooncake.states.state_input_differences``).
    state_inputs: dict[str, tuple[str, str]] = Field(default_factory=dict)

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
            raise InputError(
                f"Invalid partition string: {partition}", source=source, field="SGLANG_PP_LAYER_PARTITION"
            ) from None
        if len(parts) != pp_size:
            raise InputError(
                f"len(partitions)={len(parts)} does not match pp_size={pp_size}.",
                source=source,
                field="SGLANG_PP_LAYER_PARTITION",
            )
        if sum(parts) != num_layers:
            raise InputError(
                f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}.",
                source=source,
                field="SGLANG_PP_LAYER_PARTITION",
            )
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
        return model.model_copy(
            update={
                "num_hidden_layers": layers,
                "architecture": model.architecture + "NextN",
                "hybrid": None,
                "full_layer_ids": [],
                "swa_layer_ids": [],
                "mamba_layer_ids": [],
            }
        )
    raise InputError(
        f"--speculative-algorithm {side.args.speculative_algorithm} needs a draft model: set "
        "--speculative-draft-model-path "
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
        role=side.role,
        attn_tp_size=args.attn_tp_size,
        pp_size=args.pp_size,
        page_size=page_size,
        page_size_pinned=pinned,
        attention_backend=attn_b,
        prefill_attention_backend=prefill_b,
        decode_attention_backend=decode_b,
        gpu=gpu.name,
        gpu_assumed=gpu_assumed,
    )

    def not_modeled(reason: str | None, *, is_mla: bool, bytes_per_element: int = 0) -> SideGeometry:
        return SideGeometry(
            **base,
            pool=NOT_MODELED,
            not_modeled_reason=reason,
            is_mla=is_mla,
            kv_cache_dtype=args.kv_cache_dtype,
            bytes_per_element=bytes_per_element,
            notes=notes,
        )

    kind = pool_of(model)
    if kind == NOT_MODELED:
        return not_modeled(model.not_modeled_reason, is_mla=False)
    if kind == DSV4:
        from kvcheck.sglang.dsv4 import dsv4_geometry

        return dsv4_geometry(side, base, notes, pp_rank)
    dtype, nbytes = kv_dtype_bytes(side, model)
    fp4 = dtype in FP4_KV_DTYPES or dtype in LEGACY_FP4_KV_DTYPES
    if fp4 and (why := fp4_unmodeled_reason(side, model, dtype)):
        return not_modeled(why, is_mla=model.is_mla)
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
    stages = pp_stage_layers(
        model.num_hidden_layers, args.pp_size, side.env.get("SGLANG_PP_LAYER_PARTITION"), side.origin
    )
    start, end = stages[min(pp_rank, len(stages) - 1)]
    hisparse_decode = side.role == "decode" and args.enable_hisparse
    heads = (
        kv_heads_per_rank(model.num_key_value_heads or 1, args.attn_tp_size, args.dcp_size) if not model.is_mla else 0
    )
    inputs = PoolInputs(
        side=side,
        model=model,
        page_size=page_size,
        dtype=dtype,
        nbytes=nbytes,
        fp4=fp4,
        mxfp8=dtype == "mxfp8" and not model.is_mla,
        kind="DRAM" if hisparse_decode else "VRAM",
        layers=(start, end),
        heads=heads,
        dsa_layout=dsa_layout,
        attention_backend=attn_b,
        gpu=gpu,
        notes=notes,
    )
    layout = builder_for(kind)(inputs)
    if layout.not_modeled_reason is not None:
        return not_modeled(layout.not_modeled_reason, is_mla=False, bytes_per_element=nbytes)
    pool, raw, states, state_types, n_scales = (
        layout.pool,
        layout.regions,
        layout.states,
        layout.state_types,
        layout.n_scales,
    )
    n_draft = 0
    draft_page = None
    draft = draft_config(side)
    # The prefill's last PP stage (and every decode rank) carries the draft pool.
    if draft is not None and (side.role == "decode" or pp_rank == len(stages) - 1):
        ddtype, dbytes = kv_dtype_bytes(side, draft, draft=True)
        dfp4 = ddtype in FP4_KV_DTYPES or ddtype in LEGACY_FP4_KV_DTYPES
        if dfp4 and (why := fp4_unmodeled_reason(side, draft, ddtype, draft=True)):
            return not_modeled(why, is_mla=model.is_mla)
        draft_layers = list(range(model.num_hidden_layers, model.num_hidden_layers + draft.num_hidden_layers))
        # KVCacheConfigurator.loc_space_scale: a draft worker under DCP pages
        # page_size * dcp_size tokens. Drafts never join the DCP group.
        draft_page = page_size * args.dcp_size if args.dcp_size > 1 else page_size
        draft_regions = _pool_regions(
            draft,
            draft_layers,
            draft_page,
            args.attn_tp_size,
            ddtype,
            dbytes,
            "VRAM",
            "draft",
            dsa_layout=dsa_layout,
            fp4=dfp4,
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
        if kind == HYBRID_LINEAR:
            notes.append(
                "the MTP draft of a linear-attention hybrid is taken as one full-attention layer (K and V); not "
                "verified against the runtime"
            )
    return SideGeometry(
        **base,
        pool=pool,
        is_mla=model.is_mla,
        kv_cache_dtype=args.kv_cache_dtype,
        bytes_per_element=nbytes,
        regions=[Region(index=i, **r) for i, r in enumerate(raw)],
        num_draft_regions=n_draft,
        stage_layers=stages,
        notes=notes,
        state_types=state_types,
        state_regions=[StateRegion(index=i, **r) for i, r in enumerate(states)],
        draft_page_size=draft_page,
        unregistered_scale_buffers=n_scales,
        dsa_resolution=_dsa_resolution(side) if model.dsa else None,
    )


def _dsa_resolution(side: Side) -> str:
    """The inputs each release's DSA backend / fp8 row layout resolution reads on ``side``
    besides the GPU (``_set_default_nsa_backends`` / ``calculate_mla_kv_cache_dim`` before
    0.5.15, ``_dsa_split_backend_resolution`` after): both backend flags, HiSparse, the KV
    dtypes."""
    raw, a = side.raw_args or {}, side.args
    backends = [
        raw.get(f"{p}_{r}_backend") for r in ("prefill", "decode") for p in ("dsa", "nsa")
    ]  # --nsa-*: the older names
    return "|".join(
        str(x) for x in (*backends, bool(a.enable_hisparse), a.kv_cache_dtype, a.speculative_draft_kv_cache_dtype)
    )
