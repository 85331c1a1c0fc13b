"""Threads inside a rank belong to it: a started thread becomes a simulated task of the same
rank, and locks made inside a rank hand control to other tasks instead of blocking the OS
thread that runs the whole simulation."""

from __future__ import annotations

import _thread
import _threading_local
import contextvars
import queue
import threading
from typing import Any

from ...tasks.kernel import Scheduler
from ...tasks.task import DONE, Task
from ...tasks.waitqueue import WaitQueue
from .registry import current, original, patch, patch_function

_FAKE_IDENT = 1 << 40
_real_lock = _thread.allocate_lock


def _sched(task: Task) -> Scheduler:
    sched: Scheduler = task.context.sys.machine.sched  # the rank's Process (opaque to the scheduler)
    return sched


class SimLock:
    """A lock made inside a rank. Waiting inside a rank yields to other tasks; outside the
    simulation it blocks like a real lock (its state lives in a real lock)."""

    __slots__ = ("__weakref__", "_lock", "_queue")

    def __init__(self) -> None:
        self._lock = _real_lock()
        self._queue = WaitQueue("threading.Lock")

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(False):
            return True
        task = current()
        if task is None:
            return self._lock.acquire(blocking, timeout) if blocking else False
        if not blocking:
            return False
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        sched = _sched(task)
        deadline = None if timeout == -1 else sched.now + timeout
        while not self._lock.acquire(False):
            remaining = None if deadline is None else deadline - sched.now
            if remaining is not None and remaining <= 0:
                return False
            sched.block(self._queue, remaining)
        return True

    def release(self) -> None:
        self._lock.release()
        if self._queue.waiters:
            task = current()
            waiter = self._queue.waiters[0]
            _sched(task or waiter).notify_all(self._queue)

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _at_fork_reinit(self) -> None:
        self._lock = _real_lock()

    acquire_lock = acquire
    release_lock = release


def ident_of(task: Task) -> int:
    """The thread identifier a simulated thread reports (never a real thread's)."""
    return _FAKE_IDENT + task.tid


def _new_lock(task: Task) -> SimLock:
    return SimLock()


def _new_rlock(task: Task, *args: Any, **kwargs: Any) -> Any:
    return threading._PyRLock()  # type: ignore[attr-defined]  # private: the pure-Python RLock, on our Lock


def _stand_in(task: Task) -> threading.Thread:
    """The Thread object a rank's main task sees as current (and as main) thread."""
    if task.owner is None:
        thread = threading.Thread(name="MainThread", daemon=False)
        thread._ident = ident_of(task)  # type: ignore[attr-defined]  # Thread's private state
        task.owner = thread
    owner: threading.Thread = task.owner
    return owner


def _current_thread(task: Task) -> threading.Thread:
    return _stand_in(task)


def _main_thread(task: Task) -> threading.Thread:
    return _stand_in(_sched(task).mains[task.rank])


def _get_ident(task: Task) -> int:
    return ident_of(task)


def _start(self: threading.Thread) -> None:
    task = current()
    if task is None:
        original(threading.Thread, "start")(self)
        return None
    started: threading.Event = self._started  # type: ignore[attr-defined]  # Thread's private state
    if started.is_set():
        raise RuntimeError("threads can only be started once")
    child = _sched(task).spawn(lambda: _thread_main(self), task.rank, task.context, f"rank{task.rank}/{self.name}",
                               is_main=False, gr_context=contextvars.copy_context(), daemon=self.daemon)
    child.owner = self
    self._simfs_task = child  # type: ignore[attr-defined]  # ours: the thread's task, for join and is_alive
    self._ident = ident_of(child)  # type: ignore[attr-defined]  # Thread's private state, as start() sets it
    if hasattr(self, "_native_id"):
        self._native_id = self._ident  # type: ignore[attr-defined]  # (its _ident, set just above)
    started.set()
    return None


def _thread_main(thread: threading.Thread) -> None:
    """What Thread._bootstrap_inner does around run(): an uncaught exception goes to the rank's
    threading.excepthook (which prints it to the rank's stderr by default) and into the result."""
    try:
        thread.run()
    except SystemExit:
        return
    except BaseException as exc:
        hook = threading.excepthook
        try:
            hook(threading.ExceptHookArgs((type(exc), exc, exc.__traceback__, thread)))
        except BaseException as hook_error:  # noqa: BLE001 - as CPython does: a failing hook is reported instead
            threading.__excepthook__(threading.ExceptHookArgs(
                (type(hook_error), hook_error, hook_error.__traceback__, thread)))
        raise


def _start_new_thread(task: Task, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> int:
    """_thread.start_new_thread inside a rank: a simulated thread of the same rank."""
    child = _sched(task).spawn(lambda: function(*args, **(kwargs or {})), task.rank, task.context,
                               f"rank{task.rank}/{getattr(function, '__name__', 'thread')}", is_main=False,
                               gr_context=contextvars.copy_context(), daemon=True)  # nothing joins it at exit
    return ident_of(child)


def _join(self: threading.Thread, timeout: float | None = None) -> None:
    child: Task | None = getattr(self, "_simfs_task", None)
    task = current()
    if child is None:
        original(threading.Thread, "join")(self, timeout)
        return None
    if task is None:
        return None  # a simulated thread joined from outside: its run is over (or it never ends)
    if child is task:
        raise RuntimeError("cannot join current thread")
    sched = _sched(task)
    deadline = None if timeout is None else sched.now + timeout
    while child.state != DONE:
        remaining = None if deadline is None else deadline - sched.now
        if remaining is not None and remaining <= 0:
            break
        sched.block(child.finished, remaining)
    return None


def _is_alive(self: threading.Thread) -> bool:
    child: Task | None = getattr(self, "_simfs_task", None)
    if child is None:
        alive: bool = original(threading.Thread, "is_alive")(self)
        return alive
    return child.state != DONE


class _Local(threading.local):
    """threading.local made inside a rank is local to the simulated thread."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if current() is not None and cls is _Local:
            return _threading_local.local(*args, **kwargs)
        return super().__new__(cls, *args, **kwargs)


class _SimpleQueue(queue.SimpleQueue[Any]):
    """queue.SimpleQueue made inside a rank waits cooperatively."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if current() is not None and cls is _SimpleQueue:
            return queue._PySimpleQueue()  # type: ignore[attr-defined]  # private: pure Python, on our locks
        return super().__new__(cls)


def install() -> None:
    for owner, name in ((threading, "Lock"), (threading, "_allocate_lock"), (_thread, "allocate_lock")):
        patch_function(owner, name, _new_lock)
    patch_function(threading, "RLock", _new_rlock)
    patch_function(threading, "current_thread", _current_thread)
    patch_function(threading, "main_thread", _main_thread)
    patch_function(threading, "get_ident", _get_ident)
    patch_function(_thread, "get_ident", _get_ident)
    if hasattr(threading, "get_native_id"):
        patch_function(threading, "get_native_id", _get_ident)
    patch_function(_thread, "start_new_thread", _start_new_thread)
    if hasattr(_thread, "start_new"):
        patch_function(_thread, "start_new", _start_new_thread)
    patch(threading.Thread, "start", _start, scan=False)
    patch(threading.Thread, "join", _join, scan=False)
    patch(threading.Thread, "is_alive", _is_alive, scan=False)
    patch(threading, "local", _Local, scan=False)
    patch(queue, "SimpleQueue", _SimpleQueue, scan=False)
