"""Which SGLang releases a traceback's pasted source line fits (``line_digests.json.gz``,
generated from the release wheels by ``scripts/gen_explain_line_digests.py``).

Python prints, under each frame, the source line it ran (``traceback.format_list``). Line
numbers alone fit every release in which the function spans that number; the line's text
fits only the releases whose file holds that text at that line. The table keeps, for every
file under ``srt/disaggregation/`` of SGLang 0.5.1 .. 0.5.23, a one-byte digest of each
line: a release that does not fit is let through one time in 256 (the answer is then less
narrow, never wrong), a release that fits is never refused.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from importlib import resources
from typing import Any


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    raw = resources.files("kvcheck.explain").joinpath("line_digests.json.gz").read_bytes()
    return json.loads(gzip.decompress(raw))


def line_digest(text: str) -> str:
    """The digest the generator stores for a line (``gen_explain_line_digests.line_digest``)."""
    return hashlib.blake2b(text.strip().encode("utf-8"), digest_size=1).hexdigest()


@functools.lru_cache(maxsize=64)
def _versions(srt_file: str) -> dict[str, str]:
    """Release -> the file's digests (two hex characters a line), for each release whose
    wheel has ``srt_file``; {} for a file the table does not cover."""
    d = load()
    chain = d["files"].get(srt_file)
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
