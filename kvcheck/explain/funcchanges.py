"""Whether the SGLang function that raised was changed in a release after the log's.

An SGLang traceback that no indexed bug (``fixedbugs.py``) explains still carries evidence: the
releases its frames fit (``logrelease.py``) and, for the function that raised, the releases whose
source changed that function (``func_changes.json.gz``: per file and function name, the first and
last release that define it and the releases whose body differs from the one before, generated
from each release's wheel by ``scripts/gen_explain_func_changes.py``; 0.5.5 on).

``evidence`` turns them into one sentence for the cause and one for the fix: a change after the
log's newest possible release may be the fix (kvcheck does not know which change fixes what, and
says so); no change up to the newest scanned release means an upgrade alone is not shown to
change that code.
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from typing import Any

from kvcheck.explain.logrelease import LogRelease
from kvcheck.release.version import version_key


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    raw = resources.files("kvcheck.explain").joinpath("func_changes.json.gz").read_bytes()
    return json.loads(gzip.decompress(raw))


def changes(srt_file: str, func: str) -> tuple[str, str, list[str]] | None:
    """(first, last, changed) releases of ``func`` in ``srt_file`` (``srt/...py``), or None when
    the file or the function is not in the table."""
    data = load()
    row = data["files"].get(srt_file, {}).get(func)
    if row is None:
        return None
    rel = data["releases"]
    return rel[row[0]], rel[row[1]], [rel[i] for i in row[2]]


def _newest(rel: LogRelease) -> tuple[str, str]:
    """The newest release the log may run and how the log shows it ('' when it does not)."""
    if rel.release:
        return rel.release, f"the log's release, {rel.release}"
    if rel.candidates:
        return rel.candidates[-1], f"the newest release the log's frames fit, {rel.candidates[-1]}"
    if rel.closest:
        newest = max(rel.closest, key=version_key)
        return newest, f"the newest release closest to the log's frames, {newest}"
    return "", ""


def evidence(srt_file: str, func: str, rel: LogRelease) -> tuple[str, str] | None:
    """(a sentence for the cause, a sentence for the fix), or None when the function is not in
    the table. ``srt_file``: ``srt/...py`` of the innermost SGLang frame; ``func``: its function."""
    got = changes(srt_file, func)
    if got is None:
        return None
    first, last, changed = got
    newest_scanned = load()["releases"][-1]
    where = f"`{srt_file.rsplit('/', 1)[-1]}:{func}`"
    shown = rel.text()
    base, how = _newest(rel)
    if not base:
        recent = ", ".join(changed[-4:]) if changed else ""
        cause = (
            f"The log's release: {shown}. The function that raised, {where}, exists in SGLang {first} .. {last}"
            + (f" and was changed in {recent}" if recent else ", unchanged across them")
            + "."
        )
        fix = (
            f" Find the release each server runs (pip show sglang); {where} was last changed in {changed[-1]}."
            if changed
            else ""
        )
        return cause, fix
    if version_key(base) < version_key(first):
        return _gone_after(srt_file, func, rel, base, how, shown)  # older than the table: the pasted line
    later = [c for c in changed if version_key(c) > version_key(base)]
    moved = version_key(last) < version_key(newest_scanned)
    if later:
        span = later[0] if len(later) == 1 else f"{later[0]} .. {later[-1]} ({len(later)} releases)"
        cause = (
            f"The log's release: {shown}. The function that raised, {where}, was changed after {how}: in "
            f"{', '.join(later[:6])}{f' and {len(later) - 6} later releases' if len(later) > 6 else ''}."
        )
        fix = (
            f" {where} was changed in SGLang {later[0]}: upgrade to {later[0]} or later (changed in {span}; "
            "kvcheck does not know which change, if any, fixes this exception)."
        )
    else:
        cause = (
            f"The log's release: {shown}. The function that raised, {where}, was not changed after {how} "
            f"up to {last}" + (f" (after {last} it is no longer in {srt_file})" if moved else "") + "."
        )
        fix = (
            f" An upgrade alone is not shown to change {where} (unchanged up to {last}): avoid the flag that reaches "
            "it, or report it with the traceback and the release."
        )
    return cause, fix


def _gone_after(srt_file: str, func: str, rel: LogRelease, base: str, how: str, shown: str) -> tuple[str, str] | None:
    """For a log older than the table: the first indexed release whose ``func`` no longer has
    the source line pasted under the frame (``linedigests``: its digest on no line of the
    function's span in that release, ``release_index.json``), or None when no source line
    was pasted or every indexed release still has it."""
    from kvcheck.explain import linedigests
    from kvcheck.explain.logrelease import load_index

    src = next((s for f, _, fn, s in reversed(rel.sources) if f == srt_file and fn == func), "")
    if not src or not linedigests.covered(srt_file):
        return None
    index = load_index()
    want = linedigests.line_digest(src)
    for v in index["releases"]:
        if version_key(v) <= version_key(base):
            continue
        t = index["files"][v].get(srt_file)
        spans = index["tables"][t].get(func, []) if t is not None else []
        got = linedigests._versions(srt_file).get(v, "")
        if any(got[2 * (i - 1) : 2 * i] == want for a, b in spans for i in range(a, b + 1)):
            continue
        where = f"`{srt_file.rsplit('/', 1)[-1]}:{func}`"
        cause = (
            f"The log's release: {shown}. The line that raised (`{src[:80]}`) is in {where} up to {how}; from "
            f"SGLang {v} on, {where} no longer has it."
        )
        fix = (
            f" {where} no longer runs the line that raised from SGLang {v}: upgrade to {v} or later (kvcheck "
            "compared the pasted line, not what the change fixes)."
        )
        return cause, fix
    return None
