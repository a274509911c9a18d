"""Renderers: terminal (rich), JSON, and the CI formats. ``FORMATS`` names them."""

from kvcheck.report.github import render_github
from kvcheck.report.json_report import render_json
from kvcheck.report.junit import render_junit
from kvcheck.report.model import Report, SideSummary, verdict_of
from kvcheck.report.terminal import render_terminal

FORMATS = ("table", "json", "junit", "github")

__all__ = ["FORMATS", "Report", "SideSummary", "render_github", "render_json", "render_junit", "render_terminal", "verdict_of"]
