"""The report: verdict, plan, findings and the two sides' summaries (DESIGN.md part 3)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from kvcheck.checks.base import Finding, Severity
from kvcheck.sglang.plan import Plan


class SideSummary(BaseModel):
    """What kvcheck derived for one side, for display: flags that shape KV and regions."""

    role: str
    origin: str
    model: str
    pool: str
    attn_tp_size: int | None = None
    pp_size: int | None = None
    page_size: int | None = None
    kv_cache_dtype: str | None = None
    n_regions: int | None = None
    kinds: dict[str, int] = Field(default_factory=dict)
    item_lens: list[int] = Field(default_factory=list)
    num_draft_regions: int = 0
    # The side's SGLang release and where kvcheck got it (kvcheck.sglang.releases).
    sglang_version: str | None = None
    version_source: str = ""


class Report(BaseModel):
    """The result of one preflight. ``verdict`` is fail on any unignored error finding,
    warn on any unignored warning, else pass."""

    verdict: str
    plan: Plan | None
    findings: list[Finding]
    sides: list[SideSummary] = Field(default_factory=list)
    kernel: str = "builtin"
    runtime: str = "sglang 0.5.23"
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 pass/warn, 1 fail, 4 unchecked (``kvcheck.errors``)."""
        return {"fail": 1, "unchecked": 4}.get(self.verdict, 0)

    def contract(self) -> dict[str, Any]:
        """The JSON object of DESIGN.md part 3 (plus ``sides``, ``kernel`` and ``runtime``)."""
        plan = self.plan.contract() if self.plan else {"path": None, "n_src": 0, "n_dst": 0, "segments": []}
        if self.plan and self.plan.error is not None:
            plan["path"] = None
        out = {
            "verdict": self.verdict,
            "plan": plan,
            "findings": [f.contract() for f in self.findings],
            "sides": [s.model_dump() for s in self.sides],
            "kernel": self.kernel,
            "runtime": self.runtime,
        }
        out.update(self.extra)
        return out


def verdict_of(findings: list[Finding]) -> str:
    """fail (an unignored error) > unchecked (kvcheck cannot decide) > warn > pass."""
    active = [f for f in findings if not f.ignored]
    if any(f.severity == Severity.ERROR for f in active):
        return "fail"
    if any(f.severity == Severity.UNCHECKED for f in active):
        return "unchecked"
    if any(f.severity == Severity.WARNING for f in active):
        return "warn"
    return "pass"
