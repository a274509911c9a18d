"""Named checks (``REGISTRY``), each with a stable id, severity, docs and a fix.

Importing this package registers every check module.
"""

from kvcheck.checks import releases  # noqa: F401  (registration; first: an unmodeled release heads the list)
from kvcheck.checks import nixl_env, pd_path, risks, startup, transfer  # noqa: F401  (registration)
from kvcheck.checks import resolved  # noqa: F401  (registration: kv-dtype-gpu)
from kvcheck.checks import mooncake  # noqa: F401  (registration: the non-NIXL backends)
from kvcheck.checks import live, nixl_live  # noqa: F401  (registration; listed after the static checks)
from kvcheck.checks import fabric  # noqa: F401  (registration: kvcheck fabric)
from kvcheck.checks.base import REGISTRY, Check, CheckContext, Finding, PairFacts, Severity, check

__all__ = ["REGISTRY", "Check", "CheckContext", "Finding", "PairFacts", "Severity", "check"]
