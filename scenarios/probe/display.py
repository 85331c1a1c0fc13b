"""What rank 0 shows a person: a rich bar per phase while the probe runs, then the measurements
and the verdicts as tables."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .report import ProbeReport, Stats

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


def _row(table: Table, what: str, stats: Stats | None, note: str = "") -> None:
    if stats is None:
        return
    missed = f"{stats.not_seen} not seen" if stats.not_seen else ""
    table.add_row(what, _s(stats.p50), _s(stats.p99), _s(stats.max), str(stats.n),
                  "; ".join(x for x in (missed, note) if x))


def measurements(report: ProbeReport) -> Table:
    table = Table(title=f"simfs probe: {report.path} ({report.world_size} ranks, {report.nodes} nodes)")
    for column in ("measurement", "p50", "p99", "max", "n", "note"):
        table.add_column(column, justify="right" if column in ("p50", "p99", "max", "n") else "left")
    for lag in report.visibility:
        _row(table, f"{lag.op} seen elsewhere ({lag.mode})", lag.lag)
    c = report.caches
    if c is not None:
        _row(table, "'not found' cached", c.negative_lifetime, "from the observer's lookup")
        _row(table, "removed name cached", c.positive_lifetime, "from the observer's lookup")
        for chain in (c.file, c.dir):
            if chain is not None:
                periods = ", ".join(_s(p) for p in chain.periods)
                _row(table, f"{chain.kind} attributes cached", chain.first,
                     f"successive: {periods}" + ("" if chain.capped else " (still growing)"))
        table.add_row("mtime granularity", _s(c.mtime_granularity), "", "", "", "")
    k = report.consistency
    if k is not None:
        _row(table, "close-to-open: whole after", k.close_to_open_lag)
        _row(table, "same-tick overwrite seen after", k.same_tick_lag, "same tick" if k.same_tick else "ticks differ")
    _row(table, "fsync (4 KiB)", report.rates.fsync)
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
