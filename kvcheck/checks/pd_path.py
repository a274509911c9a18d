"""Checks on the PD path beyond the two decision points: the releases each side runs
(what kvcheck models of them, and what a pair of different releases exchanges), the
first request's metadata buffers and routing, and KV that lands in the wrong place
without any error.

Each check says which runtime function it restates and for which releases
(``kvcheck.sglang.pd_release``). Nothing here imports SGLang.
"""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.plan import RuntimeErrorPrediction

_TRUE = ("1", "true", "yes", "on")


def _behaviours(ctx: CheckContext):
    from kvcheck.sglang.pd_release import behaviour

    return ctx.extra.get("pd_behaviour") or (
        behaviour(ctx.prefill.sglang_version),
        behaviour(ctx.decode.sglang_version),
    )


def _modeled(ctx: CheckContext) -> bool:
    return ctx.prefill.model.attention != "not_modeled" and ctx.decode.model.attention != "not_modeled"


@check(
    "release-pd-unchecked",
    Severity.UNCHECKED,
    "kvcheck models the PD path of each side's SGLang release",
    what="A side runs an SGLang release whose decode bootstrap checks or prefill registration decision kvcheck has "
    "not restated.",
    why="The PD code changes from release to release; answering with another release's code could pass a pair that "
    "release breaks.",
    fix="Run both sides on a modeled release (the decode's bootstrap checks: 0.5.5 .. 0.5.23; the prefill's "
    "decision: 0.5.5 .. 0.5.23), or check the pair on a staging deployment; on 0.5.13 .. 0.5.21 a pair whose "
    "transfer the release leaves unguarded (head slices that do not tile the items before 0.5.22, a prefill "
    "PP stage paired positionally on 0.5.13 .. 0.5.16, decode DCP before 0.5.17) stays unchecked: run it on "
    "0.5.22 or later, where the runtime checks it.",
)
def release_pd_unchecked(chk, ctx: CheckContext) -> list[Finding]:
    from kvcheck.sglang.pd_release import known_releases

    if not _modeled(ctx):
        return []
    b_p, b_d = _behaviours(ctx)
    out = []
    for side, b in (("prefill", b_p), ("decode", b_d)):
        if not b.known:
            out.append(
                chk.finding(
                    f"{side}: SGLang {b.version} is not a release kvcheck has read (known: {known_releases()[0]} .. "
                    f"{known_releases()[-1]}); "
                    "its PD path is not checked"
                )
            )
    if b_d.known and not b_d.bootstrap_modeled:
        why = (
            "its CommonKVReceiver.__init__ on the v1 /route differs from every variant kvcheck restates"
            if b_d.route == "v1"
            else "its try_ensure_parallel_info differs from every variant kvcheck restates"
        )
        out.append(chk.finding(f"decode: the bootstrap checks of SGLang {b_d.version} are not modeled ({why})"))
    pair = ctx.extra.get("pair_info")
    if b_d.bootstrap_modeled and pair is not None:
        from kvcheck.sglang.plan import bootstrap_unchecked

        for why in bootstrap_unchecked(pair[0], pair[1], b_d):
            out.append(chk.finding(f"decode: {why}; what the transfer then does is not modeled"))
    if b_p.known and not b_p.decision_modeled:
        out.append(
            chk.finding(
                f"prefill: the registration decision and first-request checks of SGLang {b_p.version} are not modeled "
                "(kvcheck restates the per-request transfer of 0.5.5 .. 0.5.12.post1 and "
                "_add_remote_peer/_prepare_payload_xfer of 0.5.13 .. 0.5.23); "
                "region counts, memory kinds and item lengths are not checked"
            )
        )
    if b_p.decision_modeled:
        plans = [ctx.plan] if ctx.plan is not None else []
        unmodeled = next((p.not_modeled_reason for p in plans if p.path == "not_modeled"), None)
        if unmodeled is None and any(st.get("path") == "not_modeled" for st in ctx.extra.get("pp_stages") or []):
            unmodeled = "a prefill PP stage's transfer"
        if unmodeled is not None:
            out.append(
                chk.finding(
                    f"prefill: SGLang {b_p.version} accepts this decode's registration without checks, and what its "
                    f"transfer then does is not modeled: {unmodeled}"
                )
            )
        # 0.5.12 .. 0.5.12.post1: SGLANG_DISAGG_STAGING_BUFFER sends unequal-TP KV through
        # staging buffers (_do_staging_transfer), which kvcheck does not restate.
        staging = str(ctx.prefill.env.get("SGLANG_DISAGG_STAGING_BUFFER", "")).lower() in _TRUE
        if b_p.per_request_decision and staging and ctx.prefill.args.attn_tp_size != ctx.decode.args.attn_tp_size:
            out.append(
                chk.finding(
                    f"prefill: SGLang {b_p.version} with SGLANG_DISAGG_STAGING_BUFFER sends unequal-TP KV through "
                    "staging buffers; "
                    "that path is not modeled (the head-slice path shown is its fallback)"
                )
            )
    if b_p.decision_modeled and b_p.decision_variant not in ("0.5.22", "0.5.23"):
        # First-request checks restated for 0.5.23 only (aux-buffer-count,
        # follow-bootstrap-room-plain-dp): unchecked only where they could fire.
        if _aux_buffers(ctx.prefill) != _aux_buffers(ctx.decode):
            out.append(
                chk.finding(
                    f"prefill: SGLang {b_p.version}'s pairing of metadata (aux) buffers is not modeled, and the two "
                    "sides register different ones "
                    "(--disaggregation-enable-kv-checksum or SGLANG_ENABLE_DISAGG_SAMPLING_MASK on one side only)"
                )
            )
        a = ctx.prefill.args
        if a.dp_size > 1 and not a.enable_dp_attention and a.attn_dp_size <= 1:
            out.append(
                chk.finding(
                    f"prefill: SGLang {b_p.version}'s routing of a plain-DP prefill (--dp-size {a.dp_size}, "
                    "attention DP 1) to its replicas is not modeled"
                )
            )
    return out


@check(
    "route-compat",
    Severity.ERROR,
    "The decode understands the prefill bootstrap server's /route reply",
    what="A prefill and a decode on releases whose /route exchange differs: the request style (v1 before 0.5.10, v2 "
    "from 0.5.10), or a v2 reply carrying PrefillServerInfo fields the decode's release does not have.",
    why=(
        "A v2 decode builds PrefillServerInfo(**reply): an unknown key raises TypeError inside "
        "try_ensure_parallel_info, which "
        "logs 'Error fetching prefill server info from bootstrap: ...' and returns False; the decode never admits a "
        "request from that prefill."
    ),
    fix="Run the prefill on the decode's release or an older one (the prefill must not send fields the decode "
    "lacks); upgrade decodes before prefills.",
)
def route_compat(chk, ctx: CheckContext) -> list[Finding]:
    b_p, b_d = _behaviours(ctx)
    if not (b_p.known and b_d.known) or b_p.version == b_d.version:
        return []
    sees = (
        "the decode logs this on every attempt to fetch the prefill's parallel info and never admits a request from "
        "this prefill; "
        "0.5.23 decodes abort them with 'Could not fetch prefill parallel info from <addr> after <n> attempts'"
    )
    if b_p.route != b_d.route:
        if b_d.route == "v1":
            rt = RuntimeErrorPrediction(
                type="HTTP 400",
                message="Missing inputs for bootstrap server.",
                raised_by="decode: scheduler, first contact with the prefill bootstrap server (CommonKVReceiver, v1 "
                "/route)",
                when="first request",
                operator_sees="the decode logs 'Failed to get prefill parallel info: 400, Missing inputs for "
                "bootstrap server.' and fails every request with 'Could not fetch prefill parallel info from "
                "bootstrap_addr: <addr>'",
            )
        else:
            rt = None
        return [
            chk.finding(
                f"/route styles differ: decode SGLang {b_d.version} uses the {b_d.route} request, prefill SGLang "
                f"{b_p.version} serves {b_p.route} "
                "(v2 from 0.5.10: /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1); "
                "the decode cannot read the prefill's parallel info and every request fails",
                runtime_error=rt,
            )
        ]
    p_info = (ctx.extra.get("pair_info") or (None, None))[0]
    unset = {
        "kv_layout": getattr(p_info, "kv_layout", None) is None,
        "dsv41_spec_layout": getattr(p_info, "dsv41_spec_layout", None) is None,
    }
    sent = [k for k in b_p.route_sends if not (k in b_p.route_pops_when_none and unset.get(k, False))]
    unknown = [k for k in sent if k not in b_d.route_accepts]
    if not unknown:
        return []
    rt = RuntimeErrorPrediction(
        type="TypeError",
        message=f"PrefillServerInfo.__init__() got an unexpected keyword argument '{unknown[0]}'",
        raised_by="decode: scheduler, first contact with the prefill bootstrap server "
        "(CommonKVManager.try_ensure_parallel_info; caught and logged as 'Error fetching prefill server info "
        "from bootstrap: ...')",
        when="first request",
        operator_sees=sees,
    )
    return [
        chk.finding(
            f"prefill SGLang {b_p.version} sends /route fields that decode SGLang {b_d.version} does not know: "
            f"{', '.join(unknown)}; "
            "the decode's PrefillServerInfo(**reply) raises TypeError, so it never learns the prefill's parallel info",
            runtime_error=rt,
        )
    ]


# KVArgsRegisterInfo.from_zmq frames (after GUARD) and the release that added each.
_FRAMES = {
    7: ("state pointers (gpu_id moves from 7 to 8)", "0.5.9"),
    11: ("dst_kv_item_len", "0.5.9"),
    12: ("state item lengths", "0.5.11"),
    13: ("state dims per tensor", "0.5.11"),
    16: ("decode slot count", "0.5.13"),
    17: ("KV memory kinds (VRAM/DRAM)", "0.5.15"),
    18: ("per-region KV item lengths", "0.5.15"),
    19: ("state layer ids", "0.5.17"),
    20: ("KV layer ids", "0.5.17"),
    21: ("decode DCP size", "0.5.17"),
    22: ("decode DCP rank", "0.5.17"),
    23: ("state pool data lengths", "0.5.23"),
}


@check(
    "registration-frames",
    Severity.ERROR,
    "The prefill reads the decode's registration the way the decode wrote it",
    what="Decode and prefill on releases whose KVArgsRegisterInfo frames differ (gpu_id moved in 0.5.9; memory kinds "
    "and item lengths in 0.5.15; DCP in 0.5.17; state data lengths in 0.5.23).",
    why="The prefill's bootstrap thread parses the frames by position: a moved frame kills the thread; a frame the "
    "prefill does not read is ignored; one the decode does not send takes a default.",
    fix="Run both sides on the same SGLang release (at least the same registration frame layout).",
)
def registration_frames(chk, ctx: CheckContext) -> list[Finding]:
    b_p, b_d = _behaviours(ctx)
    if not (b_p.known and b_d.known) or b_p.version == b_d.version:
        return []
    out: list[Finding] = []
    sends, reads = b_d.registration_sends, b_p.registration_reads
    summary = (
        f"decode SGLang {b_d.version} sends {sends} registration frames, prefill SGLang {b_p.version} reads "
        f"frames 0..{reads}"
    )
    if b_p.gpu_id_frame != b_d.gpu_id_frame:
        raised = None  # (exception type, message) KVArgsRegisterInfo.from_zmq raises
        d_info = (ctx.extra.get("pair_info") or (None, None))[1]
        if b_p.gpu_id_frame == 7 and d_info is not None and not d_info.state_types:
            # A 0.5.9+ decode without state sends b'' at frame 7, which a 0.5.5..0.5.8 prefill reads as gpu_id.
            raised = ("ValueError", "invalid literal for int() with base 10: ''")
        elif b_p.gpu_id_frame == 8 and b_p.registration_reads >= 18:
            # An 11-frame (<= 0.5.8) registration: a 0.5.13+ prefill reads dst_kv_item_len at frame 11.
            raised = ("IndexError", "list index out of range")
        rt = None
        if raised is not None:
            from kvcheck.preflight import hang_text

            rt = RuntimeErrorPrediction(
                type=raised[0],
                message=raised[1],
                raised_by="prefill: NIXL bootstrap thread (KVArgsRegisterInfo.from_zmq)",
                when="decode registration",
                operator_sees=hang_text(
                    ctx.extra.get("timeouts") or {"bootstrap_timeout_s": 300, "waiting_timeout_s": 300}
                ),
            )
        out.append(
            chk.finding(
                f"{summary}: gpu_id is frame {b_d.gpu_id_frame} for the decode but frame {b_p.gpu_id_frame} for the "
                "prefill "
                "(state pointers were inserted at frame 7 in 0.5.9); the prefill's bootstrap thread fails to parse "
                "the registration",
                runtime_error=rt,
            )
        )
        return out
    d = ctx.decode.args
    dg = ctx.decode_geometry
    # Frames the decode sends and the prefill ignores.
    if sends - 1 > reads:
        ignored = [f"{i} ({_FRAMES[i][0]})" for i in range(reads + 1, sends) if i in _FRAMES]
        if dg is not None and "DRAM" in dg.kinds and reads < 17:
            out.append(
                chk.finding(
                    f"{summary}: the prefill ignores frame 17 (KV memory kinds) and takes every decode region as VRAM, "
                    f"but the decode registers {dg.kinds.count('DRAM')} host (DRAM) regions (--enable-hisparse)"
                )
            )
        elif d.dcp_size > 1 and reads < 21:
            out.append(
                chk.finding(
                    f"{summary}: the prefill ignores frames 21-22 (decode DCP size/rank) and sends KV without the "
                    "DCP relayout "
                    f"to a decode at --dcp-size {d.dcp_size}: the decode reads KV laid out for DCP 1 (silent "
                    "corruption)"
                )
            )
        elif dg is not None and len(set(dg.item_lens)) > 1 and reads < 18:
            out.append(
                chk.finding(
                    f"{summary}: the prefill ignores frame 18 (per-region item lengths) and assumes every decode "
                    "region has "
                    f"the first one's ({dg.item_lens[0]} bytes per page); the decode's regions differ "
                    f"({sorted(set(dg.item_lens))})"
                )
            )
        elif ignored:
            out.append(
                chk.finding(
                    f"{summary}: the prefill ignores frame(s) {', '.join(ignored)}; nothing this pair uses depends "
                    "on them",
                    severity=Severity.INFO,
                )
            )
    # Frames the prefill reads and the decode does not send: defaults.
    if reads > sends - 1:
        missing = [f"{i} ({_FRAMES[i][0]}, since {_FRAMES[i][1]})" for i in range(sends, reads + 1) if i in _FRAMES]
        out.append(
            chk.finding(
                f"{summary}: frame(s) {', '.join(missing) or 'beyond ' + str(sends - 1)} are not sent and take their "
                "defaults on the prefill "
                "(frame 23 missing: the 0.5.23 prefill logs 'NIXL prepared state: peer=... all generic "
                "reason=no-decode-pool-lengths' and moves state "
                "components on the generic path); nothing this pair uses depends on them",
                severity=Severity.INFO,
            )
        )
    return out


@check(
    "nixl-stateless-hang",
    Severity.ERROR,
    "No release with a known PD hang for this model",
    what="SGLang 0.5.12 on either side with NIXL and a model without hybrid state (every plain MHA/MLA model).",
    why=(
        "0.5.12's NIXL sender sends the last chunk's completion only when the model has state indices, and its "
        "receiver "
        "expects state notifications for an empty state list: every request hangs. Fixed in 0.5.12.post1 (the sender "
        "checks `if kv_chunk.is_last:` and the receiver `if state_indices:`)."
    ),
    fix="Upgrade the 0.5.12 side(s) to 0.5.12.post1 or later.",
)
def nixl_stateless_hang(chk, ctx: CheckContext) -> list[Finding]:
    if not _modeled(ctx):
        return []
    b_p, b_d = _behaviours(ctx)
    out = []
    t = ctx.extra.get("timeouts") or {"waiting_timeout_s": 300}
    for side, b, g in (("prefill", b_p, ctx.prefill_geometry), ("decode", b_d, ctx.decode_geometry)):
        if b.nixl_stateless_hang and not (getattr(g, "state_types", None) or []):
            out.append(
                chk.finding(
                    f"{side} runs SGLang 0.5.12 with NIXL and {getattr(ctx, side).model.architecture} has no hybrid "
                    "state: every request hangs "
                    f"(the decode gives up after SGLANG_DISAGGREGATION_WAITING_TIMEOUT={t['waiting_timeout_s']:g} s)"
                )
            )
    return out


# MetadataBuffers.get_buf_infos (0.5.23): 9 fixed buffers (output ids, cached tokens,
# logprob val/idx, top logprob val/idx, top-k p/index, hidden states), 3 sampling-mask
# buffers in the middle (SGLANG_ENABLE_DISAGG_SAMPLING_MASK), the bootstrap room, then the
# KV checksum last (--disaggregation-enable-kv-checksum).
def _aux_buffers(side) -> list[str]:
    mask = str(side.env.get("SGLANG_ENABLE_DISAGG_SAMPLING_MASK", "")).lower() in _TRUE
    bufs = ["output_ids", "cached_tokens", "logprobs_val", "logprobs_idx", "top_logprobs_val", "top_logprobs_idx"]
    if mask:
        bufs += ["sampling_mask_len", "sampling_mask_idx", "sampling_logprobs"]
    bufs += ["topk_p", "topk_index", "hidden_states", "bootstrap_room"]
    if side.raw_args.get("disaggregation_enable_kv_checksum"):
        bufs.append("kv_checksum")
    return bufs


@check(
    "aux-buffer-count",
    Severity.ERROR,
    "Both sides register the same metadata (aux) buffers",
    what="--disaggregation-enable-kv-checksum or SGLANG_ENABLE_DISAGG_SAMPLING_MASK on one side only (0.5.23's "
    "MetadataBuffers).",
    why=(
        "Aux buffers pair up by position. The 0.5.23 prefill logs 'Decode <agent> registered N metadata buffers but "
        "this prefill has M; "
        "only the first min(N, M) are transferred, and misaligned if the extra buffer is not the last. ...' and "
        "sends the shorter list: "
        "a checksum (last) on one side only leaves the KV unverified; the sampling-mask buffers (in the middle) "
        "shift every later one."
    ),
    fix="Enable --disaggregation-enable-kv-checksum and SGLANG_ENABLE_DISAGG_SAMPLING_MASK on both servers or on "
    "neither.",
)
def aux_buffer_count(chk, ctx: CheckContext) -> list[Finding]:
    b_p, _ = _behaviours(ctx)
    if not b_p.aux_count_check:
        return []
    pb, db = _aux_buffers(ctx.prefill), _aux_buffers(ctx.decode)
    if len(pb) == len(db) and pb == db:
        return []
    logged = (
        f"Decode <agent> registered {len(db)} metadata buffers but this prefill has {len(pb)}; only the first "
        f"{min(len(pb), len(db))} "
        "are transferred, and misaligned if the extra buffer is not the last. An optional metadata buffer is enabled "
        "on one engine only: "
        "--disaggregation-enable-kv-checksum, SGLANG_ENABLE_DISAGG_SAMPLING_MASK, or the DSA top-k buffer."
    )
    n = min(len(pb), len(db))
    misaligned = pb[:n] != db[:n]
    which = []
    if ("kv_checksum" in pb) != ("kv_checksum" in db):
        which.append(
            f"--disaggregation-enable-kv-checksum only on the {'prefill' if 'kv_checksum' in pb else 'decode'}"
        )
    if ("sampling_mask_len" in pb) != ("sampling_mask_len" in db):
        which.append(
            f"SGLANG_ENABLE_DISAGG_SAMPLING_MASK only on the {'prefill' if 'sampling_mask_len' in pb else 'decode'}"
        )
    if misaligned:
        return [
            chk.finding(
                f'{"; ".join(which)}: the prefill logs "{logged}" at registration; buffers after the sampling mask '
                "are misaligned "
                f"(the decode's {db[n - 1] if n else '?'} receives the prefill's {pb[n - 1] if n else '?'}): request "
                "metadata arrives corrupted"
            )
        ]
    return [
        chk.finding(
            f'{"; ".join(which)}: the prefill logs "{logged}" at registration; the checksum is not transferred and '
            "the decode admits every request unverified",
            severity=Severity.WARNING,
            fix="Enable --disaggregation-enable-kv-checksum on both servers or on neither.",
        )
    ]


@check(
    "follow-bootstrap-room-plain-dp",
    Severity.ERROR,
    "The prefill's DP routing matches its attention DP ranks",
    what="A prefill with plain data parallelism (--dp-size > 1 replicas, attention DP 1) and the PD prefill's "
    "default load balancing, follow_bootstrap_room (0.5.23).",
    why=(
        "The prefill's DP controller sends a request to replica bootstrap_room % dp_size, but CommonKVSender "
        "compares that with the "
        "replica's attention DP rank, which is 0 without DP attention: every request landing on another replica "
        "fails with "
        "'follow_bootstrap_room conflict: ...' unless the router passes the prefill DP rank."
    ),
    fix="Run the prefill with attention DP (--attn-dp-size) instead of replicas, or --load-balance-method "
    "round_robin, or set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 on the prefill.",
)
def follow_bootstrap_room_plain_dp(chk, ctx: CheckContext) -> list[Finding]:
    b_p, _ = _behaviours(ctx)
    if b_p.version != "0.5.23":
        return []
    a, raw, env = ctx.prefill.args, ctx.prefill.raw_args, ctx.prefill.env
    if a.dp_size <= 1 or a.enable_dp_attention or a.attn_dp_size > 1:
        return []  # num_dp_ranks = dp_size x attn_dp_size; one of the two is 1 (runtime_context.num_dp_ranks_of)
    if raw.get("load_balance_method", "auto") not in ("auto", "follow_bootstrap_room"):
        return []
    if str(env.get("SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK", "")).lower() in _TRUE:
        return []
    rt = RuntimeErrorPrediction(
        type="KVTransferError",
        message=(
            "KVTransferError(bootstrap_room=<room>): follow_bootstrap_room conflict: dispatched to dp_rank 0 but "
            "bootstrap_room <room> "
            f"implies dp_rank <room % {a.dp_size}>. Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow "
            "mixed routing."
        ),
        raised_by="prefill: scheduler, CommonKVSender (request bootstrap)",
        when="first request",
        operator_sees=(
            f"about {a.dp_size - 1} in {a.dp_size} requests fail with HTTP 500 'Prefill bootstrap failed for request "
            "rank=... with exception "
            "KVTransferError(...)' unless the router sends the prefill DP rank"
        ),
    )
    return [
        chk.finding(
            f"prefill --dp-size {a.dp_size} (replicas, attention DP 1) routes by follow_bootstrap_room, but every "
            "replica's attention DP rank is 0",
            runtime_error=rt,
        )
    ]


@check(
    "hetero-tp-kv-misrouted",
    Severity.ERROR,
    "The head-slice path writes each prefill region into the matching decode region",
    what=(
        "Unequal attention TP (head-slice path) where the runtime pairs a prefill K region with a decode V region or "
        "another layer "
        "(get_mha_kv_ptrs_with_pp with an uneven PP partition or a decode draft pool); on SGLang 0.5.5 .. "
        "0.5.12.post1 the equal-TP "
        "and MLA paths pair regions the same way (per-request lists) and are checked too."
    ),
    why="Nothing raises: the decode attends over keys written as values (or another layer's KV), and the output is "
    "garbage.",
    fix="Use the same attention TP size on both sides, or give the decode the prefill's PP layout (same --pp-size "
    "and SGLANG_PP_LAYER_PARTITION).",
)
def hetero_tp_kv_misrouted(chk, ctx: CheckContext) -> list[Finding]:
    stages = ctx.extra.get("pp_stages") or []
    b_p = _behaviours(ctx)[0] if "pd_behaviour" in ctx.extra else None
    # 0.5.5 .. 0.5.12.post1 pair equal-TP/MLA regions with the same pointer arithmetic
    # (get_mha_kv_ptrs_with_pp / get_mla_kv_ptrs_with_pp) as the head-slice path.
    paths = ("hetero_tp_slice", "equal_tp") if b_p is not None and b_p.per_request_decision else ("hetero_tp_slice",)
    out = []
    for st in stages:
        if st.get("path") not in paths or "_geometry" not in st:
            continue
        src, dst = st["_geometry"]
        for i, j in enumerate(st.get("dst_indices") or []):
            if i >= src.n or j >= dst.n:
                continue
            a, b = src.regions[i], dst.regions[j]
            if a.part != b.part or a.layer_id != b.layer_id or a.pool != b.pool:
                out.append(
                    chk.finding(
                        f"prefill PP stage {st['pp_rank']} (layers {st['layers'][0]}..{st['layers'][1] - 1}): its "
                        f"region {i} ({a.pool} layer {a.layer_id} {a.part}) "
                        f"is written into decode region {j} ({b.pool} layer {b.layer_id} {b.part}); nothing raises "
                        "and the decode reads garbage"
                    )
                )
                break
    return out


@check(
    "state-components-differ",
    Severity.UNCHECKED,
    "Both sides register the same state components",
    what="The prefill and the decode register different state component lists (state_types: mamba, swa, dsa, "
    "block_scale, ...).",
    why=(
        "NixlKVManager.maybe_send_extra pairs state components by index (prefill component i into the decode's "
        "component i); "
        "kvcheck does not yet predict what each release does when the lists differ."
    ),
    fix="Run the same model, KV dtype and speculative settings on both sides so that both register the same state "
    "components.",
)
def state_components_differ(chk, ctx: CheckContext) -> list[Finding]:
    pi, di = ctx.extra.get("pair_info") or (None, None)
    if pi is None or di is None or pi.state_types == di.state_types:
        return []
    return [
        chk.finding(
            f"state components differ: prefill {pi.state_types or 'none'}, decode {di.state_types or 'none'}; paired "
            "by index in maybe_send_extra"
        )
    ]
