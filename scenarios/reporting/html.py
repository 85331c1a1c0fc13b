"""The HTML report: one self-contained page (inline CSS and script, nothing fetched) with the
summary table and, for each failure found, its counterexample, replay command and timeline."""

from __future__ import annotations

import os
from html import escape

from ..outcome import FindingRecord, Report, ScenarioOutcome
from ._common import replay_command_of, seconds, write_file
from .coverage import coverage_cell
from .output import output_html
from .timeline import STYLE, legend_svg, timeline_svgs

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { margin: 0 0 .3rem; } h2 { margin-top: 2rem; } h3 { margin: 1rem 0 .3rem; font-size: 1rem; }
.meta { color: #555; margin: .2rem 0; }
.interrupted { background: #fff3cd; border: 1px solid #e0c060; padding: .4rem .8rem; }
table.summary { border-collapse: collapse; }
table.summary th, table.summary td { padding: .25rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
table.summary td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.summary tr.unexpected { background: #fdecea; }
.yes { color: #1a7f37; font-weight: bold; } .no { color: #c62828; font-weight: bold; }
.verdict-fail { color: #b35c00; } .verdict-error { color: #c62828; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; white-space: pre-wrap; margin: 0; }
.replay { display: flex; gap: .5rem; align-items: flex-start; }
.replay pre { flex: 1; }
.scroll { overflow-x: auto; border: 1px solid #ddd; }
.detail { font-family: ui-monospace, monospace; color: #333; min-height: 1.3em; margin: .2rem 0 0; }
section.finding, section.error { border-top: 2px solid #ccc; }
table.warnings { border-collapse: collapse; margin: .3rem 0; }
table.warnings th, table.warnings td { padding: .2rem .5rem; border-bottom: 1px solid #ddd; text-align: left;
  vertical-align: top; }
table.warnings td.num { text-align: right; }
details.stream { margin: .3rem 0; } details.stream summary { font-family: ui-monospace, monospace; cursor: pointer; }
"""

_SCRIPT = """
document.getElementById('only-unexpected').addEventListener('change', (event) => {
  for (const row of document.querySelectorAll('table.summary tbody tr')) {
    row.hidden = event.target.checked && row.dataset.asExpected === 'true';
  }
});
for (const panel of document.querySelectorAll('.panel')) {
  const detail = panel.querySelector('.detail');
  panel.querySelector('svg').addEventListener('click', (event) => {
    const title = event.target.querySelector(':scope > title');
    if (title) detail.textContent = title.textContent;
  });
}
for (const button of document.querySelectorAll('button.copy')) {
  button.addEventListener('click', () => {
    const code = button.parentElement.querySelector('code');
    const range = document.createRange();
    range.selectNodeContents(code);
    getSelection().removeAllRanges();
    getSelection().addRange(range);  // selected, for a manual copy where the clipboard is refused
    navigator.clipboard?.writeText(code.textContent).then(() => { button.textContent = 'copied'; }, () => {});
  });
}
"""

_RUNS = {0: "run 0: the job", 1: "run 1: recover, the restarted job after the crash"}


def _failed(outcome: ScenarioOutcome) -> FindingRecord | None:
    """The counterexample found, if one was."""
    return outcome.finding if outcome.finding is not None and outcome.finding.failed else None


def _title(outcome: ScenarioOutcome) -> str:
    return f"{escape(outcome.scenario)}[{escape(outcome.profile)}]"


def _summary(report: Report) -> str:
    rows = []
    for i, o in enumerate(report.outcomes):
        name = escape(o.scenario)
        if _failed(o) is not None:
            name = f'<a href="#finding-{i}">{name}</a>'
        elif o.verdict == "error":
            name = f'<a href="#error-{i}">{name}</a>'
        mark = '<span class="yes">✓</span>' if o.as_expected else '<span class="no">✗</span>'
        rows.append(f'<tr class="{"expected" if o.as_expected else "unexpected"}" '
                    f'data-as-expected="{str(o.as_expected).lower()}"><td>{name}</td><td>{escape(o.profile)}</td>'
                    f'<td>{escape(o.expected)}</td><td class="verdict-{escape(o.verdict)}">{escape(o.verdict)}</td>'
                    f'<td>{mark}</td>'
                    f'<td class="num">{o.examples}</td>{coverage_cell(o)}'
                    f'<td class="num">{seconds(o.virtual_time)}</td>'
                    f'<td class="num">{seconds(o.wall_time)}</td></tr>')
    return ('<section id="summary"><h2>Summary</h2><p><label><input type="checkbox" id="only-unexpected"> '
            'only the results that differ from their expectation</label></p>'
            '<table class="summary"><thead><tr><th>scenario</th><th>profile</th><th>expected</th><th>verdict</th>'
            '<th>as expected</th><th>examples</th><th>events reached</th><th>virtual time</th><th>wall time</th>'
            '</tr></thead><tbody>'
            + "\n".join(rows) + "</tbody></table></section>")


def _root_cause(finding: FindingRecord) -> str:
    failure = finding.failure
    if failure is None:
        return ""
    who = f"rank {failure.rank}" if failure.rank is not None else "the check"
    where = f"\n  at {failure.where}" if failure.where else ""
    traceback = (f"<details><summary>traceback</summary><pre>{escape(failure.traceback)}</pre></details>"
                 if failure.traceback else "")
    return (f"<h3>Root cause</h3><p>{_RUNS.get(failure.run, f'run {failure.run}')}, {escape(who)} "
            f"({escape(failure.kind)})</p><pre>{escape(failure.error + where)}</pre>{traceback}")


def _timeline(finding: FindingRecord) -> str:
    panels = [f'<div class="panel" data-run="{run}"><h4>{escape(_RUNS.get(run, f"run {run}"))}</h4>'
              f'<div class="scroll">{svg}</div><p class="detail">click a mark for its details</p></div>'
              for run, svg in timeline_svgs(finding.trace, finding.failure)]
    if not panels:
        return "<h3>Timeline</h3><p>no trace recorded</p>"
    return f"<h3>Timeline</h3>{legend_svg()}" + "".join(panels)


def _finding(index: int, outcome: ScenarioOutcome, finding: FindingRecord) -> str:
    state = "failed as expected" if outcome.as_expected else f"failed, expected to {outcome.expected}"
    meta = [outcome.family, f"examples: {finding.examples}", f"{seconds(finding.virtual_time)} virtual",
            f"{seconds(finding.wall_time)} wall"]
    return (f'<section class="finding" id="finding-{index}"><h2>{_title(outcome)} {state}</h2>'
            f'<p class="meta">{escape(" · ".join(m for m in meta if m))}</p>'
            f"<h3>Counterexample</h3><pre class=\"description\">{escape(finding.description)}</pre>"
            f'<h3>Replay</h3><div class="replay"><pre><code>{escape(replay_command_of(finding))}</code></pre>'
            f'<button class="copy" type="button">copy</button></div>'
            f"{_root_cause(finding)}{output_html(finding)}{_timeline(finding)}</section>")


def _error(index: int, outcome: ScenarioOutcome) -> str:
    return (f'<section class="error" id="error-{index}"><h2>{_title(outcome)} could not run</h2>'
            f"<pre>{escape(outcome.error)}</pre></section>")


def render_html(report: Report) -> str:
    """The page for ``report``."""
    outcomes = report.outcomes
    unexpected = sum(not o.as_expected for o in outcomes)
    headline = f"{len(outcomes)} results, {unexpected} not as expected"
    sections = []
    for i, o in enumerate(outcomes):
        finding = _failed(o)
        if finding is not None:
            sections.append(_finding(i, o, finding))
        elif o.verdict == "error":
            sections.append(_error(i, o))
    interrupted = ('<p class="interrupted">interrupted: this report holds the results finished before the run '
                   "was stopped</p>" if report.interrupted else "")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>simfs report: {escape(headline)}</title><style>{_CSS}{STYLE}</style></head><body>"
            f"<header><h1>simfs report</h1><p class=\"meta\"><code>{escape(report.command)}</code> · seed "
            f"{report.seed} · started {escape(report.started)} · {seconds(report.wall_time)} wall · simfs "
            f"{escape(report.simfs_version)} · schema {report.schema}</p><p>{escape(headline)}</p>{interrupted}"
            f"</header>{_summary(report)}{''.join(sections)}<script>{_SCRIPT}</script></body></html>\n")


def write_html(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the page for ``report`` to ``path``."""
    write_file(path, render_html(report).encode("utf-8"))
