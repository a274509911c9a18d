"""Checks that predict the runtime's own refusals: bootstrap checks and the prefill's
decision when the decode registers. Their messages name both values; their
``runtime_error`` carries the exact exception the runtime raises."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.plan import DECODE_FIRST_REQUEST, GUARD_ASSERT, RuntimeErrorPrediction

# Bootstrap failures, by the start of the runtime's message -> check id.
_BOOTSTRAP_IDS = (
    ("Page size mismatch", "page-size-mismatch"),
    ("KV cache dtype mismatch", "kv-cache-dtype-mismatch"),
    ("MiniMax sparse PD requires matching attention TP", "minimax-attn-tp"),
    ("KV layout mismatch", "kv-layout-mismatch"),
    ("DeepSeek-V4.1 DSpark PD layout mismatch", "dsv41-layout-mismatch"),
    ("DeepSeek-V4.1 DSpark PD requires the same TP", "dsv41-attn-tp"),
    ("PD Disaggregation does NOT support different attention TP sizes with MXFP8", "mxfp8-attn-tp"),
    ("PD decode DCP", "decode-dcp"),
    ("MLA KV cache sharding", "kv-cache-sharding-tp"),
    ("('Decode cp size", "decode-cp-size"),
    ("('Decode pp size", "pp-size-mismatch"),
)


def bootstrap_id(message: str) -> str:
    """The finding id of a decode bootstrap failure, from the runtime's message."""
    return _classify(message, _BOOTSTRAP_IDS)[0]


_BOOTSTRAP_FIX = {
    "page-size-mismatch": "Set the same --page-size on both servers (pin it: left unset, the attention backend and "
    "GPU choose it).",
    "kv-cache-dtype-mismatch": "Write the same --kv-cache-dtype string on both servers: the runtime compares the "
    "flag strings, so 'auto' vs 'bf16' and 'bf16' vs 'bfloat16' both fail.",
    "decode-dcp": "Run the decode with --dcp-size 1, or use an MLA model with a prefill at attention CP 1 and "
    "without --enable-kv-cache-sharding.",
    "kv-cache-sharding-tp": "Use the same attention TP size on both servers, or drop --enable-kv-cache-sharding on "
    "the prefill.",
    "decode-cp-size": "Run the decode with --attn-cp-size 1: the decode cannot use attention context parallelism in "
    "PD.",
    "pp-size-mismatch": "Give the decode the prefill's --pp-size, or --pp-size 1.",
    "minimax-attn-tp": "Run both servers at the same attention TP size: MiniMax sparse KV pages and its index state "
    "cannot be resliced by head.",
    "kv-layout-mismatch": "Use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT on both servers.",
    "dsv41-layout-mismatch": "Enable DSpark on both servers with the same block size and target/draft KV layout "
    "(same release on both).",
    "dsv41-attn-tp": "Use the same TP size on both servers (for MLA, a decode TP equal to the prefill's TP x CP is "
    "also accepted from 0.5.22).",
    "mxfp8-attn-tp": "Use the same attention TP size on both servers, or a KV dtype without block scales (not "
    "mxfp8/nvfp4).",
}

_DECISION_IDS = (
    (
        "NIXL PD transfer: decode registered fewer KV regions",
        "region-count",
        "Run the speculative draft (and its KV regions) on the decode too, or on neither side: the decode must "
        "register at least as many KV regions as the prefill.",
    ),
    (
        "NIXL PD transfer does not support HiSparse combined with decode-only",
        "hisparse-decode-only-spec",
        "Drop speculative decoding on the decode, run the same draft on the prefill too, or drop --enable-hisparse "
        "on the decode.",
    ),
    (
        "NIXL heterogeneous-TP direct-to-host",
        "hetero-tp-direct-to-host",
        "Use the same attention TP size on both sides when the decode runs --enable-hisparse (host-memory KV).",
    ),
    (
        "NIXL destination mixed KV memory kinds",
        "hetero-tp-mixed-kinds",
        "Use the same attention TP size on both sides when the decode registers mixed memory kinds.",
    ),
    (
        "NIXL PD DCP destination mixed KV memory kinds",
        "dcp-mixed-kinds",
        "Run the decode with --dcp-size 1, or without --enable-hisparse.",
    ),
    (
        "NIXL prepared dlist transfer length exceeds item stride",
        "item-stride",
        "Make both sides derive the same per-page item length: same model, --kv-cache-dtype, --dtype, page size and "
        "attention TP.",
    ),
    (
        "PP-heterogeneous",
        "pp-layer-pairing",
        "Give both sides the same PP layout: the same --pp-size and the same SGLANG_PP_LAYER_PARTITION (this pool "
        "registers no layer ids, so the runtime pairs a PP prefill stage's regions with the decode's only "
        "when both hold the same layers).",
    ),
    (
        "Unsupported PD DCP topology",
        "dcp-topology",
        "Run the decode with --dcp-size 1 for this model: DCP relayout needs an MLA (or hybrid-MLA) KV pool on the "
        "prefill.",
    ),
    (
        "PD DCP source/destination KV geometry differs",
        "dcp-geometry",
        "Make both sides derive the same KV geometry (same model, --kv-cache-dtype, page size) or run the decode "
        "with --dcp-size 1.",
    ),
    ("NIXL source mixed KV memory kinds", "source-mixed-kinds", "The prefill must register one memory kind."),
    (
        "NIXL_ERR_NOT_FOUND",
        "head-slice-overrun",
        "Run SGLang 0.5.17 or newer on the prefill (its head-slice list counts replicated KV heads once), or give "
        "the decode an attention TP size no larger than the model's KV heads, or the prefill's attention TP "
        "size.",
    ),
)


def _classify(message: str, table, type_: str | None = None) -> tuple[str, str]:
    if type_ == "AssertionError" and message == "":
        return "head-slice-assert", (
            "Use attention TP sizes whose head slices tile both sides' KV pages: with the model's KV heads replicated "
            "(fewer KV heads than the TP size), run the decode at the prefill's attention TP size."
        )
    for row in table:
        if message.startswith(row[0]):
            return row[1], (row[2] if len(row) > 2 else _BOOTSTRAP_FIX.get(row[1], ""))
    return "runtime-error", "See the runtime error."


@check(
    "transfer-backend",
    Severity.ERROR,
    "Both sides use the NIXL transfer backend",
    what="--disaggregation-transfer-backend differs between prefill and decode, or is not nixl.",
    why="The default backend is mooncake. A mooncake decode gets past the bootstrap checks, then its first ZMQ "
    "message kills the NIXL prefill's bootstrap thread; requests hang until "
    "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT / SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by default).",
    fix="Set --disaggregation-transfer-backend nixl on both servers.",
)
def transfer_backend(chk, ctx: CheckContext) -> list[Finding]:
    p = ctx.prefill.args.disaggregation_transfer_backend
    d = ctx.decode.args.disaggregation_transfer_backend
    if p == d == "nixl":
        return []
    if p == d:
        return [
            chk.finding(
                f"both sides use --disaggregation-transfer-backend {p}; kvcheck models the NIXL connector only",
                severity=Severity.WARNING,
                fix="Set --disaggregation-transfer-backend nixl on both servers to use NIXL.",
            )
        ]
    return [
        chk.finding(
            backend_mismatch_message(p, d)
            + (" (the default)" if "disaggregation_transfer_backend" not in ctx.decode.raw_args else ""),
            runtime_error=backend_mismatch_error(p, d, _hang(ctx)),
        )
    ]


def backend_mismatch_message(prefill_backend: str, decode_backend: str) -> str:
    """The ``transfer-backend`` finding's message for two different backends."""
    return (
        f"transfer backends differ: prefill --disaggregation-transfer-backend={prefill_backend}, decode "
        f"--disaggregation-transfer-backend={decode_backend}"
    )


def backend_mismatch_error(
    prefill_backend: str, decode_backend: str, operator_sees: str
) -> RuntimeErrorPrediction | None:
    """What the runtime raises when the two sides' transfer backends differ: with NIXL on
    the prefill, the decode's first ZMQ message fails the ``GUARD`` assert of
    ``NixlKVManager._bootstrap_thread`` (SGLang 0.5.23 ``disaggregation/nixl/conn.py``)
    and the bootstrap thread dies; ``operator_sees`` is the hang text of the side's
    timeouts. ``None`` when the prefill is not NIXL (kvcheck does not model the other
    connectors' threads) or the backends agree."""
    if prefill_backend != "nixl" or decode_backend == prefill_backend:
        return None
    return RuntimeErrorPrediction(
        type="AssertionError",
        message=GUARD_ASSERT,
        raised_by="prefill: NIXL bootstrap thread (first ZMQ message from the decode)",
        when="first request",
        operator_sees=operator_sees,
    )


@check(
    "bootstrap",
    Severity.ERROR,
    "The decode's checks on the prefill bootstrap server's /route reply",
    what="Page size, --kv-cache-dtype string, decode attention CP, DCP and PP sizes the decode compares on its first "
    "request.",
    why="The decode raises in its scheduler on the first request routed to that prefill.",
    fix="Align the named flag on both servers.",
)
def bootstrap(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    b_d = ctx.extra["pd_behaviour"][1] if "pd_behaviour" in ctx.extra else None
    for n, (fid, rt, detail) in enumerate(ctx.extra.get("bootstrap_errors") or []):
        if n:
            detail += "; independent of the check above, the decode raises this once that one is fixed"
        if b_d is not None and b_d.version != "0.5.23":
            detail += f" (decode on SGLang {b_d.version})"
        out.append(
            Finding(
                id=fid, severity=Severity.ERROR, message=detail, fix=_BOOTSTRAP_FIX.get(fid, chk.fix), runtime_error=rt
            )
        )
    return out


@check(
    "transfer-decision",
    Severity.ERROR,
    "The prefill accepts the decode's KV registration",
    what="Region counts, memory kinds, item lengths and PP pairing the prefill checks when the decode registers.",
    why="The prefill raises in its NIXL bootstrap thread; the thread dies and requests to that rank hang until the "
    "PD timeouts (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, SGLANG_DISAGGREGATION_WAITING_TIMEOUT; 300 s by "
    "default).",
    fix="Align the geometry of both sides.",
)
def transfer_decision(chk, ctx: CheckContext) -> list[Finding]:
    plan = ctx.plan
    if plan is None or plan.error is None:
        return []
    fid, fix = _classify(plan.error.message, _DECISION_IDS, plan.error.type)
    per_request = plan.error.when == "first request"  # 0.5.5 .. 0.5.12.post1 (plan._decide_per_request)
    if per_request and plan.error.type == "IndexError":
        fid, fix = (
            "region-count",
            (
                "The decode must register the KV regions this prefill stage writes into: the same model, draft and "
                "PP layout on both sides."
            ),
        )
    elif per_request and plan.error.type == "ZeroDivisionError":
        fid, fix = (
            "head-slice-assert",
            (
                "The decode replicates KV heads (more attention TP ranks than KV heads) and this release computes 0 "
                "heads per decode rank: "
                "run the decode at the prefill's attention TP size, or upgrade both sides to 0.5.11 or later."
            ),
        )
    pg, dg = ctx.prefill_geometry, ctx.decode_geometry
    stage = next((st for st in ctx.extra.get("pp_stages") or [] if st.get("error")), None)
    if stage is not None and "_geometry" in stage:
        pg, dg = stage["_geometry"]  # the region kinds and counts of the failing PP stage
    detail = (
        f"the prefill registers {plan.n_src} KV regions ({_kind_summary(pg)}), the decode {plan.n_dst} "
        f"({_kind_summary(dg)})"
    )
    if fid == "item-stride" and pg is not None and dg is not None:
        pairs = [
            (i, j)
            for i, j in enumerate(plan.dst_indices or range(min(pg.n, dg.n)))
            if pg.regions[i].item_len > dg.regions[j].item_len
        ]
        if pairs:
            i, j = pairs[0]
            detail += (
                f"; prefill region {i} is {pg.regions[i].item_len} bytes per page, decode region {j} only "
                f"{dg.regions[j].item_len}"
            )
    if stage is not None and stage["pp_rank"] > 0:
        detail = (
            f"prefill PP stage {stage['pp_rank']} (layers {stage['layers'][0]}..{stage['layers'][1] - 1}): " + detail
        )
    if fid == "head-slice-overrun":
        p_tp, d_tp = ctx.prefill.args.attn_tp_size, ctx.decode.args.attn_tp_size
        heads = ctx.prefill.model.num_key_value_heads
        detail += (
            f"; the prefill (attention TP {p_tp}) prepares {d_tp // max(1, p_tp)} head groups per token for the "
            "decode's "
            f"attention TP {d_tp}, but the model has {heads} KV heads (replicated on the decode), so its source list "
            "runs "
            "past the registered KV region (SGLang 0.5.13 .. 0.5.16; 0.5.17 counts replicated heads once)"
        )
    if fid == "region-count":
        fix = _region_count_fix(ctx, pg, dg) or fix
    if fid == "item-stride":
        from kvcheck.checks.risks import _item_cause

        cause, cause_fix = _item_cause(ctx)
        detail += cause
        fix = cause_fix or fix
    if ctx.extra.get("bootstrap_errors"):
        detail += "; this is raised once the bootstrap checks above pass"
    if per_request:
        return [
            Finding(
                id=fid,
                severity=Severity.ERROR,
                fix=fix,
                runtime_error=plan.error,
                message=(
                    "the prefill accepts the decode's KV registration without checks and fails building the first "
                    f"request's transfer: {detail}"
                ),
            )
        ]
    return [
        Finding(
            id=fid,
            severity=Severity.ERROR,
            message=f"the prefill rejects the decode's KV registration: {detail}",
            fix=fix,
            runtime_error=plan.error,
        )
    ]


def _region_count_fix(ctx: CheckContext, pg, dg) -> str | None:
    """Name the actual cause of a region-count mismatch: different models, PP layouts or
    drafts (the fix for one is not the fix for another)."""
    p, d = ctx.prefill, ctx.decode
    if p.model.architecture != d.model.architecture or p.model.num_hidden_layers != d.model.num_hidden_layers:
        return (
            f"The two sides serve different models ({p.model.architecture}, {p.model.num_hidden_layers} layers vs "
            f"{d.model.architecture}, {d.model.num_hidden_layers} layers): point both at the same checkpoint."
        )
    if pg is not None and dg is not None and pg.num_draft_regions != dg.num_draft_regions:
        return (
            "Run the speculative draft (and its KV regions) on the decode too, or on neither side: the decode "
            "must register at least as many KV regions as the prefill."
        )
    if p.args.pp_size != d.args.pp_size:
        return (
            f"The PP layouts differ (prefill --pp-size {p.args.pp_size}, decode --pp-size {d.args.pp_size}): give "
            "both the same --pp-size and SGLANG_PP_LAYER_PARTITION."
        )
    return None


def _hang(ctx: CheckContext) -> str:
    from kvcheck.preflight import hang_text

    return hang_text(ctx.extra.get("timeouts") or {"bootstrap_timeout_s": 300, "waiting_timeout_s": 300})


def _kind_summary(g) -> str:
    if g is None:
        return "?"
    parts = []
    for kind in ("VRAM", "DRAM"):
        c = g.kinds.count(kind)
        if c:
            parts.append(f"{c} {kind}")
    if g.num_draft_regions:
        parts.append(f"{g.num_draft_regions} of them draft")
    return ", ".join(parts) or "none"


@check(
    "hisparse-draft-nixl",
    Severity.ERROR,
    "A HiSparse decode with a speculative draft needs Mooncake",
    what=(
        "A decode with --enable-hisparse that also runs a speculative draft worker (MTP/EAGLE), or whose pool is "
        "DeepSeek V4's (DeepSeekV4TokenToKVPool), on the NIXL backend."
    ),
    why=(
        "DecodePreallocQueue.pop_preallocated (0.5.23) sends device page ids beside the host pages when the decode's "
        "pool "
        "is DeepSeekV4TokenToKVPool (its C4 indexer and C128 regions stay in device memory) or a draft pool exists, "
        "which "
        "only the Mooncake connector implements; on NIXL it raises NotImplementedError in the decode's scheduler on "
        "the "
        "first request, even when both sides run the same draft."
    ),
    fix="Drop speculative decoding on the HiSparse decode, drop --enable-hisparse, or use "
    "--disaggregation-transfer-backend mooncake on both sides.",
)
def hisparse_draft_nixl(chk, ctx: CheckContext) -> list[Finding]:
    d = ctx.decode.args
    dsv4 = bool(getattr(ctx.decode.model, "dsv4", False))
    if not (d.enable_hisparse and (d.has_draft_worker or dsv4) and d.disaggregation_transfer_backend == "nixl"):
        return []
    rt = RuntimeErrorPrediction(
        type="NotImplementedError",
        message="HiSparse device-only PD transfer currently requires the Mooncake backend",
        raised_by="decode: scheduler (DecodePreallocQueue.pop_preallocated)",
        when="first request",
        operator_sees=DECODE_FIRST_REQUEST,
    )
    if dsv4:
        what = (
            "the decode runs --enable-hisparse on DeepSeek V4 on --disaggregation-transfer-backend nixl: only its C4 "
            "KV "
            "is on the host; the C4 indexer and C128 KV stay in device memory and are sent by device page ids, which "
            "only "
            "Mooncake can address"
        )
    else:
        what = (
            f"the decode runs --enable-hisparse with --speculative-algorithm {d.speculative_algorithm} on "
            "--disaggregation-transfer-backend nixl: its draft KV stays in device memory, which only Mooncake can "
            "address"
        )
    fix = (
        (
            "Drop --enable-hisparse on the DeepSeek V4 decode, or use --disaggregation-transfer-backend mooncake on "
            "both sides "
            "(dropping speculative decoding does not help: the V4 pool's device regions take the same path)."
        )
        if dsv4
        else None
    )
    return [chk.finding(what, fix=fix, runtime_error=rt)]
