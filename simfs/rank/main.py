"""A rank process: forked from the run's zygote, it builds its side from the plain data the host
sent for it (port/schema.RankSpec: no object of the host's), confines itself, waits for the
scheduler's first turn, runs the job and sends back what it returned or raised. Every intercepted
call is a request to the host (``Link.ask``) that blocks until the scheduler answers, so exactly
one thread of the cluster runs at a time. The process never returns into the host's code: it ends
in os._exit."""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from greenlet import getcurrent

from .. import _real, plaindata
from ..confinement import confine, descriptors, kernel, prepared_descriptors
from ..confinement.confine import WRITES
from ..port import framing as wire
from ..port import schema
from ..report import format_exception, user_frame, where_raised
from ..tasks import showing
from ..tasks.process import Process
from ..tasks.task import TASKS, Task
from . import libsetup, limits
from .client import NATIVE, MachineClient, SchedulerClient, SyscallsClient
from .dist import WorldClient
from .intercept import audit
from .nativecalls import NativeCalls
from .outbox import Outbox

STACKS_SIGNAL = signal.SIGUSR2  # the host asks a stuck rank for its threads' stacks with it


class Link:
    """The rank's end of its socket to the host, shared by the process's threads. Exactly one of
    them runs at a time: the one that sent last reads the host's next answer; an answer for another
    thread is handed to it (its baton released) and the reader waits for its own."""

    def __init__(self, fd: int, proc: Process) -> None:
        self.fd = fd
        self.proc = proc
        self._batons: dict[int, Any] = {}  # tid -> a real lock, held while that thread waits
        self._mail: dict[int, schema.ToRank] = {}
        # the virtual time of the host's last answer: it cannot move while this process holds the
        # turn (only the scheduler moves it, while it serves a request), so reading it asks nothing
        self.now = 0.0

    def ask(self, request: schema.Request) -> Any:
        """A request of the running thread; with it goes where rank code made it (for hangs and
        crashes in the report)."""
        tid = _tid()
        self.tell(schema.call(tid, user_frame(sys._getframe(1)), request))
        return self.answer(tid)

    def tell(self, message: bytes) -> None:
        """Send a message (one without an answer: a thread's last, after which the caller reads
        for the others until it hands the turn over). The host gone, the process ends at once:
        rank code that swallows every exception cannot outlive it."""
        try:
            wire.send(self.fd, message)
        except OSError:
            os._exit(0)

    def answer(self, tid: int) -> Any:
        """Wait for the host's answer to thread ``tid`` (the scheduler's turn) and act on it."""
        answer = self._next_for(tid)
        for signum in answer.signals:  # delivered while this rank waited: its handlers run now, in it
            handler = self.proc.signal_handlers.get(signum)
            if callable(handler):
                handler(signum, sys._getframe(1))
        if type(answer) is schema.Answer:
            return answer.value
        if type(answer) is schema.Failed:
            raise answer.error
        return NATIVE

    def hand_over(self) -> None:
        """A finished thread: read until the answer for another thread of this process comes."""
        self._next_for(None)

    def add_thread(self, tid: int) -> None:
        baton = _real.allocate_lock()
        baton.acquire()
        self._batons[tid] = baton

    def wait_turn(self, tid: int) -> None:
        """A new thread's first turn: whichever thread reads the host's answer hands it over."""
        self._batons[tid].acquire()
        self._mail.pop(tid)

    def _next_for(self, tid: int | None) -> schema.ToRank:
        wire.soon(self.fd)  # an answer comes within microseconds more often than not: no sleep for it
        data = wire.receive(self.fd)
        if data is None:  # the host is gone: nothing may run any more
            os._exit(0)
        answer = schema.decode_answer(data)
        self.now = answer.now
        if answer.tid == tid:
            return answer
        self._mail[answer.tid] = answer
        self._batons[answer.tid].release()
        if tid is None:
            return answer
        self._batons[tid].acquire()
        return self._mail.pop(tid)


def _tid() -> int:
    task = TASKS.get(getcurrent())
    assert task is not None, "a rank process's request from a thread that is not one of its tasks"
    return task.tid


class Dispositions(dict[int, Any]):
    """The rank's signal handlers; the host learns each signal's disposition (default, ignored,
    or a handler that runs in the rank), so that a signal sent to this rank does what it would."""

    def __init__(self, initial: dict[int, Any], link: Link) -> None:
        super().__init__(initial)
        self._link = link

    def __setitem__(self, signum: int, handler: Any) -> None:
        super().__setitem__(signum, handler)
        kind: schema.Disposal = "handler"
        if handler in (signal.SIG_DFL, signal.SIG_IGN):
            kind = "default" if handler == signal.SIG_DFL else "ignore"
        self._link.ask(schema.Disposition(int(signum), kind))


def main(fd: int, stacks_fd: int, console: tuple[int, int], outbox: Outbox, start: bytes,
         job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], parent: int,
         memory: int | None = None) -> NoReturn:
    """The rank process from fork to exit (``start``: its schema.RankSpec; ``console``: the write
    ends of its stdout and stderr pipes, which the host keeps as its output; ``outbox``: its collectives'
    tensors, outbox.py; ``memory``: the private memory it may take, RLIMIT_DATA). What stops it
    before it said hello the host learns in its place (_failed)."""
    code = 0
    spoke = False
    try:
        _die_with(parent)
        os.setsid()  # a session and process group of its own: kill(0), setpriority of its group reach it alone
        outbox.map_own()  # before its descriptor is closed, and before the host seals it
        spec = schema.decode_spec(start)
        proc = _process(spec)
        descriptors.keep_only((fd, stacks_fd, *outbox.descriptors, *prepared_descriptors()), *console)
        if memory is not None:  # before confinement, which allows a process its own limits only
            resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        wire.forget()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the host's: it ends the ranks
        stacks = os.fdopen(stacks_fd, "w")
        faulthandler.enable(file=stacks, all_threads=True)
        faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
        confinement = confine()  # before any rank code: one thread here, as the kernel needs
        if WRITES in confinement.confined:
            audit.trust_the_kernel()
        link = Link(fd, proc)
        link.add_thread(spec.tid)
        libsetup.start(proc)
        showing.start_fresh()  # not the hooks of the host it was forked from (pytest's recorder)
        _become(link, proc, spec, outbox)
        wire.send(fd, schema.encode(schema.Hello(confinement.landlock_abi, dict(confinement.confined),
                                                 dict(confinement.unconfined))))
        spoke = True
        link.answer(spec.tid)  # the scheduler's first turn
        wire.send(fd, _outcome(spec.tid, lambda: _main_thread(job, args, kwargs, proc)))
    except BaseException as exc:  # noqa: BLE001 - a rank process never returns into the host's code
        code = 70
        _failed(fd, outbox.rank, exc, memory, spoke)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken console: nothing to flush
                pass
        os._exit(code)


def _main_thread(job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], proc: Process) -> Any:
    """The job, then what a process does when its main thread is done: wait for its non-daemon
    threads that still make progress, and run its atexit handlers."""
    try:
        libsetup.install_c10d(proc)
        return job(*args, **kwargs)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
        return None
    finally:
        proc.exit_normally(proc.sys.machine.sched)


def thread_main(link: Link, task: Task, fn: Callable[[], Any]) -> None:
    """A thread the rank started, on an OS thread of its own: it waits for its first turn, runs,
    wakes its joiners, and tells the host how it ended."""
    TASKS[getcurrent()] = task
    sched: SchedulerClient = task.context.sys.machine.sched
    try:
        link.wait_turn(task.tid)
    except BaseException:  # noqa: BLE001 - the run ended before the thread's first turn
        return
    outcome = _outcome(task.tid, fn)
    task.state = "done"
    if task.finished.waiters:
        sched.notify_all(task.finished)
    link.tell(outcome)
    link.hand_over()


def _die_with(parent: int) -> None:
    """The kernel kills this process when the host's thread that forked it ends (prctl(2)
    PR_SET_PDEATHSIG), even by SIGKILL; a host already gone ends it now."""
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


def _failed(fd: int, rank: int, error: BaseException, memory: int | None, spoke: bool) -> None:
    """simfs's code of this process failed: its traceback to its stderr and, before it said hello,
    why it could not start to the host in its place (RankCannotStart, naming the resource limit it
    ran into; a Raised of tid 0: no thread of it ran). Out of memory, either may fail in turn: the
    host then learns of its exit alone."""
    try:
        traceback.print_exc()
        if not spoke:
            failure = limits.cannot_start(rank, f"{type(error).__name__}: {error}", error, memory)
            failure.__cause__ = error  # its traceback shows where it failed
            wire.send(fd, _raised(0, failure))
    except BaseException:  # noqa: BLE001 - no memory left, or the host gone: the process exits all the same
        pass


def _outcome(tid: int, body: Callable[[], Any]) -> bytes:
    """Done or Raised (schema.py): what the host learns of how thread ``tid`` ended."""
    try:
        value = body()
    except BaseException as exc:  # noqa: BLE001 - the rank's outcome, for the host's report
        return _raised(tid, exc)
    try:
        return schema.encode(schema.Done(tid, plaindata.dumps(value)))
    except Exception as exc:  # noqa: BLE001 - described to the host instead
        return schema.encode(schema.Unsendable(tid, _type_name(value)[:256], schema.text(str(exc))))


def _raised(tid: int, exc: BaseException) -> bytes:
    return schema.encode(schema.Raised(tid, _sendable(exc), _type_name(exc)[:256], schema.text(str(exc)),
                                       schema.text(format_exception(exc)), schema.text(where_raised(exc))))


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _sendable(exc: BaseException) -> bytes | None:
    try:
        return plaindata.dumps(exc)
    except Exception:  # noqa: BLE001 - the host describes it from its type, text and traceback
        return None


def _process(start: schema.RankSpec) -> Process:
    """The rank's process state, as the host's Process had it when it asked for this process."""
    proc = Process(rank=start.rank, local_rank=start.local_rank, node=start.node, world_size=start.world_size,
                   local_world_size=start.local_world_size, pid=start.pid, hostname=start.hostname,
                   env=dict(start.env), cwd=start.cwd, seed=start.seed, run=start.run)
    proc.umask = start.umask
    return proc


def _become(link: Link, proc: Process, start: schema.RankSpec, outbox: Outbox) -> None:
    """Make this process's main thread the rank's task, its system calls, machine, scheduler and
    torch.distributed world clients of the port."""
    task = Task(start.tid, proc.rank, proc, f"rank{proc.rank}", is_main=True)

    def start_thread(thread: Task, fn: Callable[[], Any]) -> None:
        link.add_thread(thread.tid)
        _real.start_new_thread(thread_main, (link, thread, fn))

    sched = SchedulerClient(link.ask, start_thread, task, lambda: link.now)
    proc.sys = SyscallsClient(link.ask, NativeCalls(proc), MachineClient(link.ask, sched, start))
    proc.signal_handlers = Dispositions(proc.signal_handlers, link)
    proc.dist = WorldClient.of_process(link.ask, start, outbox)
    TASKS.clear()
    glet = getcurrent()
    task.glet = glet
    TASKS[glet] = task
