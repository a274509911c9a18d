"""A side's releases, and a pair decided over them (issue 14: "Release not pinned").

``side_window(clues, parse)``: the releases a side may run. Its clues
(``kvcheck.sources.release_clues.ReleaseClue``) say which releases the input allows: the
strongest clue wins (``--sglang-version`` > image tag / recipe pin / pip line /
``/server_info`` > a dated nightly); clues that disagree are said in ``conflict``. Without
a clue, the candidates are every release whose PD path kvcheck models
(``manifest.pd_releases()``). The flags are evidence too: only the candidates whose own
argparse table accepts every flag of the side stay (``parse(release)`` raises otherwise).
When no candidate accepts them, the server refuses its flags at start-up on every release
it may run: ``refusal`` holds the newest candidate's parser error (exit 1).

``pair_candidates(p, d)``: the (prefill release, decode release) pairs to decide: both
sides on the same release unless their clues pin them apart.

``combine(groups)``: the pair's answer from one decision per distinct behaviour: every
group agrees -> that answer, naming the window; they differ -> ``unchecked`` with the
per-release table (``window_table``).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kvcheck.release import manifest
from kvcheck.release.version import span, version_key


class NotARefusal(Exception):
    """Raised by a ``parse`` callable for an error that is kvcheck's own input, not a
    release's parser refusing a flag (``error``: the ``InputError`` to raise, exit 2)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


@dataclass
class SideRelease:
    """What kvcheck knows of one side's SGLang release.

    ``releases``: the window (oldest first): the releases the side may run that kvcheck
    decides on; one when pinned. ``pinned``: a clue names exactly one release. ``how``:
    how the releases were found, for the output. ``problem``: the strongest clue names a
    release kvcheck does not model or cannot be read (the side is ``unchecked``; ``named``
    is the release as written, if any). ``conflict``: clues that disagree, said as a
    finding. ``refusal``: (release, error) when no candidate release's parser accepts the
    side's flags. ``parsed``: release -> what ``parse`` returned for it. ``outside``: what
    the window leaves out and why (``"0.5.0rc2-0.5.4.post3 (no PD model)"``). ``older``:
    set with ``problem`` when no release of the window reads the flags but releases kvcheck
    does not model the PD path of do (0.5.0rc2-0.5.4.post3 by their own tables, 0.4.x by
    their option names, ``kvcheck.release.older``): the side runs one of those.
    ``beyond_newest``: the clue that also allows releases newer than the newest modeled
    one (an open pip range, ``sglang>=0.5.9``), else None: the side may run a release
    kvcheck does not model, so the pair never passes on the modeled ones alone.
    ``value_refused``: release -> the parser's error, for the releases of the window whose
    parser refuses a flag's VALUE (a type or choice that changed) while others accept the
    flags: on those the server exits at start-up, on ``releases`` it starts; the pair is
    decided over both (``kvcheck.cluster.decide``: a start-up refusal is a fail there)."""

    releases: tuple[str, ...] = ()
    pinned: bool = False
    how: str = ""
    problem: str | None = None
    named: str | None = None
    conflict: str | None = None
    refusal: tuple[str, Exception] | None = None
    refused_on: tuple[str, ...] = ()
    parsed: dict[str, Any] = field(default_factory=dict)
    outside: str = ""
    clues: list = field(default_factory=list)
    older: str | None = None
    value_refused: dict[str, Exception] = field(default_factory=dict)
    beyond_newest: str | None = None

    @property
    def label(self) -> str:
        """``"0.5.9"`` when pinned, ``"0.5.5-0.5.23 (window)"`` otherwise."""
        if not self.releases:
            return self.named or "unknown"
        return self.releases[0] if self.pinned else f"{span(list(self.releases))} (window)"

    def contract(self) -> dict[str, Any]:
        return {
            "releases": list(self.releases),
            "pinned": self.pinned,
            "how": self.how,
            "clues": [
                {
                    "text": c.text,
                    "named": c.named,
                    "releases": list(c.releases),
                    "location": c.location,
                    "strength": c.strength,
                    "problem": c.problem,
                }
                for c in self.clues
            ],
            "problem": self.problem,
            "conflict": self.conflict,
            "refused_on": list(self.refused_on),
            "outside": self.outside or None,
            "refuses_to_start_on": sorted(self.value_refused, key=version_key),
        }


def _strongest(clues: list) -> tuple[list, list]:
    """(the clues of the highest strength, the weaker ones)."""
    if not clues:
        return [], []
    top = max(c.strength for c in clues)
    return [c for c in clues if c.strength == top], [c for c in clues if c.strength != top]


def side_window(clues: Iterable, parse: Callable[[str], Any], options: Iterable[str] = ()) -> SideRelease:
    """The ``SideRelease`` of a side with these clues whose flags ``parse(release)``
    reads (raising ``kvcheck.errors.InputError`` / ``ArgparseRefusal`` where that
    release's parser refuses them); ``options``: the side's ``--option`` words (for
    ``older_reading``). See the module docstring."""
    clues = [c for c in clues if c is not None]
    strong, weak = _strongest(clues)
    out = SideRelease(clues=clues)
    universe = manifest.pd_releases()
    if strong:
        unreadable = [c for c in strong if not c.releases]
        readable = [c for c in strong if c.releases]
        if readable:
            allowed: list[str] = []
            for c in readable:
                allowed += [r for r in c.releases if r not in allowed]
            allowed.sort(key=version_key)
            texts = "; ".join(c.text for c in readable)
            disagree = [c for c in readable if set(c.releases) != set(readable[0].releases)]
            if disagree:
                out.conflict = (
                    "clues of equal weight name different releases "
                    f"({'; '.join(f'{c.text} -> {span(list(c.releases))}' for c in readable)}); kvcheck decides "
                    "over all of them"
                )
            if unreadable:
                extra = "; ".join(c.problem or c.text for c in unreadable)
                out.conflict = (out.conflict + "; " if out.conflict else "") + f"also: {extra}"
            weaker = [c for c in weak if c.releases and not set(c.releases) & set(allowed)]
            if weaker:
                said = "; ".join(f"{c.text} -> {span(list(c.releases))}" for c in weaker)
                out.conflict = (out.conflict + "; " if out.conflict else "") + f"{texts} wins over {said}"
            candidates = tuple(allowed)
            how = texts
            out.beyond_newest = next((c.text for c in readable if getattr(c, "beyond_newest", False)), None)
        else:
            c = unreadable[0]
            out.problem = c.problem or f"{c.text} names no release kvcheck models"
            out.named = c.named
            out.how = c.text
            return out
    else:
        candidates = universe
        before = [v for v in manifest.flag_releases() if version_key(v) < version_key(universe[0])] if universe else []
        out.outside = f"{span(before)} (kvcheck has no model of their PD path)" if before else ""
        how = "no clue to the release (no image tag, recipe pin, pip line or --sglang-version)"
    accepted, refused = [], []
    errors: dict[str, str] = {}
    excs: dict[str, Exception] = {}
    last_error: tuple[str, Exception] | None = None
    for v in candidates:
        try:
            out.parsed[v] = parse(v)
            accepted.append(v)
        except NotARefusal as exc:
            raise exc.error from None
        except Exception as exc:  # the release's parser refuses the side's flags
            from kvcheck.errors import InputError

            if not isinstance(exc, InputError):
                raise
            refused.append(v)
            errors[v] = str(exc)
            excs[v] = exc
            last_error = (v, exc)
    out.refused_on = tuple(refused)
    if (
        not accepted
        and strong
        and all(_derived_pin(c) for c in strong)
        and last_error is not None
        and not _value_refusal(str(last_error[1]))
    ):
        # A pin derived from a Dynamo release (``dynamo.version`` with srt-slurm's
        # site-built ``dynamo-sglang`` container, which installs Dynamo without its sglang
        # extra) that the flags contradict by name: the container runs another release.
        # Decide over the releases whose parser reads the flags, and say so.
        rest = [c for c in clues if c not in strong]
        again = side_window(rest, parse, options)
        said = "; ".join(c.text for c in strong)
        note = (
            f"{said}, but that release's parser refuses the flags ({str(last_error[1])[:200]}): "
            "the container runs another SGLang release; decided over the releases that accept them"
        )
        again.conflict = note + ("; " + again.conflict if again.conflict else "")
        again.clues = clues
        return again
    if not accepted and not strong and last_error is not None:
        # No clue, and no release whose PD path kvcheck models reads the flags: a file
        # written for an older release (a flag it retired), or a typo.
        older = older_reading(parse, options, last_error[1], candidates)
        if older is not None:
            out.problem, out.older, out.how = older, older, how
            return out
    if not accepted:
        out.refusal = last_error
        out.how = how
        return out
    by_value = [v for v in refused if _value_refusal(errors[v])]
    if by_value:
        # A flag's VALUE that some releases' parsers refuse (a type that changed, e.g.
        # --preferred-sampling-params type=str before json.loads) does not tell the release:
        # the server refuses to start on those releases and starts on the others. Both are
        # possible: the pair is decided over both (the refusal is a fail on its releases).
        v = by_value[-1]
        out.value_refused = {r: excs[r] for r in by_value}
        how += (
            f"; the server refuses to start on SGLang {span(by_value) if len(by_value) > 1 else v} "
            f"({errors[v]}) and its parser accepts the flags on {span(accepted)}"
        )
        refused = [r for r in refused if r not in out.value_refused]
    out.releases = tuple(accepted)
    out.pinned = len(accepted) == 1 and bool(strong) and not out.value_refused
    if refused:
        how += f"; the flags are refused by {span(refused) if len(refused) > 1 else refused[0]}'s parser"
        if not strong:
            how += f", accepted by {span(accepted)}"
    elif not strong:
        how += f"; every release whose PD path kvcheck models accepts the flags ({span(accepted)})"
    out.how = how
    return out


def name_refusal(exc: Exception) -> str | None:
    """The ``--option`` a parser refused by its name (unrecognized, ambiguous, retired),
    else None (a value refused, a stray word that is no option at all)."""
    import re

    text = str(exc)
    m = re.search(r"unrecognized arguments: (\S+)", text)
    if m:
        word = m.group(1).rstrip(";,")
        return word.split("=", 1)[0] if word.startswith("--") else None
    option = getattr(exc, "option", None)
    if "ambiguous option" in text and option:
        return str(option).split("=", 1)[0]
    if "refuses this retired flag" in text:
        field_ = getattr(exc, "field", None)
        m = re.search(r"argument (--[A-Za-z0-9-]+)", text)
        return m.group(1) if m else (str(field_) if field_ else None)
    return None


def older_reading(
    parse: Callable[[str], Any], options: Iterable[str], error: Exception, tried: Iterable[str] = ()
) -> str | None:
    """Why a side whose flags no release in ``tried`` reads runs an older release: the
    releases with flag tables before those (0.5.0rc2-0.5.4.post3, read with their own
    parser, ``parse``), else the 0.4.x releases whose option names take every option
    (``kvcheck.release.older``). None when the refusal is not of a flag's name
    (``name_refusal``) or no older release takes the flags: the server refuses them."""
    from kvcheck.errors import InputError
    from kvcheck.release import older

    refused = name_refusal(error)
    if refused is None:
        return None
    tried = set(tried)
    first = min(tried, key=version_key) if tried else None
    below = [
        v for v in manifest.flag_releases() if v not in tried and (first is None or version_key(v) < version_key(first))
    ]
    took = []
    for v in below:
        try:
            parse(v)
            took.append(v)
        except InputError:
            continue
    if took:
        return (
            "its flags are refused by SGLang "
            f"{span(sorted(tried, key=version_key)) if tried else 'every modeled release'} "
            f"({str(error)[:160]}) and read by SGLang {span(took) if len(took) > 1 else took[0]}, "
            "releases whose PD path kvcheck does not model: the server runs one of those"
        )
    found = older.accepting(list(options) or [refused])
    if found:
        return (
            f"{refused} is a flag no release kvcheck has tables for (0.5.0rc2-{manifest.NEWEST}) takes, but "
            f"SGLang {older.describe(found)} register every flag of this server: it runs an older SGLang, which "
            "kvcheck does not model"
        )
    return None


def _derived_pin(clue) -> bool:
    """A clue whose release is derived from a Dynamo release's pin, not read off SGLang's own version."""
    return "Dynamo" in clue.text and "pins SGLang" in clue.text


def _value_refusal(text: str) -> bool:
    """Whether an argparse refusal is about a flag's value (``invalid loads value``,
    ``invalid choice``, ``expected one argument``) rather than its name (unrecognized,
    ambiguous): only a name narrows the window."""
    return (" invalid " in text and " value" in text) or "invalid choice" in text or "expected one argument" in text


def pair_candidates(p: SideRelease, d: SideRelease) -> list[tuple[str, str]]:
    """The (prefill release, decode release) pairs to decide: the same release on both
    sides where both windows hold it; a side pinned to X with the other open runs X on
    both when the other's window holds it; else every combination (clues pin the sides
    to different releases)."""
    if p.pinned and d.pinned:
        return [(p.releases[0], d.releases[0])]
    common = [r for r in p.releases if r in d.releases]
    if p.pinned:
        x = p.releases[0]
        return [(x, x)] if x in d.releases else [(x, r) for r in d.releases]
    if d.pinned:
        x = d.releases[0]
        return [(x, x)] if x in p.releases else [(r, x) for r in p.releases]
    if common:
        return [(r, r) for r in common]
    return [(a, b) for a in p.releases for b in d.releases]


def refusal_pairs(p: SideRelease, d: SideRelease) -> list[tuple[str, str]]:
    """The (prefill release, decode release) pairs of the two windows, taken whole (the
    releases each side starts on and those whose parser refuses a flag's value:
    ``value_refused``), on which a side refuses to start; the pairs of ``pair_candidates``
    are those on which both start."""
    if not p.value_refused and not d.value_refused:
        return []
    from dataclasses import replace

    def whole(s: SideRelease) -> SideRelease:
        return replace(s, releases=tuple(sorted({*s.releases, *s.value_refused}, key=version_key)))

    return [(a, b) for a, b in pair_candidates(whole(p), whole(d)) if a in p.value_refused or b in d.value_refused]


@dataclass
class Group:
    """Releases that behave alike for a pair, decided once. ``pairs``: the (prefill,
    decode) releases; ``outcome``: (verdict, finding ids); ``result``: the decision."""

    pairs: list[tuple[str, str]]
    outcome: tuple[str, tuple[str, ...]] = ("pass", ())
    result: Any = None
    text: str = ""
    members: list = field(default_factory=list)
    gpu: str | None = None  # the GPU assumed for this group (a GPU window), None when given

    @property
    def label(self) -> str:
        return releases_label(self.pairs) + (f" on {gpu_label(self.gpu)}" if self.gpu else "")


# The GPUs a pair is decided on when no GPU is given for either side (page sizes and
# attention backends are chosen by the GPU's generation): one Hopper, one Blackwell.
ASSUMED_GPUS = ("h100", "b200")
_GPU_LABEL = {"h100": "Hopper (h100)", "b200": "Blackwell (b200)"}


def gpu_label(gpu: str | None) -> str:
    return _GPU_LABEL.get(gpu or "", gpu or "")


def releases_label(pairs: list[tuple[str, str]]) -> str:
    """``"0.5.9-0.5.21"`` (same release on both sides), else ``"0.5.9/0.5.22, ..."``."""
    if all(a == b for a, b in pairs):
        rels = sorted({a for a, _ in pairs}, key=version_key)
        return _runs(rels)
    return ", ".join(f"{a} (prefill) / {b} (decode)" for a, b in pairs[:6]) + (" ..." if len(pairs) > 6 else "")


def _runs(rels: list[str]) -> str:
    """Consecutive runs of modeled releases: ``"0.5.5-0.5.8, 0.5.10"``."""
    order = list(manifest.flag_releases())
    idx = sorted(order.index(r) if r in order else -1 for r in rels)
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(span([order[j] for j in run]) for run in runs)


def group_by(candidates: list[tuple[str, str]], signature: Callable[[str, str], Any]) -> list[Group]:
    """Candidates grouped by ``signature(prefill release, decode release)`` (releases whose
    PD behaviour, start-up outcome and parsed flags are equal decide alike), newest first."""
    by: dict[Any, Group] = {}
    for pr in sorted(candidates, key=lambda t: (version_key(t[0]), version_key(t[1])), reverse=True):
        by.setdefault(signature(*pr), Group(pairs=[])).pairs.append(pr)
    return list(by.values())


def merge_outcomes(groups: list[Group]) -> list[Group]:
    """Groups with the same verdict joined (releases of one answer, newest group first;
    ``outcome`` keeps the union of their finding ids). Only ``result`` of the newest
    group of each verdict is kept; ``members`` holds every group joined."""
    by: dict[Any, Group] = {}
    for g in groups:
        hit = by.get(g.outcome[0])
        if hit is None:
            by[g.outcome[0]] = Group(pairs=list(g.pairs), outcome=g.outcome, result=g.result, text=g.text, members=[g])
        else:
            hit.pairs += g.pairs
            hit.members.append(g)
            hit.outcome = (hit.outcome[0], tuple(sorted(set(hit.outcome[1]) | set(g.outcome[1]))))
    for g in by.values():
        g.pairs.sort(key=lambda t: (version_key(t[0]), version_key(t[1])))
    return list(by.values())


_VERB = {"fail": "fails", "unchecked": "is unchecked", "warn": "passes with warnings", "pass": "passes"}


def window_table(groups: list[Group]) -> str:
    """``"fails on 0.5.9-0.5.21: <the runtime's text>; passes on 0.5.22-0.5.23"``."""
    parts = []
    for g in sorted(groups, key=lambda g: (g.gpu or "", version_key(g.pairs[0][0]))):
        verb = _VERB.get(g.outcome[0], g.outcome[0])
        parts.append(f"{verb} on {g.label}" + (f": {g.text}" if g.text else ""))
    return "; ".join(parts)
