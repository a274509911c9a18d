"""On-call explain: recognize SGLang 0.5.23 PD/NIXL runtime messages and say what they
mean, what triggers them, what the operator sees, the fix, and which preflight check
predicts them. The catalog is data (``catalog.yaml``); ``matcher`` finds messages in a
message or a log; ``render`` prints the result."""

from kvcheck.explain.catalog import Catalog, Entry, load_catalog
from kvcheck.explain.matcher import (
    EXIT_NOT_RECOGNIZED,
    EXIT_RECOGNIZED,
    Explanation,
    Hit,
    attach_preflight,
    explain_text,
)

__all__ = [
    "Catalog",
    "Entry",
    "EXIT_NOT_RECOGNIZED",
    "EXIT_RECOGNIZED",
    "Explanation",
    "Hit",
    "attach_preflight",
    "explain_text",
    "load_catalog",
]
