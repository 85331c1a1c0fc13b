"""The JUnit XML report, for CI: one test case per scenario and profile. A verdict other than
the expected one is a <failure>, a scenario that could not run an <error>."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

from ..outcome import Report, ScenarioOutcome
from ._common import replay_command_of, write_file
from .output import output_text

# characters XML 1.0 does not allow, even escaped (ANSI colours in a traceback, NULs)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", value)


def _finding_text(outcome: ScenarioOutcome) -> str:
    """The minimal counterexample and the command that replays it, or why there is none."""
    finding = outcome.finding
    if finding is None or not finding.failed:
        return f"no failure found in {outcome.examples} examples"
    output = output_text(finding.output, finding.warnings)
    output = f"\n\n{output}" if output else ""
    return f"{finding.description}{output}\n\nreplay: {replay_command_of(finding)}\n"


def _testcase(suite: ET.Element, outcome: ScenarioOutcome) -> None:
    case = ET.SubElement(suite, "testcase", name=_text(f"{outcome.scenario}[{outcome.profile}]"),
                         classname=_text(outcome.family or "scenarios"), time=f"{outcome.wall_time:.3f}")
    if outcome.verdict == "error":
        error = ET.SubElement(case, "error", message=_text(f"the scenario could not run (expected {outcome.expected})"),
                              type="error")
        error.text = _text(outcome.error)
    elif not outcome.as_expected:
        failure = ET.SubElement(case, "failure", message=f"expected {outcome.expected}, got {outcome.verdict}",
                                type=f"unexpected-{outcome.verdict}")
        failure.text = _text(_finding_text(outcome))
    elif outcome.verdict == "fail":  # failed as expected: the counterexample still helps a reader
        ET.SubElement(case, "system-out").text = _text(_finding_text(outcome))


def write_junit(report: Report, path: str | os.PathLike[str]) -> None:
    """Write ``report`` to ``path`` as JUnit XML (one test suite named "simfs")."""
    outcomes = report.outcomes
    counts = {"tests": str(len(outcomes)),
              "failures": str(sum(not o.as_expected and o.verdict != "error" for o in outcomes)),
              "errors": str(sum(o.verdict == "error" for o in outcomes)),
              "time": f"{report.wall_time:.3f}"}
    root = ET.Element("testsuites", counts)
    suite = ET.SubElement(root, "testsuite", {"name": "simfs", **counts, "skipped": "0",
                                              "timestamp": report.started})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("command", report.command), ("seed", str(report.seed)),
                        ("simfs_version", report.simfs_version), ("schema", str(report.schema)),
                        ("interrupted", str(report.interrupted).lower())):
        ET.SubElement(properties, "property", name=name, value=_text(value))
    for outcome in outcomes:
        _testcase(suite, outcome)
    ET.indent(root)
    write_file(path, ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")
