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
    what="A side whose SGLang release kvcheck does not model: a release outside 0.5.0rc2..0.5.23 (0.4.9, 0.6.0), or "
    "an image tag that names no release (latest, a nightly, a vendor image).",
    why="Flags, defaults, the registration message and the PD checks change from release to release; judging such a "
    "side with another release's code could pass a pair that hangs.",
    fix="Give the side's release with --sglang-version (or --prefill-sglang-version / --decode-sglang-version), or "
    "pin the image to a released tag such as lmsysorg/sglang:v0.5.23.",
)
def unknown_release(chk, ctx: CheckContext) -> list[Finding]:
    """One unchecked finding per side whose release is unknown or not modeled."""
    from kvcheck.sglang.releases import describe_modeled, side_release

    out = []
    for side in (ctx.prefill, ctx.decode):
        if side_release(side)[1]:
            continue
        what = f"SGLang {side.sglang_version}" if side.sglang_version else "an SGLang release kvcheck cannot tell"
        out.append(
            chk.finding(
                f"the {side.role} runs {what} ({side.version_source or 'no release given'}); kvcheck models "
                f"{describe_modeled()}, so this pair is not judged",
                fix=f"Give the {side.role}'s release with --{side.role}-sglang-version VERSION (or --sglang-version "
                "for both), or run a modeled release.",
            )
        )
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


def match_entry(
    entry: dict[str, Any], side: Side, nixl_floor: tuple[str, str] | None = None
) -> tuple[bool, list[str], list[str]]:
    """Whether ``side`` matches ``entry``: (matches, reasons it matched, conditions kvcheck
    could not see). A side on an unmodeled release never matches an SGLang range.
    ``nixl_floor``: (release, why) the oldest NIXL the side can run at all (its SGLang
    refuses to start with an older one, ``running_nixl_floor``). Computed once per entry,
    side and floor inside ``kvcheck.memo.side_memo()``."""
    from kvcheck.memo import remembered

    seen, (ok, why, unknown) = remembered(
        "known_issue_match", side, (entry.get("id"), nixl_floor), lambda: (entry, _match_entry(entry, side, nixl_floor))
    )
    if seen is not entry:  # another mapping with the same id (a test's, or a narrowed copy)
        ok, why, unknown = _match_entry(entry, side, nixl_floor)
    return ok, list(why), list(unknown)


def _match_entry(
    entry: dict[str, Any], side: Side, nixl_floor: tuple[str, str] | None
) -> tuple[bool, list[str], list[str]]:
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
                unknown.append("the model has no hybrid (Mamba/SWA/NSA) state")
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
                unknown.append(f"the {side.role}'s GPU is {'/'.join(m['gpu'])} (kvcheck assumed {side.gpu})")
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
        # Decided over every NIXL the server may run (its image's, else NIXL_VERSION).
        from kvcheck.sglang.server_nixl import nixl_in, raise_floor, server_nixl

        got = server_nixl(side)
        if nixl_floor is not None:
            got = raise_floor(got, *nixl_floor)
        verdict = nixl_in(got, m["nixl"])
        if verdict == "no":
            return False, [], []
        if verdict == "yes":
            why.append(f"NIXL {got.describe()} ({got.source})")
        else:
            runs = f"it runs NIXL {got.describe()}, {got.source}" if got.known else got.source
            unknown.append(f"the {side.role}'s NIXL is {_ranges_text(m['nixl'])} ({runs})")
    return True, why, unknown


def running_nixl_floor(side: Side) -> tuple[str, str] | None:
    """(release, why): the oldest NIXL ``side`` can run at all. A ``refuse`` entry whose
    NIXL ranges are all ``[null, X]`` and whose other conditions hold for the side means
    that its SGLang stops at start-up with a NIXL older than X, so every other known issue
    is decided over NIXL >= X only (e.g. SGLang 0.5.15 on imports NIXL 1.1.0's
    ``nixl_thread_sync_t``). None when no such entry matches."""
    from kvcheck.memo import remembered

    return remembered("running_nixl_floor", side, None, lambda: _running_nixl_floor(side))


def _running_nixl_floor(side: Side) -> tuple[str, str] | None:
    from kvcheck.sglang.releases import release_key

    best: tuple[str, str] | None = None
    for entry in load_known_issues():
        m = entry.get("match", {})
        ranges = m.get("nixl") or []
        if entry.get("effect") != "refuse" or not ranges or any(lo is not None or hi is None for lo, hi in ranges):
            continue
        rest = {**entry, "match": {k: v for k, v in m.items() if k != "nixl"}}
        ok, _, unseen = _match_entry(rest, side, None)
        if not ok or unseen:
            continue
        floor = max((hi for _, hi in ranges), key=release_key)
        if best is None or release_key(floor) > release_key(best[0]):
            best = (floor, f"its SGLang {side.sglang_version} does not start with an older one, {entry['id']}")
    return best


def _decode_replicates_kv_heads(ctx: CheckContext, several: bool = False) -> bool:
    """The prefill's attention TP is smaller than the decode's, and the decode's is larger
    than the model's KV heads (each KV head is replicated over decode ranks); ``several``:
    also each prefill rank holds more than one KV head (prefill attention TP < KV heads).
    False when the KV head count is unknown or the model is MLA."""
    p, d = ctx.prefill.args.attn_tp_size, ctx.decode.args.attn_tp_size
    heads = getattr(ctx.prefill.model, "num_key_value_heads", None)
    if not heads:
        return False
    return ctx.prefill.model.attention == "MHA" and p < d and d > heads and (not several or p < heads)


@check(
    "known-issue",
    Severity.ERROR,
    "No side runs a release combination with a known PD-path defect",
    what="A side whose SGLang / NIXL release, transfer backend, GPU, model and environment match a known defect on "
    "the PD path (kvcheck/sglang/known_issues.yaml: hangs, crashes, start-up refusals), each with its public "
    "source. Severity: error when the defect is an error and every condition it depends on was seen; warning when "
    "one was not (the finding says 'applies only if ...'); info for a start-up refusal that depends only on a NIXL "
    "release kvcheck cannot see (NIXL < 1.1 under SGLang 0.5.15+: set NIXL_VERSION with --prefill-env/--decode-env "
    "to decide it), and for a release advisory of a deployment that pins no release (the finding names the "
    "releases that carry the defect).",
    why="These defects are in the releases themselves: the configuration is valid and the pair still hangs or "
    "crashes (e.g. SGLang 0.5.12 with NIXL hangs every request of a dense model).",
    fix="Move to the release that fixed it (named in the finding), or apply the workaround given.",
)
def known_issue(chk, ctx: CheckContext) -> list[Finding]:
    """One finding per (entry, side) match; error when the entry is certain and every
    condition was seen, else warning naming what kvcheck could not see."""
    out: list[Finding] = []
    floors: dict[str, tuple[str, str] | None] = {}
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
            if entry.get("effect") == "refuse":
                floor = None
            else:
                if side.role not in floors:
                    floors[side.role] = running_nixl_floor(side)
                floor = floors[side.role]
            ok, why, unknown = match_entry(entry, side, floor)
            if ok:
                hits.append((side, why, unknown))
        if not hits:
            continue
        roles = " and ".join(s.role for s, _, _ in hits)
        side, why, unknown = hits[0]
        unseen = [u for _, _, us in hits for u in us]
        severity = Severity.ERROR if entry["severity"] == "error" and not unseen else Severity.WARNING
        if unseen and entry.get("effect") == "refuse" and all("NIXL" in u for u in unseen):
            # A start-up refusal that depends only on a NIXL kvcheck cannot see: the server
            # exits at launch with its own message, before any traffic; said, not a verdict.
            severity = Severity.INFO
        fixed = entry.get("fixed_in") or {}
        fixed_text = (
            "; fixed in " + ", ".join(f"{k.upper() if k == 'nixl' else 'SGLang'} {v}" for k, v in fixed.items())
            if fixed
            else ""
        )
        msg = (
            f"{entry['id']} on the {roles} ({', '.join(why)}): {' '.join(entry['what'].split())} "
            f"[{entry['effect']}{fixed_text}; {', '.join(entry['sources'])}]"
        )
        fix = " ".join(entry["fix"].split())
        if unseen:
            msg += f"; applies only if {' and '.join(dict.fromkeys(unseen))}"
            need = sorted({s.role for s, _, us in hits for u in us if "NIXL" in u})
            if need:
                fix += (
                    " To decide it, set NIXL_VERSION (the NIXL the server's image ships) in "
                    + " and ".join(f"--{r}-env" for r in need)
                    + ", or run an lmsysorg/sglang:vX.Y.Z image."
                )
        out.append(Finding(id="known-issue", severity=severity, message=msg, fix=fix))
    return out
