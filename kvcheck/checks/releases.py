"""Release checks: a side on a release kvcheck does not model, and known PD-path defects.

* ``unknown-release`` (unchecked): a side's SGLang release is not one kvcheck has tables
  for (0.4.9, 0.6.0, a nightly, ``latest``, a vendor image): the pair is ``unchecked``,
  never judged with the newest release's answers.
* ``known-issue``: a side matches an entry of ``kvcheck/sglang/known_issues.yaml`` (a
  release range of SGLang / NIXL x backend x GPU x model x environment known to hang,
  crash or refuse on the PD path), with the public source and the fix.
"""

from __future__ import annotations

import functools
from typing import Any

from kvcheck.checks.base import CheckContext, Finding, Severity, check
from kvcheck.sides import Side

KNOWN_ISSUES_FILE = "known_issues.yaml"


@check(
    "unknown-release",
    Severity.UNCHECKED,
    "Each side runs an SGLang release kvcheck models",
    what="A side whose SGLang release kvcheck does not model: a release outside 0.5.0rc2..0.5.23 (0.4.9, 0.6.0), or an image tag that names no release (latest, a nightly, a vendor image).",
    why="Flags, defaults, the registration message and the PD checks change from release to release; judging such a side with another release's code could pass a pair that hangs.",
    fix="Give the side's release with --sglang-version (or --prefill-sglang-version / --decode-sglang-version), or pin the image to a released tag such as lmsysorg/sglang:v0.5.23.",
)
def unknown_release(chk, ctx: CheckContext) -> list[Finding]:
    """One unchecked finding per side whose release is unknown or not modeled."""
    from kvcheck.sglang.releases import describe_modeled, side_release

    out = []
    for side in (ctx.prefill, ctx.decode):
        if side_release(side)[1]:
            continue
        what = f"SGLang {side.sglang_version}" if side.sglang_version else "an SGLang release kvcheck cannot tell"
        out.append(chk.finding(
            f"the {side.role} runs {what} ({side.version_source or 'no release given'}); kvcheck models {describe_modeled()}, so this pair is not judged",
            fix=f"Give the {side.role}'s release with --{side.role}-sglang-version VERSION (or --sglang-version for both), or run a modeled release.",
        ))
    return out


@functools.lru_cache(maxsize=1)
def load_known_issues() -> list[dict[str, Any]]:
    """The entries of ``kvcheck/sglang/known_issues.yaml`` (cached). Each has ``id``,
    ``effect``, ``severity``, ``what``, ``match``, ``fix``, ``fixed_in``, ``sources``,
    ``verified``."""
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parent.parent / "sglang" / KNOWN_ISSUES_FILE
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on the cold path
    return yaml.load(path.read_text("utf-8"), Loader=loader)["entries"]


def side_nixl_version(side: Side) -> tuple[str | None, str]:
    """(NIXL release, where from): ``NIXL_VERSION`` in the side's environment (a kvcheck
    reading; NIXL ignores it), else the nixl distribution installed here (metadata only)."""
    from kvcheck.sglang.releases import parse_release

    if side.env.get("NIXL_VERSION"):
        return parse_release(side.env["NIXL_VERSION"]) or side.env["NIXL_VERSION"], "NIXL_VERSION"
    from kvcheck.sglang.releases import installed_version

    for dist in ("nixl-cu12", "nixl-cu13", "nixl"):
        v = installed_version(dist)
        if v:
            return parse_release(v) or v, f"{dist} installed where kvcheck runs"
    return None, "unknown"


def _in_ranges(version: str, ranges: list[list[str | None]]) -> bool:
    from kvcheck.sglang.releases import in_range

    return any(in_range(version, lo, hi) for lo, hi in ranges)


def _ranges_text(ranges: list[list[str | None]]) -> str:
    parts = []
    for lo, hi in ranges:
        if lo and hi:
            parts.append(f">= {lo}, < {hi}")
        elif lo:
            parts.append(f">= {lo}")
        elif hi:
            parts.append(f"< {hi}")
    return " or ".join(parts) or "any"


def match_entry(entry: dict[str, Any], side: Side) -> tuple[bool, list[str], list[str]]:
    """Whether ``side`` matches ``entry``: (matches, reasons it matched, conditions kvcheck
    could not see). A side on an unmodeled release never matches an SGLang range."""
    m = entry.get("match", {})
    why: list[str] = []
    unknown: list[str] = []
    if "sglang" in m:
        from kvcheck.sglang.releases import side_release

        v, _ = side_release(side)
        if not v or not _in_ranges(v, m["sglang"]):
            return False, [], []
        why.append(f"SGLang {v}")
    if "backend" in m:
        if side.args.disaggregation_transfer_backend != m["backend"]:
            return False, [], []
        why.append(f"--disaggregation-transfer-backend {m['backend']}")
    if "model" in m:
        model = side.model
        # dense: no hybrid state (no DSA index, no SWA / Mamba / MiniMax sparse pool),
        # i.e. a request carries no state_indices (0.5.12's aux gate reads them)
        dense = model.attention in ("MHA", "MLA") and not model.dsa and getattr(model, "hybrid", None) is None
        if m["model"] == "dense" and not dense:
            if model.attention == "not_modeled":
                unknown.append("whether the model has hybrid (Mamba/SWA/NSA) state")
            else:
                return False, [], []
        elif m["model"] == "dsa" and not model.dsa:
            return False, [], []
        elif m["model"] == "mha" and model.attention != "MHA":
            return False, [], []
        else:
            why.append(f"{model.architecture} ({'no hybrid state' if dense else m['model']})")
    if "gpu" in m:
        if (side.gpu or "") not in m["gpu"]:
            if side.gpu_source.startswith("default"):
                unknown.append(f"the GPU ({'/'.join(m['gpu'])})")
            else:
                return False, [], []
        else:
            why.append(f"GPU {side.gpu}")
    for var, token in (m.get("env_contains") or {}).items():
        tokens = [t.strip().lstrip("^") for t in side.env.get(var, "").split(",")]
        if token not in tokens or side.env.get(var, "").startswith("^"):
            return False, [], []
        why.append(f"{var}={side.env[var]}")
    for var in m.get("env_unset") or []:
        if side.env.get(var):
            return False, [], []
        why.append(f"{var} unset")
    for dest in m.get("args_set") or []:
        if getattr(side.args, dest, None) in (None, "", False):
            return False, [], []
        why.append(f"--{dest.replace('_', '-')} {getattr(side.args, dest)}")
    if "nixl" in m:
        nv, src = side_nixl_version(side)
        if nv is None:
            unknown.append(f"the NIXL release ({_ranges_text(m['nixl'])}); set NIXL_VERSION in --{side.role}-env")
        elif not _in_ranges(nv, m["nixl"]):
            return False, [], []
        else:
            why.append(f"NIXL {nv} ({src})")
    return True, why, unknown


def _decode_replicates_kv_heads(ctx: CheckContext, several: bool = False) -> bool:
    """The prefill's attention TP is smaller than the decode's, and the decode's is larger
    than the model's KV heads (each KV head is replicated over decode ranks); ``several``:
    also each prefill rank holds more than one KV head (prefill attention TP < KV heads).
    False when the KV head count is unknown or the model is MLA."""
    p, d = ctx.prefill.args.attn_tp_size, ctx.decode.args.attn_tp_size
    heads = getattr(ctx.prefill.model, "num_key_value_heads", None)
    return bool(heads) and ctx.prefill.model.attention == "MHA" and p < d and d > heads and (not several or p < heads)


@check(
    "known-issue",
    Severity.ERROR,
    "No side runs a release combination with a known PD-path defect",
    what="A side whose SGLang / NIXL release, transfer backend, GPU, model and environment match a known defect on the PD path (kvcheck/sglang/known_issues.yaml: hangs, crashes, start-up refusals), each with its public source.",
    why="These defects are in the releases themselves: the configuration is valid and the pair still hangs or crashes (e.g. SGLang 0.5.12 with NIXL hangs every request of a dense model).",
    fix="Move to the release that fixed it (named in the finding), or apply the workaround given.",
)
def known_issue(chk, ctx: CheckContext) -> list[Finding]:
    """One finding per (entry, side) match; error when the entry is certain and every
    condition was seen, else warning naming what kvcheck could not see."""
    out: list[Finding] = []
    for entry in load_known_issues():
        pair = entry.get("match", {}).get("pair")
        if pair == "hetero_tp" and ctx.prefill.args.attn_tp_size == ctx.decode.args.attn_tp_size:
            continue
        if pair == "decode_replicates_kv_heads" and not _decode_replicates_kv_heads(ctx):
            continue
        if pair == "decode_replicates_several_prefill_heads" and not _decode_replicates_kv_heads(ctx, several=True):
            continue
        role = entry.get("match", {}).get("role")
        hits = []
        for side in (ctx.prefill, ctx.decode):
            if role and side.role != role:
                continue
            ok, why, unknown = match_entry(entry, side)
            if ok:
                hits.append((side, why, unknown))
        if not hits:
            continue
        roles = " and ".join(s.role for s, _, _ in hits)
        side, why, unknown = hits[0]
        severity = Severity.ERROR if entry["severity"] == "error" and not any(u for _, _, u in hits) else Severity.WARNING
        fixed = entry.get("fixed_in") or {}
        fixed_text = "; fixed in " + ", ".join(f"{k.upper() if k == 'nixl' else 'SGLang'} {v}" for k, v in fixed.items()) if fixed else ""
        msg = f"{entry['id']} on the {roles} ({', '.join(why)}): {' '.join(entry['what'].split())} [{entry['effect']}{fixed_text}; {', '.join(entry['sources'])}]"
        if unknown:
            msg += f"; applies only if {', '.join(dict.fromkeys(u for _, _, us in hits for u in us))} match"
        out.append(Finding(id="known-issue", severity=severity, message=msg, fix=" ".join(entry["fix"].split())))
    return out
