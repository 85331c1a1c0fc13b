"""Reports of a scenario run: versioned JSON, JUnit XML for CI, and a self-contained HTML page
with a timeline of each counterexample."""

from __future__ import annotations

import os

from ..outcome import Report, shown
from ._common import replay_command
from .html import render_html, write_html
from .json_report import read_json, write_json
from .junit import write_junit

__all__ = ["read_json", "render_html", "replay_command", "write_all", "write_html", "write_json", "write_junit"]


def write_all(report: Report, directory: str | os.PathLike[str]) -> dict[str, str]:
    """Write report.json, report.xml and report.html into ``directory`` (made if missing);
    their paths by format ("json", "junit", "html"). Every text is written visible (outcome.shown)."""
    report = shown(report)
    os.makedirs(directory, exist_ok=True)
    paths = {kind: os.path.join(os.fspath(directory), name)
             for kind, name in (("json", "report.json"), ("junit", "report.xml"), ("html", "report.html"))}
    write_json(report, paths["json"])
    write_junit(report, paths["junit"])
    write_html(report, paths["html"])
    return paths
