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

from kvcheck.release.manifest import NEWEST as NEWEST_MODELED  # noqa: E402  (written once, in the manifest)

# Dynamo release -> the SGLang release its ``ai-dynamo[sglang]`` extra pins
# (``Requires-Dist: sglang==X; extra == "sglang"`` in the ai-dynamo wheel's METADATA on
# PyPI; the NGC ``sglang-runtime:<dynamo release>`` image installs that extra).
# Only releases whose METADATA was read are listed; any other Dynamo tag is unknown.
# Read 2026-12-01 from https://pypi.org/project/ai-dynamo/<release>/ (wheel METADATA).
DYNAMO_SGLANG: dict[str, str] = {
    "0.8.0": "0.5.6.post2", "0.8.1": "0.5.6.post2", "0.8.1.post1": "0.5.6.post2",
    "0.8.1.post2": "0.5.6.post2", "0.8.1.post3": "0.5.6.post2",
    "0.9.0": "0.5.8", "0.9.1": "0.5.8",
    "1.0.0": "0.5.9", "1.0.1": "0.5.9", "1.0.2": "0.5.9",
    "1.1.0": "0.5.10.post1", "1.1.1": "0.5.10.post1",
    "1.2.0.post1": "0.5.11", "1.2.1": "0.5.11",
    "1.3.0.post1": "0.5.14", "1.3.1": "0.5.14",
    "1.4.0": "0.5.16", "1.4.1": "0.5.16", "1.4.2": "0.5.16",
    "1.5.0": "0.5.18", "1.5.1": "0.5.18",
    "1.6.0": "0.5.21", "1.6.1": "0.5.21",
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
    return bool(version) and version in modeled()


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
    """(release or None, reason) for a container image reference.

    ``lmsysorg/sglang`` (and mirrors whose repository is named ``sglang``): a tag
    ``v0.5.8.post1``, ``v0.5.8.post1-cu126``, ``0.5.9-cu124-amd64`` names that release;
    ``latest``, ``dev``, ``nightly-...``, ``v0.5.9-dev``... name none. Dynamo's
    ``nvcr.io/nvidia/ai-dynamo/sglang-runtime:<dynamo release>`` maps through
    ``DYNAMO_SGLANG`` when that Dynamo release is listed. Any other image: None.
    A digest (``@sha256:...``) is ignored; without a tag Docker pulls ``latest``.
    """
    if not image or not image.strip():
        return None, "no image given"
    if "$" in image:
        return None, f"image {image} holds an unresolved variable; pass --env with its value or --sglang-version"
    bare = parse_release(image)
    if bare is not None and "/" not in image and ":" not in image:
        # srt-slurm recipes name the container by its SGLang release (model.container: "0.5.6.post2").
        return bare, f"container {image} (a release number)"
    ref = image.strip().split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = ref.rpartition(":")
    else:
        name, tag = ref, ""
    repo = name.rsplit("/", 1)[-1]
    if repo == "sglang-runtime" and "dynamo" in name:
        dyn = parse_release(tag)
        if dyn and dyn in DYNAMO_SGLANG:
            return DYNAMO_SGLANG[dyn], f"image {image}: Dynamo {dyn} pins SGLang {DYNAMO_SGLANG[dyn]} (ai-dynamo[sglang] on PyPI)"
        return None, f"image {image} is a Dynamo runtime image; kvcheck does not know which SGLang release Dynamo {tag or 'latest'} ships"
    if repo != "sglang":
        return None, f"image {image} is not an SGLang image; its SGLang release is unknown"
    if not tag:
        return None, f"image {image} has no tag (Docker pulls 'latest', which names no SGLang release)"
    m = _TAG.match(tag)
    if not m:
        return None, f"image tag {tag} of {image} names no SGLang release (a nightly, dev or moving tag)"
    version, rest = m.group(1), m.group(2)
    if rest and _DEV_WORDS.search(rest):
        return None, f"image tag {tag} of {image} is a development build after or before {version}, not a release"
    return parse_release(version), f"image tag {image}"


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


@functools.lru_cache(maxsize=None)
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
        return ReleaseChoice(inp, input_source or "input", False, newest,
                             f"SGLang {inp} ({input_source or 'input'}) is not a release kvcheck models")
    if cli:
        return ReleaseChoice(cli, cli_source, False, newest, f"SGLang {cli} ({cli_source}) is not a release kvcheck models")
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
