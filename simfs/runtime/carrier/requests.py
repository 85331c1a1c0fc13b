"""What a rank process may ask the host, each served on the simulated machine for the rank's proxy
task: its system calls, waits and notifications, trace notes, signals, exit, and threads. Every
argument is plain data; each handler checks what it uses."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import SimfsError
from ..syscalls import CALLS
from ..syscalls.dirent import ScandirIterator
from ..waitqueue import WaitQueue
from .handle import Forward, RankProcess

if TYPE_CHECKING:
    from ..machine import Machine
    from ..scheduler import Scheduler


class ProcessRequests:
    """The requests of one run's rank processes about their own process and the machine."""

    def __init__(self, machine: Machine, sched: Scheduler, serve: Callable[[RankProcess], Any]) -> None:
        self.machine = machine
        self.sched = sched
        self._serve = serve  # the body of a proxy task (a new thread's)
        self._importing = False  # the system call being served comes from the rank's import system
        machine.reads_on_rank = lambda: self._importing

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {
            "sys": self.sys, "check_fd": self.check_fd, "elapse": self.elapse, "block": self.block,
            "notify_all": self.notify_all, "note": self.note, "alive": self.alive, "signal": self.signal,
            "disposition": self.disposition, "exit": self.exit, "spawn": self.spawn, "busy_threads": self.busy_threads,
            "progress": self.progress,
        }

    def sys(self, rank: RankProcess, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], importing: bool,
            umask: int) -> Any:
        if name not in CALLS or type(args) is not tuple or type(kwargs) is not dict:
            raise SimfsError(f"simfs: a rank process asked for system call {name!r}, which does not exist")
        rank.proc.umask = int(umask) & 0o777
        self._importing = bool(importing)
        try:
            value = getattr(rank.proc.sys, name)(*args, **kwargs)
        finally:
            self._importing = False
        if isinstance(value, ScandirIterator):
            return [(e.name, e.path, e.inode(), e._kind) for e in value]
        return value

    def progress(self, rank: RankProcess) -> None:
        """Nothing to do: the rank's import system read the real disk (remote.IMPORT_READS), and
        the request itself is the watchdog's sign of progress."""

    def check_fd(self, rank: RankProcess, fd: Any) -> None:
        rank.proc.sys._fd(fd)

    def elapse(self, rank: RankProcess, cost: float) -> None:
        self.sched.elapse(float(cost))

    def block(self, rank: RankProcess, key: int, what: str, timeout: float | None) -> bool:
        queue = rank.queues.get(key)
        if queue is None:
            queue = rank.queues[key] = WaitQueue(str(what))
        return self.sched.block(queue, None if timeout is None else float(timeout))

    def notify_all(self, rank: RankProcess, key: int) -> None:
        queue = rank.queues.get(key)
        if queue is not None:
            self.sched.notify_all(queue)

    def note(self, rank: RankProcess, op: str, path: str, outcome: str) -> None:
        """A trace line in the rank's name (its rank and node are the channel's, never the body's)."""
        self.machine.note(str(op), str(path), str(outcome), rank=rank.proc.rank, node=rank.proc.node)

    def alive(self, rank: RankProcess, pid: int) -> bool:
        return self.machine.process_on(rank.proc.node, int(pid)) is not None

    def signal(self, rank: RankProcess, pid: int, signum: int, sender: str) -> None:
        target = self.machine.process_on(rank.proc.node, int(pid))
        if target is None:
            raise ProcessLookupError(3, os.strerror(3))  # ESRCH
        self.machine.deliver(target, int(signum), str(sender))

    def disposition(self, rank: RankProcess, signum: int, kind: str) -> None:
        handlers = rank.proc.signal_handlers
        handlers[int(signum)] = {"default": signal.SIG_DFL, "ignore": signal.SIG_IGN}.get(kind) or Forward(rank)

    def exit(self, rank: RankProcess, outcome: BaseException | None) -> None:
        if outcome is not None and not isinstance(outcome, BaseException):
            raise SimfsError(f"simfs: a rank process exited with {outcome!r}")
        rank.kill("")
        self.machine.end_process(rank.proc, outcome)  # ends this proxy: does not return

    def spawn(self, rank: RankProcess, name: str, daemon: bool) -> int:
        proc = rank.proc
        task = self.sched.spawn(lambda: self._serve(rank), proc.rank, proc, str(name), is_main=False,
                                daemon=bool(daemon))  # named by the rank, as a greenlet rank names its threads
        return task.tid

    def busy_threads(self, rank: RankProcess) -> list[int]:
        return [t.tid for t in self.sched.busy_threads(rank.proc.rank)]
