"""Whether the SGLang function that raised was changed in a release after the log's.

An SGLang traceback that no indexed bug (``fixedbugs.py``) explains still carries evidence: the
releases its frames fit (``logrelease.py``) and, for the function that raised, the releases whose
source changed that function (``func_changes.json.gz``: per file and function name, the first and
last release that define it and the releases whose body differs from the one before, generated
from each release's wheel by ``scripts/gen_explain_func_changes.py``; 0.5.5 on).

``evidence`` turns them into one sentence for the cause and one for the fix. Where the source
line is pasted under the frame that raised (``_line_evidence``), that line decides: the releases
it fits (the text wins over the line number), followed through the later releases
(``linedigests.follow``, relocated inside the function by ``release_index.json``'s spans): the
first release whose function no longer has it is the likely fix (evidence, never certainty);
still there in the newest scanned release means no released fix is shown. Without a pasted
line: a change of the function after the log's newest possible release may be the fix (kvcheck
does not know which change fixes what, and says so); no change up to the newest scanned release
means an upgrade alone is not shown to change that code.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from importlib import resources
from typing import Any, NamedTuple

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


def evidence(srt_file: str, func: str, rel: LogRelease, line: int = 0, raised: bool = True) -> tuple[str, str] | None:
    """(a sentence for the cause, a sentence for the fix), or None when the function is not in
    the table. ``srt_file``: ``srt/...py`` of the innermost SGLang frame; ``func``: its function.
    The source line pasted under that frame comes first (``_line_evidence``): where it is gone in
    a later release, and whether it is still there up to the newest."""
    by_line = _line_evidence(srt_file, func, rel, line, raised)
    if by_line is not None:
        return by_line
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
        return None  # older than the table, and no pasted line to follow
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


def _spans(srt_file: str, func: str, release: str) -> list[list[int]]:
    """The 1-based [start, end] spans of ``func`` in ``srt_file`` of ``release``
    (``release_index.json``, 0.5.5 on); [] when not indexed."""
    from kvcheck.explain.logrelease import load_index

    index = load_index()
    t = index["files"].get(release, {}).get(srt_file)
    return index["tables"][t].get(func, []) if t is not None else []


# digests of lines too common to place a line by (``_in_span``'s neighbours)
_COMMON = frozenset(
    hashlib.blake2b(t.encode(), digest_size=1).hexdigest()
    for t in (
        "",
        ")",
        "]",
        "}",
        "):",
        "),",
        "],",
        "else:",
        "try:",
        "return",
        "pass",
        "continue",
        "break",
        "return None",
        "return False",
        "return True",
        ") -> None:",
        "finally:",
        "#",
    )
)


def _in_span(
    srt_file: str, func: str, release: str, want: str, before: str, at: int, whole: bool = False
) -> int | None:
    """The line of ``func``'s span in ``release`` whose digest is ``want`` and that keeps a
    neighbour of the line's place in the release ``before`` (line ``at``, 1-based: the line
    just above or below has the same digest there and here), or None. A one-byte digest alone
    matches some line of a 300-line function by chance; with a neighbour, one time in ~30000.
    ``at`` 0: no neighbour asked (the caller knows the function still has the line). ``whole``:
    anywhere in the file (a release or file without spans), with both neighbours kept (one time
    in ~20 million a line of a 3000-line file by chance)."""
    from kvcheck.explain import linedigests

    got = linedigests._versions(srt_file).get(release, "")
    old = linedigests._versions(srt_file).get(before, "")

    def dg(text: str, n: int) -> str:
        return text[2 * (n - 1) : 2 * n] if n >= 1 else ""

    # the nearest line above and below that is not a common one (a blank, a bracket, 'else:'),
    # at its offset from the line
    near: list[tuple[int, str]] = []
    for step in (-1, 1):
        for d in range(step, 4 * step, step):
            n = dg(old, at + d)
            if n and n not in _COMMON:
                near.append((d, n))
                break
    if whole:
        if len(near) < 2:
            return None
        for i in range(1, len(got) // 2 + 1):
            if dg(got, i) == want and all(dg(got, i + d) == n for d, n in near):
                return i
        return None
    for a, b in _spans(srt_file, func, release):
        for i in range(a, b + 1):
            if dg(got, i) == want and (not at or any(dg(got, i + d) == n for d, n in near)):
                return i
    return None


class _Trace(NamedTuple):
    start: str  # the release the pasted line was read in
    last: str  # the newest release that still has it (for 'function-changed': up to which it is known to)
    gone: str  # the first release after ``last`` without it ('' = none up to the newest)
    # 'changed' (no longer in the function) | 'file' (the file is gone) | 'function' (``func``
    # no longer in the file) | 'function-changed' (the line moved with its unchanged function,
    # and the function changed in ``gone``: whether the line survived is not known)
    why: str
    moved: bool  # relocated at least once (``_in_span``, or with its unchanged function)
    line: int = 0  # where it is in ``last`` (1-based; 0 when not known: moved with its function)


def _unchanged_at(srt_file: str, func: str, release: str) -> tuple[bool, str]:
    """(whether ``func_changes`` shows ``func`` with the same body in ``release`` as in the
    release before, the first release after ``release`` that changes it or '' for none)."""
    got = changes(srt_file, func)
    if got is None:
        return False, ""
    first, last, changed = got
    k = version_key(release)
    if not version_key(first) < k <= version_key(last) or release in changed:
        return False, ""
    return True, next((c for c in changed if version_key(c) > k), "")


def trace_line(srt_file: str, func: str, line: int, src: str, start: str) -> _Trace | None:
    """Where the line that raised (``src`` at ``line`` of ``srt_file`` in ``start``) goes in
    the later releases (``linedigests.follow``). Where ``follow`` loses it (no copied range
    holds it) in release N:

    - N indexed (``release_index.json``, 0.5.5 on): it is looked for in ``func``'s span there,
      with a neighbour it had (``_in_span``); found, the line moved with code around it and is
      followed from there; not found, the function no longer has that text next to its old
      neighbours (a line moved alone into a changed function reads as gone: evidence);
    - otherwise, where ``func_changes`` shows ``func``'s body unchanged in N (0.5.5 on), the
      line moved with its function: it is there up to the function's next change
      ('function-changed' at that release) or the newest release;
    - otherwise (before 0.5.5, a function the tables lack) the loss stands as 'changed':
      evidence, since a line moved with its changed function reads the same."""
    from kvcheck.explain import linedigests

    want = linedigests.line_digest(src)
    got = linedigests.follow(srt_file, line, src, start)
    moved = False
    while got is not None and got.gone and got.why == "changed":
        if not _spans(srt_file, func, got.gone):
            if _indexed(srt_file, got.gone):
                return _Trace(start, got.last, got.gone, "function", moved)
            same, nxt_change = _unchanged_at(srt_file, func, got.gone)
            if not same:
                # moved with its neighbours elsewhere in the file: followed from there
                at = _in_span(srt_file, func, got.gone, want, got.last, got.line, whole=True)
                nxt = linedigests.follow(srt_file, at, src, got.gone) if at else None
                if nxt is None:
                    break
                moved, got = True, nxt
                continue
            rels = linedigests.all_releases()
            if nxt_change:
                return _Trace(start, rels[rels.index(nxt_change) - 1], nxt_change, "function-changed", True)
            f_last = (changes(srt_file, func) or ("", rels[-1], []))[1]
            if f_last in rels and f_last != rels[-1]:
                return _Trace(start, f_last, rels[rels.index(f_last) + 1], "function", True)
            return _Trace(start, rels[-1], "", "", True)
        at = _in_span(srt_file, func, got.gone, want, got.last, got.line)
        if at is None and _unchanged_at(srt_file, func, got.gone)[0]:
            # the function's body is the same: the line is in it, wherever its digest is
            at = _in_span(srt_file, func, got.gone, want, got.last, 0)
        if at is None:  # moved out of the function with both neighbours (a helper split off)
            at = _in_span(srt_file, func, got.gone, want, got.last, got.line, whole=True)
        if at is None:
            break
        nxt = linedigests.follow(srt_file, at, src, got.gone)
        if nxt is None:
            break
        moved = True
        got = nxt
    if got is None:
        return None
    return _Trace(start, got.last, got.gone, got.why, moved, got.line)


def _indexed(srt_file: str, release: str) -> bool:
    """Whether ``release_index.json`` has the functions of ``srt_file`` in ``release``."""
    from kvcheck.explain.logrelease import load_index

    return load_index()["files"].get(release, {}).get(srt_file) is not None


def _start(srt_file: str, line: int, src: str, rel: LogRelease) -> tuple[str, str]:
    """The release to follow the pasted line from, and a sentence when the pasted text does not
    fit the release the log states or its other evidence (the text wins: line numbers alone
    fit many releases). ('', '') when the text fits no release of the table (a patched build)."""
    from kvcheck.explain import linedigests

    fits = linedigests.releases_fitting(srt_file, line, src)
    if not fits:
        return "", ""
    if rel.release and rel.release in fits:
        return rel.release, ""
    both = [v for v in fits if v in set(rel.candidates)]
    if both:
        return both[-1], ""
    span = fits[0] if len(fits) == 1 else f"{fits[0]} .. {fits[-1]}"
    note = (
        f" The pasted line fits SGLang {span} only, not {rel.release or 'the releases the rest of the log fits'}: "
        "read from there (the pasted text is stronger evidence than a line number or another process's version line)."
    )
    return fits[-1], note


def _line_evidence(srt_file: str, func: str, rel: LogRelease, at: int, raised: bool) -> tuple[str, str] | None:
    """The cause and fix sentences from the source line pasted under the frame that raised:
    the releases it fits, and whether it is still in ``func`` in the later releases
    (``trace_line``) with what ``func_changes`` says of the function. None when no line was
    pasted, the file is not in ``line_digests``, or the text fits no release. ``at``: the
    frame's line number (0: the last frame of ``func`` with a pasted line); ``raised``: whether
    the traceback shows the exception below the frame (a traceback cut before it does not show
    where it raised, so a line gone later is not said to be the fix)."""
    from kvcheck.explain import linedigests

    got = next(
        ((ln, s) for f, ln, fn, s in reversed(rel.sources) if f == srt_file and fn == func and (not at or ln == at)),
        None,
    )
    if got is None or not linedigests.covered(srt_file):
        return None
    line, src = got
    start, note = _start(srt_file, line, src, rel)
    if not start:
        return None
    tr = trace_line(srt_file, func, line, src, start)
    if tr is None:
        return None
    newest = linedigests.all_releases()[-1]
    short = srt_file.rsplit("/", 1)[-1]
    where = f"`{short}:{func}`"
    said = f"`{src[:80]}`"
    ch = changes(srt_file, func)
    later = [c for c in ch[2] if version_key(c) > version_key(start)] if ch else []
    what_line = (
        "The line that raised"
        if raised
        else "The innermost SGLang line shown (the traceback is cut before its exception)"
    )
    fits = [v for v in linedigests.releases_fitting(srt_file, line, src) if version_key(v) <= version_key(start)]
    fit_span = fits[0] if len(fits) == 1 else f"{fits[0]} .. {fits[-1]} ({len(fits)} releases)"
    cause = f"The log's release: {rel.text()}.{note} {what_line}, {said} ({short}:{line}), fits SGLang {fit_span}"
    if tr.gone and not raised:
        cause += f"; from SGLang {tr.gone} on, `{func}` no longer has it there."
        return cause, ""
    if tr.gone and tr.why in ("file", "function"):
        # the code moved (a file split, a function renamed or moved out): not a fix by itself
        what = f"{srt_file} no longer exists" if tr.why == "file" else f"{srt_file} no longer has `{func}`"
        cause += f"; it is still there in SGLang {tr.last}, and from SGLang {tr.gone} on {what} (the code moved)."
        fix = (
            f" kvcheck cannot follow the line that raised past SGLang {tr.last} ({what} from {tr.gone}): whether a "
            "later release fixes it is not shown; report it with the traceback and the release."
        )
        return cause, fix
    if tr.gone and tr.why == "function-changed":
        cause += (
            f"; it moved with {where}, unchanged, and is there up to SGLang {tr.last}; {where} changed in "
            f"{tr.gone} (kvcheck cannot tell whether the line survived that change)."
        )
        fix = (
            f" {where} changed in SGLang {tr.gone}, the first release after those known to have the line that "
            f"raised: possibly the fix; upgrade to {tr.gone} or later and check (kvcheck does not know what the "
            "change does)."
        )
        return cause, fix
    if tr.gone:
        what = f"{where} no longer has it"
        if ch and tr.gone in ch[2]:
            what += f" (the function changed in {tr.gone})"
        cause += f"; from SGLang {tr.gone} on, {what}."
        fix = (
            f" Likely fixed in SGLang {tr.gone}, the first release without the line that raised: upgrade to {tr.gone} "
            "or later and check (evidence from each release's source, not a known fix: kvcheck compared the pasted "
            "line, not what the change does)."
        )
        return cause, fix
    unchanged = ch is not None and not later and version_key(ch[1]) >= version_key(newest)
    since = start if ch is None or version_key(start) >= version_key(ch[0]) else ch[0]  # the table's first
    renamed = ch is not None and version_key(ch[1]) < version_key(newest)
    spans = _spans(srt_file, func, tr.last) if tr.line else []
    if renamed and ch is not None:
        where = f"{short} (no longer inside `{func}`, which it has only up to {ch[1]})"
    elif spans and not any(a <= tr.line <= b for a, b in spans):
        where = f"{short} (moved out of `{func}`, to line {tr.line})"
    cause += (
        f" and is still in {where} in SGLang {tr.last}"
        + (
            f", the function unchanged since {since}"
            if unchanged
            else (f" (the function changed around it in {', '.join(later[:4])})" if later else "")
        )
        + ("; it moved within the function" if tr.moved else "")
        + "."
    )
    if not raised:
        return cause, ""
    fix = (
        f" No released fix shown: the line that raised is still in its function through SGLang {tr.last}"
        + (" and so is its function" if unchanged else "")
        + ", so an upgrade alone is not shown to fix it; avoid the flag that reaches it, or report it with the "
        "traceback and the release."
    )
    return cause, fix
