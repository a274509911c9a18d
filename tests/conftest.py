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
