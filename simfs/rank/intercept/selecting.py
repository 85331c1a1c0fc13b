"""select.select, select.poll and select.epoll inside a rank. A rank's descriptors are its simulated
files and its console, and select(2) says "file descriptors associated with regular files shall
always select true for ready to read, ready to write, and error conditions" (POSIX select, also
Linux's): a wait with descriptors returns at once, each ready as asked; a wait with none is a wait
in virtual time, for ``timeout`` seconds or, without one, until a signal (the rank is blocked)."""

from __future__ import annotations

import math
import select
from collections.abc import Iterable
from typing import Any

from ...tasks.process import FD_BASE
from ...tasks.task import Task
from ...tasks.waitqueue import WaitQueue
from .registry import patch_function

_IDLE = WaitQueue("select() on no descriptor, without a timeout")


def _wait(task: Task, seconds: float | None) -> None:
    """Nothing to wait for but time: ``seconds`` of virtual time (None: until interrupted)."""
    sched = task.context.sys.machine.sched
    if seconds is None:
        sched.block(_IDLE)
    else:
        sched.elapse(max(float(seconds), 0.0))


def _timeout(seconds: Any, scale: float = 1.0) -> float | None:
    """A timeout as select (seconds) or poll (milliseconds; negative: none) take it."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("timeout must be a float or None")
    if math.isnan(seconds):
        raise ValueError("Invalid value NaN (not a number)")
    if scale != 1.0 and seconds < 0:
        return None
    if seconds < 0:
        raise ValueError("timeout must be non-negative")
    return seconds * scale


def _select(task: Task, rlist: Iterable[Any], wlist: Iterable[Any], xlist: Iterable[Any],
            timeout: Any = None) -> tuple[list[Any], list[Any], list[Any]]:
    readers, writers, errors = list(rlist), list(wlist), list(xlist)
    seconds = _timeout(timeout)
    for fd in (*readers, *writers, *errors):
        _check(task, fd)
    if readers or writers or errors:
        return readers, writers, errors
    _wait(task, seconds)
    return [], [], []


class _Poll:
    """select.poll() of a rank: registered simulated descriptors are always ready as asked."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._events: dict[int, int] = {}

    def register(self, fd: Any, eventmask: int = select.POLLIN | select.POLLPRI | select.POLLOUT) -> None:
        self._events[_check(self._task, fd)] = eventmask

    def modify(self, fd: Any, eventmask: int) -> None:
        key = _fileno(fd)
        if key not in self._events:
            raise FileNotFoundError(2, "No such file or directory")
        self._events[key] = eventmask

    def unregister(self, fd: Any) -> None:
        del self._events[_fileno(fd)]

    def poll(self, timeout: Any = None) -> list[tuple[int, int]]:
        ready = [(fd, mask & (select.POLLIN | select.POLLOUT | select.POLLRDNORM | select.POLLWRNORM))
                 for fd, mask in self._events.items()]
        ready = [(fd, mask) for fd, mask in ready if mask]
        if not ready:
            _wait(self._task, _timeout(timeout, 0.001))
        return ready


def _fileno(fd: Any) -> int:
    return fd if isinstance(fd, int) else int(fd.fileno())


def _check(task: Task, fd: Any) -> int:
    """The descriptor's number; EBADF for one the process does not have, as select(2) and poll(2)."""
    number = _fileno(fd)
    if number < FD_BASE:
        task.context.console.check(number)
    else:
        task.context.sys._fd(number)
    return number


def install() -> None:
    patch_function(select, "select", _select)
    patch_function(select, "poll", lambda task: _Poll(task))
