"""DeepSeek V4 pools (``DeepseekV4ForCausalLM``) as SGLang 0.5.23 builds and registers them.

Mirrors, on CUDA:

* ``KVCacheConfigurator._build_dsv4_kv_pool`` -> ``DeepSeekV4TokenToKVPool``
  (``mem_cache/deepseek_v4_memory_pool.py``): page size 256 (``_deepseek_v4_overrides``
  pins it, whatever ``--page-size`` says), a paged SWA pool over every layer of the stage,
  one compressed pool per compress ratio (C4: page 256/4 = 64 tokens, plus the C4
  lightning-indexer K pool; C128: page 2 tokens), and per-layer compress states
  (``CompressStatePool``: C4 kv+score rings, SWA-addressed; C128 request-scoped rings).
* ``get_contiguous_buf_infos`` (the KV regions): ``[C4 KV x n_c4, C4 indexer x n_c4,
  C128 KV x n_c128]``, one item per 256-token page.
* ``setup_state_kv_args``: component ``swa`` (``get_state_buf_infos``: SWA KV of every
  stage layer, then the C4 compress states, then the C4 indexer compress states),
  ``c128_state`` (``StateType.DSV4_REQUEST_STATE``, ``get_request_state_buf_infos``), and
  with a NextN draft worker a second ``swa`` component (the draft pool's SWA KV; the draft
  pool has compress ratio 0 on every layer, so it registers no KV region).
* ``DecodePreallocQueue._init_kv_manager`` with ``--enable-hisparse``: the host pool of
  ``HiSparseCoordinator`` (``DeepSeekV4PagedHostPool``, one DRAM region per C4 layer,
  item = the C4 device page) replaces the C4 KV regions; the rest of the device regions
  (``get_contiguous_buf_infos()[n_c4:]``) follow as VRAM.
* ``DeepSeekV4TokenToKVPool.pd_kv_layout`` (``kv_layout`` compared at bootstrap).

Byte layouts (``KVLayout``, ``kernels/ops/attention/dsv4/kv_layout.py``): a page of ``p``
tokens takes ``ceil(p * bytes_per_token / page_align) * page_align`` bytes; V4: 584 B per
token (448 fp8 nope + 64 bf16 rope + 7 scale bytes + 1 pad), pages padded to 576 B;
V4.1 (SM100 only, ``SGLANG_DSV4_KV_LAYOUT=v41|v41_new|auto``): 528 B per token, padded
to 512 (v41) or 528 (v41_new); the fp4 compressed layout 288 B per token, padded to 256 / 288.
Releases 0.5.12 .. 0.5.13.post1 (``LEGACY_FIRST`` .. ``LEGACY_END``) build the V4 pool
with the V4 layout only (no ``SGLANG_DSV4_*`` layout variables, no SM120 direct SWA KV)
and register one state component: ``setup_state_kv_args`` appends
``get_state_buf_infos()`` as ``StateType.SWA`` (the SWA KV of every stage layer, then
one ``CompressStatePool`` per nonzero-ratio stage layer in layer order (C4: last dim
4 x head_dim, C128: 2 x head_dim, online C128: 3 x head_dim), then the C4 indexer
compress states (4 x index_head_dim)), each item ``ring_size`` rows of fp32
(``get_compress_state_ring_size``: 8 / 128 rows, 16 / 256 with any
``--speculative-algorithm``, 1 for online C128); a NextN draft pool registers neither KV
regions (ratio 0 on every layer) nor states (the draft is appended for DSA pools only).
Before 0.5.12 SGLang has no DeepSeek V4 model: such a side is ``not_modeled``.
What kvcheck does not restate (trtllm's uniform-FP8 pool, which SGLang refuses under PD;
a bf16 KV dtype; prefill/attention CP, decode DCP and PP > 1 with their ratio-grouped
re-slicing; online C128 state under speculation; DSpark) is returned as ``not_modeled``
with the reason, which the preflight reports ``unchecked``.
"""

from __future__ import annotations

from kvcheck.sglang.pools.base import DSV4, NOT_MODELED
from kvcheck.sides import Side

# SGLANG_DSV4_KV_LAYOUT values -> (bytes per token, page alignment) of KVLayout (0.5.23).
_LAYOUT_BYTES = {
    "v4": (584, 576),
    "v41": (528, 512),
    "v41_new": (528, 528),
    "v41_fp4": (288, 256),
    "v41_fp4_new": (288, 288),
}
DSV4_PAGE_SIZE = 256
# DeepseekV4ForCausalLM's first release, and the release whose state registration
# changed (the legacy single-component layout is 0.5.12 .. 0.5.13.post1).
LEGACY_FIRST = "0.5.12"
LEGACY_END = "0.5.14"
DSV4_INDEXER_QUANT_BLOCK = 128
_TRUE = ("1", "true", "yes", "on")


def _env_bool(side: Side, name: str) -> bool:
    return str((side.env or {}).get(name, "")).strip().lower() in _TRUE


def _env_input(side: Side, name: str) -> tuple[str, str]:
    """(``on``/``off`` as ``_env_bool`` reads ``name``, how the side sets it)."""
    raw = (side.env or {}).get(name)
    return ("on" if _env_bool(side, name) else "off", f"{name}={raw}" if raw is not None else f"{name} unset")


def _speculative_input(side: Side, *, needs_draft_worker: bool) -> tuple[str, str]:
    """(whether the release counts the side as speculative, how the side sets it)."""
    a = side.args
    on = a.speculative_algorithm is not None and (a.has_draft_worker or not needs_draft_worker)
    shown = (
        f"--speculative-algorithm {a.speculative_algorithm}"
        if a.speculative_algorithm
        else "no --speculative-algorithm"
    )
    return ("on" if on else "off", shown)


def page_bytes(layout: str, tokens: int) -> int:
    """``KVLayout.page_bytes``: bytes of one page of ``tokens`` tokens in ``layout``."""
    per_token, align = _LAYOUT_BYTES[layout]
    return -(-tokens * per_token // align) * align


def indexer_bytes_per_token(index_head_dim: int, fp4: bool) -> int:
    """``get_dsv4_indexer_bytes_per_token``: fp8 key + a 4-byte scale per 128 values, or
    the fp4 payload + one scale byte per 32 values."""
    if fp4:
        return index_head_dim // 2 + index_head_dim // 32
    return index_head_dim + index_head_dim // DSV4_INDEXER_QUANT_BLOCK * 4


def resolve_layouts(side: Side) -> tuple[str, str] | str:
    """(main layout, compressed layout of ratios 4/128) as ``select_dsv4_kv_layout`` +
    ``resolve_compressed_kv_layout`` pick them on CUDA, or the reason kvcheck cannot
    (a start-up assertion of the runtime that is not restated here)."""
    from kvcheck.sglang.geometry import side_gpu

    env = side.env or {}
    mode = str(env.get("SGLANG_DSV4_KV_LAYOUT", "v4")).strip().lower()
    option = str(env.get("SGLANG_DSV4_COMPRESSED_KV_LAYOUT", "auto")).strip().lower()
    gpu, _ = side_gpu(side)
    sm100 = gpu.capability[0] == 10
    if option not in ("auto", "fp8", "fp4"):
        return f"SGLANG_DSV4_COMPRESSED_KV_LAYOUT={option} (the runtime asserts on unknown layouts)"
    if mode == "v4" or (mode == "auto" and not sm100):
        if option == "fp4":
            return "SGLANG_DSV4_COMPRESSED_KV_LAYOUT=fp4 beside the V4 main cache (a start-up assertion)"
        return "v4", "v4"
    if mode not in ("v41", "v41_new", "auto"):
        return f"SGLANG_DSV4_KV_LAYOUT={mode} (the runtime asserts on unknown layouts)"
    if not sm100:
        return f"SGLANG_DSV4_KV_LAYOUT={mode} on {gpu.name}: the V4.1 layouts need SM100/SM103 (a start-up assertion)"
    main = "v41_new" if mode == "v41_new" else "v41"
    compressed = "v41_fp4" if option == "fp4" else "v41"
    if main == "v41_new":
        compressed += "_new"
    return main, compressed


def pd_kv_layout(main: str, compressed: str, ratios: list[int]) -> str:
    """``DeepSeekV4TokenToKVPool.pd_kv_layout``: the main layout, then ``c<ratio>:<layout>``
    of every nonzero ratio of the model (the whole ``compress_ratios`` list)."""
    return ",".join([main, *(f"c{r}:{compressed}" for r in sorted(set(ratios) - {0}))])


def is_legacy(side: Side) -> bool:
    """The side runs a release of the single-state-component layout (0.5.12 .. 0.5.13.post1)."""
    from kvcheck.sglang.pd_release import at_least

    v = side.sglang_version
    return v is not None and at_least(v, LEGACY_FIRST) and not at_least(v, LEGACY_END)


def unmodeled_reason(side: Side) -> str | None:
    """Why kvcheck does not derive this DeepSeek V4 side's pool (None: it does)."""
    from kvcheck.sglang.pd_release import at_least

    a = side.args
    v = side.sglang_version
    if v is not None and not at_least(v, LEGACY_FIRST):
        return f"SGLang {v} has no DeepSeek V4 model (DeepseekV4ForCausalLM arrived in {LEGACY_FIRST})"
    raw = side.raw_args or {}
    algo = (a.speculative_algorithm or "").upper()
    backend = str(raw.get("dsv4_attn_backend") or "auto")
    if backend == "trtllm":
        return "--dsv4-attn-backend trtllm (uniform-FP8 pool; SGLang 0.5.23 refuses it under PD at start-up)"
    if backend == "flashmla_mega":
        return "--dsv4-attn-backend flashmla_mega (a DeepSeek-V4.1 backend; refused at start-up for V4)"
    if algo == "DSPARK":
        return "DSpark speculative decoding (draft SWA rings and request-row state)"
    if a.pp_size > 1:
        return "PP > 1 (ratio-grouped regions re-sliced per stage by _mla_slice_ptrs_for_pp)"
    if a.attn_cp_size > 1 or a.enable_prefill_cp or a.dcp_size > 1:
        return "context parallelism (prefill CP / attention CP / decode DCP)"
    if side.draft_model is not None and not (
        side.draft_model.architecture.startswith("DeepseekV4") or side.draft_model.dsv4
    ):
        return f"a {side.draft_model.architecture} draft model"
    if a.speculative_draft_kv_cache_dtype:
        return "--speculative-draft-kv-cache-dtype"
    flag = a.kv_cache_dtype
    if flag not in ("auto", "fp8_e4m3"):
        return (
            f"--kv-cache-dtype {flag} (only fp8_e4m3 builds the V4 pool on CUDA; "
            "bfloat16 trips its uint8-store assertion at start-up, other dtypes are refused)"
        )
    if (
        _env_bool(side, "SGLANG_OPT_USE_ONLINE_COMPRESS")
        and a.speculative_algorithm
        and not _env_bool(side, "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP")
    ):
        return "online C128 compression with speculative decoding (a start-up assertion)"
    layouts = ("v4", "v4") if is_legacy(side) else resolve_layouts(side)
    if isinstance(layouts, str):
        return layouts
    if a.enable_hisparse and layouts[1] != "v4":
        return "HiSparse with a V4.1 layout (HiSparseC4DevicePool asserts the V4 layout at start-up)"
    m = side.model
    if m.head_dim != 512 or (m.qk_rope_head_dim or 0) != 64:
        return f"head_dim {m.head_dim} / qk_rope_head_dim {m.qk_rope_head_dim} (the pool asserts 448 + 64)"
    return None


def dsv4_geometry(side: Side, base: dict, notes: list[str], pp_rank: int = 0):
    """The ``SideGeometry`` of one rank of a DeepSeek V4 side (see the module docstring).

    ``base``: the common ``SideGeometry`` fields ``derive_geometry`` computed (page size and
    backends are replaced here: page 256, attention backend ``dsv4``). Returns a
    ``not_modeled`` geometry with the reason when ``unmodeled_reason`` names one.
    Shapes: ``regions`` item lengths in bytes per 256-token page; state item lengths in
    bytes per SWA page (SWA KV), per SWA page of ring rows (C4 states) or per request
    (C128 state)."""
    from kvcheck.sglang.geometry import Region, SideGeometry, StateRegion, pp_stage_layers

    model = side.model
    args = side.args
    base = dict(
        base,
        page_size=DSV4_PAGE_SIZE,
        page_size_pinned=True,
        attention_backend="dsv4",
        kv_cache_dtype_str="fp8_e4m3" if args.kv_cache_dtype in ("auto", "fp8_e4m3") else args.kv_cache_dtype,
    )
    reason = unmodeled_reason(side)
    if reason is not None:
        return SideGeometry(
            **base,
            pool=NOT_MODELED,
            not_modeled_reason=reason,
            is_mla=True,
            kv_cache_dtype=args.kv_cache_dtype,
            bytes_per_element=1,
            notes=notes,
        )
    legacy = is_legacy(side)
    layouts = ("v4", "v4") if legacy else resolve_layouts(side)
    if isinstance(layouts, str):  # unmodeled_reason already said it; kept for the type
        return SideGeometry(
            **base,
            pool="not_modeled",
            not_modeled_reason=layouts,
            is_mla=True,
            kv_cache_dtype=args.kv_cache_dtype,
            bytes_per_element=1,
            notes=notes,
        )
    main, compressed = layouts
    mode = str((side.env or {}).get("SGLANG_DSV4_KV_LAYOUT", "v4")).strip().lower()
    if mode == "auto" and base.get("gpu_assumed") and not legacy:
        notes.append(
            "SGLANG_DSV4_KV_LAYOUT=auto picks the KV layout by GPU (V4.1 on SM100, V4 elsewhere); the GPU was not "
            "given, "
            f"assumed {base.get('gpu')}: layout {main}"
        )
    ratios_all = list(model.compress_ratios)
    stages = pp_stage_layers(
        model.num_hidden_layers, args.pp_size, side.env.get("SGLANG_PP_LAYER_PARTITION"), side.origin
    )
    start, end = stages[min(pp_rank, len(stages) - 1)]
    stage = list(range(start, end))
    c4 = [i for i in stage if ratios_all[i] == 4]
    c128 = [i for i in stage if ratios_all[i] == 128]
    model_ratios = set(ratios_all)
    hisparse_decode = side.role == "decode" and args.enable_hisparse
    fp4_indexer = bool((side.raw_args or {}).get("enable_deepseek_v4_fp4_indexer"))
    ihd = model.index_head_dim or 128

    regions: list[dict] = []
    if 4 in model_ratios:
        c4_page = page_bytes(compressed, DSV4_PAGE_SIZE // 4)
        regions += [
            dict(kind="DRAM" if hisparse_decode else "VRAM", item_len=c4_page, layer_id=i, part="KV", pool="target")
            for i in c4
        ]
        idx = DSV4_PAGE_SIZE // 4 * indexer_bytes_per_token(ihd, fp4_indexer)
        regions += [dict(kind="VRAM", item_len=idx, layer_id=i, part="KV", pool="target") for i in c4]
    if 128 in model_ratios:
        c128_page = page_bytes(compressed, DSV4_PAGE_SIZE // 128)
        regions += [dict(kind="VRAM", item_len=c128_page, layer_id=i, part="KV", pool="target") for i in c128]

    state_inputs: dict[str, tuple[str, str]] = {}
    if legacy:
        states, state_types = _legacy_states(side, stage, c4, c128, ratios_all, notes, state_inputs)
        draft_layers = 0
    else:
        states, state_types, draft_layers = _states(
            side, main, stage, c4, c128, last_stage=pp_rank == len(stages) - 1, notes=notes, inputs=state_inputs
        )
    if hisparse_decode:
        notes.append(
            f"HiSparse decode: the {len(c4)} C4 KV regions are the host pool (DRAM); C4 indexer and C128 regions "
            "stay VRAM"
        )
    kv_regions = f"{len(c4)} C4 + {len(c4)} C4-indexer + {len(c128)} C128 KV regions"
    if legacy:
        notes.append(
            f"DeepSeek V4 pool (SGLang {side.sglang_version}): page 256, KV layout "
            f"{pd_kv_layout(main, compressed, ratios_all)}; "
            f"{kv_regions}; one 'swa' state component ({len(states)} buffers)"
        )
    else:
        notes.append(
            f"DeepSeek V4 pool: page 256, KV layout {pd_kv_layout(main, compressed, ratios_all)}; "
            f"{kv_regions}, {len(stage)} SWA layers as the 'swa' state component"
        )
    return SideGeometry(
        **base,
        pool=DSV4,
        is_mla=True,
        kv_cache_dtype=args.kv_cache_dtype,
        bytes_per_element=1,
        regions=[Region(index=i, **r) for i, r in enumerate(regions)],
        num_draft_regions=0,
        stage_layers=stages,
        notes=notes,
        state_types=state_types,
        state_regions=[StateRegion(index=i, **r) for i, r in enumerate(states)],
        kv_layout=pd_kv_layout(main, compressed, ratios_all),
        draft_page_size=DSV4_PAGE_SIZE if draft_layers else None,
        state_inputs=state_inputs,
    )


def _states(
    side: Side,
    main: str,
    stage: list[int],
    c4: list[int],
    c128: list[int],
    *,
    last_stage: bool,
    notes: list[str],
    inputs: dict[str, tuple[str, str]] | None = None,
) -> tuple[list[dict], list[str], int]:
    """The state components of 0.5.14 and later (``setup_state_kv_args``): ``swa``
    (``get_state_buf_infos``: the SWA KV of every stage layer, then the C4 attention and C4
    indexer compress states, overlap rings of ``SGLANG_DSV4_COMPRESS_STATE_DTYPE`` rows),
    ``c128_state`` (request-scoped, when the stage has C128 layers), and the NextN draft's
    SWA KV as a second ``swa`` component (a prefill's draft only on its last PP stage:
    ``last_stage``). ``main``: the SWA KV layout. ``inputs``: filled with what the item
    lengths derive from (``SideGeometry.state_inputs``). Returns (state region dicts, state
    types, draft layers)."""
    args = side.args
    model = side.model
    ihd = model.index_head_dim or 128
    env = side.env or {}
    state_bytes = (
        2 if str(env.get("SGLANG_DSV4_COMPRESS_STATE_DTYPE", "float32")).strip().lower() in ("bfloat16", "bf16") else 4
    )
    speculative = args.speculative_algorithm is not None and args.has_draft_worker
    online_c128 = _env_bool(side, "SGLANG_OPT_USE_ONLINE_COMPRESS")
    from kvcheck.sglang.geometry import side_gpu

    gpu, _ = side_gpu(side)
    if gpu.capability[0] == 12 and _env_bool(side, "SGLANG_OPT_SM120_DIRECT_SWA_KV"):
        swa_item = page_bytes(main, 64) * (DSV4_PAGE_SIZE // 64)
    else:
        swa_item = page_bytes(main, DSV4_PAGE_SIZE)
    ring4 = 16 if speculative else 8
    latent = model.head_dim or 512
    if inputs is not None:
        inputs["--speculative-algorithm"] = _speculative_input(side, needs_draft_worker=True)
        inputs["SGLANG_OPT_USE_ONLINE_COMPRESS"] = _env_input(side, "SGLANG_OPT_USE_ONLINE_COMPRESS")
        raw_dtype = env.get("SGLANG_DSV4_COMPRESS_STATE_DTYPE")
        inputs["SGLANG_DSV4_COMPRESS_STATE_DTYPE"] = (
            f"{state_bytes} bytes",
            f"SGLANG_DSV4_COMPRESS_STATE_DTYPE={raw_dtype}"
            if raw_dtype is not None
            else "SGLANG_DSV4_COMPRESS_STATE_DTYPE unset",
        )
        direct = _env_input(side, "SGLANG_OPT_SM120_DIRECT_SWA_KV")
        inputs["SGLANG_OPT_SM120_DIRECT_SWA_KV"] = (
            direct[0] if gpu.capability[0] == 12 else "off",
            direct[1] + ("" if gpu.capability[0] == 12 else f" (not read on {gpu.name})"),
        )
        inputs["the SWA KV layout"] = (main, f"SWA KV layout {main}")
        shape = f"the model's head_dim {latent}, index_head_dim {ihd}"
        inputs["the model's head dims"] = (shape, shape)
    states: list[dict] = []
    comp = 0
    states += [dict(state_type="swa", component=comp, item_len=swa_item, layer_id=i, part="KV") for i in stage]
    # C4 attention compress state: overlap ring, last dim 2 * 2 * head_dim.
    states += [
        dict(state_type="swa", component=comp, item_len=4 * latent * state_bytes * ring4, layer_id=i, part="KV")
        for i in c4
    ]
    states += [
        dict(state_type="swa", component=comp, item_len=4 * ihd * state_bytes * ring4, layer_id=i, part="KV")
        for i in c4
    ]
    state_types = ["swa"]
    if c128:
        comp += 1
        # Request-scoped C128 state: one page of 128 rows of 2 * head_dim, or one online row of 3 * head_dim.
        item = 3 * latent * state_bytes if online_c128 else 2 * latent * state_bytes * 128
        states += [dict(state_type="c128_state", component=comp, item_len=item, layer_id=i, part="KV") for i in c128]
        state_types.append("c128_state")
    # The NextN draft pool (compress ratio 0 on every layer): no KV region, its SWA KV
    # as a second "swa" component; a prefill's draft only on its last PP stage.
    draft_layers = 0
    if args.has_draft_worker and (side.role == "decode" or last_stage):
        # ModelConfig(is_draft_model=True): DeepseekV4ForCausalLMNextN with num_nextn_predict_layers layers.
        draft_src = side.draft_model if side.draft_model is not None else model
        draft_layers = max(1, draft_src.num_nextn_predict_layers)
        comp += 1
        first = model.num_hidden_layers
        states += [
            dict(state_type="swa", component=comp, item_len=swa_item, layer_id=first + j, part="KV")
            for j in range(draft_layers)
        ]
        state_types.append("swa")
        notes.append(
            f"DeepSeek V4 NextN draft: {draft_layers} SWA-only layer(s), no KV region; its SWA KV is a second 'swa' "
            "state component"
        )
    return states, state_types, draft_layers


def _legacy_states(
    side: Side,
    stage: list[int],
    c4: list[int],
    c128: list[int],
    ratios: list[int],
    notes: list[str],
    inputs: dict[str, tuple[str, str]] | None = None,
) -> tuple[list[dict], list[str]]:
    """The one ``swa`` state component of 0.5.12 .. 0.5.13.post1
    (``DeepSeekV4TokenToKVPool.get_state_buf_infos``): the SWA KV of every stage layer
    (one 256-token page), the compress state of every nonzero-ratio stage layer in layer
    order, then the C4 indexer compress states; compress items are ``ring_size`` fp32 rows
    (``get_compress_state_ring_size`` with ``is_speculative`` = any
    ``--speculative-algorithm``; online C128 (``SGLANG_OPT_USE_ONLINE_COMPRESS``): one row
    of 3 x head_dim). ``inputs``: filled with what the item lengths derive from
    (``SideGeometry.state_inputs``). Returns (state region dicts, state types)."""
    args = side.args
    latent = side.model.head_dim or 512
    ihd = side.model.index_head_dim or 128
    fp32 = 4
    speculative = args.speculative_algorithm is not None
    online_c128 = _env_bool(side, "SGLANG_OPT_USE_ONLINE_COMPRESS")
    if inputs is not None:
        # what get_compress_state_ring_size and CompressStatePool size the items from
        inputs["--speculative-algorithm"] = _speculative_input(side, needs_draft_worker=False)
        inputs["SGLANG_OPT_USE_ONLINE_COMPRESS"] = _env_input(side, "SGLANG_OPT_USE_ONLINE_COMPRESS")
        shape = f"the model's head_dim {latent}, index_head_dim {ihd}"
        inputs["the model's head dims"] = (shape, shape)

    def ring(ratio: int) -> int:
        if ratio == 128 and online_c128:
            return 1
        return (16 if ratio == 4 else 256) if speculative else (8 if ratio == 4 else 128)

    swa_item = page_bytes("v4", DSV4_PAGE_SIZE)
    states = [dict(state_type="swa", component=None, item_len=swa_item, layer_id=i, part="KV") for i in stage]
    for i in stage:
        r = ratios[i]
        if r == 0:
            continue
        last = 3 * latent if (r == 128 and online_c128) else 2 * (1 + (r == 4)) * latent
        states.append(dict(state_type="swa", component=None, item_len=last * fp32 * ring(r), layer_id=i, part="KV"))
    states += [
        dict(state_type="swa", component=None, item_len=4 * ihd * fp32 * ring(4), layer_id=i, part="KV") for i in c4
    ]
    if args.has_draft_worker:
        notes.append(
            f"DeepSeek V4 NextN draft (SGLang {side.sglang_version}): its pool registers no KV region and no state "
            "(setup_state_kv_args appends a draft's states for DSA pools only)"
        )
    env = side.env or {}
    ignored = [
        k
        for k in ("SGLANG_DSV4_KV_LAYOUT", "SGLANG_DSV4_COMPRESSED_KV_LAYOUT", "SGLANG_DSV4_COMPRESS_STATE_DTYPE")
        if k in env
    ]
    if ignored:
        notes.append(f"SGLang {side.sglang_version} does not read {', '.join(ignored)}: the V4 layout and fp32 states")
    return states, ["swa"]
