"""One version type and one comparison for SGLang releases.

PEP 440 order restricted to what SGLang publishes: ``0.5.0rc2 < 0.5.0 < 0.5.0.post1 <
0.5.1``. Every comparison of releases in kvcheck goes through ``version_key`` (the
helpers in ``kvcheck.sglang.releases`` and ``kvcheck.sglang.pd_release`` delegate here).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.?(rc|a|b)(\d+))?(?:\.?post(\d+))?$")
_PRE_RANK = {"a": -3, "b": -2, "rc": -1}


@functools.total_ordering
@dataclass(frozen=True)
class Version:
    """A release number: ``major.minor.micro`` with an optional pre-release
    (``rc2``) and post-release (``post1``)."""

    major: int
    minor: int
    micro: int
    pre: tuple[str, int] | None = None
    post: int | None = None

    @property
    def key(self) -> tuple[int, ...]:
        # A pre-release sorts before its release; a post-release after it.
        pre = (_PRE_RANK[self.pre[0]], self.pre[1]) if self.pre else (0, 0)
        return (self.major, self.minor, self.micro, *pre, self.post if self.post is not None else -1)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key < other.key

    def __str__(self) -> str:
        pre = f"{self.pre[0]}{self.pre[1]}" if self.pre else ""
        post = f".post{self.post}" if self.post is not None else ""
        return f"{self.major}.{self.minor}.{self.micro}{pre}{post}"


def parse_version(text: str | None) -> Version | None:
    """``"v0.5.9"`` -> ``Version(0, 5, 9)``; None for anything that is not a release
    number (``"latest"``, ``"0.5.9.dev3+g1a2b"``)."""
    if not text:
        return None
    m = _VERSION.match(str(text).strip())
    if not m:
        return None
    a, b, c, pre, pre_n, post = m.groups()
    return Version(int(a), int(b), int(c), (pre, int(pre_n)) if pre else None, int(post) if post is not None else None)


# An unparsable release sorts after every real one (it is never "older than" a bound).
_LAST = (10**6,)


def version_key(version: str | Version | None) -> tuple[int, ...]:
    """Sort key of a release string: ``0.5.0rc2 < 0.5.0 < 0.5.0.post1 < 0.5.1``."""
    if isinstance(version, Version):
        return version.key
    return _str_key(version)


@functools.lru_cache(maxsize=4096)
def _str_key(text: str | None) -> tuple[int, ...]:
    """``version_key`` of a string, cached: a window decision compares the same few dozen
    release strings thousands of times."""
    v = parse_version(text)
    return v.key if v is not None else _LAST


def unpacked_releases(tree: Path, first: str | None = None) -> list[str]:
    """The releases unpacked under ``tree`` (``<tree>/<release>/sglang/...``, the layout the
    generators in ``scripts/`` read), oldest first, from ``first`` on (all when None).
    Only folders named by a release number count: another folder (a wheel unpacked as
    ``0513``) is not a release and is left out."""
    names = (d.name for d in tree.iterdir() if (d / "sglang").is_dir() and parse_version(d.name) is not None)
    return sorted((n for n in names if first is None or at_least(n, first)), key=version_key)


def at_least(version: str, first: str) -> bool:
    """``version >= first`` (by ``version_key``)."""
    return version_key(version) >= version_key(first)


def in_range(version: str, lo: str | None = None, hi: str | None = None) -> bool:
    """``lo <= version < hi``; a missing bound is open."""
    k = version_key(version)
    return (lo is None or version_key(lo) <= k) and (hi is None or k < version_key(hi))


def span(releases: list[str] | tuple[str, ...]) -> str:
    """``"0.5.9-0.5.21"`` for a run of releases (``"0.5.9"`` for one)."""
    if not releases:
        return "none"
    return releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"
