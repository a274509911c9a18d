"""Named checks (``REGISTRY``), each with a stable id, severity, docs and a fix.

Importing this package registers every check module.
"""

from kvcheck.checks import risks, transfer  # noqa: F401  (registration)
from kvcheck.checks.base import REGISTRY, Check, CheckContext, Finding, Severity, check

__all__ = ["REGISTRY", "Check", "CheckContext", "Finding", "Severity", "check"]
