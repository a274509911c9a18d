"""What a check is: a stable id, a severity, docs (what / why / fix), and a function.

Modelled on kubeadm preflight (one check = a name + a function returning findings,
ignorable by name) and ruff's rule docs (code, what it catches, why it breaks, the fix).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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
        return {
            "id": self.id,
            "severity": self.severity.value,
            "message": self.message,
            "fix": self.fix,
            "runtime_error": rt,
            "ignored": self.ignored,
        }


@dataclass
class PairFacts:
    """What the pair decision found, typed (it replaces ``CheckContext.extra: dict``).

    ``pd_behaviour``: (prefill, decode) ``PDBehaviour`` of each side's release;
    ``timeouts``: the PD timeouts each side reads from its environment
    (``preflight.disaggregation_timeouts``); ``pair_info``: (prefill, decode) ``PairInfo``
    (the scalars the bootstrap checks compare); ``bootstrap_errors``: the decode's
    bootstrap refusals, ``(finding id, RuntimeErrorPrediction, detail)``; ``pp_stages``:
    one summary per prefill PP stage; ``state_decisions``/``states_decided``: the state
    components' transfer (``kvcheck.sglang.states``).

    Reads as a mapping too (``facts["pair_info"]``, ``facts.get("pp_stages")``), so checks
    written against the old ``extra`` dict keep working while they move to attributes."""

    pd_behaviour: tuple[Any, Any] | None = None
    timeouts: dict[str, float] = field(default_factory=dict)
    pair_info: tuple[Any, Any] | None = None
    bootstrap_errors: list[tuple[str, Any, str]] | None = None
    pp_stages: list[dict] | None = None
    state_decisions: list[Any] | None = None
    states_decided: bool | None = None
    # Backend hooks (kvcheck.checks.mooncake, kvcheck.checks.resolved): checks a backend's
    # own decision replaces, its per-stage and state decisions, the KV dtype per GPU kind.
    skip_checks: tuple[str, ...] | list[str] | set[str] | None = None
    backend_stages: list[Any] | None = None
    backend_states: list[Any] | None = None
    kv_dtype_over_gpus: Any = None
    # Anything else a hook records (kept so that a new hook never breaks; give it a field).
    other: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key in self.__dataclass_fields__ and key != "other":
            value = getattr(self, key)
            if value is None:
                raise KeyError(key)
            return value
        return self.other[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self.__dataclass_fields__ and key != "other":
            setattr(self, key, value)
        else:
            self.other[key] = value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self.__dataclass_fields__ and key != "other":
            return getattr(self, key) is not None
        return key in self.other

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


@dataclass
class CheckContext:
    """Everything a check may read: both sides, their geometry, the plan, and what the
    pair decision found (``facts``; ``extra`` is the same object, its old name)."""

    prefill: Side
    decode: Side
    prefill_geometry: SideGeometry | None
    decode_geometry: SideGeometry | None
    plan: Plan | None
    extra: PairFacts = field(default_factory=PairFacts)

    @property
    def facts(self) -> PairFacts:
        return self.extra


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

    def finding(
        self,
        message: str,
        *,
        fix: str | None = None,
        severity: Severity | None = None,
        runtime_error: RuntimeErrorPrediction | None = None,
    ) -> Finding:
        return Finding(
            id=self.id,
            severity=severity or self.severity,
            message=message,
            fix=fix or self.fix,
            runtime_error=runtime_error,
        )


REGISTRY: dict[str, Check] = {}


def check(id: str, severity: Severity, title: str, *, what: str, why: str, fix: str):
    """Decorator registering ``fn(ctx) -> list[Finding]`` as a check with a stable id."""

    def wrap(fn: Callable[[Check, CheckContext], list[Finding]]) -> Callable:
        chk = Check(
            id=id, severity=severity, title=title, what=what, why=why, fix=fix, run=lambda ctx: fn(REGISTRY[id], ctx)
        )
        if id in REGISTRY:
            raise RuntimeError(f"duplicate check id {id}")
        REGISTRY[id] = chk
        return fn

    return wrap
