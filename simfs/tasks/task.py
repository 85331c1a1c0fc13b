"""A thread of a simulated rank as both sides of the port hold it: the kernel's scheduler runs
tasks (runtime/scheduler.py), and a rank process keeps a task for each of its own threads
(rank/main.py). Each is a greenlet here, or the OS thread of a rank process it stands for."""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from greenlet import getcurrent

from .waitqueue import WaitQueue

READY, BLOCKED, DONE = "ready", "blocked", "done"


class Greenlet(Protocol):
    """What simfs uses of a ``greenlet.greenlet`` (the package ships no type information)."""

    parent: Greenlet | None
    gr_context: contextvars.Context | None

    @property
    def gr_frame(self) -> FrameType | None: ...

    def switch(self, *args: Any, **kwargs: Any) -> Any: ...


class Task:
    """One thread of control of a simulated rank."""

    __slots__ = (
        "atomic",
        "blocked_since",
        "context",
        "daemon",
        "deadline",
        "error",
        "finished",
        "glet",
        "host_calls",
        "importing",
        "interrupts",
        "is_main",
        "name",
        "owed",
        "owner",
        "rank",
        "result",
        "state",
        "tid",
        "token",
        "waiting",
        "woken",
    )

    def __init__(self, tid: int, rank: int, context: Any, name: str, is_main: bool) -> None:
        self.tid = tid
        self.rank = rank
        self.context = context  # the rank's process state, opaque to the scheduler
        self.name = name
        self.is_main = is_main
        self.daemon = False
        self.state = READY
        self.token = 0
        self.woken = False
        self.waiting: WaitQueue | None = None
        self.blocked_since = 0.0
        self.interrupts: list[Callable[[], None]] = []  # run in the task when it next resumes (signals)
        self.host_calls = 0  # >0: simfs itself is calling the real machine on this task's behalf
        self.importing = 0  # >0: the task is finding or loading a module (its import system reads the real disk)
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = WaitQueue(f"join({name})")
        self.owner: Any = None  # the threading.Thread object for rank-started threads
        self.glet: Greenlet | None = None
        self.atomic = 0  # >0: inside a C extension that calls back into Python; do not switch
        self.owed = 0.0  # virtual time spent inside atomic regions, paid when they end
        self.deadline: float | None = None  # when a blocked task gives up waiting (None: never)

    def __repr__(self) -> str:
        return f"<Task {self.name} rank={self.rank} {self.state}>"


# greenlet -> Task for every live simulated task in this process (all clusters)
TASKS: dict[Greenlet, Task] = {}


def current_task() -> Task | None:
    try:
        return TASKS.get(getcurrent())
    except RuntimeError:  # a finalizer running while a greenlet is torn down
        return None


def task_frame(task: Task) -> FrameType | None:
    """The innermost frame of a task (the running one has no saved greenlet frame)."""
    if task is current_task():
        return sys._getframe(1)
    return task.glet.gr_frame if task.glet is not None else None
