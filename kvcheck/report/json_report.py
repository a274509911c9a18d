"""The JSON report: one object per the contract in DESIGN.md part 3."""

from __future__ import annotations

import json

from kvcheck.report.model import Report


def render_json(report: Report) -> str:
    """``report`` as one JSON object (keys: verdict, plan, findings, sides, kernel, runtime)."""
    return json.dumps(report.contract(), indent=2)
