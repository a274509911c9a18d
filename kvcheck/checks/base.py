"""What a check is: a stable id, a severity, docs (what / why / fix), and a function.

Modelled on kubeadm preflight (one check = a name + a function returning findings,
ignorable by name) and ruff's rule docs (code, what it catches, why it breaks, the fix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from pydantic import BaseModel

from kvcheck.sglang.geometry import SideGeometry
from kvcheck.sglang.plan import Plan, RuntimeErrorPrediction
from kvcheck.sides import Side


class Severity(str, Enum):
    """``error`` fails the verdict; ``unchecked`` means kvcheck cannot decide (verdict
    ``unchecked``, exit 4, unless an error already fails it); ``warning`` makes it
    ``warn``; ``info`` is context."""

    ERROR = "error"
    UNCHECKED = "unchecked"
    WARNING = "warning"
    INFO = "info"


class Finding(BaseModel):
    """One result of one check. ``runtime_error`` is set when the runtime will raise."""

    id: str
    severity: Severity
    message: str
    fix: str
    runtime_error: RuntimeErrorPrediction | None = None
    ignored: bool = False

    def contract(self) -> dict:
        rt = None
        if self.runtime_error is not None:
            rt = self.runtime_error.model_dump()
        return {"id": self.id, "severity": self.severity.value, "message": self.message, "fix": self.fix, "runtime_error": rt, "ignored": self.ignored}


@dataclass
class CheckContext:
    """Everything a check may read: both sides, their geometry, and the plan."""

    prefill: Side
    decode: Side
    prefill_geometry: SideGeometry | None
    decode_geometry: SideGeometry | None
    plan: Plan | None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """A named check. ``what``: what it catches; ``why``: why the runtime breaks; ``fix``."""

    id: str
    severity: Severity
    title: str
    what: str
    why: str
    fix: str
    run: Callable[[CheckContext], list[Finding]]

    def finding(self, message: str, *, fix: str | None = None, severity: Severity | None = None, runtime_error: RuntimeErrorPrediction | None = None) -> Finding:
        return Finding(id=self.id, severity=severity or self.severity, message=message, fix=fix or self.fix, runtime_error=runtime_error)


REGISTRY: dict[str, Check] = {}


def check(id: str, severity: Severity, title: str, *, what: str, why: str, fix: str):
    """Decorator registering ``fn(ctx) -> list[Finding]`` as a check with a stable id."""

    def wrap(fn: Callable[["Check", CheckContext], list[Finding]]) -> Callable:
        chk = Check(id=id, severity=severity, title=title, what=what, why=why, fix=fix, run=lambda ctx: fn(REGISTRY[id], ctx))
        if id in REGISTRY:
            raise RuntimeError(f"duplicate check id {id}")
        REGISTRY[id] = chk
        return fn

    return wrap
