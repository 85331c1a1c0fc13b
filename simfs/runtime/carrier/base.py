"""What a run asks of the carrier of its ranks, whichever it is (simfs/carriers.py names them):
greenlet ranks, which run in the host's interpreter and call the simulated kernel directly, or
rank processes, which ask it through the port. The run has no branch on which one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ...tasks.process import Process
from ...tasks.task import Task

# what the watchdog saw a stuck rank do: what a real machine never does for long
STILL = "in which its virtual time did not move (no simulated operation, or a loop of calls that take none)"


class Carrier(Protocol):
    """The ranks of one run, as the run sees them."""

    @property
    def signs(self) -> int:
        """Signs of progress served so far besides virtual time: a rank process's import system
        reading the real disk (schema.Progress), which takes real time and no virtual time."""

    def start(self, proc: Process, job: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Callable[[], Any]:
        """Make the rank ready to run ``job``; returns the body of its main task."""

    def where(self, task: Task) -> str:
        """'file:line in function' of the rank code the task is in."""

    def kill_node(self, node: int, why: str) -> None:
        """A node crashed: what runs its ranks ends with it."""

    def interrupt(self, sim: threading.Thread) -> None:
        """Ctrl-C: stop the rank that holds the turn where it is (``sim``: the simulation thread)."""

    def stuck(self, task: Task, seconds: float, sim: threading.Thread, again: bool) -> str:
        """The watchdog: ``task`` ran ``seconds`` of real time in which virtual time did not move
        (``again``: and again since the last call); stop it, and say what was done. Raises
        SimfsError when it cannot be stopped."""

    def close(self) -> None:
        """The run is over: nothing of its ranks runs any more, the host is as it was."""
