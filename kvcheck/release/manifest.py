"""The release manifest: which SGLang releases kvcheck models, and per subsystem which
of them it has verified against that release's own code.

``NEWEST`` is the one place the newest modeled release is written; the other modules
that need it import it from here (``kvcheck.sglang.releases.NEWEST_MODELED``,
``kvcheck.sglang.pd_release.NEWEST``, ``kvcheck.sglang.flags.DEFAULT_VERSION``...).

Subsystems (``SUBSYSTEMS``) and where their facts live:

* ``flags``: the argparse table of the release (``kvcheck/sglang/flagstore``), read from
  each release's ``server_args.py`` (43 releases, 0.5.0rc2 .. 0.5.23);
* ``bootstrap``: the decode's bootstrap checks (``PDBehaviour.bootstrap_modeled``:
  ``pd_facts.json`` digests of ``try_ensure_parallel_info`` / ``CommonKVReceiver``);
* ``decision``: the prefill's registration decision (``PDBehaviour.decision_modeled``);
* ``states``: the state components' transfer (``PDBehaviour.states_modeled``: 0.5.22, 0.5.23);
* ``startup``: the start-up refusals, the releases ``kvcheck.sglang.startup.STARTUP_VERIFIED_RELEASES``
  names (``unrestated_steps`` still leaves some flag sets of older releases ``startup-unchecked``);
* ``explain``: the runtime messages scanned per release (``kvcheck/explain/releases.json``).

``verified(subsystem, release)`` is the single question every stage asks; anything not
verified for a release is ``unchecked`` for it. A release after ``NEWEST`` (0.5.24) is
verified for nothing.

The window of a side whose release is not pinned is drawn from ``pd_releases()``: the
releases whose PD path (bootstrap checks and prefill decision) kvcheck models, 0.5.5 ..
0.5.23. Before 0.5.5 kvcheck has no PD facts: such a release is said to be outside the
window in the output, never decided.
"""

from __future__ import annotations

import functools

from kvcheck.release.version import version_key

NEWEST = "0.5.23"

SUBSYSTEMS = ("flags", "startup", "bootstrap", "decision", "states", "explain")


@functools.lru_cache(maxsize=1)
def flag_releases() -> tuple[str, ...]:
    """Every release with an argparse table, oldest first."""
    from kvcheck.sglang.flags import modeled_releases

    return tuple(sorted(modeled_releases(), key=version_key))


@functools.lru_cache(maxsize=1)
def pd_releases() -> tuple[str, ...]:
    """The releases whose PD path kvcheck models (flags, bootstrap checks and prefill
    decision all verified), oldest first: the universe a window is drawn from."""
    return tuple(v for v in flag_releases() if verified("bootstrap", v) and verified("decision", v))


def startup_verified_from() -> str:
    from kvcheck.sglang import startup

    return getattr(startup, "STARTUP_VERIFIED_FROM", NEWEST)


@functools.cache
def verified(subsystem: str, release: str | None) -> bool:
    """Whether kvcheck's ``subsystem`` is verified against ``release``'s own code."""
    if subsystem not in SUBSYSTEMS:
        raise ValueError(f"unknown subsystem {subsystem!r}")
    if not release or version_key(release) > version_key(NEWEST) or release not in flag_releases():
        return False
    if subsystem == "flags":
        return True
    if subsystem == "startup":
        from kvcheck.sglang import startup

        listed = getattr(startup, "STARTUP_VERIFIED_RELEASES", None)
        if listed is not None:  # the start-up package names each verified release
            return release in listed
        return version_key(release) >= version_key(startup_verified_from())
    if subsystem == "explain":
        return release in _explain_releases()
    from kvcheck.sglang.pd_release import behaviour

    b = behaviour(release)
    return {"bootstrap": b.bootstrap_modeled, "decision": b.decision_modeled, "states": b.states_modeled}[subsystem]


@functools.cache
def _explain_releases() -> frozenset[str]:
    """The releases ``kvcheck/explain/releases.json`` was scanned on (what
    ``kvcheck.explain.releases.load_message_releases()["releases"]`` holds), read without
    importing ``kvcheck.explain`` (its catalog and matcher): a pair's release window asks
    this for every release it decides."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "explain" / "releases.json"
    return frozenset(json.loads(path.read_text("utf-8")).get("releases", ()))


def is_modeled(release: str | None) -> bool:
    """A release kvcheck has any model of (its flag table)."""
    return verified("flags", release)


# Releases from which some behaviour kvcheck restates changes, named in code as a literal
# (``at_least`` / ``in_range`` / ``release_at_least`` bounds outside the variant tables):
# a pair decided over a window never groups releases on both sides of one of these.
# tests/test_release_window.py keeps this list complete.
CODE_BOUNDARIES = (
    "0.5.6.post1",
    "0.5.7",
    "0.5.8",
    "0.5.9",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.17",
    "0.5.18",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)


@functools.lru_cache(maxsize=1)
def boundaries() -> tuple[str, ...]:
    """Every release from which kvcheck's model of the runtime changes: the variant tables
    of ``pd_release`` (bootstrap checks, prefill decision), start-up's verified-from
    release, and ``CODE_BOUNDARIES``."""
    from kvcheck.sglang.pd_release import BOOTSTRAP_VARIANTS, DECISION_VARIANTS

    found = (
        set(CODE_BOUNDARIES)
        | set(BOOTSTRAP_VARIANTS.values())
        | set(DECISION_VARIANTS.values())
        | {startup_verified_from(), NEWEST}
    )
    return tuple(sorted(found, key=version_key))


@functools.cache
def epoch(release: str | None) -> tuple[bool, ...]:
    """Which of ``boundaries()`` ``release`` is at or after: releases with equal epochs
    sit between the same boundaries."""
    k = version_key(release)
    return tuple(k >= version_key(b) for b in boundaries())


def table() -> list[dict]:
    """The manifest as rows (``kvcheck releases``, docs): release -> subsystem -> verified."""
    return [{"release": v, **{s: verified(s, v) for s in SUBSYSTEMS}} for v in flag_releases()]
