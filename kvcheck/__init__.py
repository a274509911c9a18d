"""kvcheck: preflight checks for disaggregated LLM serving (prefill/decode KV transfer over NIXL).

Data flows one way: sources -> sides -> geometry -> plan -> checks -> report.
The runtime modelled first is SGLang 0.5.23 (``kvcheck.sglang``).
"""

import os as _os

__version__ = "0.2.0"

# pydantic scans every installed distribution's entry points for plugins the first
# time a model is built (tens of ms on the cold path); kvcheck uses none. A user's own
# setting wins.
_os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
from kvcheck.release.manifest import NEWEST as RUNTIME_VERSION  # noqa: F401  (kvcheck.RUNTIME_VERSION; written once, in the manifest)
