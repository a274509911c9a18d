"""The JSON report: one object per the contract in DESIGN.md part 3."""

from __future__ import annotations

import json

from kvcheck.report.model import Report


def render_json(report: Report) -> str:
    """``report`` as one JSON object (keys: verdict, plan, findings, sides, kernel, runtime);
    an input's control, escape and bidi characters written as visible text in every value
    (``escape_values``: ``jq -r`` would otherwise print them back)."""
    from kvcheck.sources.limits import escape_values

    return json.dumps(escape_values(report.contract()), indent=2)
