"""A search's coverage of the fault space as the reports show it: each kind of event its examples
reached (scenarios.coverage), with how many examples reached it."""

from __future__ import annotations

from html import escape

from ..outcome import ScenarioOutcome


def coverage_of(outcome: ScenarioOutcome) -> dict[str, int]:
    """The kinds of event the outcome's search reached ({} for a search that did not run)."""
    if outcome.coverage or outcome.finding is None:
        return outcome.coverage
    return outcome.finding.coverage  # (a report written before outcomes kept it)


def coverage_words(coverage: dict[str, int], examples: int) -> str:
    """In one line: "reached: stale lookup answer (37 of 101 examples), start skew (50 of 101)"."""
    if not coverage:
        return "reached: no fault (every example ran as the simple one)"
    first, *rest = coverage.items()
    words = [f"{first[0]} ({first[1]} of {examples} examples)"] + [f"{kind} ({count})" for kind, count in rest]
    return "reached: " + ", ".join(words)


def coverage_cell(outcome: ScenarioOutcome) -> str:
    """The summary table's cell: how many kinds, unfolding to each with its count."""
    coverage = coverage_of(outcome)
    if not coverage:
        return '<td class="num coverage">0</td>'
    items = "".join(f'<li><span class="kind">{escape(kind)}</span>: {count}</li>' for kind, count in coverage.items())
    return (f'<td class="coverage"><details><summary>{len(coverage)} kinds</summary>'
            f"<ul>{items}</ul></details></td>")
