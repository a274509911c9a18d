"""Suite-wide settings."""

from __future__ import annotations

import logging


def pytest_sessionfinish(session, exitstatus):
    # SGLang's bootstrap server (started by the live tests on loopback) leaves a periodic
    # asyncio cleanup task behind; at interpreter exit asyncio logs it as destroyed while
    # pending, after pytest's summary line. Keep the summary the last thing printed.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
