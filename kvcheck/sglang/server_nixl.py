"""The NIXL release a server runs: from its image, else its environment, else unknown.

Never the NIXL installed where kvcheck runs: the server's image ships its own, and the
same deployment must get the same answer in every venv.

In order:

1. an image tag that names its NIXL (a custom build ``myreg.io/team/sglang-pd:v0.5.5.post3-nixl-1.0``):
   that release (``1.0`` allows 1.0.x);
2. ``NIXL_VERSION`` in the side's environment (a kvcheck reading: NIXL itself ignores it;
   the way to tell kvcheck what the image ships);
3. an official ``lmsysorg/sglang`` image of a release (or a dated nightly from it): SGLang's
   ``docker/Dockerfile`` installs NIXL unpinned, so the image holds at least the newest NIXL
   published before the release (``kvcheck.sglang.release_dates.image_nixl_floor``, with
   its sources): a floor, no ceiling;
4. else unknown, said.

``nixl_in(server, ranges)`` decides a known issue's NIXL condition over every release the
server may run: ``"yes"`` (all of them are in the ranges), ``"no"`` (none is), ``"maybe"``.
Standard library only (cold path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAG_NIXL = re.compile(r"(?:^|[-_.])nixl[-_]?v?(\d+)\.(\d+)(?:\.(\d+))?(?=$|[-_+])", re.I)
_OFFICIAL = re.compile(r"^(?:(?:docker\.io|registry-1\.docker\.io|index\.docker\.io)/)?lmsysorg/sglang$")


@dataclass(frozen=True)
class ServerNixl:
    """The NIXL releases a server may run: ``lo`` (inclusive) .. ``hi`` (exclusive), None
    when open; both None and ``known`` False when nothing says; ``source`` for the output."""

    lo: str | None
    hi: str | None
    source: str
    known: bool = True

    def describe(self) -> str:
        if not self.known:
            return "unknown"
        if self.lo and self.hi and _next_patch(self.lo) == self.hi:
            return self.lo
        if self.lo and self.hi:
            return f">= {self.lo}, < {self.hi}"
        return f">= {self.lo}" if self.lo else f"< {self.hi}"


def _next_patch(v: str) -> str:
    a, b, c = (list(map(int, v.split("."))) + [0, 0])[:3]
    return f"{a}.{b}.{c + 1}"


def server_nixl(side) -> ServerNixl:
    """The NIXL a ``Side`` runs (see the module docstring for the order)."""
    from kvcheck.sglang.releases import parse_release

    image = getattr(side, "image", None) or ""
    ref = image.split("@", 1)[0]
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    m = _TAG_NIXL.search(tag)
    if m:
        a, b, c = m.group(1), m.group(2), m.group(3)
        lo = f"{a}.{b}.{c or 0}"
        hi = _next_patch(lo) if c is not None else f"{a}.{int(b) + 1}.0"
        return ServerNixl(lo, hi, f"image tag {image}")
    env = (getattr(side, "env", None) or {}).get("NIXL_VERSION")
    if env:
        v = parse_release(env) or env.strip()
        return ServerNixl(v, _next_patch(v) if re.match(r"^\d+\.\d+\.\d+$", v) else None, "NIXL_VERSION")
    if image and _OFFICIAL.match(name):
        from kvcheck.sglang.release_dates import IMAGE_NIXL_FROM, image_nixl_floor, newest_nixl_before
        from kvcheck.sglang.releases import read_image, release_key

        got = read_image(image)
        floor = None
        if got is not None and got.named and not got.window:
            floor = image_nixl_floor(got.named)
        elif (
            got is not None
            and got.window
            and got.releases
            and release_key(got.releases[0]) >= release_key(IMAGE_NIXL_FROM)
        ):
            day = re.search(r"a build of (\d{4}-\d\d-\d\d)", got.text)
            floor = newest_nixl_before(day.group(1)) if day else None
        if floor:
            return ServerNixl(
                floor,
                None,
                f"{image}: SGLang's Dockerfile installs the newest NIXL unpinned, {floor} when it was published",
            )
    return ServerNixl(None, None, "no NIXL_VERSION in its env, and its image does not say", known=False)


def raise_floor(server: ServerNixl, floor: str, why: str) -> ServerNixl:
    """``server`` with releases older than ``floor`` left out (the server cannot run them)."""
    from kvcheck.sglang.releases import release_key

    if not server.known:
        return ServerNixl(floor, None, f"{server.source}; NIXL >= {floor}: {why}")
    if server.lo is None or release_key(server.lo) < release_key(floor):
        if server.hi is not None and release_key(server.hi) <= release_key(floor):
            return server  # it says an older one: the refusal entry reports that
        return ServerNixl(floor, server.hi, f"{server.source}; NIXL >= {floor}: {why}")
    return server


def nixl_in(server: ServerNixl, ranges: list[list[str | None]]) -> str:
    """``"yes"`` when every NIXL ``server`` may run is in ``ranges`` (``[[lo, hi], ...]``,
    lo inclusive, hi exclusive, None open), ``"no"`` when none is, else ``"maybe"``."""
    from kvcheck.sglang.releases import release_key

    if not server.known:
        return "maybe"

    def k(v):
        return release_key(v)

    lo, hi = server.lo, server.hi
    for rlo, rhi in ranges:
        inside = (rlo is None or (lo is not None and k(rlo) <= k(lo))) and (
            rhi is None or (hi is not None and k(hi) <= k(rhi))
        )
        if inside:
            return "yes"
    for rlo, rhi in ranges:
        overlap = (rhi is None or lo is None or k(lo) < k(rhi)) and (rlo is None or hi is None or k(rlo) < k(hi))
        if overlap:
            return "maybe"
    return "no"
