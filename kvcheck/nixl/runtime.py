"""Loading NIXL lazily, and naming its errors.

Only the live commands (``agent``, ``inspect`` of a listener needs no NIXL at all,
``preflight --probe``) import NIXL; the static preflight never does. ``nixl_cu12._api``
is imported directly (the ``nixl`` meta-package pulls torch); ``nixl._api`` is the
fallback for other builds.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kvcheck.errors import InputError

_CANDIDATES = ("nixl_cu12._api", "nixl_cu13._api", "nixl._api")
INSTALL_HINT = "pip install nixl-cu12==1.5.1 --no-deps numpy  (the wheel bundles UCX; no torch needed)"


def load_nixl() -> ModuleType:
    """The NIXL Python API module (``nixl_agent``, ``nixl_agent_config``).

    Raises ``InputError`` (exit 2) with the install command when no NIXL build is installed.
    """
    errors = []
    for name in _CANDIDATES:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise InputError(f"NIXL is not installed in this Python; {INSTALL_HINT} ({'; '.join(errors)})")


def quiet_defaults() -> None:
    """Set ``NIXL_LOG_LEVEL=WARN`` and ``UCX_LOG_LEVEL=error`` unless the user set them
    (NIXL logs every agent creation at INFO)."""
    import os

    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    os.environ.setdefault("UCX_LOG_LEVEL", "error")


def json_channel():
    """Keep stdout for kvcheck's JSON lines and send everything else written to fd 1 to stderr.

    NIXL's Python logger writes to ``sys.stdout`` and UCX/NIXL's C++ code to fd 1: after
    this call fd 1 (and ``sys.stdout``) is a copy of fd 2, and the returned text stream
    writes to the original stdout. Returns a line-buffered ``TextIO``. Also applies
    ``quiet_defaults()``.
    """
    import os
    import sys

    quiet_defaults()
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(saved, "w", buffering=1, closefd=True)


def error_class(exc: BaseException) -> str:
    """``nixlNotFoundError`` etc. for NIXL's binding exceptions, else the class name."""
    return type(exc).__name__
