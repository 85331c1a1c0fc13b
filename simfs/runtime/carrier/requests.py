"""The kernel's handlers of a rank process's requests about its own process and the machine
(port/schema.py), each served on the simulated machine for the rank's proxy task: its system
calls, waits and notifications, trace notes, signals, exit, and threads. Every field is plain
data the schema checked; each handler checks what the schema cannot."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import SimfsError
from ...port import schema
from ...tasks.dirent import ScandirIterator
from ...tasks.waitqueue import WaitQueue
from .handle import Forward, RankProcess
from .preload import ranks_imported

if TYPE_CHECKING:
    from ..machine import Machine
    from ..scheduler import Scheduler


# what the trace keeps of a rank's notes (a sleep, a store's wait: a path and a few words each),
# so that notes a rank forges cannot fill the host's memory
NOTE_PATH, NOTE_OUTCOME = 4096, 256  # characters: PATH_MAX (include/uapi/linux/limits.h); a line
NOTES_KEPT = 16 << 20  # characters of notes per rank: a million sleeps' (a few words each) and more


class ProcessRequests:
    """The requests of one run's rank processes about their own process and the machine."""

    def __init__(self, machine: Machine, sched: Scheduler, serve: Callable[[RankProcess], Any]) -> None:
        self.machine = machine
        self.sched = sched
        self._serve = serve  # the body of a proxy task (a new thread's)
        self._importing = False  # the system call being served comes from the rank's import system
        self.signs = 0  # the import system's requests served: the watchdog's sign of an import's progress
        self._notes: dict[int, int] = {}  # rank -> characters of its trace notes kept
        machine.reads_on_rank = lambda: self._importing

    def handlers(self) -> dict[type[schema.Request], Callable[[RankProcess, Any], Any]]:
        return {
            schema.SystemCall: self.sys, schema.CheckDescriptor: self.check_fd, schema.Elapse: self.elapse,
            schema.Block: self.block, schema.NotifyAll: self.notify_all, schema.Note: self.note,
            schema.Warned: self.warned, schema.Alive: self.alive, schema.Signal: self.signal,
            schema.Disposition: self.disposition, schema.Exit: self.exit, schema.Spawn: self.spawn,
            schema.BusyThreads: self.busy_threads, schema.Progress: self.progress, schema.Imported: self.imported,
        }

    def sys(self, rank: RankProcess, call: schema.SystemCall) -> Any:
        rank.proc.umask = call.umask & 0o777
        self._importing = call.importing
        self.signs += call.importing  # an import's progress: it takes real time, no virtual time
        try:
            value = getattr(rank.proc.sys, call.name)(*call.args, **call.kwargs)
        finally:
            self._importing = False
        if isinstance(value, ScandirIterator):
            return [(e.name, e.path, e.inode(), e._kind) for e in value]
        return value

    def progress(self, rank: RankProcess, request: schema.Progress) -> None:
        """The rank's import system read the real disk (remote.IMPORT_READS): counted, the
        watchdog's sign of progress that takes no virtual time."""
        self.signs += 1

    def imported(self, rank: RankProcess, request: schema.Imported) -> None:
        """The rank imported a library its process was forked without: later runs preload it."""
        ranks_imported(request.library)

    def check_fd(self, rank: RankProcess, request: schema.CheckDescriptor) -> None:
        rank.proc.sys._fd(request.fd)

    def elapse(self, rank: RankProcess, request: schema.Elapse) -> None:
        self.sched.elapse(request.seconds)

    def block(self, rank: RankProcess, request: schema.Block) -> bool:
        queue = rank.queues.get(request.queue)
        if queue is None:
            queue = rank.queues[request.queue] = WaitQueue(request.what)
        return self.sched.block(queue, request.timeout)

    def notify_all(self, rank: RankProcess, request: schema.NotifyAll) -> None:
        queue = rank.queues.get(request.queue)
        if queue is not None:
            self.sched.notify_all(queue)

    def note(self, rank: RankProcess, request: schema.Note) -> None:
        """A trace line in the rank's name (its rank and node are the channel's, never the body's),
        its path and outcome cut to what a note says, NOTES_KEPT characters of them per rank."""
        proc = rank.proc
        kept = self._notes.get(proc.rank, 0)
        if kept > NOTES_KEPT:
            return
        path, outcome = schema.text(str(request.path), NOTE_PATH), schema.text(request.outcome, NOTE_OUTCOME)
        self._notes[proc.rank] = kept + len(request.op) + len(path) + len(outcome)
        if self._notes[proc.rank] <= NOTES_KEPT:
            self.machine.note(request.op, path, outcome, rank=proc.rank, node=proc.node)
        else:
            self.machine.note("notes", "", f"rank {proc.rank}'s further trace notes left out (more than "
                              f"{NOTES_KEPT:,} characters)", rank=proc.rank, node=proc.node)

    def warned(self, rank: RankProcess, request: schema.Warned) -> None:
        """A warning the rank showed, kept with its output (the channel's rank, never the body's)."""
        self.machine.warned(rank.proc.rank, request.category, request.message, request.filename, request.lineno)

    def alive(self, rank: RankProcess, request: schema.Alive) -> bool:
        return self.machine.process_on(rank.proc.node, request.pid) is not None

    def signal(self, rank: RankProcess, request: schema.Signal) -> None:
        target = self.machine.process_on(rank.proc.node, request.pid)
        if target is None:
            raise ProcessLookupError(3, os.strerror(3))  # ESRCH
        self.machine.deliver(target, request.signum, request.sender)

    def disposition(self, rank: RankProcess, request: schema.Disposition) -> None:
        chosen = {"default": signal.SIG_DFL, "ignore": signal.SIG_IGN}.get(request.kind)
        rank.proc.signal_handlers[request.signum] = chosen or Forward(rank)

    def exit(self, rank: RankProcess, request: schema.Exit) -> None:
        outcome = request.outcome
        if outcome is not None and not isinstance(outcome, BaseException):
            raise SimfsError(f"simfs: a rank process exited with {outcome!r}")
        rank.kill("")
        self.machine.end_process(rank.proc, outcome)  # ends this proxy: does not return

    def spawn(self, rank: RankProcess, request: schema.Spawn) -> int:
        proc = rank.proc
        task = self.sched.spawn(lambda: self._serve(rank), proc.rank, proc, request.name, is_main=False,
                                daemon=request.daemon)  # named by the rank, as a greenlet rank names its threads
        return task.tid

    def busy_threads(self, rank: RankProcess, request: schema.BusyThreads) -> list[int]:
        return [t.tid for t in self.sched.busy_threads(rank.proc.rank)]
