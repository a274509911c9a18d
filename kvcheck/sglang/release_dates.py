"""When each SGLang and NIXL release was published, and what NIXL each SGLang image ships.

Dates are the first file upload of each release on PyPI (UTC, to the minute), read
2026-12-02 from https://pypi.org/pypi/sglang/json and https://pypi.org/pypi/nixl/json
(``releases[<version>][*].upload_time_iso_8601``, the earliest per release). They place a
dated nightly tag between the releases on either side of its date
(``kvcheck.sglang.releases.nightly_window``) and bound the NIXL an SGLang image ships
(``image_nixl_floor``).

The NIXL of an ``lmsysorg/sglang`` release image. SGLang's own ``docker/Dockerfile``
installs NIXL from PyPI without a version pin, so an image holds the newest NIXL on
PyPI when it was built, which is no earlier than the release's own upload:

* sgl-project/sglang@004740a9cb3d:docker/Dockerfile (``ARG SGL_VERSION=0.5.5``): ``nixl``
  in the unpinned "Python tools" ``pip install``;
* sgl-project/sglang#24382 (the cherry-pick of #24369 to ``release/v0.5.11``,
  docker/Dockerfile): ``pip install nixl nixl-cu12 --no-deps`` (``nixl-cu13`` on CUDA 13),
  unpinned;
* cross-check: ai-dynamo/dynamo#13643 pins NIXL 1.4.0 "to match the SGLang 0.5.18 runtime
  image", the newest NIXL published before 0.5.18 (1.4.0 on 2026-08-14, 0.5.18 on
  2026-08-21); kvcheck's known-issue notes read NIXL 1.2.0 in the 0.5.13.post1 image (1.3.0
  came out 17 hours after it).

So the image of release R holds NIXL >= the newest NIXL published before R (a floor, no
ceiling: a tag rebuilt later holds a newer one). The Dockerfile at releases before 0.5.5
was not read, so kvcheck gives no floor for them (``IMAGE_NIXL_FROM``). Standard library
only (cold path).
"""

from __future__ import annotations

SGLANG_PUBLISHED: dict[str, str] = {
    "0.5.0rc0": "2025-08-08T16:16",
    "0.5.0rc1": "2025-08-13T17:44",
    "0.5.0rc2": "2025-08-14T23:11",
    "0.5.1": "2025-08-23T14:09",
    "0.5.1.post1": "2025-08-24T08:14",
    "0.5.1.post2": "2025-08-25T10:45",
    "0.5.1.post3": "2025-08-27T22:43",
    "0.5.2rc0": "2025-09-01T10:07",
    "0.5.2rc1": "2025-09-02T11:43",
    "0.5.2rc2": "2025-09-05T03:07",
    "0.5.2": "2025-09-11T23:09",
    "0.5.3rc0": "2025-09-15T10:55",
    "0.5.3rc2": "2025-10-06T08:12",
    "0.5.3": "2025-10-06T12:07",
    "0.5.3.post1": "2025-10-09T22:20",
    "0.5.3.post2": "2025-10-15T23:49",
    "0.5.3.post3": "2025-10-16T20:15",
    "0.5.4": "2025-10-24T01:02",
    "0.5.4.post1": "2025-10-27T01:35",
    "0.5.4.post2": "2025-11-01T00:39",
    "0.5.4.post3": "2025-11-05T02:32",
    "0.5.5": "2025-11-06T16:47",
    "0.5.5.post1": "2025-11-10T19:54",
    "0.5.5.post2": "2025-11-12T12:35",
    "0.5.5.post3": "2025-11-17T01:56",
    "0.5.6": "2025-12-03T01:17",
    "0.5.6.post1": "2025-12-08T22:24",
    "0.5.6.post2": "2025-12-11T20:30",
    "0.5.7": "2026-01-01T03:01",
    "0.5.8": "2026-01-23T17:58",
    "0.5.8.post1": "2026-02-05T12:58",
    "0.5.9": "2026-02-23T08:14",
    "0.5.10rc0": "2026-03-27T07:54",
    "0.5.10": "2026-04-05T23:57",
    "0.5.10.post1": "2026-04-08T22:20",
    "0.5.11": "2026-05-05T08:23",
    "0.5.12": "2026-05-16T18:20",
    "0.5.12.post1": "2026-05-23T11:23",
    "0.5.13": "2026-06-11T10:16",
    "0.5.13.post1": "2026-06-15T05:52",
    "0.5.14": "2026-06-26T04:23",
    "0.5.15": "2026-07-10T10:44",
    "0.5.15.post1": "2026-07-14T06:21",
    "0.5.16": "2026-07-25T00:11",
    "0.5.17": "2026-08-08T00:20",
    "0.5.18": "2026-08-21T20:58",
    "0.5.19": "2026-09-04T23:10",
    "0.5.20": "2026-09-18T09:54",
    "0.5.21": "2026-10-01T07:45",
    "0.5.22": "2026-10-16T00:25",
    "0.5.23": "2026-10-30T01:34",
}
NIXL_PUBLISHED: dict[str, str] = {
    "0.1.0": "2025-03-18T03:28",
    "0.1.1": "2025-04-16T20:33",
    "0.2.0": "2025-05-01T00:33",
    "0.2.1": "2025-05-22T18:13",
    "0.3.0": "2025-06-02T21:15",
    "0.3.1": "2025-07-01T15:53",
    "0.4.0": "2025-07-10T18:33",
    "0.4.1": "2025-07-24T02:31",
    "0.5.0": "2025-08-06T21:13",
    "0.5.1": "2025-08-28T00:42",
    "0.6.0": "2025-09-19T04:39",
    "0.6.1": "2025-10-09T02:42",
    "0.7.0": "2025-10-24T19:14",
    "0.7.1": "2025-11-06T18:48",
    "0.8.0": "2025-11-20T01:37",
    "0.9.0": "2026-01-21T18:57",
    "0.10.0": "2026-02-18T01:31",
    "0.10.1": "2026-03-03T19:55",
    "1.0.0": "2026-03-13T06:55",
    "1.0.1": "2026-04-14T19:44",
    "1.1.0": "2026-05-12T03:27",
    "1.2.0": "2026-05-30T00:54",
    "1.3.0": "2026-06-15T23:22",
    "1.3.1": "2026-07-07T23:22",
    "1.3.2": "2026-07-24T20:19",
    "1.4.0": "2026-08-14T00:02",
    "1.4.1": "2026-09-01T23:45",
    "1.5.0": "2026-09-30T07:29",
    "1.5.1": "2026-10-26T16:53",
    "1.5.2": "2026-10-29T19:48",
}

# The oldest release whose image kvcheck read to install NIXL unpinned (see above).
IMAGE_NIXL_FROM = "0.5.5"
IMAGE_NIXL_SOURCES = (
    "sgl-project/sglang@004740a9cb3d:docker/Dockerfile (0.5.5: unpinned nixl)",
    "sgl-project/sglang#24382 (release/v0.5.11 docker/Dockerfile: unpinned nixl, nixl-cu12)",
    "ai-dynamo/dynamo#13643 (the SGLang 0.5.18 runtime image ships NIXL 1.4.0)",
)


def published(release: str) -> str | None:
    """``"2026-08-21T20:58"`` for ``"0.5.18"``; None when kvcheck has no date for it."""
    return SGLANG_PUBLISHED.get(release)


def newest_nixl_before(when: str) -> str | None:
    """The newest NIXL release published before ``when`` (an ISO date or date-time)."""
    best = None
    for version, date in NIXL_PUBLISHED.items():
        if date < when and (best is None or date > NIXL_PUBLISHED[best]):
            best = version
    return best


def image_nixl_floor(release: str) -> str | None:
    """The oldest NIXL an official image of SGLang ``release`` can ship: the newest NIXL on
    PyPI when the release was published (the Dockerfile installs it unpinned). None when
    kvcheck has no date for the release or did not read its Dockerfile (before 0.5.5)."""
    from kvcheck.sglang.releases import release_key

    when = published(release)
    if when is None or release_key(release) < release_key(IMAGE_NIXL_FROM):
        return None
    return newest_nixl_before(when)
