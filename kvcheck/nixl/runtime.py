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


def nixl_version() -> str:
    """The installed NIXL distribution version, or ``unknown``."""
    from importlib import metadata

    for dist in ("nixl-cu12", "nixl-cu13", "nixl"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def error_class(exc: BaseException) -> str:
    """``nixlNotFoundError`` etc. for NIXL's binding exceptions, else the class name."""
    return type(exc).__name__


def is_nixl_error(exc: BaseException) -> bool:
    """True for the exception classes of ``nixl._bindings`` (they are not RuntimeError)."""
    return type(exc).__module__.endswith("_bindings") or type(exc).__name__.startswith("nixl")
