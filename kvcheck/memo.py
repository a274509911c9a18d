"""Per-run memo of what kvcheck derives from one ``Side``.

A pair decided over a release window asks the same questions of the same side several
times: its signature (``kvcheck.cluster.decide.signature``) reads each side's start-up
outcome, connector outcome and known-issue matches, and the decision of that group asks
them again (the ``startup`` and ``known-issue`` checks). Inside ``side_memo()`` (one
``check_deployments`` run) each answer is computed once per side object; outside it,
nothing is remembered, so a side changed between two calls is never answered from a stale
entry. A side is not changed once built within a run (``kvcheck.cluster.pipeline``).

Answers must be treated as read-only by callers (outcomes, tuples), as they are shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# (what, id(side), extra) -> (side, answer); the side is held so that its id is not reused.
_active: dict[tuple, tuple[Any, Any]] | None = None


@contextmanager
def side_memo() -> Iterator[None]:
    """Remember per-side answers until the outermost ``side_memo()`` ends."""
    global _active
    outer = _active is not None
    if not outer:
        _active = {}
    try:
        yield
    finally:
        if not outer:
            _active = None


def remembered(what: str, side: Any, extra: Any, compute: Callable[[], T]) -> T:
    """``compute()``, once per (``what``, ``side`` object, ``extra``) inside ``side_memo()``."""
    memo = _active
    if memo is None:
        return compute()
    key = (what, id(side), extra)
    hit = memo.get(key)
    if hit is not None and hit[0] is side:
        return hit[1]
    value = compute()
    memo[key] = (side, value)
    return value
