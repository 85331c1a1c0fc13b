"""One run of a job on every rank: the machine and processes it builds, the simulation thread
that drives the scheduler, the caller's thread that supervises it, and the result."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _real, carriers
from ..capture import Capture, outputs
from ..choices import ChoiceSource
from ..errors import Interrupted, SimfsError, TaskKilled
from ..faults import Fault
from ..fs.filesystems import Filesystems
from ..hostpaths import HostPaths
from ..report import CrashInfo, HangInfo, Result, ThreadError, format_exception
from ..tasks.process import Process, torchrun_env
from ..tasks.task import DONE, Task
from .carrier import Carrier, GreenletCarrier, ProcessCarrier
from .carrier.greenlet import StoreNames
from .carrier.hostdist import DistRequests
from .dist import GLOO, DistWorld
from .heap import young_gc
from .kvstore import Stores
from .machine import Machine
from .marshal import Marshal
from .scheduler import Scheduler
from .sigint import sigint_deferred
from .syscalls import Syscalls
from .wakeup import Wakeups


@dataclass(frozen=True)
class Settings:
    """What a cluster fixes for all of its runs (validated by Cluster)."""

    nodes: int
    ranks_per_node: int
    seed: int
    cwd: str
    env: dict[str, str]
    watchdog: float
    time_limit: float
    collective_timeout: float
    collective_latency: float
    collective_bandwidth: float
    dist_initialized: bool
    carrier: str = carriers.DEFAULT  # simfs/carriers.py
    torch_distributed: str = "patched"  # "c10d": rank processes run torch's own c10d on simfs's groups
    rank_memory: int | None = None  # bytes of private memory each rank process may take (None: the machine's)
    preload: tuple[str, ...] = ()  # modules the rank processes start with, imported once before the forks
    collectives: str = "gloo"  # how ranks leave a collective (simfs.Cluster's collectives)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


class _State:
    """What the simulation thread learns while it drives the run."""

    def __init__(self) -> None:
        self.crashed: dict[int, CrashInfo] = {}
        self.hung: dict[int, HangInfo] = {}
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.notes: list[str] = []


STILL_WATCHDOGS = 10  # how long an import may keep virtual time still, in watchdogs: torch's takes seconds


class Run:
    """A run of ``job(*args, **kwargs)`` on every rank of a cluster."""

    def __init__(self, settings: Settings, fs: Filesystems, host: HostPaths, index: int, faults: list[Fault],
                 draws: ChoiceSource, marshal: Marshal | None, store_names: StoreNames | None = None,
                 timing: ChoiceSource | None = None) -> None:
        self.settings = settings
        self.index = index
        self.marshal = marshal
        self.sched = Scheduler(draws, fs.clock)
        fs.choices.source = draws
        self.fs = fs
        self.machine = Machine(fs, self.sched, faults, host)
        self.state = _State()
        self.stopping = False  # Ctrl-C: stop at the next switch
        self.machine.on_crash = self._record_crash
        wakeups = Wakeups(timing or draws) if settings.collectives == GLOO else None
        self.world = DistWorld(self.sched, settings.world_size, latency=settings.collective_latency,
                               bandwidth=settings.collective_bandwidth, timeout=settings.collective_timeout,
                               initialized=settings.dist_initialized, note=self._note_collective,
                               native=settings.torch_distributed == "c10d", wakeups=wakeups)
        self.stores = Stores(self.sched, self.world.latency, lambda node: node not in self.machine.crashed_nodes,
                             wakeups)
        dist = DistRequests(self.world, self.stores, lambda rank: rank // settings.ranks_per_node)
        self.carrier: Carrier = GreenletCarrier(self.sched, dist, self._end_process, self.machine.outputs,
                                                store_names) \
            if settings.carrier == carriers.GREENLET else \
            ProcessCarrier(self.machine, self.sched, dist, self._end_process, settings.rank_memory)
        self.world.where = self._where
        self.machine.where = self._where

    def _note_collective(self, rank: int, op: str, group: str, outcome: str) -> None:
        self.machine.note(op, group, outcome, rank=rank, node=rank // self.settings.ranks_per_node)

    def execute(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                replay: dict[str, Any]) -> Result:
        """Run the job to the end (or its abort) and say what happened."""
        with self.fs.taped():
            return self._execute(job, args, kwargs, replay)

    def _execute(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 replay: dict[str, Any]) -> Result:
        start = self.sched.now
        sim = threading.Thread(target=self._drive, name="simfs-run", daemon=True)
        interrupted = False
        try:  # what a failed start made is closed too (a rank's process, the zygote)
            self._spawn_ranks(job, args, kwargs)
            self.machine.faults.arm_timers()
            wall0 = _real.perf_counter()
            try:
                with sigint_deferred():  # Ctrl-C waits for the thread: once it runs, it ends every rank
                    sim.start()
                self._supervise(sim)
            except KeyboardInterrupt:
                interrupted = True
                self._stop(sim)
            sim.join()
        finally:
            self.carrier.close()
            self.machine.close()
            self.fs.choices.source = None
        wall = _real.perf_counter() - wall0
        if self.marshal is not None and self.marshal.failure is not None:
            raise self.marshal.failure
        if self.state.error is not None:
            raise self.state.error
        result = self._result(start, wall, replay)
        if interrupted:
            raise Interrupted(result)
        return result

    def _stop(self, sim: threading.Thread) -> None:
        """Ctrl-C: every rank stops at its next operation; a rank busy in Python code without
        any is interrupted where it is (Carrier.interrupt)."""
        self.stopping = True
        for _ in range(20):
            if self.state.done.wait(0.25):
                return
            self.carrier.interrupt(sim)
        raise SimfsError("Ctrl-C could not stop the simulation thread (a rank swallows every exception?)")

    # -- ranks -------------------------------------------------------------------------------------
    def _spawn_ranks(self, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        s, sched, machine = self.settings, self.sched, self.machine
        base_env = {**os.environ.copy(), **s.env}
        run_id = f"simfs-{s.seed}-{self.index}"
        caller_context = contextvars.copy_context()
        for rank in range(s.world_size):  # every process made before any starts (a rank process starts from them)
            node, local_rank = divmod(rank, s.ranks_per_node)
            env = torchrun_env(base_env, rank=rank, local_rank=local_rank, node=node, world_size=s.world_size,
                               local_world_size=s.ranks_per_node, nodes=s.nodes, master="node0", run_id=run_id)
            proc = Process(rank=rank, local_rank=local_rank, node=node, world_size=s.world_size,
                           local_world_size=s.ranks_per_node, pid=1000 + 10000 * self.index + local_rank,
                           hostname=f"node{node}", env=env, cwd=s.cwd, seed=s.seed, run=self.index)
            proc.sys = Syscalls(machine, proc)
            machine.processes.append(proc)
            machine.outputs[rank] = Capture()
            self.fs.proc[node].add(proc.pid, proc.pid - local_rank - 1, ["python", *sys.argv[1:]], env)
        for proc in list(machine.processes):
            delay = machine.faults.start_delays.get(proc.rank, 0.0)
            sched.spawn(self.carrier.start(proc, job, args, kwargs), proc.rank, proc, f"rank{proc.rank}", is_main=True,
                        start_at=sched.now + delay, gr_context=caller_context.copy())

    def _end_process(self, proc: Process, reason: str) -> None:
        """The process is over: its remaining threads end with it and the kernel closes the
        files it left open (flushing what they hold, as close on Linux does)."""
        if not proc.alive:
            return
        for task in self.sched.threads.get(proc.rank, ()):
            if task is not self.sched.current:
                self.sched.abandon(task, TaskKilled(reason))
        proc.sys.exit_process()
        self.world.gone(proc.rank)

    # -- the simulation thread ---------------------------------------------------------------------
    def _drive(self) -> None:
        """Run until every rank is done, the run's time limit passes, or the run is aborted;
        ranks still running then are ended (as a job scheduler kills a job)."""
        sched, state = self.sched, self.state
        limit = sched.limit = sched.now + self.settings.time_limit
        marshal = self.marshal

        def aborted() -> bool:
            return marshal is not None and marshal.failure is not None

        try:
            sched.run(stop=lambda: self.stopping or aborted() or sched.now > limit, tick=young_gc)
            if self.stopping:
                reason = "the run was interrupted (Ctrl-C)"
            elif aborted():
                reason = "the run was aborted"
            elif sched.now > limit:
                reason = "the run reached its virtual time limit"
                for task in sched.live():
                    self._out_of_time(task)
            else:
                reason = "deadlock: nothing could ever wake it"
                for task in sched.live():
                    self._record_hang(task)
            for task in sched.live():
                sched.abandon(task, TaskKilled(reason))
            for proc in self.machine.processes:
                self._end_process(proc, reason)
        except BaseException as exc:  # noqa: BLE001 - a simfs defect: surfaced to the caller
            state.error = exc
        finally:
            state.done.set()

    def _where(self, task: Task) -> str:
        """'file:line in function' of the rank code the task is in."""
        return self.carrier.where(task)

    def _record_hang(self, task: Task) -> None:
        state = self.state
        if task.is_main and task.rank not in state.hung and task.waiting is not None:
            waiting_for = task.waiting.peers() if task.waiting.peers else []
            state.hung[task.rank] = HangInfo(task.rank, task.waiting.what, task.blocked_since,
                                             self.sched.now - task.blocked_since, waiting_for,
                                             self._where(task))

    def _out_of_time(self, task: Task) -> None:
        limit = self.settings.time_limit
        if task.is_main and task.rank not in self.state.hung:
            self.state.hung[task.rank] = HangInfo(
                task.rank, f"a run that reached its virtual time limit ({limit:g}s)",
                self.sched.now - limit, limit, [], self._where(task))

    def _record_crash(self, node: int, why: str) -> None:
        sched = self.sched
        self.carrier.kill_node(node, f"node {node} crashed ({why})")
        self.stores.node_crashed(node)
        for task in sched.tasks:
            proc = task.context
            if task.is_main and proc.node == node and task.state != DONE:
                op, path = proc.last_op
                self.state.crashed[task.rank] = CrashInfo(task.rank, node, sched.now - self.machine.run_start, op,
                                                          path, self._where(task), why)
                self.world.gone(task.rank)

    # -- the caller's thread -----------------------------------------------------------------------
    def _supervise(self, sim: threading.Thread) -> None:
        """Wait for the simulation thread; answer draws; catch a rank stuck outside simfs, or in a
        loop of requests that take no virtual time (a real clock would move; this one would not).
        Progress is virtual time moving, or an import reading the real disk, which only the rank's
        own requests tell of: they keep virtual time still for at most STILL_WATCHDOGS watchdogs."""
        sched, state, marshal, watchdog, carrier = self.sched, self.state, self.marshal, self.settings.watchdog, \
            self.carrier
        last: tuple[float, int] | None = None
        progressed_at = moved_at = _real.monotonic()
        poked = False
        while not state.done.is_set():
            if marshal is not None:
                marshal.serve(0.01)
            else:
                state.done.wait(0.05)
            now, task = _real.monotonic(), sched.current
            progress = (sched.now, carrier.signs)
            if task is None or last is None or progress[0] != last[0]:
                moved_at, poked = now, False
            if task is None or progress != last:
                last, progressed_at = progress, now
            still = now - moved_at
            if task is None or (now - progressed_at < watchdog and still < STILL_WATCHDOGS * watchdog):
                continue
            said = watchdog if now - progressed_at >= watchdog else still  # no sign at all, or only an import's
            state.notes.append(carrier.stuck(task, said, sim, again=poked))
            poked, progressed_at, moved_at = True, now, now

    # -- the result --------------------------------------------------------------------------------
    def _result(self, start: float, wall: float, replay: dict[str, Any]) -> Result:
        sched, state = self.sched, self.state
        returns: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        tracebacks: dict[int, str] = {}
        thread_errors: dict[int, list[ThreadError]] = {}
        for task in sched.tasks:
            error, rank = task.error, task.rank
            if not task.is_main:
                if error is not None and not isinstance(error, TaskKilled):
                    name = task.owner.name if task.owner is not None else task.name.removeprefix(f"rank{rank}/")
                    thread_errors.setdefault(rank, []).append(ThreadError(name, error, format_exception(error)))
            elif error is None:
                returns[rank] = task.result
            elif not (isinstance(error, TaskKilled) and (rank in state.crashed or rank in state.hung)):
                errors[rank] = error
                tracebacks[rank] = getattr(error, "simfs_traceback", None) or format_exception(error)
        hung = {**self.world.hangs, **state.hung}
        return Result(returns=returns, errors=errors, tracebacks=tracebacks, thread_errors=thread_errors,
                      crashed=state.crashed, hung=hung,
                      virtual_time=sched.now - start, wall_time=wall, trace=self.machine.trace, replay_spec=replay,
                      ops=self.machine.total_ops, switches=sched.switches, notes=state.notes,
                      node_ops=list(self.machine.node_ops), carrier=self.settings.carrier,
                      rank_ops=[proc.ops for proc in sorted(self.machine.processes, key=lambda p: p.rank)],
                      output=outputs(self.machine.outputs))
