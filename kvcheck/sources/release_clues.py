"""Every clue a deployment gives to the SGLang release a server runs.

This is the contract between the readers (``kvcheck.sources``), which find clues, and
the release stage (``kvcheck.release``), which turns a side's clues and its flags into
a pinned release or a window of modeled releases and decides the pair over it.

A ``ReleaseClue`` says which releases one piece of evidence allows:

* an image tag that names a release (``lmsysorg/sglang:v0.5.8.post1-cu126``) -> that one;
* an srt-slurm ``identity.frameworks.sglang: "0.5.11"`` or container alias
  ``sglang-v0.5.11-cu130`` -> that one;
* a Dynamo runtime image or ``dynamo.version`` -> the SGLang its ``ai-dynamo[sglang]`` pins;
* ``pip install sglang==X`` / ``uv pip install "sglang[all]==X"`` in a script -> X;
* a dated nightly tag -> the releases on either side of its date (several);
* a live server's ``/server_info`` ``version`` -> that one;
* ``--sglang-version`` (and the per-side forms) -> that one; it wins over the others.

``releases`` is empty when the clue names a release kvcheck does not model (``named``
then says which) or names none it can read (``problem`` says why): such a side is
``unchecked`` until pinned, never judged with another release's answers.

Standard library only (cold path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How strong a clue is: an explicit pin from the user beats what the input says.
STRENGTH_CLI = 3      # --sglang-version / --prefill-sglang-version / --decode-sglang-version
STRENGTH_INPUT = 2    # image tag, recipe pin, pip line, /server_info
STRENGTH_RANGE = 1    # a nightly date, a Dynamo image whose pin is a range


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
    """

    releases: tuple[str, ...]
    text: str
    named: str | None = None
    location: str | None = None
    strength: int = STRENGTH_INPUT
    problem: str | None = None


@dataclass
class ClueSet:
    """All the clues of one side, in the order found."""

    clues: list[ReleaseClue] = field(default_factory=list)

    def add(self, clue: ReleaseClue | None) -> None:
        if clue is not None and clue not in self.clues:
            self.clues.append(clue)


def clue_from_image(image: str | None, location: str | None = None) -> ReleaseClue | None:
    """The clue an image reference gives (None when there is no image).

    First version: ``kvcheck.sglang.releases.release_from_image``; the clues work
    (issue 14) extends it to every registry, custom tag and dated nightly."""
    if not image:
        return None
    from kvcheck.sglang.releases import is_modeled, release_from_image

    rel, reason = release_from_image(image)
    if rel is None:
        return ReleaseClue((), reason, None, location, STRENGTH_INPUT, reason)
    return ReleaseClue((rel,) if is_modeled(rel) else (), reason, rel, location, STRENGTH_INPUT,
                       None if is_modeled(rel) else f"SGLang {rel} ({reason}) is not a release kvcheck models")


def clue_from_cli(version: str | None, option: str = "--sglang-version") -> ReleaseClue | None:
    """The clue ``--sglang-version`` (or a per-side option) gives."""
    if not version:
        return None
    from kvcheck.sglang.releases import is_modeled, parse_release

    rel = parse_release(version) or version.strip()
    ok = is_modeled(rel)
    return ReleaseClue((rel,) if ok else (), option, rel, None, STRENGTH_CLI,
                       None if ok else f"SGLang {rel} ({option}) is not a release kvcheck models")


def clues_for_instance(instance) -> list[ReleaseClue]:
    """Every clue a deployment ``Instance`` carries: its image, then the clues its reader
    attached (``instance.release_clues``: recipe pins, pip lines, Dynamo versions)."""
    out = ClueSet()
    out.add(clue_from_image(getattr(instance, "image", None), str(getattr(instance, "location", "")) or None))
    for c in getattr(instance, "release_clues", None) or []:
        out.add(c)
    return out.clues
