"""kvcheck: preflight checks for disaggregated LLM serving (prefill/decode KV transfer over NIXL).

Data flows one way: sources -> sides -> geometry -> plan -> checks -> report.
The runtime modelled first is SGLang 0.5.23 (``kvcheck.sglang``).
"""

__version__ = "0.1.0"
RUNTIME_VERSION = "0.5.23"
