"""A finding's captured rank output, as text (a finding's account, the console, JUnit) and as
HTML: per run, each distinct warning once with its count and ranks, then each rank's stdout and
stderr (pytest's "Captured stdout" sections)."""

from __future__ import annotations

from html import escape

from simfs.capture import KEEP, MAX_WARNINGS, rank_lines, ranks_words, times, warning_text

from ..outcome import FindingRecord, RankOutput, Warned

_RUNS = {0: "the job", 1: "the restarted job (recover)"}


def _run_name(run: int) -> str:
    return _RUNS.get(run, f"run {run}")


def _runs(output: list[RankOutput], warnings: list[Warned]) -> list[int]:
    return sorted({o.run for o in output} | {w.run for w in warnings})


def output_text(output: list[RankOutput], warnings: list[Warned]) -> str:
    """A finding's ``output`` and ``warnings`` as text ("" when the ranks wrote nothing); rank
    code's own text as it came (the caller makes it visible on a terminal)."""
    lines: list[str] = []
    for run in _runs(output, warnings):
        lines.append(f"output of the ranks ({_run_name(run)}):")
        for w in warnings:
            if w.run == run:
                text = warning_text(w.filename, w.lineno, w.category, w.message)
                lines.append(f"  warning ({times(w.count)}, {ranks_words(w.ranks)}): {text}")
        for o in output:
            if o.run == run:
                lines.extend(rank_lines(o.rank, o.stdout, o.stderr, o.warnings_left_out, "  "))
    return "\n".join(lines)


def output_html(finding: FindingRecord) -> str:
    """The output as an HTML section ("" when the ranks wrote nothing)."""
    runs = _runs(finding.output, finding.warnings)
    if not runs:
        return ""
    parts = ["<h3>Output of the ranks</h3>"]
    for run in runs:
        parts.append(f'<div class="output" data-run="{run}"><h4>{escape(_run_name(run))}</h4>')
        warned = [w for w in finding.warnings if w.run == run]
        if warned:
            rows = "".join(f'<tr><td class="num">{w.count:,}</td><td>{escape(ranks_words(w.ranks))}</td>'
                           f"<td><code>{escape(w.category)}</code></td><td>{escape(w.message)}</td>"
                           f"<td><code>{escape(w.filename)}:{w.lineno}</code></td></tr>" for w in warned)
            parts.append('<table class="warnings"><thead><tr><th>times</th><th>ranks</th><th>category</th>'
                         f"<th>message</th><th>where</th></tr></thead><tbody>{rows}</tbody></table>")
        for o in finding.output:
            if o.run != run:
                continue
            if o.warnings_left_out:
                parts.append(f"<p>rank {o.rank}: {o.warnings_left_out:,} more warnings shown and not kept (over "
                             f"{MAX_WARNINGS} distinct ones)</p>")
            for name, text, left_out in (("stdout", o.stdout, o.stdout_left_out),
                                         ("stderr", o.stderr, o.stderr_left_out)):
                if text:
                    cut = (f" ({left_out:,} bytes left out: the first and last {KEEP:,} kept)" if left_out else "")
                    parts.append(f'<details class="stream" data-rank="{o.rank}" data-stream="{name}" open>'
                                 f"<summary>rank {o.rank} {name}{cut}</summary><pre>{escape(text)}</pre></details>")
        parts.append("</div>")
    return "".join(parts)
