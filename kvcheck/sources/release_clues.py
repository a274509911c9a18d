"""Every clue a deployment gives to the SGLang release a server runs.

This is the contract between the readers (``kvcheck.sources``), which find clues, and
the release stage (``kvcheck.release``), which turns a side's clues and its flags into
a pinned release or a window of modeled releases and decides the pair over it.

A ``ReleaseClue`` says which releases one piece of evidence allows:

* an image tag that names a release, from any registry (``lmsysorg/sglang:v0.5.8.post1-cu126``,
  ``myreg.io/team/sglang-pd:v0.5.5.post3-nixl-1.0``) -> that one;
* an srt-slurm ``identity.frameworks.sglang: "0.5.11"`` or container alias
  ``sglang-v0.5.11-cu130`` -> that one;
* a Dynamo runtime image, or ``dynamo.version`` with ``container: dynamo-sglang`` -> the
  SGLang its ``ai-dynamo[sglang]`` pins (``kvcheck.sglang.releases.DYNAMO_SGLANG``);
* ``pip install sglang==X`` / ``uv pip install "sglang[all]==X"`` in a script or
  Dockerfile -> X; a range (``"sglang[all]>=0.5.9"``) -> the modeled releases in it
  (``beyond_newest`` when it is open above the newest modeled release);
* a dated nightly tag -> the releases on either side of its date (several, ``window``);
* a live server's ``/server_info`` ``version`` -> that one;
* ``--sglang-version`` (and the per-side forms) -> that one; it wins over the others.

``releases`` is empty when the clue names a release kvcheck does not model (``named``
then says which) or names none it can read (``problem`` says why): such a side is
``unchecked`` until pinned, never judged with another release's answers. Clues that
disagree are all kept (``clues_for_instance``; ``disagreement`` says how), so the
release stage can say so.

Standard library only on the cold path (``packaging`` only for a pip line's range).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# How strong a clue is: an explicit pin from the user beats what the input says.
STRENGTH_CLI = 3  # --sglang-version / --prefill-sglang-version / --decode-sglang-version
STRENGTH_INPUT = 2  # image tag, recipe pin, pip line, /server_info
STRENGTH_RANGE = 1  # a nightly date, a Dynamo image whose pin is a range, a pip range


@dataclass(frozen=True)
class ReleaseClue:
    """One piece of evidence about a side's SGLang release.

    ``releases``: the modeled releases this clue allows, oldest first (one for a pin,
    several for a dated nightly); empty when it allows none kvcheck models.
    ``text``: what the clue is, as the output says it (``"image tag lmsysorg/sglang:v0.5.9"``).
    ``named``: the release as written (``"0.5.9"``), None when the clue names a range.
    ``location``: ``file:line`` where it was written, when known.
    ``strength``: ``STRENGTH_CLI`` > ``STRENGTH_INPUT`` > ``STRENGTH_RANGE``.
    ``problem``: why the clue could not be read, else None.
    ``window``: the clue allows several releases (a dated build, a pip range).
    ``beyond_newest``: the clue also allows releases newer than the newest modeled one
    (an open pip range such as ``>=0.5.9``): a side whose other clues do not narrow it is
    not judged as if it ran only modeled releases.
    """

    releases: tuple[str, ...]
    text: str
    named: str | None = None
    location: str | None = None
    strength: int = STRENGTH_INPUT
    problem: str | None = None
    window: bool = False
    beyond_newest: bool = False


@dataclass
class ClueSet:
    """All the clues of one side, in the order found."""

    clues: list[ReleaseClue] = field(default_factory=list)

    def add(self, clue: ReleaseClue | None) -> None:
        if clue is not None and clue not in self.clues:
            self.clues.append(clue)


def clue_from_image(
    image: str | None, location: str | None = None, *, dynamo_version: str | None = None
) -> ReleaseClue | None:
    """The clue an image reference gives (None when there is no image), read with
    ``kvcheck.sglang.releases.read_image``: any registry, custom tags, srt-slurm aliases
    (``dynamo-sglang`` with the recipe's ``dynamo.version``), Dynamo runtime images and
    dated nightlies (a window, ``STRENGTH_RANGE``)."""
    if not image:
        return None
    from kvcheck.sglang.releases import read_image

    got = read_image(image, dynamo_version)
    if got is None:
        return None
    strength = STRENGTH_RANGE if got.window else STRENGTH_INPUT
    return ReleaseClue(got.releases, got.text, got.named, location, strength, got.problem, got.window)


def clue_from_release(
    version: str | None, text: str, location: str | None = None, strength: int = STRENGTH_INPUT
) -> ReleaseClue | None:
    """A clue that names one release as written (a recipe's
    ``identity.frameworks.sglang``, ``/server_info`` ``version``); None when absent."""
    if version is None or not str(version).strip():
        return None
    from kvcheck.sglang.releases import parse_release

    raw = str(version).strip()
    rel = parse_release(raw)
    if rel is None:
        return ReleaseClue((), text, raw, location, strength, f"{text}: {raw!r} is not an SGLang release number")
    return _one_release(rel, text, location, strength)


def clue_from_cli(version: str | None, option: str = "--sglang-version") -> ReleaseClue | None:
    """The clue ``--sglang-version`` (or a per-side option) gives."""
    if not version:
        return None
    from kvcheck.sglang.releases import parse_release

    return _one_release(parse_release(version) or version.strip(), option, None, STRENGTH_CLI)


def _one_release(rel: str, text: str, location: str | None, strength: int) -> ReleaseClue:
    """The clue naming release ``rel`` (said by ``text``): that release when kvcheck models
    it, else no release and the problem saying so."""
    from kvcheck.sglang.releases import is_modeled

    ok = is_modeled(rel)
    return ReleaseClue(
        (rel,) if ok else (),
        text,
        rel,
        location,
        strength,
        None if ok else f"SGLang {rel} ({text}) is not a release kvcheck models",
    )


# pip / uv / python -m pip install ... sglang[extras]SPEC  (one statement, quotes allowed)
_PIP = re.compile(r"(?:\bpip3?|\buv\s+pip|\bpython3?\s+-m\s+pip)\s+install\b([^\n;&|]*)")
_SGLANG_REQ = re.compile(r"""^["']?sglang(?:\[[^\]]*\])?\s*((?:[<>=!~]=?|===)[^"'\s]*)?["']?$""")


def clues_from_text(text: str, file: str) -> list[ReleaseClue]:
    """The ``pip install sglang...`` clues of a shell script or Dockerfile, in order, one
    per install line (``RUN pip install``, ``uv pip install "sglang[all]==X"``). A pin
    gives its release; a range gives the modeled releases in it (``window``, and
    ``beyond_newest`` when it has no upper bound); no version at all installs the newest
    release when the script runs, which no clue can pin (``problem``)."""
    out: list[ReleaseClue] = []
    joined = text.replace("\\\n", "  ")  # line continuations, same length: positions hold
    for m in _PIP.finditer(joined):
        for token in m.group(1).split():
            req = _SGLANG_REQ.match(token)
            if not req:
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(_pip_clue(req.group(1) or "", token.strip("\"'"), f"{file}:{line}"))
    return out


def _pip_clue(spec: str, token: str, location: str) -> ReleaseClue:
    from kvcheck.sglang.releases import modeled, parse_release

    what = f"pip install {token}"
    if not spec:
        return ReleaseClue(
            (),
            what,
            None,
            location,
            STRENGTH_INPUT,
            f"{what} names no version: it installs the newest SGLang on PyPI when it runs; pin sglang==X or pass "
            "--sglang-version",
        )
    if spec.startswith("==") and "*" not in spec:
        rel = parse_release(spec.lstrip("="))
        if rel is None:
            return ReleaseClue(
                (),
                what,
                spec.lstrip("="),
                location,
                STRENGTH_INPUT,
                f"{what}: {spec!r} is not an SGLang release number",
            )
        return _one_release(rel, what, location, STRENGTH_INPUT)
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # pragma: no cover - packaging ships with pip
        return ReleaseClue((), what, None, location, STRENGTH_RANGE, f"{what}: cannot read the range {spec!r}")
    try:
        spec_set = SpecifierSet(spec)
    except InvalidSpecifier:
        return ReleaseClue((), what, None, location, STRENGTH_RANGE, f"{what}: {spec!r} is not a version range")
    allowed = tuple(r for r in modeled() if spec_set.contains(r, prereleases=True))
    open_above = not any(s.operator in ("<", "<=", "==", "===", "~=") for s in spec_set)
    problem = None if allowed else f"{what}: no release kvcheck models is in {spec}"
    return ReleaseClue(allowed, what, None, location, STRENGTH_RANGE, problem, True, open_above)


def disagreement(clues: list[ReleaseClue]) -> str | None:
    """A sentence when the clues of one side allow no common release (two pins that
    differ, a pin outside a nightly's window), naming each; None when they agree or only
    one clue names releases. The strongest clue still wins; this is for the output."""
    named = [c for c in clues if c.releases or c.named]
    if len(named) < 2:
        return None
    common = set(named[0].releases)
    for c in named[1:]:
        common &= set(c.releases)
    if common:
        return None
    parts = [
        f"{c.text}{' (' + c.location + ')' if c.location else ''} says {c.named or ', '.join(c.releases) or 'none'}"
        for c in named
    ]
    return "the clues to the SGLang release disagree: " + "; ".join(parts)


def clues_for_instance(instance) -> list[ReleaseClue]:
    """Every clue a deployment ``Instance`` carries: its image, then the clues its reader
    attached (``instance.release_clues``: recipe pins, pip lines, Dynamo versions). Clues
    that disagree are all kept, so the release stage can say so (``disagreement``).
    A reader that read the image itself with more context (``dynamo-sglang`` with the
    recipe's ``dynamo.version``) attaches that clue; the bare image clue then adds
    nothing and is left out."""
    out = ClueSet()
    attached = list(getattr(instance, "release_clues", None) or [])
    image = getattr(instance, "image", None)
    if not any(getattr(c, "text", "").startswith(f"container {image}") for c in attached if image):
        out.add(clue_from_image(image, str(getattr(instance, "location", "")) or None))
    for c in attached:
        out.add(c)
    return out.clues


def attach(instances, clues: list[ReleaseClue]) -> None:
    """Add ``clues`` to each instance's ``release_clues`` (readers call this once)."""
    for inst in instances:
        have = inst.release_clues
        for c in clues:
            if c not in have:
                have.append(c)


def attach_script_clues(instances, text: str, file: str) -> None:
    """A script's or Dockerfile's ``pip install sglang...`` clues, on every instance it
    starts (the install runs before its servers)."""
    if "sglang" in text and "install" in text:
        attach(instances, clues_from_text(text, file))


def attach_recipe_clues(instances, cfg, file: str) -> None:
    """An srt-slurm recipe's clues on its instances: ``identity.frameworks.sglang``, and
    the container read with the recipe's ``dynamo.version`` (``dynamo-sglang`` maps
    through ``DYNAMO_SGLANG``; a Dynamo pinned by ``hash`` names no release)."""

    def node(m, key):
        v = m.get(key) if isinstance(m, dict) else None
        return v if isinstance(v, dict) else {}

    def where(m, key):
        line = m.line_of(key) if hasattr(m, "line_of") else None
        return f"{file}:{line}" if line else file

    frameworks = node(node(cfg, "identity"), "frameworks")
    clues = []
    if frameworks.get("sglang") is not None:
        clues.append(
            clue_from_release(str(frameworks["sglang"]), "identity.frameworks.sglang", where(frameworks, "sglang"))
        )
    dyn = node(cfg, "dynamo")
    dyn_version = str(dyn["version"]) if dyn.get("version") is not None else None
    for inst in instances:
        own = list(clues)
        if inst.image and "dynamo" in str(inst.image).lower() and "/" not in str(inst.image):
            own.append(
                clue_from_image(
                    inst.image, where(dyn, "version") if dyn_version else str(inst.location), dynamo_version=dyn_version
                )
            )
        attach([inst], [c for c in own if c is not None])
