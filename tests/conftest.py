"""Suite-wide settings."""

from __future__ import annotations

import logging


def pytest_sessionfinish(session, exitstatus):
    # SGLang's bootstrap server (started by the live tests on loopback) leaves a periodic
    # asyncio cleanup task behind; at interpreter exit asyncio logs it as destroyed while
    # pending, after pytest's summary line. Keep the summary the last thing printed.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def _use_torchvision_stub() -> None:
    """Put the test-only torchvision stand-in (tests/stubs) on the path, for this process
    and the kvcheck subprocesses the tests start, when no real torchvision is installed."""
    import importlib.util
    import os
    import sys
    from pathlib import Path

    if importlib.util.find_spec("torchvision") is not None:
        return
    stubs = str(Path(__file__).resolve().parent / "stubs")
    sys.path.insert(0, stubs)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (stubs, os.environ.get("PYTHONPATH")) if p)


_use_torchvision_stub()


def _hermetic_environment() -> None:
    """Nothing on the machine the suite runs on decides a test: no model the machine has in
    its Hugging Face cache (``HF_HUB_CACHE`` points at an empty folder; kvcheck reads only
    that one cache, as huggingface_hub does), and none of kvcheck's own settings
    (``KVCHECK_API_KEY``, ``KVCHECK_DEBUG``, ``NIXL_ETCD_NAMESPACE``) from the caller's shell.
    Inherited by the kvcheck subprocesses the tests start; a test that needs a cache or a
    key passes its own (``--models``, ``environ=``, ``env=``)."""
    import os
    import tempfile

    os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="kvcheck-tests-hf-")
    for name in ("HF_HOME", "KVCHECK_API_KEY", "KVCHECK_DEBUG", "NIXL_ETCD_NAMESPACE"):
        os.environ.pop(name, None)


_hermetic_environment()


# The costliest test files (CPU and waits, on a 2-core machine), costliest first. Under
# pytest-xdist (scripts/test.sh: one file per worker at a time) they are handed out first,
# so that no worker starts a long file when the others are about to finish; the other
# files keep their order. Only the order changes; a file missing here just runs later.
HEAVY_FIRST = (
    "test_conformance_releases.py",
    "test_pd_old_releases.py",
    "test_startup_releases.py",
    "test_nixl_hardening.py",
    "test_fabric_netns.py",
    "test_mooncake_sglang_pd_tests.py",
    "test_startup_corpus.py",
    "test_contributing_recipes.py",
    "test_hostile.py",
    "test_incidents.py",
    "test_live_deadlines.py",
    "test_mooncake.py",
    "test_corpus_kinds.py",
    "test_nixl_live.py",
)


def pytest_collection_modifyitems(session, config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: collection order
        return
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files and tests keep their order
