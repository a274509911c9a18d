"""Which SGLang release a side runs, and which releases kvcheck models.

``release_from_image(image)`` maps a container image reference to a release
(``lmsysorg/sglang:v0.5.8.post1-cu126`` -> ``0.5.8.post1``); ``None`` with a reason when
the tag does not name one (a nightly, ``latest``, a Dynamo or vendor image).
"""

from __future__ import annotations

import re

NEWEST_MODELED = "0.5.23"

_TAG = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:$|[-_+])")


def release_from_image(image: str | None) -> tuple[str | None, str]:
    """(release or None, reason). Only ``lmsysorg/sglang`` (and mirrors named ``sglang``)
    tags name an SGLang release; other images need ``--sglang-version``."""
    if not image:
        return None, "no image given"
    ref = image.split("@", 1)[0]
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    repo = name.rsplit("/", 1)[-1]
    if repo != "sglang":
        return None, f"image {image} is not an SGLang image; its SGLang release is unknown"
    m = _TAG.match(tag or "")
    if not m:
        return None, f"image tag {tag or '(none)'} of {image} names no SGLang release"
    return m.group(1), f"image tag {image}"
