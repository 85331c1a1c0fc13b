"""The HTML report rendered by headless Chromium (Debian's chromium package, driven by
playwright without downloading a browser): the timelines draw, name the failing operation,
and the page asks for nothing over the network."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _report_samples import sample_report
from conftest import missing

from scenarios.reporting import write_html

pytestmark = pytest.mark.slow  # a real browser: left out of README's test command, run by .ci/run


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Skips (fails under SIMFS_REQUIRE=chromium) where chromium or playwright is missing."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        missing("chromium", "chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        missing("chromium", "the playwright package is not installed (pip install playwright; no browser download)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        except Error as exc:
            missing("chromium", f"{executable} did not start: {exc}")
        yield launched
        launched.close()


@dataclass
class Loaded:
    """A page as the browser loaded it, with the requests it made and the errors it raised."""

    page: Any
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def loaded(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """The sample report's page, opened from its file."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_html(sample_report(), path)
    loaded = Loaded(browser.new_page(viewport={"width": 1280, "height": 900}))
    loaded.page.on("request", lambda request: loaded.requests.append(request.url))
    loaded.page.on("pageerror", lambda error: loaded.errors.append(str(error)))
    loaded.page.on("console", lambda message: message.type == "error" and loaded.errors.append(message.text))
    loaded.page.goto(path.as_uri())
    yield loaded
    loaded.page.close()


@pytest.fixture
def page(loaded: Loaded) -> Any:
    return loaded.page


def box(element: Any) -> dict[str, float]:
    rectangle = element.bounding_box()
    assert rectangle is not None, "not rendered"
    return rectangle  # type: ignore[no-any-return]


def inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (outer["x"] - 0.5 <= inner["x"] and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
            and outer["y"] - 0.5 <= inner["y"] and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5)


def test_the_page_loads_alone_and_without_errors(loaded: Loaded) -> None:
    assert len(loaded.requests) == 1 and loaded.requests[0].startswith("file://")  # no script, style, font, image
    assert loaded.errors == []


def test_the_timeline_has_a_lane_per_rank_with_marks_drawn(page: Any) -> None:
    svg = page.locator("#finding-0 svg.timeline[data-run='0']")
    svg_box = box(svg)
    assert svg_box["width"] > 500 and svg_box["height"] > 100
    lanes = svg.locator("g.lane.rank")
    assert lanes.count() == 4
    lane_boxes = [box(lanes.nth(i)) for i in range(4)]
    assert all(b["width"] > 0 and b["height"] > 0 for b in lane_boxes)
    assert [b["y"] for b in lane_boxes] == sorted(b["y"] for b in lane_boxes)  # one above the other
    marks = svg.locator(".mark")
    assert marks.count() == 19
    for i in range(marks.count()):
        mark = box(marks.nth(i))
        assert mark["width"] > 0 and mark["height"] > 0 and inside(mark, svg_box)
    assert svg.locator(".halo").count() == 2  # the stale cache answers


def test_the_failing_operation_is_labeled_visibly(page: Any) -> None:
    svg = page.locator("#finding-0 svg.timeline[data-run='0']")
    label = svg.locator(".failing-label text")
    assert label.is_visible()
    assert label.text_content() == "rank 1: mkdir /shared/trace → EEXIST"
    label_box, svg_box = box(label), box(svg)
    assert label_box["width"] > 100 and inside(label_box, svg_box)  # not clipped by the drawing's edge
    failing = box(svg.locator(".mark.failing"))
    rank1 = box(svg.locator("g.lane.rank[data-rank='1']"))
    assert rank1["y"] <= failing["y"] and failing["y"] + failing["height"] <= rank1["y"] + rank1["height"]
    leader = box(svg.locator(".failing-label .leader"))
    assert abs(leader["x"] + leader["width"] / 2 - (failing["x"] + failing["width"] / 2)) < 2  # points at it


def test_a_crash_shows_the_job_and_the_restart(page: Any) -> None:
    finding = page.locator("#finding-2")
    assert finding.locator("svg.timeline[data-run]").count() == 2
    job, recover = finding.locator("svg.timeline[data-run='0']"), finding.locator("svg.timeline[data-run='1']")
    line = box(job.locator(".crash-line"))
    lanes = job.locator("g.lane")
    assert lanes.count() == 5  # four ranks and the cluster
    assert line["y"] <= box(lanes.first)["y"] and line["y"] + line["height"] >= box(lanes.last)["y"]  # across
    assert job.locator(".crash-label").is_visible()
    label = recover.locator(".failing-label text")
    assert label.is_visible() and "JSONDecodeError" in label.text_content()
    assert box(job)["y"] < box(recover)["y"]


def test_the_summary_marks_an_unexpected_verdict(page: Any) -> None:
    rows = page.locator("table.summary tbody tr")
    assert rows.count() == 5
    unexpected = rows.filter(has_text="latest_atomic_write")
    assert unexpected.locator("td").nth(4).inner_text() == "✗" and unexpected.locator("td").nth(4).is_visible()
    assert rows.filter(has_text="beegfs").locator("td").nth(4).inner_text() == "✓"
    page.check("#only-unexpected")
    assert [rows.nth(i).is_visible() for i in range(5)] == [False, False, True, True, True]
    page.uncheck("#only-unexpected")
    assert all(rows.nth(i).is_visible() for i in range(5))


def test_the_summary_shows_each_search_s_coverage(page: Any) -> None:
    passed = page.locator("table.summary tbody tr").nth(1)  # makedirs_every_rank on nfs: passed
    cell = passed.locator("td.coverage")
    assert cell.locator("summary").inner_text() == "3 kinds"
    kinds = cell.locator("li")
    assert not kinds.first.is_visible()  # folded until asked
    cell.locator("summary").click()
    assert [kinds.nth(i).inner_text() for i in range(kinds.count())] == \
        ["start skew: 52", "stale lookup answer: 37", "slow <operations>: 3"]  # shown as text, escaped
    assert all(kinds.nth(i).is_visible() for i in range(3))
    unrun = page.locator("table.summary tbody tr").filter(has_text="sync_files_changing").locator("td.coverage")
    assert unrun.inner_text() == "0"


def test_clicking_a_mark_shows_its_details(page: Any) -> None:
    panel = page.locator("#finding-0 .panel").first
    panel.locator(".mark.failing").click()
    assert panel.locator(".detail").text_content() == \
        "0.0000003 s  rank 1 (node0): mkdir /shared/trace → EEXIST"


def test_a_findings_rank_output_is_shown_each_warning_once(page: Any) -> None:
    finding = page.locator("#finding-0")
    output = finding.locator(".output[data-run='0']")
    assert output.is_visible()
    rows = output.locator("table.warnings tbody tr")
    assert rows.count() == 1  # four ranks showed it: one row that says so
    cells = [rows.first.locator("td").nth(i).inner_text() for i in range(5)]
    assert cells[:3] == ["4", "ranks 0-3", "UserWarning"] and cells[3].startswith("Detected an existing checkpoint")
    assert cells[4] == "torch/distributed/checkpoint/state_dict_saver.py:472"
    streams = output.locator("details.stream")
    assert [(streams.nth(i).get_attribute("data-rank"), streams.nth(i).get_attribute("data-stream"))
            for i in range(streams.count())] == [("0", "stdout"), ("1", "stdout"), ("1", "stderr")]
    stderr = output.locator("details.stream[data-rank='1'][data-stream='stderr']")
    text = stderr.locator("pre")
    assert text.is_visible() and "<script>alert(2)</script>" in text.inner_text()  # shown as text, never run
    assert "81,920 bytes left out" in stderr.locator("summary").inner_text()
    long_line = box(output.locator("details.stream[data-rank='0'] pre"))
    assert inside(long_line, box(finding))  # 3,600 characters on one line wrap inside the page
    assert box(output)["y"] < box(finding.locator(".panel").first)["y"]  # above the timeline
    stderr.locator("summary").click()  # folds away
    assert not text.is_visible()
    stderr.locator("summary").click()
    assert text.is_visible()
