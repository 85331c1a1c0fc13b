"""Signals inside a rank: each simulated process has its own handler table; os.kill,
signal.raise_signal and signal.pthread_kill reach simulated processes of the sender's node
(pid 0 probes existence, as for stale-lock checks); real timers and masks are refused."""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from typing import Any

from ...errors import BypassError
from ...tasks.task import Task
from .registry import patch_function
from .threads import ident_of

# signal module functions that only compute: the same inside a rank
_PURE = {"strsignal", "valid_signals", "default_int_handler"}


def _check_signal(name: str, signum: Any) -> int:
    if not isinstance(signum, int) or not 1 <= signum < signal.NSIG:
        raise ValueError(f"{name}: signal number out of range")
    return int(signum)


def _signal(task: Task, signum: int, handler: Any) -> Any:
    signum = _check_signal("signal", signum)
    if signum in (signal.SIGKILL, signal.SIGSTOP):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    if handler not in (signal.SIG_DFL, signal.SIG_IGN) and not callable(handler):
        raise TypeError("signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a callable object")
    table = task.context.signal_handlers
    previous = table.get(signum, signal.SIG_DFL)
    table[signum] = handler
    return previous


def _getsignal(task: Task, signum: int) -> Any:
    return task.context.signal_handlers.get(_check_signal("getsignal", signum), signal.SIG_DFL)


def _kill(task: Task, pid: int, signum: int) -> None:
    """os.kill: a process of the sender's node (its simulated process table)."""
    proc = task.context
    if not isinstance(pid, int) or pid <= 0:
        raise BypassError(f"os.kill({pid}, ...)", "process groups and broadcast signals are not simulated",
                          "signal one pid")
    if signum != 0:
        _check_signal("kill", signum)
    target = proc.sys.machine.process_on(proc.node, pid)
    if target is None:
        raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH))
    if signum:
        proc.sys.machine.deliver(target, signum, f"sent by rank {proc.rank}")


def _raise_signal(task: Task, signum: int) -> None:
    proc = task.context
    proc.sys.machine.deliver(proc, _check_signal("raise_signal", signum), "raise_signal")


def _pthread_kill(task: Task, thread_id: int, signum: int) -> None:
    """A thread of the sender's own process (a signal reaches the process)."""
    proc = task.context
    sched = proc.sys.machine.sched
    idents = {ident_of(t) for t in sched.tasks if t.context is proc and t.state != "done"}
    if thread_id not in idents:
        raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH))
    if signum:
        proc.sys.machine.deliver(proc, _check_signal("pthread_kill", signum), "pthread_kill")


def _refuse(name: str) -> Any:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        raise BypassError(f"signal.{name}", "real timers, masks and signal waits are not simulated")
    return sim


SIMULATED: dict[str, Callable[..., Any]] = {
    "signal": _signal, "getsignal": _getsignal, "raise_signal": _raise_signal,
    "pthread_kill": _pthread_kill, "siginterrupt": lambda task, signum, flag: None,
}


def install() -> None:
    for name, sim in SIMULATED.items():
        if hasattr(signal, name):
            patch_function(signal, name, sim)
    patch_function(os, "kill", _kill)
    for name in dir(signal):
        value = getattr(signal, name)
        if (callable(value) and not isinstance(value, type) and not name.startswith("_")
                and name not in _PURE and name not in SIMULATED):
            patch_function(signal, name, _refuse(name))
