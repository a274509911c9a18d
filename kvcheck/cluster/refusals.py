"""An instance its server's release would not start, or kvcheck cannot judge: the
refusals of the instances stage (``kvcheck.cluster.instances``).

* ``refusal_finding``: the ``startup-argparse`` error of a server whose flags every release
  it may run refuses while parsing (``prepare_server_args`` -> ``argparse``, exit 2 at
  start-up), in the parser's own words quoted under ``kvcheck.sources.quoting``'s rule;
* ``refused`` / ``Refused``: such an instance as an ``InstanceResult`` of its own class
  with no side (its pairs fail on it);
* ``unmodeled`` / ``Unmodeled``: an instance on a release kvcheck does not model that may
  read its flags (``unknown-release``, unchecked; never a refusal);
* ``option_words`` and ``unmodeled_reading``: what the release stage needs to tell the two
  apart.
"""

from __future__ import annotations

import re
from typing import Any

from kvcheck.checks.base import Finding, Severity
from kvcheck.cluster.model import InstanceResult, Located, finding
from kvcheck.errors import ArgparseRefusal
from kvcheck.sources.deployments.instance import Instance


def refused(ir: InstanceResult, sr: Any) -> InstanceResult:
    """An instance whose flags no release it may run accepts (``sr``: its
    ``SideRelease`` with ``refusal`` set): the server refuses them at start-up, so the
    instance gets the ``startup-argparse`` error at the refused flag's line and its own
    class with no side (its pairs fail on it; nothing else about them is judged)."""
    inst = ir.instance
    release, exc = sr.refusal
    f = refusal_finding(inst.role, inst.name, str(inst.location), sr, exc, inst.inner_values)
    option = getattr(exc, "option", None) or refused_option(exc)
    ir.release, ir.release_source = None, sr.how
    ir.findings.append(Located(f, inst.arg_locations.get(option or "") or inst.location))
    if sr.conflict:
        ir.findings.append(
            finding(
                "release-clues-disagree",
                Severity.WARNING,
                f"{inst.name}: {sr.conflict}",
                "Make the image tag, recipe pins and --sglang-version name one release.",
                inst.location,
            )
        )
    ir._key = ("argparse-refused", inst.role, tuple(inst.argv), release)  # type: ignore[attr-defined]
    return ir


def unmodeled(ir: InstanceResult, sr: Any, why: str) -> InstanceResult:
    """An instance on a release kvcheck does not model whose flags that release may read
    (``Unmodeled``): an ``unknown-release`` finding and its own class with no side (its
    pairs are unchecked)."""
    inst = ir.instance
    ir.release, ir.release_source = sr.named, sr.how
    ir.findings.append(
        finding(
            "unknown-release",
            Severity.UNCHECKED,
            f"{inst.name}: the {inst.role} runs an SGLang release kvcheck does not model ({sr.how}): {why}; this "
            "pair is not judged",
            f"Give the {inst.role}'s release with --{inst.role}-sglang-version VERSION (or pin the image tag), or "
            "run a modeled release (0.5.5 or newer).",
            inst.location,
        )
    )
    ir._key = ("blocked", inst.role, id(inst))  # type: ignore[attr-defined]
    return ir


def refused_option(exc: Exception) -> str | None:
    """The flag an ``InputError`` of the flag parser names (``unrecognized arguments:
    --page-sise 16`` -> ``--page-sise``; ``field '--page-size'`` -> ``--page-size``)."""
    text = str(exc)
    m = re.search(r"unrecognized arguments: (\S+)", text)
    if m:
        return m.group(1).split("=", 1)[0]
    field_ = getattr(exc, "field", None)
    return field_ if isinstance(field_, str) and field_.startswith("--") else None


def refusal_finding(
    role: str, name: str, where: str, sr: Any, exc: Exception, inner_values: frozenset[str] = frozenset()
) -> Finding:
    """The ``startup-argparse`` error of a server whose flags every release it may run
    refuses while parsing (``prepare_server_args`` -> ``argparse``: usage, ``error: ...``,
    exit status 2). The parser's text quotes the input only under
    ``kvcheck.sources.quoting.argparse_shown``'s rule (``inner_values``: the values the
    instance took from a file named inside its input, never shown)."""
    from kvcheck.checks.startup import ARGPARSE_OPERATOR_SEES, argparse_finding
    from kvcheck.release.version import span
    from kvcheck.sglang.plan import RuntimeErrorPrediction
    from kvcheck.sources.quoting import argparse_shown, shown

    tried = list(sr.refused_on)
    on = f"SGLang {tried[0]}" if len(tried) == 1 else f"every release it may run (SGLang {span(tried)}; {sr.how})"
    if sr.problem is not None and len(tried) > 1:
        # the side's own release has no table (``sr.problem``): the refusal is one that
        # holds on every release kvcheck has a parser for, whatever the release
        on = (
            f"every release kvcheck has a parser for (SGLang {span(tried)}), a refusal that does not depend on the "
            "release "
            f"(the side's own: {sr.problem})"
        )
    if isinstance(exc, ArgparseRefusal):
        exc.release, exc.version_source = tried[-1] if tried else None, sr.how
        exc.argparse_message = argparse_shown(exc.argparse_message, inner_values)
        exc.option = shown(exc.option) if exc.option not in inner_values else "<value from --config>"
        f = argparse_finding(role, exc)
        f.message = f"{name}: {f.message}" + ("" if len(tried) <= 1 else f"; refused by {on}")
        return f
    text = str(exc)
    source = getattr(exc, "source", None)
    for prefix in ([f"{source}: "] if source else []) + [f"field {getattr(exc, 'field', None)!r}: "]:
        if text.startswith(prefix):
            text = text[len(prefix) :]
    text = argparse_shown(text, inner_values)
    argparse_text, _, hint = text.partition("; did you mean")
    return Finding(
        id="startup-argparse",
        severity=Severity.ERROR,
        message=f"{name}: the {role} server refuses to start ({where}): the argument parser of {on} refuses its "
        f"flags: {text}",
        fix=(f"Did you mean{hint.rstrip('?')}? " if hint else "")
        + "Fix the flag (a typo, or a flag of another release): the server exits while parsing its flags.",
        runtime_error=RuntimeErrorPrediction(
            type="SystemExit",
            message=argparse_text.strip(),
            raised_by=f"{role}: server start-up (argument parsing: prepare_server_args -> argparse)",
            when="start-up",
            operator_sees=ARGPARSE_OPERATOR_SEES,
        ),
    )


class Refused(Exception):
    def __init__(self, sr: Any):
        self.sr = sr


class Unmodeled(Exception):
    """A side whose flags no release kvcheck has a table for reads, on a release kvcheck
    does not model that may read them (``why``): unchecked, never a refusal."""

    def __init__(self, sr: Any, why: str):
        self.sr, self.why = sr, why


def option_words(inst: Instance) -> list[str]:
    """The ``--option`` words of an instance: its launch line's, or a config file's keys
    (``arg_locations``) for pair inputs read by their own ``parse_for``."""
    words = [t for t in inst.argv if isinstance(t, str) and t.startswith("--")]
    return words or [k for k in inst.arg_locations if isinstance(k, str) and k.startswith("--")]


def unmodeled_reading(sr: Any, options: list[str]) -> str | None:
    """Why a side on a release kvcheck has no table for (``sr.named``, or a tag that
    names none) may read flags that every table refuses by name, else None (the refusal
    holds whatever the release: a value, a stray word, a flag that release lacks).

    A named release older than the tables: its own option names (``kvcheck.release.older``)
    take every flag -> unchecked; they lack one -> refused. A release newer than the
    newest modeled, or one no clue names: a flag refused by name may be one that release
    added -> unchecked."""
    from kvcheck.release import older
    from kvcheck.release.window import name_refusal

    release, exc = sr.refusal
    refused = name_refusal(exc)
    if refused is None:
        return None
    named = sr.named
    if named and older.is_older(named):
        if named in older.releases() and named in older.accepting(options):
            return (
                f"SGLang {named} (before kvcheck's flag tables) registers every flag of this server ({refused} "
                "included): kvcheck does not model it"
            )
        return None
    what = f"SGLang {named}" if named else "the release the image runs, which no clue names,"
    return (
        f"{refused} is refused by every release kvcheck has tables for (newest {manifest_newest()}: {str(exc)[:160]}), "
        f"but {what} may have added it: unless it did, the server refuses it at start-up"
    )


def manifest_newest() -> str:
    from kvcheck.release import manifest

    return manifest.NEWEST
