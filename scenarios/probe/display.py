"""What rank 0 shows a person: a rich bar per phase while the probe runs, then the measurements
and the verdicts as tables."""

from __future__ import annotations

import math
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .lifetime import first_attr_lifetime, outlived
from .report import AttrLifetimes, ProbeReport, Stats
from .settings import MAX_LINKS
from .shortfall import stopped_by_timeout

_COLOURS = {"ok": "green", "warn": "yellow", "bad": "red", "info": "blue"}


class PhaseBars:
    """One bar per phase, kept on screen when the phase ends (on stderr: stdout has the tables)."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(TextColumn("{task.description:12}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console or Console(stderr=True))
        self._task: TaskID | None = None

    def __enter__(self) -> PhaseBars:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._finish()
        self._progress.stop()

    def _finish(self) -> None:
        if self._task is not None:
            task = self._progress.tasks[self._task]
            self._progress.update(self._task, completed=task.total)

    def phase(self, name: str, total: int) -> None:
        self._finish()
        self._task = self._progress.add_task(name, total=total)

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _figures(stats: Stats, timeout: float) -> list[str]:
    """p50, p99 and max as shown. A trial not seen within the timeout took longer than every one
    seen: a figure whose nearest rank over all trials is such a trial is '>= timeout', and with any
    of them the others are lower bounds too ('>=')."""
    def shown(q: float, value: float | None) -> str:
        if max(math.ceil(q * stats.n) - 1, 0) >= stats.n - stats.not_seen:
            return f">= {_s(timeout)}"
        return (">= " if stats.not_seen else "") + _s(value)

    return [shown(0.5, stats.p50), shown(0.99, stats.p99), shown(1.0, stats.max)]


def _row(table: Table, what: str, stats: Stats | None, timeout: float, note: str = "") -> None:
    if stats is None:
        return
    missed = f"{stats.not_seen} not seen within {timeout:g} s" if stats.not_seen else ""
    table.add_row(what, *_figures(stats, timeout), str(stats.n), "; ".join(x for x in (missed, note) if x))


def _chain(chain: AttrLifetimes, timeout: float) -> str:
    """The successive lifetimes of cached attributes, and how the chain ended."""
    if not first_attr_lifetime(chain, timeout).cached:
        return "not cached"
    said = [_s(p) for p in chain.periods]
    if chain.capped:
        return ", ".join(said) + " (capped)"
    last = outlived(chain, timeout)
    if last is not None:
        return ", ".join([*said, f">= {_s(last)}"]) + f" (not seen within {timeout:g} s)"
    if stopped_by_timeout(chain):
        return ", ".join(said) + f" (still growing: the next change would come after {timeout:g} s)"
    return ", ".join(said) + f" (still growing after {MAX_LINKS} revalidations)"


def measurements(report: ProbeReport) -> Table:
    table = Table(title=f"simfs probe: {report.path} ({report.world_size} ranks, {report.nodes} nodes)")
    for column in ("measurement", "p50", "p99", "max", "n", "note"):
        table.add_column(column, justify="right" if column in ("p50", "p99", "max", "n") else "left")
    timeout = report.timeout
    for lag in report.visibility:
        _row(table, f"{lag.op} seen elsewhere ({lag.mode})", lag.lag, timeout)
    c = report.caches
    if c is not None:
        _row(table, "'not found' cached", c.negative_lifetime, timeout, "from the observer's lookup")
        _row(table, "removed name cached", c.positive_lifetime, timeout, "from the observer's lookup")
        for chain in (c.file, c.dir):
            if chain is not None:
                _row(table, f"{chain.kind} attributes cached", chain.first, timeout,
                     f"successive: {_chain(chain, timeout)}")
        table.add_row("mtime granularity", _s(c.mtime_granularity), "", "", "", "")
    k = report.consistency
    if k is not None:
        _row(table, "close-to-open: whole after", k.close_to_open_lag, timeout)
        _row(table, "same-tick overwrite seen after", k.same_tick_lag, timeout,
             "same tick" if k.same_tick else "ticks differ")
    _row(table, "fsync (4 KiB)", report.rates.fsync, timeout)
    return table


def verdicts(report: ProbeReport) -> Table:
    table = Table(title="verdicts")
    for column in ("", "topic", "verdict", "recommendation"):
        table.add_column(column)
    for v in report.verdicts:
        colour = _COLOURS[v.level]
        table.add_row(f"[{colour}]{v.level}[/]", v.topic, v.text, v.recommendation)
    return table


def show(report: ProbeReport, console: Any) -> None:
    console.print(measurements(report))
    console.print(verdicts(report))
