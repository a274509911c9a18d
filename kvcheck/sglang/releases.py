"""Which SGLang release a side runs, and which releases kvcheck models.

* ``release_from_image(image)`` maps a container image reference to a release
  (``lmsysorg/sglang:v0.5.8.post1-cu126`` -> ``0.5.8.post1``); ``None`` with a reason
  when the tag does not name one (``latest``, a nightly or dev build, a vendor image).
  Dynamo's ``sglang-runtime`` images map through ``DYNAMO_SGLANG``: the SGLang release
  each Dynamo release pins (its ``ai-dynamo`` wheel's ``sglang`` extra on PyPI).
* ``parse_release(text)`` normalises a version string (``v0.5.9`` -> ``0.5.9``).
* ``choose_release(...)`` picks a side's release: the input's own (image tag, the
  ``version`` in ``/server_info`` or a snapshot, a ``kvcheck-sglang-version`` key), else
  ``--sglang-version``/``--prefill-sglang-version``/``--decode-sglang-version``; with
  neither the release is unknown (never the installed SGLang, never the newest modeled:
  the pipeline decides such a side over its release window, ``kvcheck.release.window``).

A release kvcheck has no flag table for (0.4.9, 0.6.0, a nightly) is never judged with
the newest release's answers: the side keeps ``modeled=False`` and the ``unknown-release``
check makes the pair ``unchecked`` (exit 4).

Cold path: standard library only; the list of modeled releases is read lazily from the
flag store (``kvcheck.sglang.flags.modeled_releases``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from kvcheck.release.manifest import NEWEST as NEWEST_MODELED

# Dynamo release -> the SGLang release its ``ai-dynamo[sglang]`` extra pins
# (``Requires-Dist: sglang==X; extra == "sglang"`` in the ai-dynamo wheel's METADATA on
# PyPI; the NGC ``sglang-runtime:<dynamo release>`` image installs that extra).
# Only releases whose METADATA was read are listed; any other Dynamo tag is unknown.
# Read 2026-12-01 from https://pypi.org/project/ai-dynamo/<release>/ (wheel METADATA).
DYNAMO_SGLANG: dict[str, str] = {
    "0.8.0": "0.5.6.post2",
    "0.8.1": "0.5.6.post2",
    "0.8.1.post1": "0.5.6.post2",
    "0.8.1.post2": "0.5.6.post2",
    "0.8.1.post3": "0.5.6.post2",
    "0.9.0": "0.5.8",
    "0.9.1": "0.5.8",
    "1.0.0": "0.5.9",
    "1.0.1": "0.5.9",
    "1.0.2": "0.5.9",
    "1.1.0": "0.5.10.post1",
    "1.1.1": "0.5.10.post1",
    "1.2.0.post1": "0.5.11",
    "1.2.1": "0.5.11",
    "1.3.0.post1": "0.5.14",
    "1.3.1": "0.5.14",
    "1.4.0": "0.5.16",
    "1.4.1": "0.5.16",
    "1.4.2": "0.5.16",
    "1.5.0": "0.5.18",
    "1.5.1": "0.5.18",
    "1.6.0": "0.5.21",
    "1.6.1": "0.5.21",
    # Read 2026-12-02 (pip download --no-deps ai-dynamo==X, METADATA):
    "0.4.1": "0.5.0rc2",
    "0.5.0": "0.5.0rc2",
    "0.5.1": "0.5.0rc2",
    "0.6.0": "0.5.3.post2",
    "0.6.1": "0.5.3.post2",
    "0.7.0": "0.5.4.post3",
    "0.7.0.post1": "0.5.4.post3",
    "0.7.1": "0.5.4.post3",
}

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(rc\d+)?(?:\.?(post\d+))?$")
_TAG = re.compile(r"^v?(\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)(?:$|[-_+])(.*)$")
# tag words that mark a build between releases: not the release the number names
_DEV_WORDS = re.compile(r"(^|[-_.])(dev|nightly|main|latest|rc|pre|snapshot|git|sha|[0-9a-f]{7,40})($|[-_.])", re.I)


def parse_release(text: str | None) -> str | None:
    """``"v0.5.9"``/``"0.5.9"`` -> ``"0.5.9"``; ``"0.5.8.post1"``, ``"0.5.0rc2"`` kept;
    None for anything that is not a release number (``"latest"``, ``"0.5.9.dev3+g1a2b"``)."""
    if not text:
        return None
    m = _VERSION.match(str(text).strip())
    if not m:
        return None
    a, b, c, rc, post = m.groups()
    return f"{a}.{b}.{c}{rc or ''}{'.' + post if post else ''}"


def release_key(version: str) -> tuple:
    """Sort key: ``0.5.0rc2 < 0.5.0 < 0.5.0.post1 < 0.5.1``. Unparsable sorts last."""
    from kvcheck.release.version import version_key

    return version_key(version)


def modeled() -> tuple[str, ...]:
    """Every release kvcheck has a flag table for, oldest first."""
    from kvcheck.sglang.flags import modeled_releases

    return modeled_releases()


def is_modeled(version: str | None) -> bool:
    """Whether ``version`` is one of ``modeled()``."""
    return bool(version) and version in _modeled_set()


@functools.cache
def _modeled_set() -> frozenset[str]:
    return frozenset(modeled())


def side_release(side) -> tuple[str | None, bool]:
    """(release, modeled) of a ``Side``: its ``sglang_version``; None (a side nobody
    resolved, e.g. built directly) counts as the newest modeled release, as before
    releases were modeled. ``"unknown"``, or None with a ``version_source`` from
    ``release_from_image`` (an image whose release cannot be told), is (None, False)."""
    version = getattr(side, "sglang_version", None)
    if version is None and str(getattr(side, "version_source", "")).startswith("image"):
        return None, False  # release_from_image could not tell (its reason is the source)
    if version is None:
        return (modeled()[-1] if modeled() else NEWEST_MODELED), True
    if version == "unknown":
        return None, False
    return version, is_modeled(version)


def in_range(version: str, lo: str | None = None, hi: str | None = None) -> bool:
    """``lo <= version < hi`` by ``release_key``; a missing bound is open."""
    k = release_key(version)
    return (lo is None or release_key(lo) <= k) and (hi is None or k < release_key(hi))


def release_from_image(image: str | None) -> tuple[str | None, str]:
    """(release or None, reason) for a container image reference: the one release the
    image pins (``read_image``), else None with the reason (a nightly, a moving tag, an
    image that is not SGLang's, a Dynamo release kvcheck has no pin for)."""
    got = read_image(image)
    if got is None:
        return None, "no image given"
    if got.named is not None and got.problem is None and len(got.releases) <= 1 and not got.window:
        return got.named, got.text
    return None, got.problem or got.text


@dataclass(frozen=True)
class ImageRelease:
    """What an image reference says about the SGLang release it runs.

    ``named``: the release it pins as written (None for a dated nightly or when it names
    none); ``releases``: the modeled releases it allows, oldest first (one for a pin, the
    releases on either side of a nightly's date); ``window``: True for a dated build
    between releases; ``text``: the clue as the output says it; ``problem``: why it names
    no modeled release, else None."""

    named: str | None
    releases: tuple[str, ...]
    text: str
    problem: str | None = None
    window: bool = False


_DATE = re.compile(r"(?<!\d)(20\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?!\d)")
_SGLANG_REPO = re.compile(r"(^|[-_.])(sglang|sgl)($|[-_.])", re.I)


def _pinned(version: str, text: str) -> ImageRelease:
    ok = is_modeled(version)
    return ImageRelease(
        version,
        (version,) if ok else (),
        text,
        None if ok else f"SGLang {version} ({text}) is not a release kvcheck models",
    )


# ``sglang0.4.10.post2`` / ``sglang-v0.5.9`` / ``sglang_0.5.9`` inside another image's tag
_SGLANG_IN_TAG = re.compile(r"(?:^|[-_.])sglang[-_]?v?(\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)(?![\d.])", re.I)


def read_image(image: str | None, dynamo_version: str | None = None) -> ImageRelease | None:
    """The SGLang release(s) an image reference names; None when there is no image.

    * Any registry and repository whose name is or contains ``sglang``/``sgl``
      (``lmsysorg/sglang``, ``docker.io/lmsysorg/sglang``, ``rocm/sgl-dev``,
      ``myreg.io/team/sglang-pd``): a tag ``v0.5.8.post1``, ``v0.5.8.post1-cu126``,
      ``v0.5.5.post3-nixl-1.0`` pins that release; a tag with a date
      (``v0.5.8-rocm700-mi35x-20260125``, ``nightly-dev-20260520-abc1234``,
      ``dev-cu13-20260520``) is a build between releases: the modeled releases from the
      newest one published by that date (or the tag's own number) to the next full
      release after it (``nightly_window``); ``latest``, ``dev``, ``v0.5.9-dev`` name none.
    * srt-slurm container aliases: ``0.5.6.post2``, ``v0.5.11``, ``sglang-v0.5.11-cu130``,
      ``sglang-nightly-dev-cu13-20260510``; ``dynamo-sglang`` with ``dynamo_version`` (the
      recipe's ``dynamo.version``) maps through ``DYNAMO_SGLANG``. An enroot file
      ``lmsysorg+sglang+v0.5.5.sqsh`` reads as ``lmsysorg/sglang:v0.5.5``.
    * Dynamo's ``.../ai-dynamo/sglang-runtime:<dynamo release>`` maps through ``DYNAMO_SGLANG``.
    A digest (``@sha256:...``) is ignored; without a tag Docker pulls ``latest``.
    """
    if not image or not str(image).strip():
        return None
    image = str(image).strip()
    if "$" in image:
        return ImageRelease(
            None,
            (),
            f"image {image}",
            f"image {image} holds an unresolved variable; pass --env with its value or --sglang-version",
        )
    ref = image.split("@", 1)[0]
    if ref.endswith(".sqsh"):  # enroot: registry+repo+tag.sqsh
        stem = ref.rsplit("/", 1)[-1][: -len(".sqsh")]
        if "+" in stem:
            *path, tag = stem.split("+")
            ref = "/".join(path) + ":" + tag
        else:
            ref = stem
    if "/" not in ref and ":" not in ref:
        return _alias(ref, image, dynamo_version)
    last = ref.rsplit("/", 1)[-1]
    name, tag = (ref.rpartition(":")[0], ref.rpartition(":")[2]) if ":" in last else (ref, "")
    repo = name.rsplit("/", 1)[-1]
    if repo == "sglang-runtime" and "dynamo" in name:
        return _dynamo(tag, f"image {image}")
    if not _SGLANG_REPO.search(repo):
        named = _SGLANG_IN_TAG.search(tag)
        after = tag[named.end() :] if named else ""
        next_word = after[1:].split("-", 1)[0] if after[:1] in ("-", "_", ".") else ""
        if named and not _DEV_WORDS.search(next_word):
            # a vendor image whose tag names the SGLang it carries
            # (``docker-temp:0.3.4.post2-sglang0.4.10.post2-pytorch2.7.1.8-...``)
            return _pinned(
                parse_release(named.group(1)) or named.group(1), f"image tag {image} (names sglang {named.group(1)})"
            )
        return ImageRelease(
            None, (), f"image {image}", f"image {image} is not an SGLang image; its SGLang release is unknown"
        )
    if not tag:
        return ImageRelease(
            None,
            (),
            f"image {image}",
            f"image {image} has no tag (Docker pulls 'latest', which names no SGLang release)",
        )
    return _tag(tag, f"image tag {image}", image)


def _alias(alias: str, image: str, dynamo_version: str | None) -> ImageRelease:
    bare = parse_release(alias)
    if bare is not None:
        return _pinned(bare, f"container {image} (a release number)")
    low = alias.lower()
    if "dynamo" in low:
        if dynamo_version:
            return _dynamo(dynamo_version, f"container {image} with dynamo.version {dynamo_version}")
        return ImageRelease(
            None,
            (),
            f"container {image}",
            f"container {image} is a Dynamo image alias and the recipe pins no dynamo.version; its SGLang release is "
            "unknown",
        )
    m = re.match(r"^(?:lmsysorg[-_])?(?:sglang|sgl)[-_](.+)$", alias, re.I)
    if m:
        return _tag(m.group(1), f"container {image}", image)
    return ImageRelease(
        None,
        (),
        f"container {image}",
        f"container alias {image} names no SGLang release (the cluster's srtslurm.yaml maps it to an image)",
    )


def _dynamo(tag: str, text: str) -> ImageRelease:
    dyn = parse_release(tag)
    if dyn and dyn in DYNAMO_SGLANG:
        return _pinned(
            DYNAMO_SGLANG[dyn], f"{text}: Dynamo {dyn} pins SGLang {DYNAMO_SGLANG[dyn]} (ai-dynamo[sglang] on PyPI)"
        )
    return ImageRelease(
        None,
        (),
        text,
        f"{text} is a Dynamo runtime; kvcheck does not know which SGLang release Dynamo {tag or 'latest'} ships",
    )


def _tag(tag: str, text: str, image: str) -> ImageRelease:
    date = _DATE.search(tag)
    m = _TAG.match(tag)
    if date:
        day = f"{date.group(1)}-{date.group(2)}-{date.group(3)}"
        since = parse_release(m.group(1)) if m else None
        return nightly_window(day, f"{text} (a build of {day})", since=since)
    if not m:
        return ImageRelease(
            None, (), text, f"image tag {tag} of {image} names no SGLang release (a nightly, dev or moving tag)"
        )
    version, rest = m.group(1), m.group(2)
    if rest and _DEV_WORDS.search(rest):
        return ImageRelease(
            None,
            (),
            text,
            f"image tag {tag} of {image} is a development build after or before {version}, not a release",
        )
    return _pinned(parse_release(version) or version, text)


def nightly_window(day: str, text: str, since: str | None = None) -> ImageRelease:
    """A build from SGLang's main branch on ``day`` (``2026-05-20``): the modeled releases
    from the newest one published on or before that day (or ``since``, the release the
    tag names, when later) up to the first full release (no ``.postN``) published after
    it. A day after the newest modeled release's publication (the build holds code no
    modeled release has) or before the oldest is no window: ``problem`` says so."""
    from kvcheck.sglang.release_dates import SGLANG_PUBLISHED

    rels = [r for r in modeled() if r in SGLANG_PUBLISHED]
    end = day + "T23:59"
    before = [r for r in rels if SGLANG_PUBLISHED[r] <= end]
    if since and is_modeled(since):
        before.append(since)
    if not before:
        return ImageRelease(
            None,
            (),
            text,
            f"{text}: {day} is before the oldest release kvcheck models ({rels[0] if rels else NEWEST_MODELED})",
            True,
        )
    lo = max(before, key=release_key)
    after = [
        r
        for r in rels
        if SGLANG_PUBLISHED[r] > end and release_key(r) > release_key(lo) and "post" not in r and "rc" not in r
    ]
    if not after:
        return ImageRelease(
            None,
            (),
            text,
            f"{text}: a build after SGLang {lo}, newer than the newest release kvcheck models "
            f"({rels[-1] if rels else NEWEST_MODELED}); pin a released tag or pass --sglang-version",
            True,
        )
    hi = min(after, key=release_key)
    window = tuple(r for r in modeled() if release_key(lo) <= release_key(r) <= release_key(hi))
    return ImageRelease(None, window, f"{text}: between SGLang {lo} and {hi}", None, True)


def installed_version(dist: str) -> str | None:
    """The version of distribution ``dist`` installed on ``sys.path`` (``sglang``,
    ``nixl-cu12``), read from its ``<name>-<version>.dist-info`` directory name the way
    ``importlib.metadata`` finds it, without parsing METADATA (tens of ms cold); None
    when absent. Nothing is imported."""
    import sys

    want = re.sub(r"[-_.]+", "_", dist).lower()
    for entry in sys.path:
        for name in _listdir(entry or "."):
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            stem = name.rsplit(".", 1)[0]
            proj, _, version = stem.partition("-")
            if re.sub(r"[-_.]+", "_", proj).lower() == want and version:
                return version
    return None


@functools.cache
def _listdir(path: str) -> tuple[str, ...]:
    import os

    try:
        return tuple(os.listdir(path))
    except OSError:
        return ()


def installed_release() -> str | None:
    """The installed SGLang distribution's version (``installed_version("sglang")``;
    SGLang is never imported), or None."""
    v = installed_version("sglang")
    return (parse_release(v) or v) if v else None


@dataclass(frozen=True)
class ReleaseChoice:
    """A side's SGLang release.

    ``release``: the release the side runs as far as kvcheck knows (None when the input
    names an image whose release is unknown); ``source``: where it came from, for the
    output (``"image tag lmsysorg/sglang:v0.5.9"``, ``"--sglang-version"``,
    ``"installed SGLang"``, ``"default: newest modeled release"``); ``modeled``: whether
    kvcheck models it; ``table``: the modeled release whose flags read the input
    (``release`` when modeled, else the newest: an unmodeled side is ``unchecked``
    anyway); ``problem``: why the release is unknown, else None.
    """

    release: str | None
    source: str
    modeled: bool
    table: str
    problem: str | None = None


def choose_release(
    input_release: str | None = None,
    input_source: str | None = None,
    cli_release: str | None = None,
    cli_source: str = "--sglang-version",
    *,
    input_unknown: str | None = None,
) -> ReleaseChoice:
    """A side's release, by the order of issue 9.

    ``input_release``/``input_source``: what the input itself says (an image tag's
    release, ``/server_info`` ``version``); ``input_unknown``: the reason when the input
    names an image whose release cannot be read (then a known ``cli_release`` is used, and
    without one the side is unmodeled); ``cli_release``: ``--sglang-version`` or the per-side
    option (normalised; an unparsable one is kept as written and is unmodeled).
    An input release kvcheck does not model yields to a modeled ``cli_release``.
    """
    newest = modeled()[-1] if modeled() else NEWEST_MODELED
    cli = (parse_release(cli_release) or cli_release.strip()) if cli_release else None
    inp = parse_release(input_release) or input_release if input_release else None
    if inp and is_modeled(inp):
        return ReleaseChoice(inp, input_source or "input", True, inp)
    if cli and is_modeled(cli):
        return ReleaseChoice(cli, cli_source, True, cli)
    if inp:
        return ReleaseChoice(
            inp,
            input_source or "input",
            False,
            newest,
            f"SGLang {inp} ({input_source or 'input'}) is not a release kvcheck models",
        )
    if cli:
        return ReleaseChoice(
            cli, cli_source, False, newest, f"SGLang {cli} ({cli_source}) is not a release kvcheck models"
        )
    if input_unknown:
        return ReleaseChoice(None, input_unknown, False, newest, input_unknown)
    # No clue: never the SGLang installed where kvcheck runs, never the newest modeled
    # release (issue 14): the side's release is unknown, so it is unchecked here; the
    # pipeline (kvcheck.release.window) decides such a side over its window instead.
    why = "no release named (no image tag, version key, /server_info version or --sglang-version)"
    return ReleaseChoice(None, why, False, newest, why)


def describe_modeled() -> str:
    """``"0.5.0rc2 ... 0.5.23 (43 releases)"``."""
    m = modeled()
    return f"{m[0]} to {m[-1]} ({len(m)} releases)" if m else NEWEST_MODELED
