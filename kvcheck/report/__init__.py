"""Renderers: terminal (rich), JSON, and the CI formats. ``FORMATS`` names them.

Renderers are imported on first use (PEP 562), so ``--format json`` never pays for
rich or junit-xml on the cold path.
"""

from __future__ import annotations

from importlib import import_module

from kvcheck.report.model import Report, SideSummary, verdict_of

FORMATS = ("table", "json", "junit", "github")

_RENDERERS = {
    "render_github": "kvcheck.report.github",
    "render_json": "kvcheck.report.json_report",
    "render_junit": "kvcheck.report.junit",
    "render_terminal": "kvcheck.report.terminal",
}

__all__ = ["FORMATS", "Report", "SideSummary", *_RENDERERS, "verdict_of"]


def __getattr__(name: str):
    if name in _RENDERERS:
        return getattr(import_module(_RENDERERS[name]), name)
    raise AttributeError(f"module 'kvcheck.report' has no attribute {name!r}")
