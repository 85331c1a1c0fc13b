"""The host's side of the process carrier: it forks one process per rank and gives each a proxy
task in the scheduler. A proxy hands its turn to its rank process, then serves the rank's requests
one by one on the simulated machine (waiting in the scheduler when a request waits), until the rank
returns, raises or dies. While a rank process runs, the simulation thread waits for its next
request: exactly one thread of the cluster runs at a time."""

from __future__ import annotations

import atexit
import importlib.util
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import _real
from ...confinement import Confinement
from ...confinement.confine import prepare as prepare_confinement
from ...errors import OutsideSimulation, RankDied, RankError, SimfsError
from ..machine import ReadOnRank
from ..process import Process
from ..scheduler import DONE, Task, current_task
from ..syscalls import Syscalls
from ..syscalls.dirent import ScandirIterator
from ..waitqueue import WaitQueue
from . import rank as rank_side
from . import wire
from .hostdist import DistRequests

if TYPE_CHECKING:
    from ..dist import DistWorld
    from ..machine import Machine
    from ..scheduler import Scheduler

# what a rank may ask of its Syscalls: the public system calls, nothing else of the host's object
SYSCALLS = frozenset(name for name in dir(Syscalls) if not name.startswith("_") and callable(getattr(Syscalls, name))
                     and name not in ("exit_process",))
_STACKS_GRACE = 2.0  # real seconds a stuck rank gets to write its stacks before it is killed


_PRELOADED = ("numpy", "numpy.random", "torch")  # numpy.random: numpy imports it on first use (~17 ms)


def _preload() -> None:
    """Import numpy and torch (when installed) before forking: every rank then starts with them
    imported (a fork shares their pages; importing torch in each rank takes a second or more),
    and their global generators seeded from the run's seed (rank.py), not at a later import."""
    for name in _PRELOADED:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    prepare_confinement()

_EXITING: list[int] = []  # killed rank processes of ended runs, not yet reaped


def reap_exited() -> None:
    """Reap the killed rank processes that have exited since (each run's end calls it)."""
    for pid in list(_EXITING):
        try:
            done, _ = _real.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _EXITING.remove(pid)


@atexit.register
def _reap_all() -> None:
    for pid in _EXITING:
        try:
            _real.waitpid(pid, 0)
        except ChildProcessError:
            pass


@dataclass(eq=False)
class RankProcess:
    """The host's handle on one rank process."""

    proc: Process
    pid: int
    fd: int
    stacks: int
    queues: dict[int, WaitQueue] = field(default_factory=dict)  # the rank's wait queues, by its key
    signals: list[int] = field(default_factory=list)  # for its handlers, with its main thread's next answer
    killed: str = ""  # why the host killed it (empty: it was not)
    reaped: bool = False


class _Exited(Exception):
    """The rank process exited with status 0 without a word (exit(3) from C code)."""


class _Forward:
    """A rank's Python signal handler as the host's Process holds it: delivering the signal queues
    it for the rank, whose own handler runs when its next answer arrives."""

    def __init__(self, rank: RankProcess) -> None:
        self._rank = rank

    def __call__(self, signum: int, frame: Any) -> None:
        self._rank.signals.append(signum)


class ProcessCarrier:
    """The rank processes of one run."""

    def __init__(self, machine: Machine, sched: Scheduler, world: DistWorld,
                 end_process: Callable[[Process, str], None]) -> None:
        self.machine = machine
        self.sched = sched
        self._end_process = end_process
        self.ranks: dict[int, RankProcess] = {}
        self.requests = 0  # served so far: the watchdog's sign of progress
        self.confinement: Confinement | None = None
        self._importing = False  # the request being served comes from the rank's import system
        self._where: dict[int, str] = {}  # task id -> where its rank code made its last request
        machine.reads_on_rank = lambda: self._importing
        self._handlers: dict[str, Callable[..., Any]] = {
            "sys": self._sys, "check_fd": self._check_fd,
            "elapse": self._elapse, "block": self._block, "notify_all": self._notify_all, "note": self._note,
            "alive": self._alive, "signal": self._signal, "disposition": self._disposition, "exit": self._exit,
            "spawn": self._spawn, "busy_threads": self._busy_threads,
        }
        for op, serve in DistRequests(world).handlers().items():
            self._handlers[op] = lambda rank, *args, serve=serve: serve(rank.proc.rank, *args)

    # -- starting ----------------------------------------------------------------------------------
    def start(self, proc: Process, job: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Callable[[], Any]:
        """Fork the rank's process (it confines itself and waits for its first turn); returns the
        body of its proxy task."""
        _preload()
        host_end, rank_end = (s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
        stacks = os.memfd_create(f"simfs-rank{proc.rank}-stacks")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        host = os.getpid()
        pid = os.fork()
        if pid == 0:
            _real.close(host_end)
            rank_side.main(rank_end, stacks, proc, self.sched.next_tid, job, args, kwargs, parent=host)
        _real.close(rank_end)
        rank = self.ranks[proc.rank] = RankProcess(proc, pid, host_end, stacks)
        for signum, handler in list(proc.signal_handlers.items()):
            if callable(handler):  # Python's own (SIGINT's default_int_handler) runs in the rank too
                proc.signal_handlers[signum] = _Forward(rank)
        return lambda: self._serve(rank)

    def _greeted(self, rank: RankProcess) -> None:
        """The rank process's first word: it confined itself (what the kernel refuses it)."""
        hello = self._receive(rank)
        if hello[0] != "hello":
            raise SimfsError(f"rank {rank.proc.rank}'s process did not start: it said {hello[0]!r}")
        if self.confinement is None:
            _, abi, confined, unconfined = hello
            self.confinement = Confinement(int(abi), dict(confined), dict(unconfined))

    # -- serving a rank ----------------------------------------------------------------------------
    def _serve(self, rank: RankProcess) -> Any:
        """The body of a proxy task: the main thread of a rank process, or a thread it started."""
        task = self.sched.current
        assert task is not None  # a proxy runs as a task
        answer: tuple[str, Any] = ("go", None)
        try:
            if task.is_main:
                self._greeted(rank)
            while True:
                signals: list[int] = []
                if task.is_main:
                    signals, rank.signals = rank.signals, []
                self._send(rank, task.tid, answer, signals)
                message = self._receive(rank)
                kind, tid = message[0], message[1]
                if tid != task.tid:
                    raise SimfsError(f"rank {rank.proc.rank}'s thread {tid} spoke while thread {task.tid} had the turn")
                if kind == "call":
                    self._where[task.tid] = str(message[3])
                    answer = self._handle(rank, message[2], message[4:])
                elif kind == "done":
                    return self._load(rank, message[2])
                elif kind == "raised":
                    raise self._raised(message[2:])
                elif kind == "unsendable":
                    raise SimfsError(f"rank {rank.proc.rank} returned a {message[2]}, which cannot be sent to the "
                                     f"host ({message[3]}); return plain data")
                else:
                    raise SimfsError(f"rank {rank.proc.rank} sent the host a message of unknown kind {kind!r}")
        except _Exited:
            return None
        finally:
            if task.is_main:
                self._end_process(rank.proc, "its process exited")

    def _handle(self, rank: RankProcess, op: Any, args: tuple[Any, ...]) -> tuple[str, Any]:
        self.requests += 1
        handler = self._handlers.get(op) if isinstance(op, str) else None
        try:
            if handler is None:
                raise SimfsError(f"simfs: a rank process asked the host for {op!r}, which it does not serve")
            return ("ok", handler(rank, *args))
        except ReadOnRank:
            return ("local", None)
        except Exception as exc:  # noqa: BLE001 - the rank's call raises it, as in a greenlet rank
            return ("err", exc)

    def _send(self, rank: RankProcess, tid: int, answer: tuple[str, Any], signals: list[int]) -> None:
        try:
            try:
                wire.send(rank.fd, (tid, *answer, signals, self.sched.now))
            except (TypeError, AttributeError, ValueError, pickle.PicklingError) as exc:  # an unpicklable exception
                wire.send(rank.fd, (tid, "err", SimfsError(f"{answer[1]!r} ({exc})"), signals, self.sched.now))
        except (BrokenPipeError, ConnectionResetError):
            self._died(rank)

    def _receive(self, rank: RankProcess) -> Any:
        data = wire.receive(rank.fd)
        if data is None:
            self._died(rank)
        try:
            return wire.load_untrusted(data)  # type: ignore[arg-type]  # not None: _died raised
        except Exception as exc:  # noqa: BLE001 - anything unloadable ends the rank, nothing of it runs here
            self.kill(rank, "it sent the host something other than plain data")
            raise SimfsError(f"rank {rank.proc.rank} sent the host a message it does not load ({exc!r}): "
                             "rank code never runs in the host") from None

    def _load(self, rank: RankProcess, data: bytes) -> Any:
        try:
            return wire.load_untrusted(data)
        except wire.Untrusted as exc:
            raise SimfsError(f"rank {rank.proc.rank} returned an object that holds a {exc}: the host loads plain "
                             "data only (rank code never runs in the host); return plain data") from None

    def _raised(self, parts: tuple[Any, ...]) -> BaseException:
        pickled, type_name, text, trace = parts
        error: Any = None
        if pickled is not None:
            try:
                error = wire.load_untrusted(pickled)
            except Exception:  # noqa: BLE001 - a class of the rank's own: described below
                pass
        if not isinstance(error, BaseException):
            error = RankError(str(type_name), str(text))
        error.simfs_traceback = str(trace)
        return error  # type: ignore[no-any-return]  # checked just above

    def _died(self, rank: RankProcess) -> None:
        """The rank's process is gone without saying how it ended: raise what happened to it."""
        status = self._reap(rank)
        stacks = self._stacks(rank)
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

    # -- requests ----------------------------------------------------------------------------------
    def _sys(self, rank: RankProcess, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], importing: bool,
             umask: int) -> Any:
        if name not in SYSCALLS or type(args) is not tuple or type(kwargs) is not dict:
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

    def _spawn(self, rank: RankProcess, name: str, daemon: bool) -> int:
        proc = rank.proc
        task = self.sched.spawn(lambda: self._serve(rank), proc.rank, proc, f"rank{proc.rank}/{name}", is_main=False,
                                daemon=bool(daemon))
        return task.tid

    def _busy_threads(self, rank: RankProcess) -> list[int]:
        sched = self.sched
        return [t.tid for t in sched.threads.get(rank.proc.rank, ())
                if not t.daemon and t.state != DONE and sched.progressing(t)]

    def _check_fd(self, rank: RankProcess, fd: Any) -> None:
        rank.proc.sys._fd(fd)

    def _elapse(self, rank: RankProcess, cost: float) -> None:
        self.sched.elapse(float(cost))

    def _block(self, rank: RankProcess, key: int, what: str, timeout: float | None) -> bool:
        queue = rank.queues.get(key)
        if queue is None:
            queue = rank.queues[key] = WaitQueue(str(what))
        return self.sched.block(queue, None if timeout is None else float(timeout))

    def _notify_all(self, rank: RankProcess, key: int) -> None:
        queue = rank.queues.get(key)
        if queue is not None:
            self.sched.notify_all(queue)

    def _note(self, rank: RankProcess, op: str, path: str, outcome: str, rank_no: int, node: int) -> None:
        self.machine.note(str(op), str(path), str(outcome), rank=int(rank_no), node=int(node))

    def _alive(self, rank: RankProcess, pid: int) -> bool:
        return self.machine.process_on(rank.proc.node, int(pid)) is not None

    def _signal(self, rank: RankProcess, pid: int, signum: int, sender: str) -> None:
        target = self.machine.process_on(rank.proc.node, int(pid))
        if target is None:
            raise ProcessLookupError(3, os.strerror(3))  # ESRCH
        self.machine.deliver(target, int(signum), str(sender))

    def _disposition(self, rank: RankProcess, signum: int, kind: str) -> None:
        handlers = rank.proc.signal_handlers
        handlers[int(signum)] = {"default": signal.SIG_DFL, "ignore": signal.SIG_IGN}.get(kind) or _Forward(rank)

    def _exit(self, rank: RankProcess, outcome: BaseException | None) -> None:
        if outcome is not None and not isinstance(outcome, BaseException):
            raise SimfsError(f"simfs: a rank process exited with {outcome!r}")
        self.kill(rank, "")
        self.machine.end_process(rank.proc, outcome)  # ends this proxy: does not return

    def where(self, task: Task) -> str:
        """'file:line in function' of the rank code that made the task's last request."""
        return self._where.get(task.tid, "")

    # -- ending --------------------------------------------------------------------------------------
    def kill(self, rank: RankProcess, why: str) -> None:
        """SIGKILL the rank's process (a crashed node, a stuck rank, the end of the run)."""
        if rank.reaped:
            return
        rank.killed = rank.killed or why
        task = current_task()  # a proxy, when a rank's request crashed a node: the call is the host's own
        if task is not None:
            task.host_calls += 1
        try:
            _real.kill(rank.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            if task is not None:
                task.host_calls -= 1

    def kill_node(self, node: int, why: str) -> None:
        for rank in self.ranks.values():
            if rank.proc.node == node:
                self.kill(rank, why)

    def stop_running(self, why: str, *, stacks: bool) -> None:
        """Kill the rank process that holds the turn (Ctrl-C, or the watchdog); with ``stacks``,
        it first writes its threads' stacks, which its error shows."""
        task = self.sched.current
        rank = self.ranks.get(task.rank) if task is not None else None
        if rank is None or rank.reaped:
            return
        if stacks:
            try:
                _real.kill(rank.pid, rank_side.STACKS_SIGNAL)
            except ProcessLookupError:
                return
            deadline, size = _real.monotonic() + _STACKS_GRACE, -1
            while _real.monotonic() < deadline:
                _real.sleep(0.05)
                now = _real.fstat(rank.stacks).st_size
                if now and now == size:
                    break
                size = now
        self.kill(rank, why)

    def close(self) -> None:
        """The run is over: every rank process is killed (none runs code past its run). Those the
        kernel has not finished tearing down are reaped later (_EXITING), off the run's time."""
        for rank in self.ranks.values():
            self.kill(rank, "the run ended")
            if not rank.reaped:
                _EXITING.append(rank.pid)
                rank.reaped = True
            wire.forget(rank.fd)
            _real.close(rank.fd)
            _real.close(rank.stacks)
        reap_exited()

    def _reap(self, rank: RankProcess) -> int:
        if rank.reaped:
            return 0
        _, status = _real.waitpid(rank.pid, 0)
        rank.reaped = True
        return status

    def _stacks(self, rank: RankProcess) -> str:
        size = _real.fstat(rank.stacks).st_size
        return _real.pread(rank.stacks, size, 0).decode(errors="replace") if size else "(no stacks were written)"
