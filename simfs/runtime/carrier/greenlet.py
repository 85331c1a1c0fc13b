"""Greenlet ranks: every rank a task of the host's scheduler in the host's interpreter, whose
intercepted calls go to the simulated kernel directly (no copy, no message): system calls and waits to
its objects, torch.distributed and stores to the handlers of the port's requests. The interpreter-wide
names a process owns alone are swapped in while each rank runs (procglobals.py)."""

from __future__ import annotations

import ctypes
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from ...capture import Capture
from ...errors import OutsideSimulation, SimfsError
from ...port import schema
from ...rank.dist import Shared, WorldClient
from ...report import user_frame
from ...tasks.groups import SimGroup
from ...tasks.process import Process
from ...tasks.task import Task, task_frame
from ..procglobals import ProcessGlobals
from ..scheduler import Scheduler
from .base import STILL
from .hostdist import DistRequests


class Stop(BaseException):
    """Raised into a rank that runs Python code without any simulated operation when Ctrl-C
    stops the run."""


class StoreNames(Protocol):
    """torch's names for its stores, given to simfs's for the run (simfs/rank/c10d/greenlets.py, which
    the caller passes in when torch.distributed is loaded: this side imports nothing of c10d)."""

    def install(self) -> None: ...

    def uninstall(self) -> None: ...


class DirectHost:
    """What a greenlet rank's torch.distributed (rank/dist.py) and torch's stores (rank/c10d/host.py
    Asks) ask of the kernel: the request handler itself, called with the request as it is, as the
    rank that runs, as a rank process's request is served."""

    def __init__(self, sched: Scheduler, handlers: dict[type[schema.Request], Callable[[int, Any], Any]]) -> None:
        self._sched = sched
        self._handlers = handlers

    def ask(self, request: schema.Request) -> Any:
        task = self._sched.current
        assert task is not None, "a store's request outside a rank"
        return self._handlers[type(request)](task.rank, request)


class GreenletCarrier:
    """The greenlet ranks of one run."""

    signs = 0  # a greenlet rank imports in the host's own process: no sign to count

    def __init__(self, sched: Scheduler, dist: DistRequests, end_process: Callable[[Process, str], None],
                 outputs: dict[int, Capture], store_names: StoreNames | None = None) -> None:
        self.sched = sched
        self._outputs = outputs  # rank -> its output: what its console and streams write
        self._end_process = end_process
        self._host = DirectHost(sched, dist.handlers())
        self._world = dist.world
        self._globals = ProcessGlobals()
        sched.enter = self._globals.enter
        self._stores = store_names
        if store_names is not None:
            store_names.install()

    def start(self, proc: Process, job: Callable[..., Any], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Callable[[], Any]:
        """The job, then what a process does when its main thread is done: wait for its
        threads that still make progress, and run its atexit handlers."""
        sched = self.sched
        proc.c10d_host = self._host
        proc.console.sink = self._outputs[proc.rank].write
        world = self._world.world
        proc.dist = WorldClient(self._host.ask, SimGroup(list(world.ranks), world.name, world.timeout),
                                self._world.initialized[proc.rank], Shared())

        def body() -> Any:
            try:
                return job(*args, **kwargs)
            except SystemExit as exc:
                if exc.code in (0, None):
                    return None
                raise
            finally:
                proc.exit_normally(sched)
                self._end_process(proc, "its process exited")
        return body

    def where(self, task: Task) -> str:
        return user_frame(task_frame(task))

    def kill_node(self, node: int, why: str) -> None:
        """Nothing runs a greenlet rank but the scheduler, which abandons the node's tasks."""

    def interrupt(self, sim: threading.Thread) -> None:
        _raise_in_thread(sim.ident, Stop)

    def stuck(self, task: Task, seconds: float, sim: threading.Thread, again: bool) -> str:
        """The simulation thread runs the rank: an exception raised into it, or, when that did
        not stop it, the run is given up (it waits on something simfs cannot interrupt)."""
        stack = "".join(traceback.format_stack(sys._current_frames().get(sim.ident or 0)))
        if again:
            raise SimfsError(f"rank {task.rank} is blocked outside the simulation and cannot be interrupted "
                             f"(a real lock, socket or subprocess?); it was here:\n{stack}")
        _raise_in_thread(sim.ident, OutsideSimulation)
        return (f"rank {task.rank} ran {seconds:g}s of real time {STILL} (blocked outside "
                f"the simulation?):\n{stack}")

    def close(self) -> None:
        self._globals.leave()
        if self._stores is not None:
            self._stores.uninstall()


def _raise_in_thread(ident: int | None, exc_type: type[BaseException]) -> None:
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc_type))
