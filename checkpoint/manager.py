"""CheckpointManager: numbered checkpoints under one root, the newest committed one found and
loaded, old ones deleted.

Layout: ``root/step-00000100/`` per step (see ``steps``), each a ``checkpoint.save`` directory.
Every method but ``path`` is a collective over the manager's communicator; what the filesystem
says (which steps exist, which is the latest, what to delete) is decided on rank 0 alone and
shared, so ranks never diverge however their caches differ. One job writes a root at a time.

Retention, after each save (on rank 0): the step just saved and the ``keep - 1`` newest other
committed steps are kept; the other committed steps, steps marked for deletion and incomplete
directories older than the newest kept step (crashed saves or deletions) are deleted. A step is
never deleted while it is being written (retention runs after the save's commit, and the next
save waits for it) or while a ``CheckpointManager.load`` of any job holds its lease (see
``leases``; a lease older than ``lease_timeout`` is stale, so a load that outlives it loses its
protection). A plain ``checkpoint.load`` of a step directory takes no lease and is not
protected."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from coord import Comm, get_comm

from .async_saver import SaveFuture, settle, start
from .errors import CheckpointNotFound
from .files import DEFAULT_THREADS, is_committed
from .leases import acquire, delete, release, unmark
from .loader import load
from .saver import save
from .steps import State, listing, state, step_name

_RELISTS = 8  # listings of the steps a load of the newest tries while they keep changing

T = TypeVar("T")
log = logging.getLogger("checkpoint")
DEFAULT_LEASE_TIMEOUT = 6 * 3600.0


class CheckpointManager:
    """Checkpoints ``root/step-NNNNNNNN`` (see the module docstring for retention and leases)."""

    def __init__(self, root: str | os.PathLike[str], keep: int = 3, *, comm: Comm | Any = None,
                 allow_pickle: bool = False, threads: int = DEFAULT_THREADS,
                 lease_timeout: float = DEFAULT_LEASE_TIMEOUT) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"CheckpointManager: keep must be an int >= 1, got {keep!r}")
        if not lease_timeout > 0:
            raise ValueError(f"CheckpointManager: lease_timeout must be > 0 seconds, got {lease_timeout!r}")
        self.root = os.path.abspath(os.fspath(root))
        self.keep = keep
        self.allow_pickle = allow_pickle
        self.threads = threads
        self.lease_timeout = lease_timeout
        self._comm = comm

    def path(self, step: int) -> str:
        """The directory of ``step``."""
        return os.path.join(self.root, step_name(_checked(step)))

    def steps(self) -> list[int]:
        """The committed steps, oldest first."""
        return self._decide(get_comm(self._comm), None, lambda: sorted(
            step for step in listing(self.root) if state(self.path(step)) is State.COMMITTED))

    def latest(self) -> int | None:
        """The newest committed step (an incomplete, corrupt or half-deleted one never), or None.
        An asynchronous save counts once its future is done."""
        return self._decide(get_comm(self._comm), None, lambda: next(
            (step for step in listing(self.root) if state(self.path(step)) is State.COMMITTED), None))

    def save(self, step: int, state_dict: Mapping[Any, Any]) -> None:
        """Save ``step`` (after the save in flight, if any; see ``async_save.settle``), then
        apply retention. FileExistsError on every rank if the step is committed already."""
        comm = self._begin(step)
        save(state_dict, self.path(step), comm=comm, allow_pickle=self.allow_pickle, threads=self.threads)
        if comm.rank == 0:
            self._retain(step)

    def async_save(self, step: int, state_dict: Mapping[Any, Any]) -> SaveFuture:
        """``save`` in the background (see ``checkpoint.async_save``); retention runs after the
        commit, before the future completes."""
        comm = self._begin(step)
        then = functools.partial(self._retain, step) if comm.rank == 0 else None
        return start(state_dict, self.path(step), comm, allow_pickle=self.allow_pickle, threads=self.threads,
                     then=then)

    def load(self, state_dict: Mapping[Any, Any], step: int | None = None) -> int:
        """Load ``step`` (default: the latest) into ``state_dict`` in place, under a lease that
        retention respects; returns the step. CheckpointNotFound on every rank if there is none."""
        if step is not None:
            _checked(step)
        comm = get_comm(self._comm)
        lease: str | None = None

        def choose() -> int:
            nonlocal lease
            chosen, lease = self._lease(step)
            return chosen

        try:
            chosen = self._decide(comm, step, choose)
            load(state_dict, self.path(chosen), comm=comm, allow_pickle=self.allow_pickle, threads=self.threads)
        finally:
            if lease is not None:
                release(lease)
        return chosen

    def __repr__(self) -> str:
        return f"CheckpointManager({self.root!r}, keep={self.keep})"

    # -- on rank 0 --------------------------------------------------------------------------
    def _begin(self, step: int) -> Comm:
        """Before saving ``step``: the save in flight settled, and the step free on every rank."""
        _checked(step)
        comm = get_comm(self._comm)
        settle(comm)
        self._decide(comm, step, lambda: self._claim(step))
        return comm

    def _claim(self, step: int) -> None:
        directory = self.path(step)
        if is_committed(directory):
            raise FileExistsError(f"CheckpointManager.save: step {step} is saved already ({directory}); a step is "
                                  "saved once")
        unmark(directory)  # a deletion that crashed after uncommitting it must not take the new save

    def _lease(self, step: int | None) -> tuple[int, str]:
        """The step to load (``step``, or the newest committed) and a lease on it. The newest is
        looked for again while the listing changes: a saver that committed a step and retired the
        listed ones between this listing and its leases (this process paused in between) leaves
        none of them, and the new one unlisted."""
        tried: list[int] | None = None
        for _ in range(_RELISTS):
            candidates = [step] if step is not None else listing(self.root)
            if candidates == tried:
                break
            for candidate in candidates:
                lease = acquire(self.path(candidate))
                if lease is not None:
                    if state(self.path(candidate)) is State.COMMITTED:
                        return candidate, lease
                    release(lease)
            tried = candidates
        what = f"step {step}" if step is not None else "any step"
        raise CheckpointNotFound(f"no committed checkpoint of {what} under {self.root}")

    def _retain(self, saved: int) -> None:
        """Delete what retention does not keep (see the module docstring); failures are logged."""
        try:
            states = {step: state(self.path(step)) for step in listing(self.root)}
        except OSError as exc:
            log.warning("checkpoint: retention skipped, cannot list %s: %s", self.root, exc)
            return
        committed = [step for step, s in states.items() if s is State.COMMITTED and step != saved]
        kept = {saved, *committed[:self.keep - 1]}
        newest = max(kept)
        for step in sorted(states):
            if step not in kept and (states[step] is not State.INCOMPLETE or step < newest):
                try:
                    delete(self.path(step), self.lease_timeout)
                except OSError as exc:
                    log.warning("checkpoint: could not delete %s: %s", self.path(step), exc)

    @staticmethod
    def _decide(comm: Comm, step: int | None, fn: Callable[[], T]) -> T:
        """``fn()`` evaluated on rank 0: its value on every rank, or its exception raised on every
        rank; ValueError on every rank if the ranks passed different steps."""
        outcome: tuple[T | None, Exception | None] | None = None
        if comm.rank == 0:
            try:
                outcome = (fn(), None)
            except Exception as exc:  # noqa: BLE001 - raised on every rank below
                outcome = (None, exc)
        gathered = comm.all_gather_object((step, outcome))
        if len({s for s, _ in gathered}) > 1:
            raise ValueError(f"CheckpointManager: the ranks passed different steps: {[s for s, _ in gathered]}")
        value, error = gathered[0][1]
        if error is not None:
            raise error
        return cast(T, value)  # fn's value: it did not raise


def _checked(step: int) -> int:
    if not isinstance(step, int) or isinstance(step, bool):
        raise TypeError(f"CheckpointManager: a step is an int, got {type(step).__name__} {step!r}")
    if step < 0:
        raise ValueError(f"CheckpointManager: a step is >= 0, got {step}")
    return step
