"""One run of a simulated cluster: what happens around every operation of a rank (faults,
trace, virtual cost), locks that block, and crashes. The filesystems outlive it."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..capture import Capture
from ..errors import RankKilled, TaskKilled
from ..faults import CrashNode, CrashServer, EvictClient, PowerLoss
from ..fs.filesystems import Filesystems
from ..fs.mount import Mount
from ..hostpaths import HostPaths
from ..tasks.importreads import from_import_system
from ..tasks.task import Task, current_task
from .faultengine import FaultEngine
from .scheduler import Scheduler

if TYPE_CHECKING:
    from ..faults import Fault
    from .syscalls.openfile import OpenFile

from ..report import TraceEvent
from ..tasks.process import Process

WALL_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: what time.time() reads at virtual 0
_IGNORED_BY_DEFAULT = {signal.SIGCHLD, signal.SIGURG, signal.SIGWINCH, signal.SIGCONT}  # signal(7)


class ReadOnRank(Exception):
    """On the process carrier: the call being served reads the real machine, which the rank's
    process does itself (its descriptors are its own, and the kernel confines it)."""


class Machine:
    """The simulated machines of one run (its scheduler, faults and trace) over the cluster's
    filesystems."""

    epoch = WALL_EPOCH
    # process carrier: whether the rank's import system made the call being served (None: ranks
    # are greenlets of this process, whose stack says so)
    reads_on_rank: Callable[[], bool] | None = None

    def __init__(self, fs: Filesystems, sched: Scheduler, faults: list[Fault], host: HostPaths) -> None:
        self.fs = fs
        self.sched = sched
        self.faults = FaultEngine(faults, fraction=fs.choices.fraction, call_at=sched.call_at, fire=self.fire,
                                  run_start=sched.now)
        self.host = host
        self.vfs = fs.vfs
        self.meter = fs.meter
        self.run_start = sched.now
        self.trace: list[TraceEvent] = []
        self.node_ops = [0] * fs.nodes
        self.where: Callable[[Task], str] = lambda task: ""  # where rank code is (set by the run)
        self.total_ops = 0
        self.processes: list[Process] = []
        self.outputs: dict[int, Capture] = {}  # rank -> what it writes to its stdout and stderr, its warnings
        self.crashed_nodes: dict[int, str] = {}
        self.crashes = 0  # nodes and servers that crashed in this run
        self.on_crash: Any = None  # callback(node, why) set by the run for its report
        for mount in fs.shared:
            for client in mount.clients.values():
                client.opens.clear()
        fs.interleave_hook = self.interleave

    def close(self) -> None:
        """The run is over: the filesystems no longer reach into it."""
        self.fs.interleave_hook = None

    # -- time ----------------------------------------------------------------------------------
    def now(self) -> float:
        return self.sched.now

    def wall_time(self) -> float:
        return self.epoch + self.sched.now

    def dev_of(self, mount: Mount) -> int:
        return self.fs.dev_of(mount)

    def is_real(self, path: str) -> bool:
        """The path is read from the real disk (read-only): the Python installation, or any path
        the import system reads. On the process carrier the rank's process reads it: ReadOnRank."""
        if self.reads_on_rank is None:
            return self.host.readable(path) or from_import_system()
        if self.host.readable(path) or self.reads_on_rank():
            raise ReadOnRank(path)
        return False

    def imports_here(self) -> bool:
        """The call being served comes from the import system, which resolves a relative sys.path
        entry against the real working directory, as the host's does. On the process carrier the
        rank's process resolves it itself: ReadOnRank."""
        if self.reads_on_rank is None:
            return from_import_system()
        if self.reads_on_rank():
            raise ReadOnRank("the working directory")
        return False

    # -- around every operation ----------------------------------------------------------------
    def begin(self, proc: Process, op: str, path: str) -> float:
        task = current_task()
        if task is None:
            return self.now()
        hook = self.fs.op_hook
        if hook is not None:
            hook(self.total_ops)
        self.node_ops[proc.node] += 1
        self.total_ops += 1
        proc.last_op = (op, path)
        faults = self.faults
        if faults.pauses:
            self._pause(proc, task, op, path)
        proc.ops += 1
        if not (faults.triggers or faults.errnos):
            return self.sched.now
        try:
            faults.before(proc, op, path, self.node_ops[proc.node], self.total_ops)
        except OSError as exc:
            self.trace.append(TraceEvent(self.sched.now, proc.rank, proc.node, op, path,
                                         (errno.errorcode.get(exc.errno, "error") if exc.errno is not None
                                          else "error") + " (injected)"))
            raise
        return self.sched.now  # (a crash this operation triggered never returns here)

    def _pause(self, proc: Process, task: Task, op: str, path: str) -> None:
        """The rank stops before this operation if a Pause says so (traced with where its code is)."""
        seconds = self.faults.pauses.get((proc.rank, proc.ops))
        if seconds:
            self.trace.append(TraceEvent(self.sched.now, proc.rank, proc.node, "pause", path,
                                         f"{seconds:g}s before {op} at {self.where(task)}"))
            self.sched.elapse(seconds)

    def finish(self, proc: Process, op: str, path: str, start: float, outcome: str) -> None:
        meter = self.meter
        stale, meter.stale = meter.stale, ""
        self.trace.append(TraceEvent(start, proc.rank, proc.node, op, path, outcome, stale))
        cost, meter.cost = meter.cost, 0.0
        if self.sched.current is None:
            return
        if self.faults.slow_ops:
            cost += self.faults.delay(proc, op, path)
        self.sched.elapse(cost)

    def interleave(self) -> None:
        """Yield inside an operation (between two requests of a non-atomic one)."""
        if current_task() is not None:
            self.sched.elapse(self.meter.take())

    def flush_fault(self, proc: Process, op: str, path: str) -> None:
        if current_task() is not None:
            self.faults.flush_error(proc, op, path)

    def note(self, op: str, path: str, outcome: str, rank: int = -1, node: int = -1) -> None:
        """A trace line for something that is not a rank's operation (a crash, a timer)."""
        self.trace.append(TraceEvent(self.now(), rank, node, op, path, outcome))

    def warned(self, rank: int, category: str, message: str, filename: str, lineno: int) -> None:
        """A warning the rank showed, kept with its output (capture.py)."""
        self.outputs[rank].warned(category, message, filename, lineno)

    # -- locks -----------------------------------------------------------------------------------
    def lock(self, of: OpenFile, owner: Any, operation: int) -> None:
        table = of.mount.lock_table(of.node)
        if table is None:
            return  # flock="none": locks always succeed and exclude nothing
        if (of.mount.profile.flock == "cluster" and of.mount.profile.unlink_open == "estale"
                and not of.mount.server.holds(of.ino)):
            # the server's lock request names the file by handle, and another node deleted it
            # (NFS4ERR_STALE; filelock PR #669, chimera PR #286)
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        server_locks = of.mount.profile.flock == "cluster"
        if operation & fcntl.LOCK_UN:
            if server_locks:  # fs/nfs/file.c do_unlk: 'Flush all pending writes before doing anything with locks'
                of.client.flush(of.ino)
            if table.release(of.ino, owner):
                self.sched.notify_all(table.queue(of.ino))
            return
        exclusive = bool(operation & fcntl.LOCK_EX)
        while not table.try_acquire(of.ino, owner, exclusive):
            if operation & fcntl.LOCK_NB:
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            self.sched.block(table.queue(of.ino))
        if server_locks:
            of.client.lock_acquired(of.ino)

    def drop_locks(self, of: OpenFile, proc: Process) -> None:
        table = of.mount.lock_table(of.node)
        if table is None:
            return
        released = table.release(of.ino, of)
        released = table.release(of.ino, proc) or released
        if released and self.sched is not None:
            self.sched.notify_all(table.queue(of.ino))

    # -- faults ----------------------------------------------------------------------------------
    def crash_node(self, node: int, why: str) -> None:
        """A node loses power: its processes are gone (no code of theirs runs again), its caches
        and dirty data are lost, its disks keep what a crash state allows."""
        if node in self.crashed_nodes:
            return
        self.crashed_nodes[node] = why
        self.crashes += 1
        self.note("crash", f"node{node}", why, node=node)
        for proc in self.processes:
            if proc.node == node:
                proc.alive = False
        for path, summary in self.fs.node_lost_power(node):
            self.note("disk-crash", f"node{node}:{path}", summary, node=node)
        for mount in self.fs.shared:
            for table in mount.lock_tables():
                for ino in table.release_where(lambda owner: getattr(owner, "node", None) == node):
                    self.sched.notify_all(table.queue(ino))
        if self.on_crash is not None:
            self.on_crash(node, why)
        current = self.sched.current
        for task in list(self.sched.tasks):
            if task.context.node == node and task is not current:
                self.sched.abandon(task, TaskKilled(f"node {node} crashed ({why})"))
        if current is not None and current.context.node == node:
            self.sched.abandon(current, TaskKilled(f"node {node} crashed ({why})"))  # does not return

    # -- processes and signals -------------------------------------------------------------------
    def process_on(self, node: int, pid: int) -> Process | None:
        """A live process of a node by pid (pids of different nodes may collide, as they do)."""
        for proc in self.processes:
            if proc.node == node and proc.pid == pid and proc.alive:
                return proc
        return None

    def deliver(self, proc: Process, signum: int, sender: str) -> None:
        """A signal reaches a simulated process: ignored, its Python handler runs in its main
        thread (when that thread next runs), or the default action kills the process."""
        handler = proc.signal_handlers.get(signum, signal.SIG_DFL)
        if handler == signal.SIG_IGN or (handler == signal.SIG_DFL and signum in _IGNORED_BY_DEFAULT):
            return
        if handler == signal.SIG_DFL:
            self.end_process(proc, RankKilled(proc.rank, signum, sender))
            return
        main = self.sched.mains.get(proc.rank)
        if main is None or main.state == "done":
            return
        number = int(signum)  # CPython calls a handler with a plain int, never a signal.Signals
        main.interrupts.append(lambda: handler(number, sys._getframe(1)))
        if main is self.sched.current:
            self.sched.interrupted(main)

    def end_process(self, proc: Process, outcome: BaseException | None) -> None:
        """The process ends now, running none of its own code (a signal's default action, or
        os._exit): its threads stop, the kernel closes its files. ``outcome`` is its error
        (None: a clean exit)."""
        if not proc.alive:
            return
        proc.sys.exit_process()
        current = self.sched.current
        tasks = [t for t in self.sched.tasks if t.context is proc]
        for task in tasks:
            if task is not current:
                self.sched.abandon(task, outcome if task.is_main else None)
        if current is not None and current.context is proc:
            self.sched.abandon(current, outcome if current.is_main else None)  # does not return

    def fire(self, fault: Any, why: str) -> None:
        """Carry out a crash or an eviction that the fault engine says is due."""
        if isinstance(fault, CrashNode):
            self.crash_node(fault.node, why)
        elif isinstance(fault, CrashServer):
            self.crash_server(fault.mount, why)
        elif isinstance(fault, EvictClient):
            self.evict_client(fault.node, fault.mount, why)
        elif isinstance(fault, PowerLoss):
            self.power_loss(why)

    def power_loss(self, why: str) -> None:
        """Every storage server and every node lose power; the node of the running rank goes
        last (its crash does not return)."""
        for mount in self.fs.shared:
            if mount.host is None:
                self.crash_server(mount.path, why, clients_survive=False)
        current = self.sched.current
        last = current.context.node if current is not None else None
        for node in [n for n in range(self.fs.nodes) if n != last] + ([last] if last is not None else []):
            self.crash_node(node, why)

    def crash_server(self, mount_path: str, why: str, *, clients_survive: bool = True) -> None:
        """The storage server of a mount restarts; if the mount is a disk inside a node, that
        is a power loss of the node. Surviving clients of a mount whose clients replay
        (``data_durable="replayed"``) send their uncommitted writes again."""
        mount = self.fs.mount_named(mount_path)
        if mount.host is not None:
            self.crash_node(mount.host, f"{why}: {mount_path} is a disk inside node {mount.host}")
            return
        summary = self.fs.crash_disk(mount)
        if clients_survive and mount.profile.data_durable == "replayed":
            resent = sum(client.replay_unstable() for client in mount.clients.values())
            if resent:
                summary += f"; the clients sent their uncommitted writes to {resent} file(s) again"
        self.crashes += 1
        self.note("server-crash", mount_path, f"{summary} ({why})")

    def evict_client(self, node: int, mount_path: str, why: str) -> None:
        self.fs.mount_named(mount_path).clients[node].evict()
        self.note("evict", mount_path, f"node{node} evicted ({why})", node=node)
