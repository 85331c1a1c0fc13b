"""The reports of a scenario run: JSON read back and validated, JUnit XML that CI can parse, and
the HTML page's summary and timelines (checked as markup here; rendered in Chromium by
test_report_html_browser.py)."""

from __future__ import annotations

import io
import json
import os
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from _report_samples import (
    CRASH_ERROR,
    MAKEDIRS_ERROR,
    MAKEDIRS_REPLAY,
    crash_finding,
    makedirs_finding,
    outcome,
    polling_finding,
    sample_report,
)
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace
from rich.console import Console

from scenarios import outcome as model
from scenarios.outcome import Event, Failure, FindingRecord, Report, shown
from scenarios.reporting import read_json, render_html, replay_command, write_all, write_json, write_junit
from scenarios.reporting.console import searching, show_failures
from scenarios.reporting.failing import failing_event, failing_label
from scenarios.reporting.timeline import timeline_svgs

NS = "{http://www.w3.org/2000/svg}"
SVG = re.compile(r'<svg class="timeline" data-run="(\d+)".*?</svg>', re.S)


def one_finding_report(finding: FindingRecord, *, interrupted: bool = False) -> Report:
    return Report(model.SCHEMA, "0.1.0", "simfs run", 0, "2026-05-01T12:00:00Z", 1.0, interrupted,
                  [outcome("job", "nfs", "fail", "fail", finding)])


def svgs(html: str) -> dict[int, ET.Element]:
    """The page's timelines by run, parsed as XML (so each is well-formed)."""
    return {int(m.group(1)): ET.fromstring(m.group(0)) for m in SVG.finditer(html)}


def by_class(root: ET.Element, *classes: str) -> list[ET.Element]:
    return [e for e in root.iter() if set(classes) <= set(e.get("class", "").split())]


# -- JSON -------------------------------------------------------------------------------------------

def test_json_round_trips_and_is_versioned(tmp_path: Path) -> None:
    report = sample_report()
    path = tmp_path / "report.json"
    write_json(report, path)
    assert read_json(path) == report
    data = json.loads(path.read_text())
    assert data["schema"] == model.SCHEMA == 1
    assert data["outcomes"][0]["finding"]["trace"][0] == {
        "run": 0, "time": 0.0, "rank": 0, "node": 0, "op": "stat", "path": "/shared/trace", "outcome": "ENOENT"}
    assert os.listdir(tmp_path) == ["report.json"]  # written through a temporary file, none left


def test_schema_md_documents_every_field_and_no_other() -> None:
    text = (Path(model.__file__).parent / "reporting" / "SCHEMA.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    documented = {s.split("\n", 1)[0].split(" ")[0]: set(re.findall(r"^\| `(\w+)` \|", s, re.M)) for s in sections}
    for struct in (Report, model.ScenarioOutcome, FindingRecord, Failure, Event, model.RankOutput, model.Warned):
        assert documented[struct.__name__] == set(struct.__struct_fields__), struct.__name__
    assert f"schema {model.SCHEMA}" in text.splitlines()[0]


def _edit(data: dict[str, Any], change: str) -> None:
    if change == "verdict":
        data["outcomes"][0]["verdict"] = "maybe"
    elif change == "missing":
        del data["seed"]
    elif change == "schema":
        data["schema"] = 2
    elif change == "time":
        data["outcomes"][2]["finding"]["trace"][0]["time"] = "soon"


@pytest.mark.parametrize(("change", "said"), [
    ("verdict", "Invalid enum value 'maybe' - at `$.outcomes[0].verdict`"),
    ("missing", "missing required field `seed`"),
    ("schema", "schema 2, this simfs reads schema 1"),
    ("time", "Expected `float`, got `str` - at `$.outcomes[2].finding.trace[0].time`"),
])
def test_read_json_names_the_file_and_what_is_wrong(tmp_path: Path, change: str, said: str) -> None:
    path = tmp_path / "report.json"
    write_json(sample_report(), path)
    data = json.loads(path.read_text())
    _edit(data, change)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a simfs report") as caught:
        read_json(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert said in str(caught.value)


@pytest.mark.parametrize("content", ["", "{", "[]", "null"])
def test_read_json_refuses_what_is_not_a_report_object(tmp_path: Path, content: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(f"{path}: not a simfs report: ")):
        read_json(path)


def test_a_finding_keeps_its_ranks_output_and_an_older_report_reads_without_it(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_json(sample_report(), path)
    data = json.loads(path.read_text())
    finding = data["outcomes"][0]["finding"]
    assert finding["warnings"] == [{"run": 0, "category": "UserWarning",
                                    "message": "Detected an existing checkpoint in /shared/dcp/model, overwriting",
                                    "filename": "torch/distributed/checkpoint/state_dict_saver.py", "lineno": 472,
                                    "count": 4, "ranks": [0, 1, 2, 3]}]
    assert [(o["rank"], o["stderr_left_out"]) for o in finding["output"]] == [(0, 0), (1, 81920)]
    for written in data["outcomes"]:  # as schema 1 was written before the output was kept
        if written["finding"] is not None:
            del written["finding"]["output"], written["finding"]["warnings"]
    path.write_text(json.dumps(data))
    assert read_json(path).outcomes[0].finding.output == []  # type: ignore[union-attr]


# -- JUnit XML --------------------------------------------------------------------------------------

def junit(tmp_path: Path) -> ET.Element:
    path = tmp_path / "report.xml"
    write_junit(sample_report(), path)
    return ET.parse(path).getroot()  # well-formed, or this raises


def test_junit_counts_and_names_every_result(tmp_path: Path) -> None:
    root = junit(tmp_path)
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "simfs"
    for element in (root, suite):
        assert (element.get("tests"), element.get("failures"), element.get("errors")) == ("5", "2", "1")
    cases = suite.findall("testcase")
    assert [(c.get("name"), c.get("classname")) for c in cases] == [
        ("makedirs_every_rank[beegfs]", "makedirs"), ("makedirs_every_rank[nfs]", "makedirs"),
        ("latest_atomic_write[nfs]", "latest"), ("rank0_no_barrier[lustre]", "makedirs"),
        ("sync_files_changing[objectstore]", "sync")]
    assert {c.get("time") for c in cases} == {"0.400"}
    assert len(suite.findall("testcase/failure")) == 2 and len(suite.findall("testcase/error")) == 1
    properties = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert properties["seed"] == "3" and properties["command"] == "simfs run --seed 3"


def test_junit_failure_says_expected_versus_got_with_the_counterexample_and_replay(tmp_path: Path) -> None:
    cases = {c.get("name"): c for c in junit(tmp_path).iter("testcase")}
    failure = cases["latest_atomic_write[nfs]"].find("failure")
    assert failure is not None and failure.get("message") == "expected pass, got fail"
    assert CRASH_ERROR in (failure.text or "")
    assert "replay: simfs replay 'scenarios1:eNo-crash'\\''quote'" in (failure.text or "")
    unexpected_pass = cases["rank0_no_barrier[lustre]"].find("failure")
    assert unexpected_pass is not None and unexpected_pass.get("message") == "expected fail, got pass"
    assert unexpected_pass.text == "no failure found in 100 examples"


def test_junit_error_and_expected_failure(tmp_path: Path) -> None:
    cases = {c.get("name"): c for c in junit(tmp_path).iter("testcase")}
    error = cases["sync_files_changing[objectstore]"].find("error")
    assert error is not None and "TypeError: sync_files()" in (error.text or "")
    assert "\x1b" not in (error.text or "")  # not allowed in XML 1.0: replaced
    expected = cases["makedirs_every_rank[beegfs]"]
    assert expected.find("failure") is None and expected.find("error") is None
    out = expected.find("system-out")
    assert out is not None and f"simfs replay '{MAKEDIRS_REPLAY}'" in (out.text or "")
    text = out.text or ""
    assert "\nwarning" not in text and "  warning (4 times, ranks 0-3): torch/distributed/checkpoint/" \
        "state_dict_saver.py:472: UserWarning: Detected an existing checkpoint" in text
    assert "  rank 1 stderr:\n    | making /shared/trace <script>" in text and "81,920 bytes left out" in text


def test_replay_command_quotes_for_the_shell() -> None:
    assert replay_command("scenarios1:abc") == "simfs replay 'scenarios1:abc'"
    assert replay_command("it's") == "simfs replay 'it'\\''s'"
    assert replay_command("scenarios1:abc", ["--job", "my jobs/a.py:job"]) == \
        "simfs replay --job 'my jobs/a.py:job' 'scenarios1:abc'"


def test_every_report_replays_a_job_file_with_its_options(tmp_path: Path) -> None:
    """A finding of a job file replays with `--job FILE.py:job`: the console, JUnit and HTML say so."""
    finding = replace(makedirs_finding(), replay_options=["--job", "jobs/train.py:job"])
    command = f"simfs replay --job jobs/train.py:job '{MAKEDIRS_REPLAY}'"
    report = one_finding_report(finding)
    write_junit(report, tmp_path / "report.xml")
    assert command in (tmp_path / "report.xml").read_text()
    assert command.replace("'", "&#x27;") in render_html(report)
    shown_on = Console(file=io.StringIO(), width=200)
    show_failures(shown_on, [outcome("jobs/train.py:job", "nfs", "pass", "fail", finding)], every=False)
    assert f"reproduce: {command}\n" in shown_on.file.getvalue()  # type: ignore[attr-defined]


# -- the console ------------------------------------------------------------------------------------

def test_the_console_shows_expected_failures_when_told_to() -> None:
    outcomes = [outcome("makedirs_every_rank", "beegfs", "fail", "fail", makedirs_finding()),
                outcome("latest_atomic_write", "nfs", "pass", "fail", crash_finding())]
    for every, shown_names in ((False, ["latest_atomic_write"]), (True, ["makedirs_every_rank",
                                                                         "latest_atomic_write"])):
        console = Console(file=io.StringIO(), width=200)
        show_failures(console, outcomes, every=every)
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert re.findall(r"^(\w+) on \w+(?: \(an expected failure\))?: root cause", text, re.M) == shown_names
        assert text.count("reproduce: simfs replay '") == len(shown_names)


def test_outside_a_terminal_each_search_is_a_line_and_a_long_one_a_line_a_while() -> None:
    console = Console(file=io.StringIO(), width=200)  # a file: no terminal
    done = outcome("makedirs_every_rank", "beegfs", "fail", "fail", makedirs_finding())
    with searching(console, 2, quiet=0.2) as told:
        time.sleep(0.7)  # a search that takes a while
        told(done)
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines[-1] == "[1/2] makedirs_every_rank on beegfs: fail as expected, 1 example in 0.4 s"
    assert len(lines) >= 3, lines
    assert all(re.fullmatch(r"still searching: 0 of 2 searches finished after \d+ s", line) for line in lines[:-1])


# -- HTML -------------------------------------------------------------------------------------------

def test_html_is_self_contained_and_escapes_what_it_shows() -> None:
    page = render_html(sample_report())
    assert page.count("<script>") == 1  # its own; the description's is shown as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * len(re.findall("<svg", page))
    assert not re.search(r"<link|<img|<iframe|\ssrc=|@import|@font-face", page)
    assert "url(" not in page


def test_html_shows_a_findings_rank_output_escaped() -> None:
    page = render_html(sample_report())
    section = page[page.index('id="finding-0"'):page.index('id="finding-2"')]
    assert "<h3>Output of the ranks</h3>" in section
    assert section.count("<tr><td class=\"num\">4</td><td>ranks 0-3</td>") == 1
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in section
    assert "rank 1 stderr (81,920 bytes left out: the first and last 16,384 kept)" in section
    assert "Output of the ranks" not in page[page.index('id="finding-2"'):]  # its ranks wrote nothing


def test_html_summary_table_marks_each_result() -> None:
    page = render_html(sample_report())
    rows = re.findall(r"<tr class=\"(\w+)\" data-as-expected=\"(\w+)\"><td>(.*?)</td><td>(\w+)</td>.*?"
                      r"<td>(<span class=\"\w+\">.</span>)</td>", page)
    assert [(row[0], row[3], row[4][-8]) for row in rows] == [
        ("expected", "beegfs", "✓"), ("expected", "nfs", "✓"), ("unexpected", "nfs", "✗"),
        ("unexpected", "lustre", "✗"), ("unexpected", "objectstore", "✗")]
    assert '<a href="#finding-0">makedirs_every_rank</a>' in page and 'id="finding-0"' in page
    assert '<a href="#error-4">sync_files_changing</a>' in page and 'id="error-4"' in page
    assert 'id="finding-1"' not in page  # passed: nothing to show
    assert f"simfs replay &#x27;{MAKEDIRS_REPLAY}&#x27;" in page


def test_timeline_has_a_lane_per_rank_and_names_the_failing_operation() -> None:
    (run, svg), = timeline_svgs(makedirs_finding().trace, makedirs_finding().failure)
    root = ET.fromstring(svg)
    assert run == 0 and [g.get("data-rank") for g in by_class(root, "lane", "rank")] == ["0", "1", "2", "3"]
    assert not by_class(root, "lane", "cluster")  # no crash, no server event: no cluster lane
    label = by_class(root, "failing-label")
    assert len(label) == 1 and label[0].findtext(NS + "text") == "rank 1: mkdir /shared/trace → EEXIST"
    failing = by_class(root, "mark", "failing")
    assert len(failing) == 1 and "EEXIST" in failing[0].findtext(NS + "title", "")
    assert len(by_class(root, "halo")) == 2  # the two stale cache answers
    assert len(by_class(root, "coll")) == 4 and len(by_class(root, "timeout")) == 2
    assert "+1,800 s" in [t.text for t in root.iter(NS + "text")]  # the axis break


def test_marks_at_one_time_stand_side_by_side_in_the_order_they_happened() -> None:
    (_, svg), = timeline_svgs(makedirs_finding().trace, None)
    marks = sorted(by_class(ET.fromstring(svg), "mark"), key=lambda e: float(e.get("x", "nan")))
    xs = [float(e.get("x", "nan")) for e in marks[:4]]
    assert [e.findtext(NS + "title", "") for e in marks[:4]] == [
        f"0.0000000 s  rank {rank} (node{rank // 2}): stat /shared/trace → ENOENT" for rank in (0, 3, 2, 1)]
    assert len(set(xs)) == 4


def test_a_crash_and_the_restart_are_two_panels_with_the_crash_across_the_lanes() -> None:
    finding = crash_finding()
    panels = dict(timeline_svgs(finding.trace, finding.failure))
    assert sorted(panels) == [0, 1]
    job, recover = ET.fromstring(panels[0]), ET.fromstring(panels[1])
    assert len(by_class(job, "lane", "rank")) == len(by_class(recover, "lane", "rank")) == 4
    assert len(by_class(job, "lane", "cluster")) == 1 and not by_class(recover, "lane", "cluster")
    lines = by_class(job, "crash-line")
    assert len(lines) == 1  # the power loss: one line for the server and the two nodes
    assert by_class(job, "crash-label")[0].text == "server-crash /shared, crash node1, crash node0"
    assert not by_class(job, "failing-label")
    label = by_class(recover, "failing-label")[0].findtext(NS + "text")
    assert label == "rank 1: close /shared/ckpt/latest → ok, then JSONDecodeError"


def test_html_shows_both_runs_and_an_interrupted_run() -> None:
    page = render_html(one_finding_report(crash_finding(), interrupted=True))
    assert sorted(svgs(page)) == [0, 1]
    assert "run 1: recover, the restarted job after the crash" in page
    assert 'class="interrupted"' in page
    assert 'class="interrupted"' not in render_html(one_finding_report(crash_finding()))


def test_hundreds_of_events_stay_readable() -> None:
    finding = polling_finding()
    (_, svg), = timeline_svgs(finding.trace, finding.failure)
    root = ET.fromstring(svg)
    width = float(root.get("width", "0"))
    marks = by_class(root, "mark")
    assert len(finding.trace) == 639 and len(marks) < 120 and width < 1200  # each polling loop: one bar
    assert "\N{MULTIPLICATION SIGN}40" in [t.text for t in root.iter(NS + "text")]
    assert len(by_class(root, "sleep")) == 7 * 40
    label = by_class(root, "failing-label")[0].findtext(NS + "text")
    assert label == "rank 5: stat /shared/ckpt/done → ENOENT, then TimeoutError"


def test_an_axis_finds_how_long_a_stretch_must_be_to_be_cut_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One threshold for the whole axis: found again for each of its stretches, a finding of some
    thousand events took seconds to draw (the sort of every gap, once per gap), at the end of
    every `simfs run` that reported a failure."""
    from scenarios.reporting import _axis

    found: list[float] = []

    def counted(gaps: list[float], span: float) -> float:
        found.append(span)
        return cut_above(gaps, span)

    cut_above = _axis._cut_above
    monkeypatch.setattr(_axis, "_cut_above", counted)
    starts = [0.001 * i for i in range(2000)] + [100.0]
    axis = _axis.Axis.build(starts, [], left=0.0, target=1000.0)
    assert found == [100.0]
    assert axis.cut == [False] * 1999 + [True]  # the long stretch before 100 s, and only it, is cut


def test_repeats_in_a_row_make_one_mark_from_three_on() -> None:
    cycle = [("lstat", "/root"), ("lstat", "/root/.pyenv"), ("lstat", "/root/.pyenv/versions")]
    trace = [_event(0, "barrier", "WORLD", "arrived", time=1.0), _event(0, "barrier", "WORLD", "arrived", time=2.0),
             _event(1, "stat", "/shared/x", "ENOENT", time=1.0), _event(1, "stat", "/shared/x", "ENOENT", time=1.5),
             _event(1, "stat", "/shared/x", "ENOENT", time=2.0),
             *(_event(2, op, path, "ENOENT", time=i / 10) for i, (op, path) in enumerate(cycle * 5)),
             _event(2, "mkdir", "/shared/x", "ok", time=2.0)]
    (_, svg), = timeline_svgs(trace, None)
    root = ET.fromstring(svg)
    lanes = {g.get("data-rank"): by_class(g, "mark") for g in by_class(root, "lane", "rank")}
    assert [m.tag for m in lanes["0"]] == [NS + "polygon"] * 2  # two barriers stay two
    (bar,) = lanes["1"]
    assert bar.findtext(NS + "title") == \
        "1.0000000 s  rank 1 (node0): stat /shared/x → ENOENT  (\N{MULTIPLICATION SIGN}3, the last at 2.0000000 s)"
    assert float(bar.get("width", "0")) > 100  # from the first to the last
    cycles, mkdir = lanes["2"]
    assert cycles.findtext(NS + "title") == (
        "0.0000000 s  rank 2 (node1): lstat /root → ENOENT; lstat /root/.pyenv → ENOENT; "
        "lstat /root/.pyenv/versions → ENOENT  (\N{MULTIPLICATION SIGN}5, the last at 1.4000000 s)")
    assert "mkdir" in mkdir.findtext(NS + "title", "")


def test_empty_trace_says_so() -> None:
    finding = FindingRecord(True, "the check failed", "scenarios1:x", 3, 0.1, 0.0,
                            Failure(0, None, "check", "AssertionError: 2 != 3", "", ""))
    page = render_html(one_finding_report(finding))
    assert "no trace recorded" in page and "the check (check)" in page


def test_write_all_makes_the_directory_and_three_files(tmp_path: Path) -> None:
    directory = tmp_path / "reports" / "run-1"
    paths = write_all(sample_report(), directory)
    assert paths == {"json": str(directory / "report.json"), "junit": str(directory / "report.xml"),
                     "html": str(directory / "report.html")}
    assert read_json(paths["json"]) == shown(sample_report())  # its traceback's ANSI colours written visible
    assert ET.parse(paths["junit"]).getroot().tag == "testsuites"
    assert Path(paths["html"]).read_text(encoding="utf-8").startswith("<!doctype html>")


# -- which operation failed --------------------------------------------------------------------------

def _event(rank: int, op: str, path: str, outcome: str, time: float = 0.0, run: int = 0) -> Event:
    return Event(run, time, rank, rank // 2, op, path, outcome)


def test_failing_event_is_the_errno_the_error_names_on_its_path() -> None:
    trace = [_event(1, "mkdir", "/shared/a", "EEXIST"), _event(1, "mkdir", "/shared/trace", "EEXIST"),
             _event(1, "mkdir", "/shared/b", "EEXIST"), _event(1, "stat", "/shared/trace", "ENOENT"),
             _event(0, "mkdir", "/shared/trace", "EEXIST")]
    assert failing_event(trace, Failure(0, 1, "raised", MAKEDIRS_ERROR, "", "")) is trace[1]
    no_path = Failure(0, 1, "raised", "OSError: [Errno 17] File exists", "", "")
    assert failing_event(trace, no_path) is trace[2]  # the last EEXIST of the rank
    by_name = Failure(0, 0, "raised", "RuntimeError: mkdir failed with EEXIST", "", "")
    assert failing_event(trace, by_name) is trace[4]
    assert failing_label(trace[1], Failure(0, 1, "raised", MAKEDIRS_ERROR, "", "")) == \
        "rank 1: mkdir /shared/trace → EEXIST"


def test_failing_event_of_a_hang_a_check_and_a_rank_with_no_operation() -> None:
    trace = [_event(2, "barrier", "WORLD", "arrived"), _event(2, "barrier", "WORLD", "timeout", time=1800),
             _event(2, "stat", "/x", "ok", run=1)]
    hung = Failure(0, 2, "hung", "rank 2 waited 1800s in barrier", "", "")
    assert failing_event(trace, hung) is trace[1]
    assert failing_label(trace[1], hung) == "rank 2: barrier WORLD → timeout"
    assert failing_event(trace, Failure(0, None, "check", "AssertionError", "", "")) is None
    assert failing_event(trace, Failure(1, 3, "raised", "KeyError: 'x'", "", "")) is None
    assert failing_event(trace, None) is None


# -- any trace --------------------------------------------------------------------------------------

_OPS = st.sampled_from([("stat", "/shared/a"), ("mkdir", "/shared/a"), ("barrier", "WORLD"), ("sleep", ""),
                        ("crash", "node1"), ("server-crash", "/shared"), ("evict", "/shared")])
_OUTCOMES = st.sampled_from(["ok", "ENOENT", "EEXIST (stale: node 0's cache <said> 'x' & more)", "timeout",
                             "arrived", "2.5s", "EIO (injected)"])


@st.composite
def traces(draw: st.DrawFn) -> list[Event]:
    events = []
    for _ in range(draw(st.integers(1, 60))):
        op, path = draw(_OPS)
        rank = -1 if op in ("crash", "server-crash", "evict") else draw(st.integers(0, 5))
        time = draw(st.one_of(st.sampled_from([0.0, 0.001, 60.0, 1800.0]), st.floats(0, 4000)))
        events.append(Event(draw(st.integers(0, 1)), time, rank, max(rank, 0) // 2, op, path, draw(_OUTCOMES)))
    return events


@given(traces(), st.integers(0, 5), st.sampled_from(["raised", "hung"]))
def test_any_trace_draws_well_formed_timelines_with_every_mark_inside(trace: list[Event], rank: int,
                                                                      kind: str) -> None:
    failure = Failure(0, rank, kind, "FileExistsError: [Errno 17] File exists: '/shared/a'", "", "")
    ranks = {e.rank for e in trace if e.rank >= 0} | {rank}
    for run, svg in timeline_svgs(trace, failure):
        root = ET.fromstring(svg)
        width = float(root.get("width", "0"))
        assert len(by_class(root, "lane", "rank")) == len(ranks)
        for element in root.iter():
            for attribute in ("x", "x1", "x2"):
                if element.get(attribute) is not None:
                    assert 0 <= float(element.get(attribute, "0")) <= width, (attribute, element.attrib)
            if element.get("width") is not None and element.get("x") is not None:
                assert float(element.get("x", "0")) + float(element.get("width", "0")) <= width + 0.1
        expect_label = run == 0 and any(e.run == 0 and e.rank == rank and e.op != "sleep" for e in trace)
        assert len(by_class(root, "failing-label")) == expect_label
        events = [e for e in trace if e.run == run and e.op != "sleep"]
        assert bool(events) <= len(by_class(root, "mark")) <= len(events)
