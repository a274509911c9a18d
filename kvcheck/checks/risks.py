"""Checks for what the runtime does not catch (silent risks) and for inputs kvcheck
cannot model. None of these predicts a runtime exception."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.pools import DSA, NOT_MODELED


@check(
    "disaggregation-mode",
    Severity.ERROR,
    "Each side runs in its PD role",
    what="The prefill side lacks --disaggregation-mode prefill, or the decode side lacks --disaggregation-mode decode.",
    why="A server without its PD role never starts the bootstrap server (prefill) or never contacts one (decode).",
    fix="Set --disaggregation-mode prefill on the prefill and --disaggregation-mode decode on the decode.",
)
def disaggregation_mode(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in (ctx.prefill, ctx.decode):
        mode = side.args.disaggregation_mode
        if mode != side.role:
            out.append(
                chk.finding(
                    f"the {side.role} side has --disaggregation-mode {mode} ({side.origin}); expected {side.role}"
                )
            )
    return out


@check(
    "not-modeled",
    Severity.UNCHECKED,
    "kvcheck models this side's KV pool",
    what=(
        "A KV pool or pool variant kvcheck does not model yet: DeepSeek V4 NextN/DSpark layers served as a target "
        "model, "
        "DeepSeek V4 ratio-1/2 compressed layers and V4.1's kv_source pools, DSA with compressed index-K pooling, "
        "FP4 KV variants, hybrid layer_types kvcheck has not verified, and architectures SGLang does not serve "
        "(kvcheck/sglang/model_archs.py NOT_MODELED_ARCHITECTURES). SWA, Mamba/linear-attention hybrids, DeepSeek V4 "
        "and "
        "MiniMax sparse pools are modeled (kvcheck/sglang/pools/, geometry.py, states.py, dsv4.py)."
    ),
    why="kvcheck never guesses a geometry: no plan is computed for such a pair.",
    fix="Check this pair on a staging deployment, or pass --allow-unchecked to accept it knowingly.",
)
def not_modeled(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in (ctx.prefill, ctx.decode):
        g = ctx.prefill_geometry if side.role == "prefill" else ctx.decode_geometry
        if side.model.attention == "not_modeled":
            out.append(
                chk.finding(
                    f"{side.role}: {side.model.architecture} uses a {side.model.not_modeled_reason}, which kvcheck "
                    "does not model yet; no transfer plan was computed"
                )
            )
        elif g is not None and g.pool == NOT_MODELED:
            out.append(
                chk.finding(
                    f"{side.role}: {side.model.architecture} with {g.not_modeled_reason} is a KV pool kvcheck does "
                    "not model yet; no transfer plan was computed"
                )
            )
    return out


@check(
    "architecture-assumed",
    Severity.UNCHECKED,
    "kvcheck knows this architecture's KV pool",
    what="A model architecture kvcheck has not verified against SGLang's pools. kvcheck never guesses a geometry: "
    "the pair is unchecked (its regions are shown as if it were a plain MHA/GQA model, K and V regions per "
    "layer).",
    why="An architecture with sliding-window, linear-attention or other hybrid layers registers other regions; a "
    "plain-MHA guess could pass a pair the runtime breaks.",
    fix="Confirm the model uses plain full attention in every layer, then pass --allow-unchecked (or --ignore "
    "architecture-assumed).",
)
def architecture_assumed(chk, ctx: CheckContext) -> list[Finding]:
    out, seen = [], set()
    for side in (ctx.prefill, ctx.decode):
        m = side.model
        if m.attention == "MHA" and m.assumed_mha and m.architecture not in seen:
            seen.add(m.architecture)
            out.append(
                chk.finding(
                    f"{m.architecture} is not an architecture kvcheck has verified; kvcheck does not guess its KV "
                    f"pool, so the pair is unchecked (shown as plain MHA/GQA: {m.num_key_value_heads} KV "
                    f"heads x {m.head_dim}, K and V per layer)"
                )
            )
    return out


@check(
    "page-size-unpinned",
    Severity.WARNING,
    "The page size is pinned on both sides",
    what="--page-size left unset on a side.",
    why="The attention backend and GPU choose it at start-up (flashmla 64, trtllm_mla 32/64, ...): two GPU types can "
    "disagree, and the decode then refuses the prefill.",
    fix="Pin --page-size to the same value on both servers.",
)
def page_size_unpinned(chk, ctx: CheckContext) -> list[Finding]:
    """A side whose page size is left to the attention backend, while some side's GPU was
    not given: the page size each server resolves then rests on an assumed GPU. With both
    GPUs given, the resolved page sizes are compared by ``page-size-mismatch`` instead."""
    pg, dg = ctx.prefill_geometry, ctx.decode_geometry
    if pg is None or dg is None:
        return []
    given = {
        side.role: not str(getattr(side, "gpu_source", "") or "default").startswith(("default", "assumed"))
        for side in (ctx.prefill, ctx.decode)
    }
    if all(given.values()):
        return []
    out = []
    for side, g in ((ctx.prefill, pg), (ctx.decode, dg)):
        if g.page_size_pinned:
            continue
        gpu = g.gpu if given[side.role] else f"{g.gpu} (assumed: no GPU given)"
        out.append(
            chk.finding(
                f"{side.role}: --page-size is not set: it resolves to {g.page_size} with attention backend "
                f"{g.attention_backend or 'default'} on {gpu}; on another GPU the backend, and so the page size, can "
                "differ"
            )
        )
    return out


@check(
    "hetero-tp-performance",
    Severity.WARNING,
    "Equal attention TP for non-MLA models",
    what="Different attention TP sizes on a non-MLA (MHA/GQA) model.",
    why="The runtime only logs 'Performance is NOT guaranteed when using different TP sizes for non-MLA models.' and "
    "moves KV by head slices.",
    fix="Use the same attention TP size on both sides for the fast path.",
)
def hetero_tp_performance(chk, ctx: CheckContext) -> list[Finding]:
    pg, dg = ctx.prefill_geometry, ctx.decode_geometry
    if pg is None or dg is None or pg.is_mla or pg.attn_tp_size == dg.attn_tp_size:
        return []
    return [
        chk.finding(
            f"attention TP differs: prefill attn_tp_size={pg.attn_tp_size}, decode attn_tp_size={dg.attn_tp_size}; "
            "the runtime uses the head-slice path"
        )
    ]


@check(
    "item-length-larger",
    Severity.ERROR,
    "Destination item lengths equal the source's",
    what=(
        "A decode region whose per-page item length is larger than the prefill region written into it (any PP "
        "stage); on "
        "SGLang 0.5.5 .. 0.5.12.post1, which check no item length, a shorter one too."
    ),
    why=(
        "The runtime accepts it silently (only a shorter destination raises) and writes prefill-sized items at the "
        "decode's "
        "stride: the decode reads a layout it did not write. Nothing raises; the output is garbage."
    ),
    fix="Make both sides derive the same item length: same model, --kv-cache-dtype, --dtype and page size.",
)
def item_length_larger(chk, ctx: CheckContext) -> list[Finding]:
    stages = ctx.extra.get("pp_stages") or []
    if not stages:
        return []
    b_p = (ctx.extra.get("pd_behaviour") or (None, None))[0]
    per_request = b_p is not None and b_p.per_request_decision
    for st in stages:
        if st.get("error") or st.get("path") in ("hetero_tp_slice", "dcp_relayout", None) or "_geometry" not in st:
            continue
        pg, dg = st["_geometry"]
        for i, j in enumerate(st.get("dst_indices") or []):
            src, dst = pg.regions[i].item_len, dg.regions[j].item_len
            if dst < src and per_request and b_p is not None:
                # send_kvcache (0.5.5 .. 0.5.12.post1) strides both sides by the prefill's item
                # length and checks nothing: page p lands at p x src bytes, where the decode
                # reads pages p x src / dst on; the last pages run past the region (NIXL error).
                where = f"prefill PP stage {st['pp_rank']}: " if len(stages) > 1 else ""
                cause, fix = _item_cause(ctx)
                return [
                    chk.finding(
                        f"{where}decode region {j} has item length {dst} bytes per page, shorter than the {src}-byte "
                        f"items of prefill region {i} "
                        f"that SGLang {b_p.version} writes into it at the prefill's stride without any check (0.5.15 "
                        "added one): the decode reads "
                        "overlapping, misplaced pages (silent corruption), and requests whose pages reach the "
                        f"region's end fail in NIXL{cause}",
                        fix=fix,
                    )
                ]
            if dst > src:
                where = f"prefill PP stage {st['pp_rank']}: " if len(stages) > 1 else ""
                cause, fix = _item_cause(ctx)
                return [
                    chk.finding(
                        f"{where}decode region {j} has item length {dst} bytes per page, the prefill region {i} "
                        f"written into it {src} bytes{cause}",
                        fix=fix,
                    )
                ]
    return []


def _item_cause(ctx: CheckContext) -> tuple[str, str | None]:
    """Name the cause of differing item lengths when kvcheck can tell it."""
    from kvcheck.sglang.geometry import dsa_fp8_layout

    p, d = ctx.prefill, ctx.decode
    pg = ctx.prefill_geometry
    if pg is not None and pg.pool == DSA and "fp8" in (p.args.kv_cache_dtype + d.args.kv_cache_dtype):
        pl, dl = dsa_fp8_layout(p)[0], dsa_fp8_layout(d)[0]
        if pl != dl:
            pb = (p.raw_args or {}).get("dsa_prefill_backend") or "unset (GPU default)"
            db = (d.raw_args or {}).get("dsa_decode_backend") or "unset (GPU default)"
            return (
                f" (DSA fp8 rows differ by role backend: the prefill's --dsa-prefill-backend {pb} stores {pl} rows, "
                f"the decode's --dsa-decode-backend {db} stores {dl} rows)",
                "Pick DSA backends that store the same fp8 row layout on both roles (trtllm stores 576-byte raw "
                "rows, flashmla_* 656-byte scaled rows), or use --kv-cache-dtype bf16.",
            )
    if p.args.kv_cache_dtype == d.args.kv_cache_dtype == "auto":
        pd = p.args.dtype if p.args.dtype != "auto" else p.model.torch_dtype
        dd = d.args.dtype if d.args.dtype != "auto" else d.model.torch_dtype
        if pd != dd:
            return (
                f" (--kv-cache-dtype auto on both sides, but --dtype resolves to {pd} on the prefill and {dd} on the "
                "decode)",
                "Set the same --dtype on both sides, or pin the same --kv-cache-dtype on both.",
            )
    return "", None


@check(
    "dtype-under-auto",
    Severity.ERROR,
    "The KV element type agrees when --kv-cache-dtype is auto",
    what="Both sides say --kv-cache-dtype auto (so the bootstrap check passes) but resolve to different element "
    "types (--dtype differs).",
    why="The runtime compares only the flag strings; the bytes written differ in size or meaning. When the sizes "
    "agree (bfloat16 vs float16) nothing raises and the decode reads garbage.",
    fix="Set the same --dtype on both sides, or pin --kv-cache-dtype explicitly on both.",
)
def dtype_under_auto(chk, ctx: CheckContext) -> list[Finding]:
    p, d = ctx.prefill.args, ctx.decode.args
    if p.kv_cache_dtype != "auto" or d.kv_cache_dtype != "auto":
        return []
    if ctx.prefill.model.kv_cache_quant_algo or ctx.decode.model.kv_cache_quant_algo:
        return []  # the checkpoint's FP8 KV quantization decides, not --dtype
    pd = p.dtype if p.dtype != "auto" else ctx.prefill.model.torch_dtype
    dd = d.dtype if d.dtype != "auto" else ctx.decode.model.torch_dtype
    if pd == dd or {pd, dd} <= {"bfloat16", "bf16"} or {pd, dd} <= {"float16", "half", "fp16"}:
        return []
    return [
        chk.finding(
            "--kv-cache-dtype is auto on both sides but the KV element type differs: prefill --dtype resolves to "
            f"{pd}, decode to {dd}; the same string 'auto' passes the decode's dtype check while the bytes "
            "differ"
        )
    ]


@check(
    "fp4-block-scales",
    Severity.ERROR,
    "FP4 KV block scales reach the decode",
    what=(
        "Both sides store the KV cache in FP4 (--kv-cache-dtype nvfp4 or fp4_mx_block16). SGLang 0.5.23 registers "
        "only the "
        "packed FP4 data with NIXL (get_contiguous_buf_infos of MHATokenToKVPool with an FP4 quant method, of "
        "MLATokenToKVPoolFP4); the block-scale buffers beside it (k_scale_buffer/v_scale_buffer, MLA "
        "kv_scale_buffer: one "
        "scale per 16 values) are neither KV regions nor a state component (setup_state_kv_args adds block scales "
        "only for "
        "MHATokenToKVPoolMXFP8)."
    ),
    why=(
        "The prefill sends the packed data; the decode's scales for those tokens are never written (zeros, or stale "
        "scales "
        "of an earlier request in the same slots), so attention dequantizes the prompt's KV with the wrong scales. "
        "Nothing "
        "raises; the output is garbage."
    ),
    fix="Use --kv-cache-dtype fp8_e4m3 (or mxfp8 / bf16) on both servers for PD disaggregation: FP4 KV is not "
    "transferable in SGLang 0.5.23.",
)
def fp4_block_scales(chk, ctx: CheckContext) -> list[Finding]:
    from kvcheck.sglang.geometry import FP4_KV_DTYPES

    pg, dg = ctx.prefill_geometry, ctx.decode_geometry
    if pg is None or dg is None or pg.pool == NOT_MODELED or dg.pool == NOT_MODELED:
        return []
    if not (pg.unregistered_scale_buffers and dg.unregistered_scale_buffers):
        return []
    if pg.kv_cache_dtype_str not in FP4_KV_DTYPES or pg.kv_cache_dtype_str != dg.kv_cache_dtype_str:
        return []  # a target that is not FP4 (a draft-only FP4 pool), or the decode's dtype check refuses first
    return [
        chk.finding(
            f"--kv-cache-dtype {pg.kv_cache_dtype_str} on both sides: the prefill registers {pg.n} packed FP4 KV "
            "regions but none of "
            f"its {pg.unregistered_scale_buffers} block-scale buffers (the decode: {dg.unregistered_scale_buffers}); "
            "the decode "
            "attends over the transferred prompt with block scales nobody wrote (silent corruption)"
        )
    ]


def _model_paths_differ(a: str | None, b: str | None) -> bool:
    """Whether two --model-path values name different models (trailing slashes and a
    ``hf:`` prefix ignored)."""
    norm = lambda p: (p or "").strip().removeprefix("hf:").rstrip("/")  # noqa: E731
    return bool(a and b) and norm(a) != norm(b)


@check(
    "same-model",
    Severity.WARNING,
    "Both sides serve the same model",
    what="Different model architecture or layer count (error), or a different --revision (warning), on the two sides.",
    why="The runtime never compares models: it pairs KV regions by position, so a different checkpoint moves KV of "
    "the wrong shape or meaning, silently when the decode has at least as many regions.",
    fix="Point both sides at the same model and revision.",
)
def same_model(chk, ctx: CheckContext) -> list[Finding]:
    pm, dm = ctx.prefill.model, ctx.decode.model
    out = []
    if (pm.architecture, pm.num_hidden_layers) != (dm.architecture, dm.num_hidden_layers):
        # The runtime pairs regions by position and never compares models: the decode
        # would attend over another model's KV (garbage output), or the prefill refuses
        # the registration when the decode has fewer regions.
        out.append(
            chk.finding(
                f"models differ: prefill {pm.architecture} with {pm.num_hidden_layers} layers, decode "
                f"{dm.architecture} with {dm.num_hidden_layers} layers",
                severity=Severity.ERROR,
            )
        )
    elif (
        _model_paths_differ(ctx.prefill.args.model_path, ctx.decode.args.model_path)
        and pm.source
        and pm.source == dm.source
    ):
        # One config file given for both sides (--model-config) cannot tell two models apart.
        out.append(
            chk.finding(
                f"--model-path differs (prefill {ctx.prefill.args.model_path}, decode {ctx.decode.args.model_path}) "
                f"but both sides' config.json came from {pm.source}: "
                "kvcheck cannot tell whether they are the same model",
                severity=Severity.UNCHECKED,
                fix="Point both sides at the same --model-path, or give each side its own config "
                "(--prefill-model-config/--decode-model-config, or model directories).",
            )
        )
    pr, dr = ctx.prefill.args.revision, ctx.decode.args.revision
    if pr != dr:
        out.append(chk.finding(f"model revisions differ: prefill --revision {pr}, decode --revision {dr}"))
    return out


@check(
    "speculative-layout",
    Severity.INFO,
    "Where the speculative draft runs",
    what="A speculative draft worker on one side only.",
    why="Decode-only drafting is common and works with VRAM destinations (the prefill pairs its regions with the "
    "first ones of the decode); prefill-only drafting fails.",
    fix="Nothing to do when the transfer decision passes.",
)
def speculative_layout(chk, ctx: CheckContext) -> list[Finding]:
    p, d = ctx.prefill.args.has_draft_worker, ctx.decode.args.has_draft_worker
    if p == d:
        return []
    where = "decode" if d else "prefill"
    g = ctx.decode_geometry if d else ctx.prefill_geometry
    n = g.num_draft_regions if g else 0
    return [
        chk.finding(
            f"only the {where} runs a speculative draft worker ({n} draft KV region(s) appended after the target's)"
        )
    ]


@check(
    "hicache-no-effect",
    Severity.INFO,
    "HiCache does not change what NIXL moves",
    what="--enable-hierarchical-cache on one or both sides.",
    why="HiCache keeps a host copy for the radix cache; the regions and kinds NIXL registers stay the device pool's "
    "(VRAM). A public error page suggesting to align HiCache to fix 'no KV memory segments' is wrong for "
    "0.5.23.",
    fix="Nothing to do for the transfer.",
)
def hicache_no_effect(chk, ctx: CheckContext) -> list[Finding]:
    sides = [s.role for s in (ctx.prefill, ctx.decode) if s.args.enable_hierarchical_cache]
    if not sides:
        return []
    return [
        chk.finding(
            f"HiCache is on for: {', '.join(sides)}; NIXL still registers and moves the device (VRAM) KV regions"
        )
    ]


@check(
    "state-components",
    Severity.UNCHECKED,
    "The state components both sides register are decided",
    what=(
        "A hybrid pool (sliding-window, Mamba/linear attention) or a block-scaled (MXFP8) KV cache registers state "
        "components "
        "(state_types) besides its KV regions, and kvcheck does not decide their transfer: a side runs a release "
        "other than "
        "0.5.22/0.5.23, the two sides register different component lists, or a component is left undecided (a PP stage "
        "without Mamba layers posting an empty transfer, Mamba sizes that do not scale with TP, unknown KV head count)."
    ),
    why="The runtime sends SWA windows, Mamba states and block scales with their own item lengths and TP slicing; a "
    "mismatch there fails or corrupts the first request even when the KV regions agree.",
    fix="Check this pair on a staging deployment, or pass --allow-unchecked to accept it knowingly.",
)
def state_components(chk, ctx: CheckContext) -> list[Finding]:
    if ctx.extra.get("states_decided"):
        return []
    out = []
    decisions = ctx.extra.get("state_decisions")
    if (
        decisions is not None
        and ctx.prefill_geometry is not None
        and ctx.decode_geometry is not None
        and ctx.prefill_geometry.state_types == ctx.decode_geometry.state_types
    ):
        # SGLang 0.5.23: decided per component; only the undecided ones stay unchecked.
        for d in decisions:
            if d.unchecked:
                out.append(
                    chk.finding(f"state component {d.index} ({d.state_type}, {d.n_entries} entries): {d.unchecked}")
                )
        return out
    # No decision made: the components the state decision covers stay unchecked
    # (``DECIDED_STATE_TYPES``), but "dsa" (index-K per layer, paired with the KV regions
    # layer by layer), which is decided with the KV regions.
    from kvcheck.sglang.states_base import DECIDED_STATE_TYPES

    for g in (ctx.prefill_geometry, ctx.decode_geometry):
        if g is None or g.pool == NOT_MODELED:
            continue
        todo_idx = [i for i, t in enumerate(g.state_types) if t in DECIDED_STATE_TYPES and t != "dsa"]
        todo = [g.state_types[i] for i in todo_idx]
        if todo:
            # By component index: a type can occur twice (DeepSeek V4's target and draft "swa").
            comp = g.state_item_lens_by_type
            lens = "; ".join(
                f"{g.state_types[i]}: {len(comp[i])} items of {sorted(set(comp[i]))} bytes" for i in todo_idx
            )
            out.append(
                chk.finding(
                    f"{g.role}: {g.pool} pool registers {g.n} KV regions and state components {todo} ({lens}); "
                    "kvcheck does not decide their transfer yet"
                )
            )
    return out


@check(
    "state-transfer",
    Severity.ERROR,
    "The state components transfer as the runtime sends them",
    what=(
        "SGLang 0.5.23's NixlKVManager.maybe_send_extra (and the prepared state plan of _prepare_state_xfer) refuses "
        "or "
        "corrupts a state component: SWA head slicing with a non-NHD layout or PP>1, MXFP8 block scales or MiniMax "
        "state "
        "with unequal attention TP, item lengths that differ between the sides (prepared path: the peer is rejected; "
        "generic "
        "path and Mamba slices: the decode's slots are overwritten with the prefill's layout)."
    ),
    why=(
        "The prefill's transfer worker raises on the request's last chunk: it logs 'Unexpected transfer worker error "
        "for room N' "
        "and fails the request, every request. A silent layout mismatch raises nothing and the decode continues from "
        "garbage state."
    ),
    fix="See the finding.",
)
def state_transfer(chk, ctx: CheckContext) -> list[Finding]:
    from kvcheck.sglang.states import fix_for

    out = []
    decisions = ctx.extra.get("state_decisions")
    if decisions is None and ctx.prefill_geometry is not None and ctx.decode_geometry is not None:
        # Releases before 0.5.22 (state transfer otherwise not restated): their refusals
        # of unequal attention TP for SWA / Mamba state (states.legacy_hetero_tp_refusals).
        from kvcheck.sglang.releases import side_release
        from kvcheck.sglang.states import legacy_hetero_tp_refusals

        decisions = legacy_hetero_tp_refusals(ctx.prefill_geometry, ctx.decode_geometry, side_release(ctx.prefill)[0])
    for d in decisions or []:
        if d.error is not None:
            out.append(
                chk.finding(
                    f"state component {d.index} ({d.state_type}, {d.n_entries} entries): the prefill's transfer "
                    f"worker raises {d.error.type}: {d.error.message}",
                    fix=fix_for(d),
                    runtime_error=d.error.model_copy(),
                )
            )
        elif d.corruption:
            out.append(
                chk.finding(
                    f"state component {d.index} ({d.state_type}): silent corruption: {d.corruption}", fix=fix_for(d)
                )
            )
    return out
