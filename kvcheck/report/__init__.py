"""Renderers: terminal (rich), JSON, and the CI formats. ``FORMATS`` names them."""

from kvcheck.report.json_report import render_json
from kvcheck.report.model import Report, SideSummary, verdict_of
from kvcheck.report.terminal import render_terminal

FORMATS = ("table", "json")

__all__ = ["FORMATS", "Report", "SideSummary", "render_json", "render_terminal", "verdict_of"]
