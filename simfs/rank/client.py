"""The simulation as a rank process sees it: the system calls, machine and scheduler that simfs's
interception layer calls, each call a request of the port (simfs/port/schema.py) that the rank's link
sends to the host and waits for the answer (main.Link). They hold no object of the host's: what they know
(the clock, the real paths ranks read) came as plain data (schema.RankSpec). What a call does on
the real machine (reads of the Python installation and of what the import system opens, the
rank's real descriptors) this process does itself (nativecalls.py), confined by the kernel."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, get_args

from .. import _real
from ..errors import SimfsError
from ..hostpaths import HostPaths
from ..port import native, schema
from ..tasks.dirent import DirEntry, ScandirIterator
from ..tasks.importreads import from_import_system
from ..tasks.process import FD_BASE, Process
from ..tasks.task import Task, current_task
from .nativecalls import ON_REAL_DESCRIPTORS, NativeCalls

if TYPE_CHECKING:
    from ..tasks.waitqueue import WaitQueue

Ask = Callable[[schema.Request], Any]  # the host's answer to a request (or its exception, raised)
# what the import system asks of the machine (seen: stat and listdir; the rest as importlib's and
# setuptools' finders may). The host answers each Native when it comes from the import system
# (Machine.is_real and imports_here: ReadOnRank), so the rank makes them without asking
IMPORT_READS = frozenset({"stat", "lstat", "listdir", "scandir", "access", "readlink", "getcwd", "getcwdb"})
# real seconds of the import system's reads between two signs of progress to the host, whose
# watchdog kills a rank process whose virtual time stands still for a watchdog (a long import is
# progress): a tenth of a second is far below any watchdog and costs one request
PROGRESS_EVERY = 0.1
_CALLS = frozenset(get_args(schema.CallName))


class _Native:
    """The host's answer for a call on the real machine: make it here (compared by identity: a
    system call may well return any string)."""


NATIVE = _Native()


class SchedulerClient:
    """The scheduler's calls that rank code makes (virtual time, waiting, threads). A wait queue's
    waiters are the rank's own threads, listed here while they wait, so that whoever releases
    a lock knows to wake them through the host."""

    def __init__(self, ask: Ask, start_thread: Callable[[Task, Callable[[], Any]], None], main: Task,
                 clock: Callable[[], float]) -> None:
        self._ask = ask
        self._clock = clock
        self._start_thread = start_thread
        self._next_key = 0
        self.mains = {main.rank: main}
        self.tasks = [main]
        self.threads: dict[int, Task] = {}

    @property
    def now(self) -> float:
        """Virtual time, as of the host's last answer (it has not moved since)."""
        return self._clock()

    def elapse(self, cost: float) -> None:
        if cost > 0:
            self._ask(schema.Elapse(float(cost)))

    def block(self, queue: WaitQueue, timeout: float | None = None) -> bool:
        task = current_task()
        queue.waiters.append(task)
        try:
            woken: bool = self._ask(schema.Block(self._key(queue), schema.text(queue.what), timeout))
        finally:
            queue.waiters.remove(task)
        return woken

    def notify_all(self, queue: WaitQueue) -> None:
        self._ask(schema.NotifyAll(self._key(queue)))

    def _key(self, queue: WaitQueue) -> int:
        """The queue's number for the host, given at its first wait or notification."""
        if queue.key is None:
            queue.key = self._next_key
            self._next_key += 1
        return queue.key

    def enter_atomic(self) -> None:
        """Nothing to do: a rank process's C++ state is its own, another rank may run meanwhile."""

    def exit_atomic(self) -> None:
        """See enter_atomic."""

    def spawn(self, fn: Callable[[], Any], rank: int, context: Any, name: str, *, is_main: bool,
              start_at: float | None = None, gr_context: Any = None, daemon: bool = False) -> Task:
        """A thread of the rank: a task in the host's scheduler, run by an OS thread of this process."""
        tid: int = self._ask(schema.Spawn(schema.text(str(name)), bool(daemon)))
        task = Task(tid, rank, context, name, is_main=False)
        task.daemon = daemon
        self.tasks.append(task)
        self.threads[tid] = task
        self._start_thread(task, fn if gr_context is None else lambda: gr_context.run(fn))
        return task

    def busy_threads(self, rank: int) -> list[Task]:
        """The rank's threads its process's exit waits for (the host knows which)."""
        busy: list[int] = self._ask(schema.BusyThreads())
        return [self.threads[tid] for tid in busy]


class MachineClient:
    """What rank code asks of its Machine: the clock, trace notes, signals and process exit."""

    def __init__(self, ask: Ask, sched: SchedulerClient, start: schema.RankSpec) -> None:
        self._ask = ask
        self.sched = sched
        self.epoch = start.epoch
        self.run_start = start.run_start
        self.host = HostPaths(tuple(start.readable))

    def now(self) -> float:
        return self.sched.now

    def wall_time(self) -> float:
        return self.epoch + self.sched.now

    def is_real(self, path: str) -> bool:
        return self.host.readable(path) or from_import_system()

    def note(self, op: str, path: str, outcome: str, rank: int = -1, node: int = -1) -> None:
        """A trace line: the host writes it in this rank's name."""
        self._ask(schema.Note(op, path, schema.text(outcome)))

    def warned(self, rank: int, category: str, message: str, filename: str, lineno: int) -> None:
        """A warning the rank showed: the host keeps it with the rank's output (the channel's rank)."""
        self._ask(schema.Warned(category[:256], schema.text(message), schema.text(filename), lineno))

    def imported(self, library: schema.Library) -> None:
        """The rank imported ``library`` itself: the host preloads it for its later runs."""
        self._ask(schema.Imported(library))

    def process_on(self, node: int, pid: int) -> int | None:
        """The pid when that process of the node is alive (the host's Process stays there)."""
        alive: bool = self._ask(schema.Alive(pid))
        return pid if alive else None

    def deliver(self, target: int | Process, signum: int, sender: str) -> None:
        self._ask(schema.Signal(target if isinstance(target, int) else target.pid, int(signum), sender))

    def end_process(self, proc: Process, outcome: BaseException | None) -> None:
        self._ask(schema.Exit(outcome))
        raise SimfsError("simfs: the host did not end this rank process")  # it never answers an exit


class SyscallsClient:
    """The rank's system calls: each a request to the host, which runs it on the simulated
    machine; calls on the real machine (the host answers Native) and on the rank's own real
    descriptors this process makes itself (``native``)."""

    def __init__(self, ask: Ask, native_calls: NativeCalls, machine: MachineClient) -> None:
        self._ask = ask
        self.native = native_calls
        self.proc = native_calls.proc
        self.machine = machine
        self._progress_told = _real.monotonic()  # when the host last heard of an import's progress

    def __getattr__(self, name: str) -> Any:
        if name not in _CALLS:  # the host's state (its vfs, its descriptor table) is not here
            raise AttributeError(f"simfs defect: rank-side code read {name!r} of the system calls, which only the "
                                 "host holds; ask the host for it by a system call")
        natively = self.native.call
        on_real_descriptors = name in ON_REAL_DESCRIPTORS

        def call(*args: Any, **kwargs: Any) -> Any:
            by_fd = bool(args) and type(args[0]) is int
            if by_fd and on_real_descriptors and 0 <= args[0] < FD_BASE:
                return natively(name, args, kwargs)  # a real descriptor of this process
            importing = from_import_system()
            if importing and not by_fd and name in IMPORT_READS:
                self._import_read()
                return natively(name, args, kwargs)
            answer = self._ask(schema.SystemCall(cast(schema.CallName, name), [_plain(a) for a in args],
                                                 {k: _plain(v) for k, v in kwargs.items()}, importing, self.proc.umask))
            if answer is NATIVE:
                return natively(name, args, kwargs)
            if name in ("chdir", "fchdir"):
                self.proc.cwd = self._ask(schema.SystemCall("getcwd", [], {}))
            if name == "scandir":
                return _entries(self, answer)
            return answer

        call.__name__ = name
        setattr(self, name, call)  # made once per name: the next call finds it without __getattr__
        return call

    def _import_read(self) -> None:
        now = _real.monotonic()
        if now - self._progress_told >= PROGRESS_EVERY:
            self._progress_told = now
            self._ask(schema.Progress())

    def _abs(self, path: Any, dir_fd: int | None = None) -> tuple[str, bool]:
        return self.native._abs(path, dir_fd)

    def _fd(self, fd: Any) -> None:
        number = _plain(fd)
        if type(number) is not int:
            raise TypeError(f"an integer is required (got type {type(fd).__name__})")
        self._ask(schema.CheckDescriptor(number))

    def _real_write_refused(self, shown: Any) -> OSError:
        return native.refused(shown)


def _plain(value: Any) -> Any:
    """An argument as plain data the host loads: paths as str or bytes, buffers as bytes, an
    int enum as its number, a file object as its descriptor."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, int) and type(value) not in (int, bool):  # an IntEnum or IntFlag: its number
        return int(value)
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if not isinstance(value, (int, str, bytes, float, tuple, list, type(None))) and hasattr(value, "fileno"):
        return value.fileno()
    return value


class _Entries(ScandirIterator):
    """os.scandir's iterator over the entries the host listed."""

    def __init__(self, entries: list[DirEntry]) -> None:
        self._it = iter(entries)


def _entries(sys: SyscallsClient, listed: list[tuple[Any, Any, int, str]]) -> _Entries:
    return _Entries([DirEntry(sys, name, path, ino, kind) for name, path, ino, kind in listed])
