"""Start-up refusals: what each server refuses while it resolves its own args, before it
loads the model (SGLang 0.5.23 ``ServerArgs.resolve_once()`` + ``check_server_args()``).

The runtime stops at the first refusal, so one finding per side at most; its id names the
kind of refusal (see ``kvcheck.sglang.startup.REFUSAL_IDS``)."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.startup import first_refusal

_WHAT = {
    "decode-allocation-policy": "--disaggregation-decode-allocation-policy prefill_complete with a feature it does not support (NIXL among them)",
    "decode-host-receive-threshold": "--disaggregation-decode-host-receive-threshold outside [0, 1]",
    "decode-host-receive-hisparse": "decode host receive (--disaggregation-decode-host-receive-threshold < 1) with HiSparse or PD role switching",
    "decode-host-receive-retraction": "decode host receive with --disaggregation-decode-retraction-backup cpu_tensor",
    "decode-radix-cache-incompatible": "--disaggregation-decode-enable-radix-cache with HiSparse, the fake backend, or a speculative algorithm other than EAGLE/EAGLE3/DSPARK",
    "prefill-fake-backend": "a prefill with --disaggregation-transfer-backend fake",
    "dcp-size": "an invalid --dcp-size",
    "dsa-dcp": "decode context parallelism on a DSA model with HiSparse/HiCache or in a PD role",
    "dsa-kv-cache-dtype": "a DSA model with a --kv-cache-dtype other than bf16/bfloat16/fp8_e4m3 (auto)",
    "hisparse-dsa-backend": "a DSA backend HiSparse cannot use for this KV dtype",
    "speculative-params": "explicit EAGLE parameters the runtime refuses on a DSA model",
    "decode-host-pool-role": "the host-pool retraction backup (or host receive) on a server that is not a PD decode",
    "decode-host-pool-dcp": "the host-pool retraction backup (or host receive) with --dcp-size > 1",
    "hisparse-model": "--enable-hisparse on a model that is not DSA, DeepSeek V4 or MiniMax M3",
    "hisparse-radix-cache": "--enable-hisparse with the radix cache on",
    "hisparse-mixed-chunk": "--enable-hisparse with --enable-mixed-chunk",
    "hisparse-spec-topk": "--enable-hisparse with speculative --speculative-eagle-topk other than 1",
    "hisparse-spec-adaptive": "--enable-hisparse with --speculative-adaptive",
}

_FIX = {
    "decode-allocation-policy": "Drop --disaggregation-decode-allocation-policy prefill_complete (keep the default 'early'): it supports only Mooncake, TP 1, and none of the listed features.",
    "decode-host-receive-threshold": "Set --disaggregation-decode-host-receive-threshold between 0 and 1 (1 turns host receive off).",
    "decode-host-receive-hisparse": "Leave --disaggregation-decode-host-receive-threshold at 1 with --enable-hisparse or --enable-pd-role-switch.",
    "decode-host-receive-retraction": "Use --disaggregation-decode-retraction-backup host_pool (or leave it unset) with decode host receive.",
    "decode-radix-cache-incompatible": "Drop --disaggregation-decode-enable-radix-cache, or the feature it conflicts with.",
    "prefill-fake-backend": "Use --disaggregation-transfer-backend nixl on the prefill.",
    "dcp-size": "Use --dcp-size >= 1, and not with --enable-prefill-cp.",
    "dsa-dcp": "Run DSA models with --dcp-size 1 in PD disaggregation.",
    "dsa-kv-cache-dtype": "Use --kv-cache-dtype bfloat16 or fp8_e4m3 (the same string on both servers).",
    "hisparse-dsa-backend": "Omit --dsa-prefill-backend/--dsa-decode-backend with --enable-hisparse, or use one the message allows.",
    "speculative-params": "Give --speculative-num-steps with --speculative-eagle-topk/--speculative-num-draft-tokens, and use topk 1 on DSA models.",
    "decode-host-pool-role": "Use the host-pool retraction backup and host receive only on the decode server.",
    "decode-host-pool-dcp": "Run the decode with --dcp-size 1, or without the host-pool retraction backup / host receive.",
    "hisparse-model": "Drop --enable-hisparse: it needs a DSA model (DeepSeek V3.2, GLM-5), DeepSeek V4 or MiniMax M3.",
    "hisparse-radix-cache": "Add --disable-radix-cache on a prefill or non-PD server running --enable-hisparse (a PD decode turns it off by itself).",
    "hisparse-mixed-chunk": "Drop --enable-mixed-chunk with --enable-hisparse.",
    "hisparse-spec-topk": "Use --speculative-eagle-topk 1 with --enable-hisparse.",
    "hisparse-spec-adaptive": "Drop --speculative-adaptive with --enable-hisparse.",
}


@check(
    "startup",
    Severity.ERROR,
    "Each server accepts its own args at start-up",
    what="Flag combinations SGLang refuses while resolving a server's args: HiSparse (model, radix cache, KV dtype and DSA backends, speculative topk), the decode radix cache, decode host receive, decode context parallelism, PD allocation policy.",
    why="The server exits during start-up, before loading the model; the pair never runs.",
    fix="Change the flag the message names.",
)
def startup(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in (ctx.prefill, ctx.decode):
        r = first_refusal(side)
        if r is None:
            continue
        what = _WHAT.get(r.id, r.id)
        out.append(Finding(
            id=r.id,
            severity=Severity.ERROR,
            message=f"the {side.role} server refuses to start ({side.origin or side.role}): {what}",
            fix=_FIX.get(r.id, chk.fix),
            runtime_error=r.prediction(side),
        ))
    return out
