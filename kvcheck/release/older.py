"""Flags of SGLang releases older than kvcheck's flag tables (0.4.0 .. 0.4.10.post2).

kvcheck decides nothing on those releases. It only needs to tell a launch line written
for one of them from a typo: ``--enable-deepep-moe`` is refused by every release kvcheck
has a table for (0.5.0rc2 .. 0.5.23), but SGLang 0.4.4.post2 .. 0.4.10.post2 register it,
and a published file that uses it ran on one of those. Such a side runs a release kvcheck
does not model (``unknown-release``, unchecked), not a server that refuses its flags.

``older_flags.json`` (``scripts/gen_older_flags.py``): per option string, the runs of
releases whose ``sglang/srt/server_args.py`` (PyPI wheel) registers it. Names only: the
values are not read, so nothing is decided from this table, only ``unchecked`` said.

Standard library only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

from kvcheck.release.version import span, version_key

_FILE = Path(__file__).with_name("older_flags.json")


@functools.lru_cache(maxsize=1)
def _table() -> tuple[tuple[str, ...], dict[str, frozenset[str]]]:
    data = json.loads(_FILE.read_text("utf-8"))
    releases = tuple(data["releases"])
    index = {v: i for i, v in enumerate(releases)}
    per: dict[str, set[str]] = {v: set() for v in releases}
    for option, runs in data["options"].items():
        for first, last in runs:
            for v in releases[index[first] : index[last] + 1]:
                per[v].add(option)
    return releases, {v: frozenset(s) for v, s in per.items()}


def releases() -> tuple[str, ...]:
    """The older releases the table holds, oldest first."""
    return _table()[0]


def _takes(options: frozenset[str], token: str) -> bool:
    """argparse's ``_parse_optional`` on option names only: an exact option string, or an
    unambiguous prefix of one (``allow_abbrev``, as every SGLang parser)."""
    name = token.split("=", 1)[0]
    if name in options:
        return True
    return sum(1 for o in options if o.startswith(name)) == 1


def accepting(tokens: Iterable[str]) -> list[str]:
    """The older releases whose option strings take every ``--option`` of ``tokens``
    (a launch line's words, or a config file's keys as ``--key``), oldest first."""
    opts = [t for t in tokens if isinstance(t, str) and t.startswith("--") and len(t) > 2]
    if not opts:
        return []
    rels, per = _table()
    return [v for v in rels if all(_takes(per[v], t) for t in opts)]


def describe(found: list[str]) -> str:
    return span(found) if len(found) > 1 else found[0]


def is_older(release: str | None) -> bool:
    """``release`` is older than every release kvcheck has a flag table for."""
    from kvcheck.release import manifest

    return bool(release) and version_key(release) < version_key(manifest.flag_releases()[0])
