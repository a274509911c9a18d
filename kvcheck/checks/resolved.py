"""Checks on values SGLang resolves before it compares them (``kvcheck.sglang.resolved``).

* ``kv-dtype-gpu`` (unchecked): the decode's bootstrap check compares the KV cache dtype
  strings after the release resolves them, and a DeepSeek DSA ``auto`` resolves by GPU
  (``fp8_e4m3`` from SM100, ``bfloat16`` below). When a side's GPU was only assumed and
  the comparison passes on one GPU kind and fails on another, the pair is not judged.
  The pipeline (``kvcheck.cluster.decide._assumed_gpus``) decides such a side on each GPU
  itself, so this fires only for a ``run_preflight`` caller that hands it an assumed GPU.
  (The start-up refusal of a KV dtype a GPU cannot use is ``kv-dtype-gpu-refused``.)
"""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check


@check(
    "kv-dtype-gpu",
    Severity.UNCHECKED,
    "The KV cache dtype comparison does not rest on an assumed GPU",
    what="A DeepSeek DSA side whose --kv-cache-dtype the runtime resolves by GPU (auto: fp8_e4m3 from SM100, "
    "bfloat16 below), with its GPU not given, where the decode's bootstrap dtype check passes on one GPU kind "
    "and fails on another.",
    why="The decode compares the resolved strings on its first request and raises on a mismatch; kvcheck cannot tell "
    "which one the servers resolve without their GPU.",
    fix="Give the GPU (--gpu, --prefill-gpu/--decode-gpu, a kvcheck-gpu key, or the manifest's node selector), or "
    "set --kv-cache-dtype explicitly (bfloat16 or fp8_e4m3) on both servers.",
)
def kv_dtype_gpu(chk, ctx: CheckContext) -> list[Finding]:
    rows = ctx.extra.get("kv_dtype_over_gpus")
    if not rows:
        return []
    parts = []
    for label, p, d in rows:
        if "bytes per element" in p:  # a release without the decode's dtype check
            parts.append(
                f"on {label} the prefill KV cache is {p}, the decode's {d}"
                + (": the item lengths agree" if p == d else ": the item lengths differ")
            )
        elif p == d:
            parts.append(f"on {label} both resolve to {p}: the check passes")
        else:
            parts.append(
                f'on {label} "KV cache dtype mismatch: prefill server has kv_cache_dtype={p}, but decode server has '
                f'kv_cache_dtype={d}."'
            )
    assumed = [s.role for s in (ctx.prefill, ctx.decode) if s.gpu is None or str(s.gpu_source).startswith("default")]
    who = "the prefill's and the decode's GPUs were" if len(assumed) == 2 else f"the {assumed[0]}'s GPU was"
    return [
        chk.finding(
            f"{who} not given and the KV cache dtype each side resolves depends on it: "
            + "; ".join(parts)
            + (" (both sides on one GPU kind)" if len(assumed) == 2 else ""),
        )
    ]
