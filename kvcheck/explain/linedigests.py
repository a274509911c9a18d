"""Which SGLang releases a traceback's pasted source line fits (``line_digests.json.gz``,
generated from the release wheels by ``scripts/gen_explain_line_digests.py``).

Python prints, under each frame, the source line it ran (``traceback.format_list``). Line
numbers alone fit every release in which the function spans that number; the line's text
fits only the releases whose file holds that text at that line. The table keeps, for every
file a PD traceback runs through (``srt/disaggregation``, ``srt/managers``, ``srt/mem_cache``,
``srt/entrypoints/*.py``, ``srt/model_executor``, ``srt/layers/attention``, ``srt/speculative``,
``server_args.py``; ``scripts/gen_explain_line_digests.FILES``) of SGLang 0.5.1 .. 0.5.23, a
one-byte digest of each line: a release that does not fit is let through one time in 256 (the
answer is then less narrow, never wrong), a release that fits is never refused.

The versions of a file are stored as copies of the previous version's lines (difflib's
``equal`` ranges over the stripped text) and new lines, so ``follow`` can track the line a
traceback raised at through the later releases: a copied line is the same text, a line in no
copied range was changed or removed in that release.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from importlib import resources
from typing import Any, NamedTuple


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    raw = resources.files("kvcheck.explain").joinpath("line_digests.json.gz").read_bytes()
    return json.loads(gzip.decompress(raw))


def line_digest(text: str) -> str:
    """The digest the generator stores for a line (``gen_explain_line_digests.line_digest``)."""
    return hashlib.blake2b(text.strip().encode("utf-8"), digest_size=1).hexdigest()


@functools.lru_cache(maxsize=64)
def _parsed(srt_file: str) -> list[list[Any]]:
    """The chain of ``srt_file``'s stored versions, ``[[release index, ops], ...]`` (stored as a
    JSON string per file: only the files a traceback names are parsed); [] when not covered."""
    raw = load()["files"].get(srt_file)
    return json.loads(raw) if raw else []


@functools.lru_cache(maxsize=64)
def _versions(srt_file: str) -> dict[str, str]:
    """Release -> the file's digests (two hex characters a line), for each release whose
    wheel has ``srt_file``; {} for a file the table does not cover."""
    d = load()
    chain = _parsed(srt_file)
    if not chain:
        return {}
    out: dict[str, str] = {}
    prev = ""
    for idx, ops in chain:
        if ops != "=":
            parts = []
            for op in ops:
                parts.append(prev[2 * op[0] : 2 * op[1]] if isinstance(op, list) else op)
            prev = "".join(parts)
        out[d["releases"][idx]] = prev
    return out


def covered(srt_file: str) -> bool:
    """Whether the table holds ``srt_file`` (``srt/...py``) in some release."""
    return srt_file in load()["files"]


def releases_fitting(srt_file: str, line: int, text: str) -> list[str]:
    """The releases (oldest first) whose ``srt_file`` has ``text`` (stripped) at 1-based
    ``line``. [] when none does or the file is not covered (see ``covered``)."""
    want = line_digest(text)
    rels = load()["releases"]
    got = _versions(srt_file)
    return [v for v in rels if v in got and got[v][2 * (line - 1) : 2 * line] == want]


def all_releases() -> list[str]:
    """The releases the table covers, oldest first."""
    return list(load()["releases"])


def _chain(srt_file: str) -> list[tuple[str, Any]]:
    """(release, ops) of each stored version of ``srt_file``, oldest first ([] when not covered)."""
    rels = load()["releases"]
    return [(rels[idx], ops) for idx, ops in _parsed(srt_file)]


def _map(ops: Any, pos: int) -> int | None:
    """Where the 0-based line ``pos`` of the previous stored version is in this one, or None
    when no copied range holds it (the line changed or was removed). ``ops``: one version's
    ``"="`` or list of copy ranges and new digests."""
    if ops == "=":
        return pos
    out = 0
    for op in ops:
        if isinstance(op, list):
            if op[0] <= pos < op[1]:
                return out + pos - op[0]
            out += op[1] - op[0]
        else:
            out += len(op) // 2
    return None


class Followed(NamedTuple):
    """Where the line pasted under a frame goes in the releases after ``start``:
    ``last``: the newest release whose file still has it (``line`` there, 1-based);
    ``gone``: the first release after ``last`` whose file no longer has it at a copied place,
    '' when every covered release to the newest has it; ``why``: 'changed' (the line was
    changed or removed, or moved with a change around it), 'file' (the file is gone)."""

    start: str
    last: str
    line: int
    gone: str
    why: str


def follow(srt_file: str, line: int, text: str, start: str) -> Followed | None:
    """Track ``text`` at 1-based ``line`` of ``srt_file`` in release ``start`` through the
    later releases of the table (``_map`` over each version's copies). None when ``start``'s
    file does not have that text at that line (its digest). A release whose file is absent
    ends it ('file'). The copies are exact text, so 'still there' is certain up to the digest
    of the first version; 'gone' may also be a line moved within the file, with the code
    around it (``funcchanges`` tells a changed function from a moved one)."""
    if start not in releases_fitting(srt_file, line, text):
        return None
    rels = load()["releases"]
    chain = _chain(srt_file)
    stored = {v for v, _ in chain}
    pos, last = line - 1, start
    after = False
    for v in rels:
        if v == start:
            after = True
            continue
        if not after:
            continue
        if v not in stored:
            return Followed(start, last, pos + 1, v, "file")
        ops = next(o for r, o in chain if r == v)
        new = _map(ops, pos)
        if new is None:
            return Followed(start, last, pos + 1, v, "changed")
        pos, last = new, v
    return Followed(start, last, pos + 1, "", "")
