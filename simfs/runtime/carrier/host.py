"""The host's side of the process carrier: it forks one process per rank and gives each a proxy
task in the scheduler. A proxy hands its turn to its rank process, then serves the rank's requests
one by one on the simulated machine (waiting in the scheduler when a request waits), until the rank
returns, raises or dies. While a rank process runs, the simulation thread waits for its next
request: exactly one thread of the cluster runs at a time."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import _real, plaindata, relay
from ...confinement import Confinement
from ...confinement.confine import release as release_confinement
from ...errors import ConfigError, OutsideSimulation, RankCannotStart, RankDied, RankError, RankOutOfMemory, SimfsError
from ...port import framing as wire
from ...port import schema
from ...rank import main as rank_side
from ...rank.limits import cannot_start
from ...relay import Relay
from ...supervise import ask_for_stacks
from ...tasks.process import Process
from ...tasks.task import Task
from ..machine import ReadOnRank
from .base import STILL
from .handle import Forward, RankProcess
from .kept import zygote_for
from .outbox import Outboxes
from .requests import ProcessRequests
from .zygote import MAX_START, NotForked, Zygote, ZygoteGone

if TYPE_CHECKING:
    from ..machine import Machine
    from ..scheduler import Scheduler
    from .hostdist import DistRequests



# launches the host asks of the zygote before it waits for the oldest: the zygote forks while the
# host makes the next ranks' descriptors, and neither fills the other's socket buffer
LAUNCH_WINDOW = 16
_GRACE = 1.0  # real seconds a rank process whose socket ended gets to end too; the pipes after the run


def _as_rank(serve: Callable[[int, Any], Any]) -> Callable[[RankProcess, Any], Any]:
    """A handler of a rank's request by its global rank, as one by its process's handle."""
    return lambda rank, request: serve(rank.proc.rank, request)


def _zygote_for(rank: int, job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                native: bool) -> tuple[Zygote, int, bool]:
    """kept.zygote_for, at rank ``rank``'s start; RankCannotStart names the limit that stops it."""
    try:
        return zygote_for(job, args, kwargs, native)
    except OSError as exc:
        raise cannot_start(rank, f"the host could not fork the run's zygote ({exc})", exc) from exc


def _descriptors(rank: int) -> tuple[int, ...]:
    """Rank ``rank``'s process's descriptors as the host makes them: its socket's two ends (the
    host's first), its stacks memfd, its stdout's and stderr's pipes (read end, write end);
    RankCannotStart names the limit that stops one."""
    made: list[int] = []
    try:
        made.extend(s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
        made.append(os.memfd_create(f"simfs-rank{rank}-stacks"))
        for _ in ("stdout", "stderr"):
            made.extend(relay.pipe())
    except OSError as exc:
        error = cannot_start(rank, f"the host could not make its descriptors ({exc})", exc)
        for fd in made:
            _real.close(fd)
        raise error from exc
    return tuple(made)


class _Exited(Exception):
    """The rank process exited with status 0 without a word (exit(3) from C code)."""


class ProcessCarrier:
    """The rank processes of one run."""

    def __init__(self, machine: Machine, sched: Scheduler, dist: DistRequests,
                 end_process: Callable[[Process, str], None], memory: int | None = None) -> None:
        self.machine = machine
        self.memory = memory  # RLIMIT_DATA of each rank process (None: unlimited)
        self.sched = sched
        self._world = dist.world
        self._end_process = end_process
        self.ranks: dict[int, RankProcess] = {}
        self.confinement: Confinement | None = None
        self._where: dict[int, str] = {}  # task id -> where its rank code made its last request
        self._zygote: Zygote | None = None  # found at the first start (kept.py)
        self._job = 0  # the run's job among the zygote's
        self._owns_zygote = True  # a zygote of this run alone, not one kept for a series
        self._launching: deque[RankProcess] = deque()  # asked of the zygote, not yet known to have started
        self._process_requests = ProcessRequests(machine, sched, self._serve)
        self._handlers = self._process_requests.handlers()
        self.outboxes = Outboxes.create(len(dist.world.world.ranks))  # the ranks' collectives' tensors
        self.relay = Relay()  # what the rank processes write to their stdout and stderr, to their captures
        for kind, serve in dist.handlers().items():
            self._handlers[kind] = _as_rank(serve)
        missing = set(schema.REQUESTS) - set(self._handlers)
        assert not missing, f"requests no handler serves: {missing}"

    # -- starting ----------------------------------------------------------------------------------
    def start(self, proc: Process, job: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Callable[[], Any]:
        """Start the rank's process (it confines itself and waits for its first turn); returns the
        body of its proxy task. The first call forks the run's zygote (once every rank's Process is
        made: Run._spawn_ranks); the rank process starts from its RankSpec, sent with the request."""
        start = schema.spec(self._spec(proc))
        if len(start) > MAX_START:
            size = sum(len(k) + len(v) + 2 for k, v in proc.env.items())
            raise ConfigError(f"simfs.Cluster: rank {proc.rank}'s process would start from {len(start):,} bytes, more "
                              f"than the {MAX_START:,} a rank process starts from; its environment is "
                              f"{size:,} bytes (os.environ and Cluster(env=...)): make it smaller")
        if self._zygote is None:
            self._zygote, self._job, self._owns_zygote = _zygote_for(proc.rank, job, args, kwargs, self._world.native)
            self._zygote.outboxes(self.outboxes.readable)
        host_end, rank_end, stacks, out, out_w, err, err_w = _descriptors(proc.rank)
        try:
            self._zygote.launch(proc.rank, self._job, self.memory, start,
                                [rank_end, stacks, out_w, err_w, self.outboxes.writable[proc.rank]])
        finally:
            for fd in (rank_end, out_w, err_w):
                _real.close(fd)
        rank = self.ranks[proc.rank] = RankProcess(proc, 0, host_end, stacks, (out, err), -1, self._zygote.wait)
        self._launching.append(rank)
        if len(self._launching) >= LAUNCH_WINDOW:
            self._started()
        output = self.machine.outputs[proc.rank]
        self.relay.add(out, functools.partial(output.write, 1))
        self.relay.add(err, functools.partial(output.write, 2))
        for signum, handler in list(proc.signal_handlers.items()):
            if callable(handler):  # Python's own (SIGINT's default_int_handler) runs in the rank too
                proc.signal_handlers[signum] = Forward(rank)
        return lambda: self._serve(rank)

    def _spec(self, proc: Process) -> schema.RankSpec:
        """What rank ``proc``'s process starts from: plain data, no object of the host's."""
        world = self._world
        seed, run, _ = proc.seed_parts
        return schema.RankSpec(
            self.sched.next_tid, proc.rank, proc.local_rank, proc.node, proc.world_size, proc.local_world_size,
            proc.pid, proc.hostname, proc.env, proc.cwd, proc.umask, seed, run, self.machine.epoch,
            self.machine.run_start, list(self.machine.host.prefixes), world.native, world.initialized[proc.rank],
            list(world.world.ranks), world.world.name, world.world.timeout)

    def _started(self) -> None:
        """The oldest launch's process is known (its pid and pidfd)."""
        assert self._zygote is not None  # it launched
        rank = self._launching.popleft()
        try:
            rank.pid, rank.pidfd = self._zygote.started(rank.proc.rank)
        except NotForked as exc:  # raised in the rank's own proxy (_serve)
            rank.start_error = cannot_start(rank.proc.rank, f"the zygote could not fork it ({exc})", exc,
                                            pid=self._zygote.pid)

    def _greet_everyone(self) -> None:
        """Before any rank runs: every rank process's first word (it mapped its own outbox and
        confined itself), then the outboxes sealed. What ended a rank process before it spoke is
        raised in its own proxy, not in the one that greets."""
        while self._launching:
            self._started()
        for rank in self.ranks.values():
            if not rank.greeted and rank.start_error is None:  # (a process the zygote could not fork has none)
                rank.greeted = True
                try:
                    self._greeted(rank)
                except BaseException as exc:  # noqa: BLE001 - raised in the rank's own proxy (_serve)
                    rank.start_error = exc
        unsealed = self.outboxes.seal()
        if unsealed:
            self.machine.note("outbox", "", unsealed)

    def _greeted(self, rank: RankProcess) -> None:
        """The rank process's first word: it confined itself (what the kernel refuses it), or why
        it could not start (a Raised in its place: rank/main.py)."""
        try:
            hello = self._receive(rank)
        except (SystemExit, _Exited) as exc:  # it could not even say why
            status = exc.code if isinstance(exc, SystemExit) else 0
            raise RankCannotStart(rank.proc.rank, f"its process exited with status {status} before it said "
                                  "hello (what it wrote to its stderr, in the run's output, says why)") from None
        if isinstance(hello, schema.Raised):
            raise self._raised(rank, hello)
        if not isinstance(hello, schema.Hello):
            raise SimfsError(f"rank {rank.proc.rank}'s process did not start: it said {type(hello).__name__}")
        if self.confinement is None:
            self.confinement = Confinement(hello.landlock_abi, dict(hello.confined), dict(hello.unconfined))

    # -- serving a rank ----------------------------------------------------------------------------
    def _serve(self, rank: RankProcess) -> Any:
        """The body of a proxy task: the main thread of a rank process, or a thread it started.
        Rank code never runs in it, so every call it makes is the host's own, on the real machine
        (an import of numpy or torch to load a rank's tensors): it serves the rank's system calls
        on the simulated machine directly (requests.py), never through the interception."""
        task = self.sched.current
        assert task is not None  # a proxy runs as a task
        task.host_calls += 1
        answer: tuple[str, Any] = ("ok", None)  # the first turn
        if not self.outboxes.sealed:  # every rank is forked: before any runs
            self._greet_everyone()
        try:
            if task.is_main and rank.start_error is not None:
                raise rank.start_error
            while True:
                signals: list[int] = []
                if task.is_main:
                    signals, rank.signals = rank.signals, []
                self._send(rank, task.tid, answer, signals)
                message = self._receive(rank)
                if isinstance(message, schema.Hello) or message.tid != task.tid:
                    raise SimfsError(f"rank {rank.proc.rank}'s process spoke out of turn: thread {task.tid} "
                                     f"had the turn, it sent {type(message).__name__}")
                if isinstance(message, schema.Call):
                    self._where[task.tid] = message.where
                    answer = self._handle(rank, message.request)
                elif isinstance(message, schema.Done):
                    return self._load(rank, message.value)
                elif isinstance(message, schema.Raised):
                    raise self._raised(rank, message)
                else:
                    raise SimfsError(f"rank {rank.proc.rank} returned a {message.type_name}, which cannot be sent "
                                     f"to the host ({message.why}); return plain data")
        except _Exited:
            return None
        finally:
            if task.is_main:
                self._end_process(rank.proc, "its process exited")

    def _handle(self, rank: RankProcess, request: schema.Request) -> tuple[str, Any]:
        """The request served by its handler: ("ok", its value), ("failed", what it raised) or
        ("native", None)."""
        try:
            return ("ok", self._handlers[type(request)](rank, request))
        except ReadOnRank:
            return ("native", None)
        except Exception as exc:  # noqa: BLE001 - the rank's call raises it, as in a greenlet rank
            return ("failed", exc)

    def _send(self, rank: RankProcess, tid: int, answer: tuple[str, Any], signals: list[int]) -> None:
        kind, value = answer
        now = self.sched.now
        try:
            try:
                if kind == "ok":
                    data = schema.answer(tid, now, signals, value)
                elif kind == "failed":
                    data = schema.failed(tid, now, signals, value)
                else:
                    data = schema.native(tid, now, signals)
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                data = schema.failed(tid, now, signals, SimfsError(f"simfs defect: the answer {value!r} does not "
                                                                   f"cross to the rank ({exc})"))
            wire.send(rank.fd, data)
        except (BrokenPipeError, ConnectionResetError):
            self._died(rank)

    def _wait(self, rank: RankProcess) -> None:
        """Until the rank's next message arrives, or its process ends, keep what it writes."""
        if wire.soon(rank.fd):
            return
        watched = [rank.fd, rank.pidfd, *(fd for fd in rank.outputs if fd in self.relay.fds)]
        while True:
            ready = _real.readable(watched, None)
            for fd in rank.outputs:
                if fd in ready:
                    self.relay.pump(fd)
                    if fd not in self.relay.fds:
                        watched.remove(fd)
            if rank.fd in ready or rank.pidfd in ready:
                return

    def _receive(self, rank: RankProcess) -> schema.FromRank:
        self._wait(rank)
        try:
            data = wire.receive(rank.fd, wire.MAX_MESSAGE)
            if data is None:
                self._died(rank)
            return schema.decode(data)  # type: ignore[arg-type]  # not None: _died raised
        except (plaindata.Untrusted, wire.Oversized) as exc:  # it ends the rank, nothing of it runs here
            rank.kill("it sent the host something other than plain data")
            raise SimfsError(f"rank {rank.proc.rank} sent the host a message it does not load ({exc}): "
                             "rank code never runs in the host") from None

    def _load(self, rank: RankProcess, data: bytes) -> Any:
        try:
            return plaindata.load(data, records=True)
        except plaindata.Untrusted as exc:
            raise SimfsError(f"rank {rank.proc.rank} returned an object that holds {exc}: the host loads plain "
                             "data only (rank code never runs in the host); return plain data") from None

    def _raised(self, rank: RankProcess, message: schema.Raised) -> BaseException:
        error: Any = None
        if message.error is not None:
            try:
                error = plaindata.load(message.error, records=True)
            except plaindata.Untrusted:
                pass  # described below from its type's name and text
        if not isinstance(error, BaseException):
            error = RankError(message.type_name, message.text)
        if self.memory is not None and isinstance(error, MemoryError):
            error = RankOutOfMemory(rank.proc.rank, self.memory, message.text or "MemoryError")
        error.simfs_traceback, error.simfs_where = message.trace, message.where
        return error  # type: ignore[no-any-return]  # checked just above

    def _died(self, rank: RankProcess) -> None:
        """The rank's socket ended without a word: its process died (raise what happened to it),
        or it cut its end (closed it, or ran another program), and is killed: nothing of it runs
        unseen."""
        if not rank.ends_within(_GRACE):
            rank.kill("it closed its channel to the host (it closed the descriptor, or ran another program)")
        status = rank.reap()
        stacks = rank.stacks_text()
        if rank.killed:
            raise OutsideSimulation(f"rank {rank.proc.rank}: {rank.killed}; it was here:\n{stacks}")
        if os.WIFSIGNALED(status):
            died = RankDied(rank.proc.rank, os.WTERMSIG(status), stacks)
            died.simfs_traceback = stacks  # type: ignore[attr-defined]  # read by the run's result
            raise died
        code = os.waitstatus_to_exitcode(status)
        if code:
            raise SystemExit(code)
        raise _Exited

    def where(self, task: Task) -> str:
        """'file:line in function' of the rank code that made the task's last request."""
        return self._where.get(task.tid, "")

    # -- ending --------------------------------------------------------------------------------------
    def kill_node(self, node: int, why: str) -> None:
        for rank in self.ranks.values():
            if rank.proc.node == node:
                rank.kill(why)

    def interrupt(self, sim: threading.Thread) -> None:
        """Ctrl-C: the rank process that holds the turn is killed (the simulation thread runs only
        the host's code, never to be interrupted)."""
        self.stop_running("the run was interrupted (Ctrl-C)", stacks=False)

    @property
    def signs(self) -> int:
        return self._process_requests.signs

    def stuck(self, task: Task, seconds: float, sim: threading.Thread, again: bool) -> str:
        """A process can always be stopped: it is killed, after it wrote its threads' stacks."""
        self.stop_running(f"it ran {seconds:g}s of real time {STILL} (the watchdog killed it)",
                          stacks=True)
        return f"rank {task.rank} ran {seconds:g}s of real time {STILL}: the watchdog killed " \
            "its process"

    def stop_running(self, why: str, *, stacks: bool) -> None:
        """Kill the rank process that holds the turn (Ctrl-C, or the watchdog); with ``stacks``,
        it first writes its threads' stacks, which its error shows."""
        task = self.sched.current
        rank = self.ranks.get(task.rank) if task is not None else None
        if rank is None or rank.reaped:
            return
        if stacks and not ask_for_stacks(rank.pid, rank_side.STACKS_SIGNAL, rank.stacks):
            return
        rank.kill(why)

    def close(self) -> None:
        """The run is over: every rank process is killed (none runs code past its run) and reaped,
        then the zygote, so the host has no child left. All are killed first: the kernel tears
        them down together."""
        with contextlib.suppress(ZygoteGone):
            while self._launching:
                self._started()
        for rank in self.ranks.values():
            rank.kill("the run ended")
        for rank in self.ranks.values():
            with contextlib.suppress(ZygoteGone):  # it took its children with it (PR_SET_PDEATHSIG)
                rank.reap()
            wire.forget(rank.fd)
            _real.close(rank.fd)
            _real.close(rank.stacks)
        if self._zygote is not None and self._owns_zygote:
            self._zygote.close()
        elif self._zygote is not None:
            with contextlib.suppress(ZygoteGone):
                self._zygote.outboxes(())  # the kept zygote lets this run's go
        self.relay.finish(_GRACE)  # what they wrote last: the pipes end with them
        self.outboxes.close()
        if self._owns_zygote:
            release_confinement()  # (a series' ruleset is released when it ends: kept.py)
