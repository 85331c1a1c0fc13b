"""What `simfs run` prints while it searches and after its table: on a terminal a live progress
bar; elsewhere (a CI log) a line per finished search, and a line whenever a while passes without
one; then each failure's account, root cause first, with the command that replays it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from simfs.visible import FRAME, framed, visible

from ..outcome import ScenarioOutcome
from ._common import replay_command_of
from .output import output_text

Told = Callable[[ScenarioOutcome], None]  # tells the display that a search finished

QUIET = 60.0  # seconds a log may go without a line while searches run: well inside CI's limits on silence
# (Travis CI stops a job after 10 minutes without output: docs.travis-ci.com/user/common-build-problems)


def searching(console: Console, total: int, quiet: float = QUIET) -> AbstractContextManager[Told]:
    """The display of ``total`` searches as they finish: a transient progress bar on a terminal,
    plain lines elsewhere (one per search; one every ``quiet`` seconds while none finishes). Where
    rich is told to treat a log as a terminal (FORCE_COLOR, TTY_COMPATIBLE), the log still gets lines:
    a bar redrawn in place is no line a log keeps."""
    if console.is_terminal and console.file.isatty():
        return _bar(console, total)
    return _Lines(console, total, quiet)


@contextmanager
def _bar(console: Console, total: int) -> Iterator[Told]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    with progress:
        bar = progress.add_task("searching", total=total)

        def told(outcome: ScenarioOutcome) -> None:
            progress.update(bar, advance=1, description=escape(f"{outcome.scenario} [{outcome.profile}]"))

        yield told


def search_line(outcome: ScenarioOutcome) -> str:
    """A finished search in one line: scenario, profile, verdict against its expectation,
    examples and wall seconds."""
    judged = "as expected" if outcome.as_expected else f"(expected {outcome.expected}): UNEXPECTED"
    examples = f"{outcome.examples} example{'' if outcome.examples == 1 else 's'}"
    return visible(f"{outcome.scenario} on {outcome.profile}: {outcome.verdict} {judged}, {examples} in "
                   f"{outcome.wall_time:.1f} s")


class _Lines:
    """The display outside a terminal: a line per finished search, flushed at once, and a line
    from a thread of its own whenever ``quiet`` seconds pass without any (a long search)."""

    def __init__(self, console: Console, total: int, quiet: float) -> None:
        self._console, self._total, self._quiet = console, total, quiet
        self._done = 0
        self._started = self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_telling, name="simfs-progress", daemon=True)

    def __enter__(self) -> Told:
        self._thread.start()
        return self._finished

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _finished(self, outcome: ScenarioOutcome) -> None:
        with self._lock:
            self._done += 1
            self._say(f"[{self._done}/{self._total}] {search_line(outcome)}")

    def _keep_telling(self) -> None:
        while not self._stop.wait(max(0.0, self._last + self._quiet - time.monotonic())):
            with self._lock:
                now = time.monotonic()
                if now - self._last >= self._quiet:
                    self._say(f"still searching: {self._done} of {self._total} searches finished after "
                              f"{now - self._started:.0f} s")

    def _say(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        self._console.file.flush()  # (a pipe's stdout is block-buffered: the log would wait for it)
        self._last = time.monotonic()


def show_failures(console: Console, outcomes: list[ScenarioOutcome], *, every: bool) -> None:
    """The account of each unexpected failure (``every``: of each expected one too) and of each
    search that could not run: root cause, counterexample, the ranks' output and the command that
    replays it. What came from rank code is shown with its control and escape sequences made
    visible, and no rich markup of it interpreted."""
    for o in outcomes:
        if o.verdict == "error":
            console.print(f"\n[red]{escape(o.scenario)} on {escape(o.profile)} could not run:[/] "
                          f"{escape(visible(o.error))}", markup=True)
        elif o.finding is not None and o.finding.failed and (every or not o.as_expected):
            expected = " (an expected failure)" if o.as_expected else ""
            console.print(f"\n[bold]{escape(o.scenario)} on {escape(o.profile)}[/]{expected}: ", end="")
            console.print(visible(o.finding.description), markup=False, highlight=False)
            failure = o.finding.failure
            if failure is not None and failure.traceback:
                console.print(visible(FRAME + framed(failure.traceback.rstrip(), "")), markup=False,
                              highlight=False)
            output = output_text(o.finding.output, o.finding.warnings)
            if output:
                console.print(visible(output), markup=False, highlight=False)
            console.print("reproduce: " + visible(replay_command_of(o.finding)), markup=False, highlight=False,
                          soft_wrap=True)
