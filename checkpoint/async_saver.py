"""checkpoint.async_save: stage now, write and commit in a background thread.

The state dict is copied to the CPU (CUDA tensors into pinned memory) before ``async_save``
returns, so training may change the tensors at once; ``save_staged`` then runs in a background
thread. At most one save is in flight per process: the next ``async_save`` (or a
``CheckpointManager`` save) first waits for it (``settle``). A failure reaches the future (the
same error on every rank) and, if no rank's future was asked for its outcome, the next save,
which then raises SaveError on every rank instead of starting.

The background thread's collectives run on their own gloo group over the same ranks, made at the
first asynchronous save (``torch.distributed.new_group``, called on every rank of the
communicator) and reused: they never interleave with the training thread's collectives on its
group (and need no CUDA device in that thread)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from coord import Comm, TorchComm, get_comm

from ._gc import paused
from .errors import SaveError, describe
from .files import DEFAULT_THREADS
from .saver import save_staged
from .staging import Staged, stage


class SaveFuture(Future[None]):
    """The outcome of an asynchronous save of ``path``: ``result()`` returns None once the
    checkpoint is committed, or raises the save's error. Asking ``result()`` or ``exception()``
    for a failure marks it as seen (see ``settle``). A save in flight cannot be cancelled."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._seen = False

    def result(self, timeout: float | None = None) -> None:
        try:
            return super().result(timeout)
        finally:
            self._seen = self._seen or self.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        finally:
            self._seen = self._seen or self.done()

    def unseen_failure(self) -> BaseException | None:
        """Wait for the save; its error if it failed and nobody asked (it counts as seen now)."""
        failure = super().exception()
        if self._seen:
            return None
        self._seen = True
        return failure


@dataclass
class _Process:
    pid: int
    in_flight: SaveFuture | None = None
    groups: dict[tuple[Any, Any], Comm] = field(default_factory=dict)  # (group, default group) -> gloo comm


# keyed by the process's main thread (a simulated process has its own); reset in a forked child
_processes: weakref.WeakKeyDictionary[threading.Thread, _Process] = weakref.WeakKeyDictionary()


def _process() -> _Process:
    main = threading.main_thread()
    found = _processes.get(main)
    if found is None or found.pid != os.getpid():
        found = _processes[main] = _Process(os.getpid())
    return found


def async_save(state_dict: Mapping[Any, Any], path: str | os.PathLike[str], *, comm: Comm | Any = None,
               allow_pickle: bool = False, threads: int = DEFAULT_THREADS) -> SaveFuture:
    """Save ``state_dict`` to ``path`` as ``checkpoint.save`` does, in the background: returns
    once the tensors may change again. A collective over ``comm`` (default ``coord.get_comm()``);
    the save in flight, if any, is waited for first (see ``settle``)."""
    comm = get_comm(comm)
    settle(comm)
    return start(state_dict, path, comm, allow_pickle=allow_pickle, threads=threads)


def settle(comm: Comm) -> None:
    """Wait for this process's save in flight, if any. If it failed and no rank asked its
    future, raise SaveError on every rank (naming the failed save and its cause). A collective."""
    proc = _process()
    previous, proc.in_flight = proc.in_flight, None
    failure = previous.unseen_failure() if previous is not None else None
    report = None if previous is None or failure is None else (previous.path, describe(failure))
    reports = comm.all_gather_object(report)
    failed = {rank: report for rank, report in enumerate(reports) if report is not None}
    if failed:
        path = next(iter(failed.values()))[0]
        raise SaveError(path, {rank: f"an asynchronous save whose future nobody checked: {cause}"
                               for rank, (_, cause) in failed.items()}) from failure


def start(state_dict: Mapping[Any, Any], path: str | os.PathLike[str], comm: Comm, *, allow_pickle: bool = False,
          threads: int = DEFAULT_THREADS, then: Callable[[], None] | None = None) -> SaveFuture:
    """Stage ``state_dict`` and save it in a background thread (after ``settle``), calling
    ``then`` once it is committed. A staging error fails the save on every rank, as in ``save``."""
    proc = _process()
    if proc.in_flight is not None:
        raise RuntimeError("checkpoint: a save is in flight; settle() it before starting another")
    directory = os.path.abspath(os.fspath(path))
    with paused():
        try:
            staged: Staged | Exception = stage(state_dict, allow_pickle=allow_pickle, copy=True, pin_memory=True)
        except Exception as exc:  # noqa: BLE001 - every rank learns it in the background save's plan exchange
            staged = exc
    background = _background_comm(proc, comm)
    future = SaveFuture(directory)
    future.set_running_or_notify_cancel()
    proc.in_flight = future
    threading.Thread(target=_run, args=(future, staged, directory, background, threads, then),
                     name=f"checkpoint-save {directory}").start()
    return future


def _run(future: SaveFuture, staged: Staged | Exception, directory: str, comm: Comm, threads: int,
         then: Callable[[], None] | None) -> None:
    try:
        save_staged(staged, directory, comm=comm, threads=threads)
        if then is not None:
            then()
    except BaseException as exc:  # noqa: BLE001 - delivered through the future (and the next save)
        future.set_exception(exc)
    else:
        future.set_result(None)


def _background_comm(proc: _Process, comm: Comm) -> Comm:
    """The gloo communicator over ``comm``'s ranks for background saves (a collective the
    first time). A LocalComm has no collectives to keep apart and is used as it is."""
    if not isinstance(comm, TorchComm):
        return comm
    import torch.distributed as dist

    key = (comm.group, dist.group.WORLD)  # a new default group (after re-initializing) needs new groups
    found = proc.groups.get(key)
    if found is None:
        if comm.group is None:
            group = dist.new_group(backend="gloo")
        else:
            group = dist.new_group(dist.get_process_group_ranks(comm.group), backend="gloo",
                                   use_local_synchronization=True)
        found = proc.groups[key] = TorchComm(group)
    return found
