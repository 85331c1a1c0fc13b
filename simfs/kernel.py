"""The simulated machines of one cluster: mounts, node views, and what happens around every
operation (faults, trace, virtual cost). It outlives a run: the next run is the restart."""

from __future__ import annotations

import fcntl
import errno
import os
import sys
import sysconfig
from typing import TYPE_CHECKING, Any, NamedTuple

from .choices import ChoiceSource
from .client import Meter
from .errors import TaskKilled
from .mount import Mount
from .profiles import Profile
from .scheduler import Scheduler, current_task
from .server import ROOT, Server
from .vfs import NodeVfs

if TYPE_CHECKING:
    from .faults import FaultEngine
    from .process import OpenFile, Process

WALL_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: what time.time() reads at virtual 0


class TraceEvent(NamedTuple):
    """One simulated operation: when it started, who, what, on which path, and how it ended."""

    time: float
    rank: int
    node: int
    op: str
    path: str
    outcome: str

    def __str__(self) -> str:
        who = f"rank {self.rank}" if self.rank >= 0 else f"node {self.node}"
        return f"{self.time:12.6f}s {who:>8} {self.op:<10} {self.path} -> {self.outcome}"


class ChoiceProxy:
    """The current run's choice source, for the long-lived filesystem model."""

    def __init__(self) -> None:
        self.source: ChoiceSource | None = None

    def choose(self, n: int) -> int:
        return self.source.choose(n) if n > 1 else 0

    def fraction(self) -> float:
        return self.source.fraction()


def _real_prefixes() -> tuple[str, ...]:
    """The Python installation stays readable inside ranks, so imports keep working."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(value)
    for entry in sys.path:
        if "site-packages" in entry or "dist-packages" in entry:
            paths.add(entry)
    return tuple(sorted(os.path.realpath(p) for p in paths if p and p != "/"))


class Kernel:
    """Filesystems and per-operation bookkeeping of a simulated cluster."""

    def __init__(self, nodes: int, mounts: dict[str, Profile], local: Profile) -> None:
        self.nodes = nodes
        self.choices = ChoiceProxy()
        self.meter = Meter()
        self.sched: Scheduler | None = None
        self._idle_now = 0.0
        self.epoch = WALL_EPOCH
        self.run_start = 0.0
        self.shared = [Mount(path, prof, list(range(nodes)), self.now, self.choices, self.meter, self.interleave)
                       for path, prof in mounts.items()]
        self.local = [Mount("/", local, [n], self.now, self.choices, self.meter, self.interleave) for n in range(nodes)]
        self._devs = {id(m): i + 1 for i, m in enumerate([*self.shared, *self.local])}
        for disk in self.local:
            self._make_dirs(disk.server, ["/tmp", *(m.path for m in self.shared)])
        for mount in self.shared:  # a nested mount point is a directory of the mount around it
            outer = [m for m in self.shared if m is not mount and mount.path.startswith(m.path + "/")]
            if outer:
                parent = max(outer, key=lambda m: len(m.path))
                self._make_dirs(parent.server, [mount.path[len(parent.path):]])
        self.vfs = [NodeVfs(n, self.shared, self.local[n]) for n in range(nodes)]
        self.real_prefixes = _real_prefixes()
        self.trace: list[TraceEvent] = []
        self.node_ops = [0] * nodes
        self.total_ops = 0
        self.faults: FaultEngine | None = None
        self.processes: list[Process] = []
        self.crashed_nodes: dict[int, str] = {}
        self.on_crash: Any = None  # callback(node, why) set by the cluster for its report

    @staticmethod
    def _make_dirs(server: Server, paths: list[str]) -> None:
        """Directories that exist before any run, already durable (/tmp, mount points)."""
        for path in paths:
            ino = ROOT
            for name in [c for c in path.split("/") if c]:
                child = server.lookup(ino, name)
                if child is None:
                    child, _ = server.mkdir(ino, name, 0o1777 if path == "/tmp" else 0o755)
                    server.sync_dir(ino)
                ino = child

    # -- time ----------------------------------------------------------------------------------
    def now(self) -> float:
        return self.sched.now if self.sched is not None else self._idle_now

    def wall_time(self) -> float:
        return self.epoch + self.now()

    def dev_of(self, mount: Mount) -> int:
        return self._devs[id(mount)]

    def is_real(self, path: str) -> bool:
        for prefix in self.real_prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return True
        return False

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, sched: Scheduler, choices: ChoiceSource, faults: FaultEngine) -> None:
        self.sched = sched
        self.choices.source = choices
        self.run_start = sched.now
        self.faults = faults
        self.trace = []
        self.node_ops = [0] * self.nodes
        self.total_ops = 0
        self.crashed_nodes = {}
        for mount in self.shared:
            for client in mount.clients.values():
                client.opens.clear()

    def end_run(self) -> None:
        self._idle_now = self.sched.now
        self.sched = None

    # -- around every operation ----------------------------------------------------------------
    def begin(self, proc: Process, op: str, path: str) -> float:
        task = current_task()
        if task is None or self.sched is None:
            return self.now()
        if task.pending is not None:
            exc, task.pending = task.pending, None
            raise exc
        if not proc.alive:
            raise TaskKilled(f"node {proc.node} crashed: its processes can do nothing more")
        self.node_ops[proc.node] += 1
        self.total_ops += 1
        proc.last_op = (op, path)
        try:
            self.faults.before(proc, op, path)
        except OSError as exc:
            self.trace.append(TraceEvent(self.sched.now, proc.rank, proc.node, op, path,
                                         errno.errorcode.get(exc.errno, "error") + " (injected)"))
            raise
        if task.pending is not None:  # this very operation crashed our node
            exc, task.pending = task.pending, None
            raise exc
        return self.sched.now

    def finish(self, proc: Process, op: str, path: str, start: float, outcome: str) -> None:
        self.trace.append(TraceEvent(start, proc.rank, proc.node, op, path, outcome))
        cost = self.meter.take()
        if self.sched is None or current_task() is None:
            return
        if self.faults.slow_ops:
            cost += self.faults.delay(proc, op, path)
        self.sched.elapse(cost)

    def interleave(self) -> None:
        """Yield inside an operation (between two requests of a non-atomic one)."""
        if self.sched is not None and current_task() is not None:
            self.sched.elapse(self.meter.take())

    def flush_fault(self, proc: Process, op: str, path: str) -> None:
        if self.faults is not None and current_task() is not None:
            self.faults.flush_error(proc, op, path)

    def note(self, op: str, path: str, outcome: str, rank: int = -1, node: int = -1) -> None:
        """A trace line for something that is not a rank's operation (a crash, a timer)."""
        self.trace.append(TraceEvent(self.now(), rank, node, op, path, outcome))

    # -- locks -----------------------------------------------------------------------------------
    def lock(self, of: OpenFile, owner: Any, operation: int) -> None:
        table = of.mount.lock_table(of.node)
        if table is None:
            return  # flock="none": locks always succeed and exclude nothing
        if operation & fcntl.LOCK_UN:
            if table.release(of.ino, owner):
                self.sched.notify_all(table.queue(of.ino))
            return
        exclusive = bool(operation & fcntl.LOCK_EX)
        while not table.try_acquire(of.ino, owner, exclusive):
            if operation & fcntl.LOCK_NB:
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            self.sched.block(table.queue(of.ino))

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
        if node in self.crashed_nodes:
            return
        self.crashed_nodes[node] = why
        self.note("crash", f"node{node}", why, node=node)
        for proc in self.processes:
            if proc.node == node:
                proc.alive = False  # descriptors stay in the table: later calls meet TaskKilled, not EBADF
        for mount in self.shared:
            mount.node_crashed(node)
            for table in mount.lock_tables():
                for ino in table.release_where(lambda owner: getattr(owner, "node", None) == node):
                    self.sched.notify_all(table.queue(ino))
        disk = self.local[node]
        summary = disk.server.crash(self.choices)
        disk.node_crashed(node)
        self.note("disk-crash", f"node{node}:/", summary, node=node)
        if self.on_crash is not None:
            self.on_crash(node, why)
        for task in self.sched.tasks:
            if task.context is not None and task.context.node == node:
                self.sched.kill(task, f"node {node} crashed ({why})")

    def crash_server(self, mount_path: str, why: str) -> None:
        mount = self.mount_named(mount_path)
        summary = mount.server.crash(self.choices)
        self.note("server-crash", mount_path, f"{summary} ({why})")

    def evict_client(self, node: int, mount_path: str, why: str) -> None:
        self.mount_named(mount_path).clients[node].evict()
        self.note("evict", mount_path, f"node{node} evicted ({why})", node=node)

    def mount_named(self, path: str) -> Mount:
        for mount in self.shared:
            if mount.path == path:
                return mount
        raise ValueError(f"no shared mount at {path!r}; mounts: {[m.path for m in self.shared]}")

