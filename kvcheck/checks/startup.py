"""Start-up refusals: what each server refuses while it resolves its own args, before it
loads the model (SGLang 0.5.23 ``ServerArgs.resolve_once()`` + ``check_server_args()``).

The runtime stops at the first refusal, so one finding per side at most; its id names the
kind of refusal (see ``kvcheck.sglang.startup.REFUSAL_IDS``)."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sglang.gpu import resolve_gpu
from kvcheck.sglang.startup import GPU_DEPENDENT_IDS, Refusal, ReleaseStop, Stop, first_outcome

_WHAT = {
    "decode-allocation-policy": "--disaggregation-decode-allocation-policy prefill_complete with a feature it does "
    "not support (NIXL among them)",
    "decode-host-receive-threshold": "--disaggregation-decode-host-receive-threshold outside [0, 1]",
    "decode-host-receive-hisparse": "decode host receive (--disaggregation-decode-host-receive-threshold < 1) with "
    "HiSparse or PD role switching",
    "decode-host-receive-retraction": "decode host receive with --disaggregation-decode-retraction-backup cpu_tensor",
    "decode-radix-cache-incompatible": "--disaggregation-decode-enable-radix-cache with HiSparse, the fake backend, "
    "or a speculative algorithm other than EAGLE/EAGLE3/DSPARK",
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
    "staging-buffer": "SGLANG_DISAGG_STAGING_BUFFER with a transfer backend other than mooncake/nixl",
    "cp-tp-group-sharing": "prefill context parallelism shared with the TP group (Qwen4Exp) with a layout or feature "
    "it does not support",
    "staging-cp-tp-sharing": "SGLANG_DISAGG_STAGING_BUFFER on a prefill whose prefill CP shares the TP group (CP-TP "
    "group sharing)",
    "hisparse-kv-dtype": "--enable-hisparse with a --kv-cache-dtype string HiSparse does not take (bfloat16 or "
    "fp8_e4m3)",
    "nvfp4-prefill-dequant": "--kv-cache-dtype nvfp4 with an attention backend (or dequant dtype) NVFP4 "
    "prefill/decode cannot use",
    "attention-backend-gpu": "an attention backend this GPU (or this use of it) does not support",
    "attention-kv-dtype": "a --kv-cache-dtype spelling the attention backend refuses (trtllm_mla takes fp8_e4m3, "
    "bf16 or auto; not bfloat16)",
    "kv-dtype-gpu-refused": "a KV cache dtype this GPU or PD cannot use (mxfp8 needs Blackwell; nvfp4 needs "
    "SM100/SM120 and "
    "is refused in PD on SM100; FP4 KV refuses --enable-unified-memory)",
    "kv4-backend": "FP4 KV (nvfp4 off SM100, fp4_mx_block16) with an attention backend outside "
    "handle_kv4_compatibility's lists (MHA: triton/torch_native/flex_attention/trtllm_mha; MLA: "
    "flashinfer/trtllm_mla)",
    "hicache-dcp": "HiCache with --dcp-size > 1 on a model or with a feature it does not support",
    "dp-size": "--dp-size > 1 combined with attention DP",
    "tp-attn-dp-cp": "--tp-size not divisible by attention DP x attention CP",
    "kv-sharding": "--enable-kv-cache-sharding where it is not supported (not a PD prefill, speculative decoding, "
    "DCP, HiSparse, HiCache storage)",
    "hicache-radix-cache": "--enable-hierarchical-cache with the radix cache off (a PD decode turns it off unless "
    "--disaggregation-decode-enable-radix-cache)",
    "decode-offload-kvcache": "--disaggregation-decode-enable-offload-kvcache off the decode, without a HiCache "
    "storage backend, or with host_pool retraction",
    "unified-memory": "--enable-page-major-kv-layout without --enable-unified-memory, or --enable-unified-memory in PD "
    "with a transfer backend other than Mooncake (NIXL among them), PP, speculative decoding, HiSparse or an "
    "attention backend its page-major pool does not allow",
    "pp-speculative": "pipeline parallelism with speculative decoding outside a PD prefill (or with a non-EAGLE "
    "algorithm)",
    "nodes": "a TP x PP world that does not split across --nnodes, or --dp-size replicas across nodes",
    "chunked-prefill-page": "a --chunked-prefill-size (divided by attention DP) that is not a multiple of the "
    "resolved page size",
    "two-batch-overlap": "--enable-two-batch-overlap without an EP all-to-all backend (--moe-a2a-backend none) and, "
    "from 0.5.15, without attention DP",
}

_FIX = {
    "decode-allocation-policy": "Drop --disaggregation-decode-allocation-policy prefill_complete (keep the default "
    "'early'): it supports only Mooncake, TP 1, and none of the listed features.",
    "decode-host-receive-threshold": "Set --disaggregation-decode-host-receive-threshold between 0 and 1 (1 turns "
    "host receive off).",
    "decode-host-receive-hisparse": "Leave --disaggregation-decode-host-receive-threshold at 1 with "
    "--enable-hisparse or --enable-pd-role-switch.",
    "decode-host-receive-retraction": "Use --disaggregation-decode-retraction-backup host_pool (or leave it unset) "
    "with decode host receive.",
    "decode-radix-cache-incompatible": "Drop --disaggregation-decode-enable-radix-cache, or the feature it conflicts "
    "with.",
    "prefill-fake-backend": "Use --disaggregation-transfer-backend nixl on the prefill.",
    "dcp-size": "Use --dcp-size >= 1, and not with --enable-prefill-cp.",
    "dsa-dcp": "Run DSA models with --dcp-size 1 in PD disaggregation.",
    "dsa-kv-cache-dtype": "Use --kv-cache-dtype bfloat16 or fp8_e4m3 (the same string on both servers).",
    "hisparse-dsa-backend": "Omit --dsa-prefill-backend/--dsa-decode-backend with --enable-hisparse, or use one the "
    "message allows.",
    "speculative-params": "Give --speculative-num-steps with "
    "--speculative-eagle-topk/--speculative-num-draft-tokens, and use topk 1 on DSA models.",
    "decode-host-pool-role": "Use the host-pool retraction backup and host receive only on the decode server.",
    "decode-host-pool-dcp": "Run the decode with --dcp-size 1, or without the host-pool retraction backup / host "
    "receive.",
    "hisparse-model": "Drop --enable-hisparse: it needs a DSA model (DeepSeek V3.2, GLM-5), DeepSeek V4 or MiniMax M3.",
    "hisparse-radix-cache": "Add --disable-radix-cache on a prefill or non-PD server running --enable-hisparse (a PD "
    "decode turns it off by itself).",
    "hisparse-mixed-chunk": "Drop --enable-mixed-chunk with --enable-hisparse.",
    "hisparse-spec-topk": "Use --speculative-eagle-topk 1 with --enable-hisparse.",
    "hisparse-spec-adaptive": "Drop --speculative-adaptive with --enable-hisparse.",
    "staging-buffer": "Unset SGLANG_DISAGG_STAGING_BUFFER, or use --disaggregation-transfer-backend nixl or mooncake.",
    "cp-tp-group-sharing": "Use --attn-cp-size equal to --tp-size, --cp-strategy zigzag, and none of the features "
    "the message names (or drop --enable-prefill-cp).",
    "staging-cp-tp-sharing": "Unset SGLANG_DISAGG_STAGING_BUFFER on the prefill (or drop --enable-prefill-cp).",
    "hisparse-kv-dtype": "Use --kv-cache-dtype bfloat16 or fp8_e4m3 (these exact strings; bf16 is refused) with "
    "--enable-hisparse, the same string on both servers.",
    "nvfp4-prefill-dequant": "With --kv-cache-dtype nvfp4, drop the attention-backend flags (NVFP4 picks "
    "flashinfer/trtllm_mha) or use one the message names.",
    "attention-backend-gpu": "Use an attention backend this GPU supports (or omit --attention-backend and let SGLang "
    "choose), and name the GPU with --gpu/--prefill-gpu/--decode-gpu.",
    "attention-kv-dtype": "Write the KV dtype the backend accepts (e.g. --kv-cache-dtype bf16, not bfloat16, with "
    "trtllm_mla) on both servers.",
    "kv-dtype-gpu-refused": "Use --kv-cache-dtype fp8_e4m3 or bf16 on this GPU / in PD.",
    "kv4-backend": "With FP4 KV pick an attention backend from the message's list (e.g. --attention-backend triton "
    "for MHA, flashinfer for MLA) on this GPU, or use --kv-cache-dtype fp8_e4m3.",
    "hicache-dcp": "Run HiCache with --dcp-size 1, or on an MLA model without speculative decoding (DSPARK only) or "
    "HiSparse.",
    "dp-size": "Use attention DP (--attn-dp-size) or data-parallel replicas (--dp-size), not both.",
    "tp-attn-dp-cp": "Make --tp-size a multiple of --attn-dp-size x --attn-cp-size.",
    "kv-sharding": "Use --enable-kv-cache-sharding only on the PD prefill, without DCP, HiSparse or speculative "
    "decoding.",
    "hicache-radix-cache": "On a PD decode add --disaggregation-decode-enable-radix-cache with "
    "--enable-hierarchical-cache, or drop HiCache; elsewhere drop --disable-radix-cache.",
    "decode-offload-kvcache": "Use --disaggregation-decode-enable-offload-kvcache only on the decode, with "
    "--hicache-storage-backend, and without host_pool retraction.",
    "unified-memory": "Drop --enable-unified-memory and --enable-page-major-kv-layout on PD servers that use NIXL "
    "(unified memory moves KV over Mooncake only, with PP 1 and no speculative decoding or HiSparse).",
    "pp-speculative": "Run speculative decoding with --pp-size 1 on the decode (PP with EAGLE/MTP is for the PD "
    "prefill only).",
    "nodes": "Use a --nnodes that divides --tp-size x --pp-size, and --attn-dp-size (not --dp-size) across nodes.",
    "chunked-prefill-page": "Use a --chunked-prefill-size that is a multiple of page size x --attn-dp-size (the "
    "backend may pick the page: trtllm_mla/flashmla 64).",
    "two-batch-overlap": "Set --moe-a2a-backend (e.g. deepep) with --enable-two-batch-overlap, or run attention DP, "
    "or drop --enable-two-batch-overlap.",
}


def _start_up_logs(side) -> list[Finding]:
    """What ``handle_pd_disaggregation`` (SGLang 0.5.23) warns while it accepts the flags: the
    prefill-DCP warning. (Its line "Radix cache is disabled for decode server", printed by
    every PD decode without --disaggregation-decode-enable-radix-cache, is the
    ``startup-log`` check's info finding.)"""
    a = side.args
    out = []
    if a.disaggregation_mode == "prefill" and a.dcp_size > 1:
        out.append(
            Finding(
                id="prefill-dcp-warning",
                severity=Severity.WARNING,
                message="the prefill runs --dcp-size > 1; the runtime warns: DCP on a PD prefill server is supported "
                "when "
                "prefill and decode use the same DCP layout, but it usually adds communication overhead "
                "without improving prefill performance.",
                fix="Run the prefill with --dcp-size 1 unless the decode uses the same DCP layout.",
            )
        )
    return out


# What handle_pd_disaggregation logs when a PD decode turns its radix cache off (no
# --disaggregation-decode-enable-radix-cache): the text of each release range.
DECODE_RADIX_OFF_LOG = (
    ("0.5.22", "Radix cache is disabled for decode server"),  # pd_disaggregation_hook, 0.5.22 .. 0.5.23
    ("0.5.0rc2", "KV cache is forced as chunk cache for decode server"),  # server_args / the hook, up to 0.5.21
)


def decode_radix_off_log(side) -> str | None:
    """The warning a PD decode logs at start-up when it turns its radix cache off (every PD
    decode without ``--disaggregation-decode-enable-radix-cache``; the flag exists from
    0.5.11), in the side's release's words; ``None`` when it does not log it."""
    from kvcheck.sglang.startup import release_at_least

    a = side.args
    if a.disaggregation_mode != "decode" or a.disaggregation_decode_enable_radix_cache:
        return None
    return next((text for first, text in DECODE_RADIX_OFF_LOG if release_at_least(side, first)), None)


@check(
    "startup-log",
    Severity.INFO,
    "What each server logs while it accepts its args",
    what="Start-up log lines the runtime prints for these flags that need no action: a PD decode turning its radix "
    "cache off.",
    why="So the operator can tell the expected start-up lines from a problem.",
    fix="Nothing to do.",
)
def startup_log(chk, ctx: CheckContext) -> list[Finding]:
    """``decode-radix-disabled`` (info): the decode's ``handle_pd_disaggregation`` logs
    "Radix cache is disabled for decode server" (0.5.22 .. 0.5.23; "KV cache is forced as
    chunk cache for decode server" before) unless ``--disaggregation-decode-enable-radix-cache``."""
    out = []
    for side in (ctx.prefill, ctx.decode):
        text = decode_radix_off_log(side)
        if text is not None and first_outcome(side) is None:
            out.append(
                Finding(
                    id="decode-radix-disabled",
                    severity=Severity.INFO,
                    message=f"the {side.role} server logs at start-up: {text} (a PD decode runs without a radix "
                    "cache unless --disaggregation-decode-enable-radix-cache); nothing is wrong",
                    fix="Nothing to do.",
                )
            )
    return out


def gpu_given(side) -> bool:
    """Whether the user named this side's GPU (``Side.gpu`` unset or defaulted: not given)."""
    return side.gpu is not None and not side.gpu_source.startswith("default")


def _other_gpu(side) -> list[Finding]:
    """The GPU was not given and the assumed Hopper starts, but a Blackwell (b200) refuses:
    say so, since the verdict then depends on where the server lands."""
    if gpu_given(side):
        return []
    other = first_outcome(side, resolve_gpu("b200"))
    if not isinstance(other, Refusal):
        return []
    return [
        Finding(
            id="startup-gpu-dependent",
            severity=Severity.WARNING,
            message=(
                f"the {side.role} server starts on the assumed Hopper (h100; GPU not given), but on a Blackwell (b200) "
                f"it refuses: {other.type}: {other.message} ({other.hook})"
            ),
            fix=f"Name the GPU (--gpu/--{side.role}-gpu or kvcheck-gpu:) to check the server where it runs; on "
            "Blackwell: " + _FIX.get(other.id, "change the flag the message names."),
        )
    ]


def _gpu_note(side, r: Refusal) -> str:
    """Where the GPU decides this refusal and none was given: say which GPU was assumed and
    whether another generation would start."""
    if gpu_given(side) or r.id not in GPU_DEPENDENT_IDS:
        return ""
    other = first_outcome(side, resolve_gpu("b200"))
    same = isinstance(other, Refusal) and (other.type, other.message) == (r.type, r.message)
    tail = "a Blackwell (b200) refuses the same way" if same else "on a Blackwell (b200) this refusal differs"
    return f" [GPU not given: assumed Hopper (h100); {tail}; name it with --gpu/--{side.role}-gpu]"


@check(
    "startup",
    Severity.ERROR,
    "Each server accepts its own args at start-up",
    what="Flag combinations SGLang refuses while resolving a server's args: attention backends and KV dtypes per GPU "
    "(trtllm_mla, cutedsl_mla, trtllm_mha, nvfp4, mxfp8), TP vs attention DP x CP, DP sizes, PP with "
    "speculative decoding, HiCache (radix cache, DCP), KV sharding, HiSparse (model, radix cache, KV dtype, "
    "backends), the decode radix cache, decode host receive, decode context parallelism, CP-TP group sharing, "
    "PD allocation policy, staging buffers.",
    why="The server exits during start-up, before loading the model; the pair never runs.",
    fix="Change the flag the message names.",
)
def startup(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in (ctx.prefill, ctx.decode):
        out.extend(side_findings(chk, side))
    return out


def side_findings(chk, side) -> list[Finding]:
    """The ``startup`` check's findings for one side: its first start-up refusal (an error
    carrying the runtime's text), ``startup-unchecked`` where kvcheck cannot tell, the
    start-up warnings it logs, and the GPU notes."""
    r = first_outcome(side)
    if isinstance(r, Stop):
        return [
            Finding(
                id="startup-unchecked",
                severity=Severity.UNCHECKED,
                message=f"the {side.role} server's start-up is not fully predicted ({side.origin or side.role}): "
                f"{r.reason}",
                fix=(
                    "Pin the server's SGLang release (image tag or --sglang-version) to one kvcheck verifies, or "
                    "start the server "
                    "once (or name its GPU) to see whether it accepts these flags."
                    if isinstance(r, ReleaseStop)
                    else "Start the server once (or name its GPU) to see whether it accepts these flags."
                ),
            )
        ]
    out = _start_up_logs(side)
    if r is None:
        return out + _other_gpu(side)
    what = _WHAT.get(r.id, r.id)
    out.append(
        Finding(
            id=r.id,
            severity=Severity.ERROR,
            message=f"the {side.role} server refuses to start ({side.origin or side.role}): {what}{_gpu_note(side, r)}",
            fix=_FIX.get(r.id, chk.fix),
            runtime_error=r.prediction(side),
        )
    )
    return out


ARGPARSE_OPERATOR_SEES = (
    'the server prints its usage line and "error: <this message>" and exits with status 2 while parsing its '
    "flags, before it reads the model or binds a port"
)


def argparse_finding(role: str, refusal) -> Finding:
    """The ``startup-argparse`` error for a side whose flags the release's own argument
    parser refuses (``kvcheck.errors.ArgparseRefusal``: an ambiguous abbreviation), as
    ``prepare_server_args`` -> ``ArgumentParser.parse_args`` (Python 3.11) does it: argparse
    prints ``<prog>: error: <message>`` and raises ``SystemExit(2)``."""
    from kvcheck.sglang.plan import RuntimeErrorPrediction

    release = f"SGLang {refusal.release}" if refusal.release else "SGLang"
    ambiguous = " could match " in refusal.argparse_message
    matches = refusal.argparse_message.split(" could match ", 1)[-1]
    if ambiguous:
        said = f"finds {refusal.option} ambiguous (an abbreviation of several flags: {matches})"
        fix = (
            f"Write the flag in full (one of {matches}): argparse accepts an abbreviation only when it matches a "
            "single flag of that release."
        )
    else:  # a value its type refuses (a JSON value whose quotes a shell or YAML layer stripped)
        said = f"refuses {refusal.option}: {refusal.argparse_message}"
        fix = (
            f"Quote the value of {refusal.option} so it reaches the server as written (valid JSON needs its double "
            "quotes: '{\"key\": 0.7}')."
        )
    return Finding(
        id="startup-argparse",
        severity=Severity.ERROR,
        message=(
            f"the {role} server refuses to start ({refusal.source or role}): {release}'s argument parser {said}"
            + (f"; release from {refusal.version_source}" if refusal.version_source else "")
        ),
        fix=fix,
        runtime_error=RuntimeErrorPrediction(
            type="SystemExit",
            message=refusal.argparse_message,
            raised_by=f"{role}: server start-up (argument parsing: prepare_server_args -> argparse)",
            when="start-up",
            operator_sees=ARGPARSE_OPERATOR_SEES,
        ),
    )
