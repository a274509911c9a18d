"""The decision kernels: one interface, two implementations (``--kernel builtin|runtime``).

- ``builtin``: kvcheck's restatement of SGLang's PD decisions, release by release
  (``kvcheck.sglang.plan``; state components: ``kvcheck.sglang.states``).
- ``runtime``: the installed SGLang's own decision code, driven on CPU
  (``kvcheck.sglang.runtime_kernel``); it answers only for a side that runs the
  installed release (``runtime_version()``).

Both are modules that satisfy ``DecisionKernel``; ``choose_kernel`` picks one.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, Protocol

from kvcheck.errors import InputError

if TYPE_CHECKING:
    from kvcheck.sglang.geometry import SideGeometry
    from kvcheck.sglang.plan.model import PairInfo, Plan, RuntimeErrorPrediction
    from kvcheck.sglang.states import StateDecision

KERNELS = ("auto", "builtin", "runtime")


class DecisionKernel(Protocol):
    """What the preflight asks a kernel, in the order the runtime reaches each decision."""

    def bootstrap_error(
        self, prefill: PairInfo, decode: PairInfo, behaviour: Any = None
    ) -> RuntimeErrorPrediction | None:
        """The decode's first bootstrap check that fails (``try_ensure_parallel_info``), or None."""
        ...

    def decide_transfer(
        self,
        prefill: SideGeometry,
        decode: SideGeometry,
        *,
        decode_dcp_size: int = 1,
        pp_rank: int = 0,
        total_kv_heads: int | None = None,
        behaviour: Any = None,
    ) -> Plan:
        """The prefill's decision when the decode registers (PP stage ``pp_rank``)."""
        ...

    def decide_states(
        self,
        prefill: SideGeometry,
        decode: SideGeometry,
        inp: Any,
        *,
        prefill_dims: dict | None = None,
        decode_dims: dict | None = None,
        pp_rank: int = 0,
    ) -> list[StateDecision]:
        """The state components' transfer (``maybe_send_extra``), one decision per component."""
        ...


def builtin_kernel() -> DecisionKernel:
    """kvcheck's restatement (``kvcheck.sglang.plan``)."""
    from kvcheck.sglang import plan

    return plan


def choose_kernel(kernel: str) -> tuple[str, DecisionKernel]:
    """The decision kernel: kvcheck's ``builtin`` restatement or the installed SGLang's
    own code (``runtime``). ``auto`` prefers the runtime when SGLang is importable.

    Raises ``InputError`` when ``runtime`` is asked for and SGLang is not installed.
    """
    if kernel not in KERNELS:
        raise InputError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}", field="--kernel")
    if kernel == "builtin":
        return "builtin", builtin_kernel()
    available = importlib.util.find_spec("sglang") is not None
    if kernel == "runtime" and not available:
        raise InputError(
            "--kernel runtime needs SGLang installed in this Python (pip install sglang==0.5.23 --no-deps, plus torch)",
            field="--kernel",
        )
    if not available:
        return "builtin", builtin_kernel()
    from kvcheck.sglang import runtime_kernel

    return "runtime", runtime_kernel


def runs_for(k: DecisionKernel, kernel_name: str, behaviour: Any) -> bool:
    """The runtime kernel drives the installed SGLang; it answers for a side only when
    that side runs the installed release (else the builtin restatement of the side's
    release answers). The builtin kernel answers for every release it models."""
    if kernel_name != "runtime":
        return True
    installed = getattr(k, "runtime_version", None)  # the runtime kernel's; the builtin has none
    if installed is None:
        return False
    try:
        return bool(installed() == behaviour.version)
    except Exception:  # pragma: no cover - an unimportable SGLang is a kernel setup error
        return False
