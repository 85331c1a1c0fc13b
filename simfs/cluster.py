"""``simfs.Cluster``: N ranks on M nodes running one Python function (SPMD, like torchrun)
against simulated filesystems, deterministically and in virtual time."""

from __future__ import annotations

import contextvars
import gc
import os
import queue
import sys
import threading
import traceback
from typing import Any, Callable, Iterable

from . import _real
from .choices import ChoiceSource, RecordingChoices, ReplayChoices, SeededChoices, as_choice_source, derive_seed
from .fs.filesystems import Filesystems
from .runtime.dist import DEFAULT_TIMEOUT, DistWorld
from .errors import OutsideSimulation, SimfsError, TaskKilled
from .faults import CrashNode, CrashServer, EvictClient, Fault, SlowRank, fault_from_dict, fault_to_dict
from .runtime.hostpaths import HostPaths
from .runtime.machine import Machine
from .runtime.process import Process, torchrun_env
from .profiles import Profile, get
from .runspec import decode, encode, job_reference, json_safe, profile_from_spec, profile_spec, resolve_job
from .report import CrashInfo, HangInfo, Result, format_exception, user_frame
from .runtime.scheduler import DONE, Scheduler, Task, task_frame
from .runtime.syscalls import Syscalls

_MAX_UNWIND_ROUNDS = 10


class _AbortRun(BaseException):
    """The choice source gave up (Hypothesis stopped the example): unwind everything."""


class _Marshal:
    """Forwards draws to the thread that owns a thread-bound choice source."""

    thread_bound = False

    def __init__(self, inner: ChoiceSource) -> None:
        self.inner = inner
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self.failure: BaseException | None = None

    def _ask(self, kind: str, arg: int) -> Any:
        if self.failure is not None:
            raise _AbortRun()
        done = _real.allocate_lock()  # real: this runs inside ranks, where locks are simulated
        done.acquire()
        box: list[Any] = [None, None]
        self._requests.put((done, box, kind, arg))
        done.acquire()
        if box[1] is not None:
            raise _AbortRun()
        return box[0]

    def choose(self, n: int) -> int:
        return self._ask("choose", n) if n > 1 else 0

    def fraction(self) -> float:
        return self._ask("fraction", 0)

    def serve(self, timeout: float) -> None:
        """Answer pending draws (called on the owning thread)."""
        try:
            done, box, kind, arg = self._requests.get(timeout=timeout)
        except queue.Empty:
            return
        try:
            box[0] = self.inner.choose(arg) if kind == "choose" else self.inner.fraction()
        except BaseException as exc:  # e.g. Hypothesis' StopTest: re-raised on the owner's thread
            self.failure = exc
            box[1] = exc
        done.release()


class _RunState:
    def __init__(self) -> None:
        self.crashed: dict[int, CrashInfo] = {}
        self.hung: dict[int, HangInfo] = {}
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.notes: list[str] = []


class Cluster:
    """A simulated cluster whose filesystems persist across runs (the next run is the restart).

    ``profile`` is the shared mount's profile (``mounts`` maps several mount points to
    profiles); every other path is private to its node. ``seed`` fixes every decision.
    """

    def __init__(self, nodes: int = 1, ranks_per_node: int = 1, profile: str | Profile = "nfs", seed: int = 0,
                 faults: Iterable[Fault] = (), *, mounts: dict[str, str | Profile] | None = None,
                 local_profile: str | Profile = "local", cwd: str | None = None, watchdog: float = 60.0,
                 collective_timeout: float = DEFAULT_TIMEOUT, collective_latency: float = 5e-5,
                 collective_bandwidth: float = 1e10, dist_initialized: bool = True,
                 env: dict[str, str] | None = None, time_limit: float = 30 * 86400.0) -> None:
        for name, value in (("nodes", nodes), ("ranks_per_node", ranks_per_node)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Cluster: {name} must be a positive int, got {value!r}")
        if not isinstance(seed, int):
            raise TypeError(f"Cluster: seed must be an int, got {seed!r}")
        self.nodes = nodes
        self.ranks_per_node = ranks_per_node
        self.world_size = nodes * ranks_per_node
        self.seed = seed
        self.profiles = self._mount_profiles(profile, mounts)
        self.local_profile = get(local_profile)
        self.cwd = cwd if cwd is not None else next(iter(self.profiles))
        self.watchdog = watchdog
        self.collective_timeout = collective_timeout
        self.collective_latency = collective_latency
        self.collective_bandwidth = collective_bandwidth
        self.dist_initialized = dist_initialized
        self.env = dict(env or {})
        if not time_limit > 0:
            raise ValueError(f"Cluster: time_limit must be positive (virtual seconds), got {time_limit!r}")
        self.time_limit = time_limit
        self.faults = self._check_faults(faults)
        self.fs = Filesystems(nodes, self.profiles, self.local_profile)
        self._host = HostPaths()
        self.runs = 0

    @staticmethod
    def _mount_profiles(profile: str | Profile, mounts: dict[str, str | Profile] | None) -> dict[str, Profile]:
        table = {"/shared": profile} if mounts is None else dict(mounts)
        out: dict[str, Profile] = {}
        for path, prof in table.items():
            if not isinstance(path, str) or not path.startswith("/") or path == "/" or path.rstrip("/") != path:
                raise ValueError(f"mount point {path!r} must be an absolute path other than '/', without a trailing '/'")
            out[path] = get(prof)
        if not out:
            raise ValueError("Cluster needs at least one shared mount")
        return out

    def _check_faults(self, faults: Iterable[Fault]) -> list[Fault]:
        checked = list(faults)
        for fault in checked:
            node = getattr(fault, "node", None)
            if isinstance(fault, (CrashNode, EvictClient)) and not 0 <= node < self.nodes:
                raise ValueError(f"{fault!r}: node {node} does not exist (nodes 0..{self.nodes - 1})")
            ranks = [fault.rank] if isinstance(fault, SlowRank) else list(getattr(fault, "ranks", None) or [])
            bad = [r for r in ranks if not 0 <= r < self.world_size]
            if bad:
                which = f"rank {bad[0]} does" if len(bad) == 1 else f"ranks {bad} do"
                raise ValueError(f"{fault!r}: {which} not exist (ranks 0..{self.world_size - 1})")
            mount = getattr(fault, "mount", None)
            if isinstance(fault, (CrashServer, EvictClient)) and mount not in self.profiles:
                raise ValueError(f"{fault!r}: no shared mount at {mount!r}; mounts: {list(self.profiles)}")
        return checked

    # -- running ----------------------------------------------------------------------------------
    def run(self, job: Callable[..., Any], *args: Any, faults: Iterable[Fault] | None = None,
            choices: Any = None, **kwargs: Any) -> Result:
        """Run ``job(*args, **kwargs)`` on every rank; ``faults`` replaces the cluster's faults
        for this run, ``choices`` (a ChoiceSource or Hypothesis data) replaces the seed."""
        if not callable(job):
            raise TypeError(f"Cluster.run needs a callable job, got {job!r}")
        from ._intercept import install

        install()
        collecting = gc.isenabled()
        gc.freeze()  # the host's objects need no cycle collection while ranks allocate...
        gc.disable()  # ...and full collections wait for the end of the run (see _young_gc)
        try:
            return self._run(job, args, kwargs, faults, choices)
        finally:
            gc.unfreeze()
            if collecting:
                gc.enable()

    def _run(self, job: Callable[..., Any], args: tuple, kwargs: dict, faults: Iterable[Fault] | None,
             choices: Any) -> Result:
        run_index = self.runs
        self.runs += 1
        fault_list = self.faults if faults is None else self._check_faults(faults)
        source = SeededChoices(derive_seed(self.seed, "run", run_index)) if choices is None else as_choice_source(choices)
        recorder = None if isinstance(source, SeededChoices) else RecordingChoices(source)
        marshal = _Marshal(recorder or source) if getattr(source, "thread_bound", False) else None
        draws: ChoiceSource = marshal or recorder or source

        sched = Scheduler(draws, self.fs.clock)
        self.fs.choices.source = draws
        machine = Machine(self.fs, sched, fault_list, self._host)
        state = _RunState()
        machine.on_crash = lambda node, why: self._record_crash(sched, machine, state, node, why)
        world = DistWorld(sched, self.world_size, latency=self.collective_latency, bandwidth=self.collective_bandwidth,
                          timeout=self.collective_timeout, initialized=self.dist_initialized,
                          note=lambda rank, op, group, outcome: machine.note(
                              op, group, outcome, rank=rank, node=rank // self.ranks_per_node))
        self._spawn_ranks(sched, machine, world, run_index, job, args, kwargs)
        machine.faults.arm_timers()

        wall0 = _real.perf_counter()
        start = sched.now
        sim = threading.Thread(target=self._drive, args=(sched, state, marshal), name="simfs-run", daemon=True)
        sim.start()
        try:
            self._supervise(sim, sched, state, marshal)
        finally:
            machine.close()
            self.fs.choices.source = None
        wall = _real.perf_counter() - wall0
        if marshal is not None and marshal.failure is not None:
            raise marshal.failure
        if state.error is not None:
            raise state.error
        spec = self._replay_spec(job, args, kwargs, run_index, fault_list, recorder)
        return self._result(sched, machine, state, world, start, wall, encode(spec))

    def _spawn_ranks(self, sched: Scheduler, machine: Machine, world: DistWorld, run_index: int,
                     job: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        base_env = {**dict(os.environ), **self.env}
        run_id = f"simfs-{self.seed}-{run_index}"
        procs = []
        caller_context = contextvars.copy_context()
        for rank in range(self.world_size):
            node, local_rank = divmod(rank, self.ranks_per_node)
            env = torchrun_env(base_env, rank=rank, local_rank=local_rank, node=node, world_size=self.world_size,
                               local_world_size=self.ranks_per_node, nodes=self.nodes, master="node0", run_id=run_id)
            proc = Process(rank=rank, local_rank=local_rank, node=node, world_size=self.world_size,
                           local_world_size=self.ranks_per_node,
                           pid=1000 + 10000 * run_index + local_rank, hostname=f"node{node}", env=env,
                           cwd=self.cwd, seed=self.seed, run=run_index)
            proc.sys = Syscalls(machine, proc)
            proc.dist = world
            procs.append(proc)
            delay = machine.faults.start_delays.get(rank, 0.0)
            sched.spawn(self._rank_body(sched, proc, job, args, kwargs), rank, proc, f"rank{rank}", is_main=True,
                        start_at=sched.now + delay, gr_context=caller_context.copy())
        machine.processes = procs

    @staticmethod
    def _rank_body(sched: Scheduler, proc: Process, job: Callable[..., Any], args: tuple,
                   kwargs: dict) -> Callable[[], Any]:
        def body() -> Any:
            try:
                return job(*args, **kwargs)
            except SystemExit as exc:
                if exc.code in (0, None):
                    return None
                raise
            finally:
                if proc.alive:
                    _wait_for_threads(sched, proc.rank)
                    proc.sys.exit_process()
        return body

    def _drive(self, sched: Scheduler, state: _RunState, marshal: _Marshal | None) -> None:
        """The simulation thread: run, then deal with ranks that can never run again."""
        limit = sched.now + self.time_limit
        aborted = (lambda: marshal.failure is not None) if marshal else (lambda: False)
        try:
            for _ in range(_MAX_UNWIND_ROUNDS):
                sched.run(stop=lambda: aborted() or sched.now > limit, tick=_young_gc)
                live = sched.live()
                if not live:
                    break
                for task in live:
                    if sched.now > limit and not aborted():
                        self._out_of_time(sched, state, task)
                    else:
                        self._settle(sched, state, task, aborted())
            else:
                for task in sched.live():
                    task.state = DONE
                    state.notes.append(f"{task.name} ignored being killed and was abandoned")
        except BaseException as exc:  # a simfs defect: surfaced to the caller
            state.error = exc
        finally:
            state.done.set()

    def _settle(self, sched: Scheduler, state: _RunState, task: Task, aborting: bool) -> None:
        if aborting:
            sched.kill(task, "run aborted")
            return
        main = sched.mains.get(task.rank)
        if not task.is_main and main is not None and main.state == DONE:
            sched.kill(task, "its process exited")
            return
        if task.is_main and task.rank not in state.hung and task.waiting is not None:
            waiting_for = task.waiting.peers() if task.waiting.peers else []
            state.hung[task.rank] = HangInfo(task.rank, task.waiting.what, task.blocked_since,
                                             sched.now - task.blocked_since, waiting_for,
                                             user_frame(task_frame(task)))
        sched.kill(task, "deadlock: nothing could ever wake it")

    def _out_of_time(self, sched: Scheduler, state: _RunState, task: Task) -> None:
        if task.is_main and task.rank not in state.hung:
            state.hung[task.rank] = HangInfo(task.rank, f"a run that reached its virtual time limit ({self.time_limit:g}s)",
                                             sched.now - self.time_limit, self.time_limit, [],
                                             user_frame(task_frame(task)))
        sched.kill(task, "the run reached its virtual time limit")

    def _supervise(self, sim: threading.Thread, sched: Scheduler, state: _RunState, marshal: _Marshal | None) -> None:
        """Wait for the simulation thread; answer draws; catch ranks stuck outside simfs."""
        last_switches, last_progress, poked = -1, _real.monotonic(), False
        while not state.done.is_set():
            if marshal is not None:
                marshal.serve(0.01)
            else:
                state.done.wait(0.05)
            now = _real.monotonic()
            if sched.switches != last_switches or sched.current is None:
                last_switches, last_progress, poked = sched.switches, now, False
                continue
            if now - last_progress < self.watchdog:
                continue
            task = sched.current
            stack = "".join(traceback.format_stack(sys._current_frames().get(sim.ident)))
            if not poked:
                state.notes.append(f"rank {task.rank} ran {self.watchdog:g}s of real time without a simulated "
                                   f"operation (blocked outside the simulation?):\n{stack}")
                _raise_in_thread(sim.ident, OutsideSimulation)
                poked, last_progress = True, now
                continue
            raise SimfsError(f"rank {task.rank} is blocked outside the simulation and cannot be interrupted "
                             f"(a real lock, socket or subprocess?); it was here:\n{stack}")

    def _record_crash(self, sched: Scheduler, machine: Machine, state: _RunState, node: int, why: str) -> None:
        for task in sched.tasks:
            proc = task.context
            if task.is_main and proc.node == node and task.state != DONE:
                frame = task_frame(task)
                op, path = getattr(proc, "last_op", ("", ""))
                state.crashed[task.rank] = CrashInfo(task.rank, node, sched.now - machine.run_start, op, path,
                                                     user_frame(frame), why)

    # -- results ----------------------------------------------------------------------------------
    def _result(self, sched: Scheduler, machine: Machine, state: _RunState, world: DistWorld, start: float,
                wall: float, replay: str) -> Result:
        returns: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        tracebacks: dict[int, str] = {}
        for task in sched.tasks:
            error, rank = task.error, task.rank
            if not task.is_main:
                if error is not None and not isinstance(error, TaskKilled):
                    state.notes.append(f"rank {rank}: exception in thread {task.name!r}:\n" + format_exception(error))
            elif error is None:
                returns[rank] = task.result
            elif not (isinstance(error, TaskKilled) and (rank in state.crashed or rank in state.hung)):
                errors[rank] = error
                tracebacks[rank] = format_exception(error)
        hung = {**world.hangs, **state.hung}
        return Result(returns=returns, errors=errors, tracebacks=tracebacks, crashed=state.crashed, hung=hung,
                      virtual_time=sched.now - start, wall_time=wall, trace=machine.trace, replay=replay,
                      ops=machine.total_ops, switches=sched.switches, notes=state.notes)

    def _replay_spec(self, job: Callable[..., Any], args: tuple, kwargs: dict, run_index: int,
                     faults: list[Fault], recorder: RecordingChoices | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "v": 1, "job": job_reference(job), "nodes": self.nodes, "rpn": self.ranks_per_node,
            "mounts": {p: profile_spec(prof) for p, prof in self.profiles.items()},
            "local": profile_spec(self.local_profile), "seed": self.seed, "run": run_index,
            "faults": [fault_to_dict(f) for f in faults], "cwd": self.cwd, "env": self.env,
            "timeout": self.collective_timeout, "latency": self.collective_latency,
            "bandwidth": self.collective_bandwidth, "dist": self.dist_initialized,
        }
        if json_safe(list(args)) and json_safe(kwargs):
            spec["args"], spec["kwargs"] = list(args), kwargs
        if recorder is not None:
            spec["draws"] = recorder.draws
        return spec


def _young_gc() -> None:
    """Collect the young generations when they fill up: a full collection would walk every
    rank's frames and grows with the number of ranks."""
    if gc.get_count()[0] > 20_000:
        gc.collect(1)


def _wait_for_threads(sched: Scheduler, rank: int) -> None:
    """Process exit: wait for the rank's non-daemon threads that are still making progress
    (threads blocked with nothing to wake them, like idle pool workers, are ended after)."""
    while True:
        busy = [t for t in sched.threads.get(rank, ()) if not t.daemon and t.state != DONE and sched.progressing(t)]
        if not busy:
            return
        sched.block(busy[0].finished)


def _raise_in_thread(ident: int | None, exc_type: type[BaseException]) -> None:
    import ctypes

    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc_type))


def cluster_from_spec(spec: dict[str, Any]) -> Cluster:
    return Cluster(
        nodes=spec["nodes"], ranks_per_node=spec["rpn"], seed=spec["seed"],
        mounts={path: profile_from_spec(p) for path, p in spec["mounts"].items()},
        local_profile=profile_from_spec(spec["local"]), cwd=spec["cwd"],
        faults=[fault_from_dict(f) for f in spec["faults"]], env=spec["env"],
        collective_timeout=spec["timeout"], collective_latency=spec["latency"],
        collective_bandwidth=spec["bandwidth"], dist_initialized=spec["dist"],
    )


def replay(text: str, job: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Result:
    """Run again exactly the run a replay string came from. ``job`` defaults to the recorded
    importable job; its arguments default to the recorded ones (when they were JSON data)."""
    spec = decode(text)
    if not args and not kwargs:
        args, kwargs = tuple(spec.get("args", ())), dict(spec.get("kwargs", {}))
    if spec["run"] != 0:
        raise ValueError(f"this replay string is run #{spec['run']} of its cluster: its filesystem came from "
                         "earlier runs, which a replay string does not hold; replay the whole scenario instead")
    if job is None:
        if spec["job"] is None:
            raise ValueError("the replayed job was not importable (a lambda, closure or __main__ function); "
                             "pass it: simfs.replay(text, job)")
        job = resolve_job(spec["job"])
    try:
        cluster = cluster_from_spec(spec)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"simfs replay string describes an invalid cluster: {exc}") from None
    choices = ReplayChoices(spec["draws"]) if "draws" in spec else None
    return cluster.run(job, *args, choices=choices, **kwargs)
