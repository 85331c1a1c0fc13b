"""Simulated torch.distributed: process groups whose collectives meet in virtual time, with
torch's timeouts (a collective that can never complete names the ranks it waits for)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollectiveMismatch
from ..report import HangInfo, user_frame
from ..tasks.groups import SimGroup, named_group
from ..tasks.task import Task, current_task, task_frame
from ..tasks.waitqueue import WaitQueue
from .scheduler import Scheduler

DEFAULT_TIMEOUT = 1800.0  # torch's default for gloo and NCCL: 30 minutes


@functools.cache
def _backend_error() -> type[Exception]:
    """torch's error for a failed collective (looked up once: collectives are a hot path)."""
    try:
        from torch.distributed import DistBackendError
    except ImportError:  # torch absent: object collectives still work
        return RuntimeError
    return DistBackendError


@dataclass
class _Call:
    kind: str
    group: SimGroup
    seq: int
    started: float
    arrived: dict[int, Any] = field(default_factory=dict)
    results: dict[int, Any] | None = None
    mismatch: str = ""
    consumed: int = 0
    queue: WaitQueue = field(default=None)  # type: ignore[assignment]  # set as soon as it is made


class DistWorld:
    """The process groups of one run."""

    def __init__(self, sched: Scheduler, world_size: int, *, latency: float, bandwidth: float,
                 timeout: float, initialized: bool, note: Callable[[int, str, str, str], None],
                 native: bool = False) -> None:
        self.sched = sched
        self.native = native  # rank processes run torch's c10d on these groups (simfs/rank/c10d)
        self._note = note  # trace: (rank, collective, group, outcome)
        self.latency = latency
        self.bandwidth = bandwidth
        self.world = SimGroup(list(range(world_size)), "WORLD", timeout)
        self.initialized = {r: initialized for r in range(world_size)}
        self.initialized_by_job = {r: False for r in range(world_size)}
        self.hangs: dict[int, HangInfo] = {}
        self._groups = 0
        self.where: Callable[[Task], str] = lambda task: user_frame(task_frame(task))  # where rank code waits

    # -- membership -------------------------------------------------------------------------
    def group(self, group: Any, rank: int) -> SimGroup:
        return named_group(self.world, group, rank, self.initialized[rank])

    def init(self, rank: int, timeout: Any) -> None:
        if self.initialized_by_job[rank]:
            raise ValueError("trying to initialize the default process group twice!")
        self.initialized_by_job[rank] = True
        self.initialized[rank] = True
        if timeout is not None:
            self.world.timeout = _seconds(timeout)
        self.collective(rank, None, "init_process_group", None)

    def destroy(self, rank: int) -> None:
        self.initialized[rank] = False
        self.initialized_by_job[rank] = False

    def new_group(self, rank: int, ranks: list[int] | None, timeout: Any) -> SimGroup | None:
        """The group every rank made with these members; None for a rank not among them (its
        torch.distributed gives it GroupMember.NON_GROUP_MEMBER, rank/dist.py)."""
        members = sorted(ranks) if ranks is not None else list(self.world.ranks)
        bad = [r for r in members if r not in self.world.ranks]
        if bad:
            raise ValueError(f"new_group: ranks {bad} are not in the world of size {len(self.world.ranks)}")
        key = tuple(members)
        created: SimGroup = self.collective(rank, None, "new_group", key)
        if rank not in created.ranks:
            return None
        if timeout is not None:
            created.timeout = _seconds(timeout)
        return created

    # -- the meeting point ----------------------------------------------------------------------
    def collective(self, rank: int, group: Any, kind: str, payload: Any, *, timeout: float | None = None,
                   nbytes: int = 0) -> Any:
        """Arrive at the next collective of ``group``; return this rank's result when all came."""
        g = self.group(group, rank)
        sched = self.sched
        error = _backend_error()
        self._note(rank, kind, g.name, "aborted" if g.aborted else "arrived")
        if g.aborted:
            raise error(f"[simfs] {kind} on {g.name}: the process group was aborted ({g.aborted})")
        seq = g.next_seq[rank]
        g.next_seq[rank] = seq + 1
        call = g.calls.get(seq)
        if call is None:
            call = g.calls[seq] = _Call(kind, g, seq, sched.now)

            def peers(c: _Call = call) -> list[int]:
                return [r for r in c.group.ranks if r not in c.arrived]

            call.queue = WaitQueue(f"{kind} #{seq} on {g.name}", peers)
        elif call.kind != kind:
            first = next(iter(call.arrived))
            call.mismatch = (f"collective mismatch in {g.name} at call #{seq}: rank {first} called {call.kind}, "
                             f"rank {rank} called {kind}")
            g.aborted = call.mismatch
            sched.notify_all(call.queue)  # the ranks already waiting learn it now, not at their timeout
            raise CollectiveMismatch(call.mismatch)
        call.arrived[rank] = payload
        if len(call.arrived) == len(g.ranks):
            call.results = self._complete(call)
            sched.notify_all(call.queue)
        else:
            limit = g.timeout if timeout is None else timeout
            if not sched.block(call.queue, limit):
                return self._timed_out(call, rank, limit, error)
            if call.mismatch:
                raise CollectiveMismatch(call.mismatch)
            if call.results is None:
                raise error(f"[simfs] {kind} on {g.name}: the process group was aborted ({g.aborted})")
        result = call.results[rank]
        call.consumed += 1
        if call.consumed == len(g.ranks):
            del g.calls[seq]
        sched.elapse(self.latency + nbytes / self.bandwidth)
        return result

    def _timed_out(self, call: _Call, rank: int, limit: float, error: type[Exception]) -> Any:
        g = call.group
        missing = [r for r in g.ranks if r not in call.arrived]
        task = current_task()
        assert task is not None  # the rank that waited
        self.hangs[rank] = HangInfo(rank, f"{call.kind} #{call.seq} on {g.name}", call.started,
                                    self.sched.now - call.started, missing, self.where(task))
        g.aborted = f"rank {rank} timed out in {call.kind} waiting for ranks {missing}"
        self._note(rank, call.kind, g.name, f"timeout waiting for ranks {missing}")
        raise error(f"[simfs] Rank {rank}: {call.kind} on {g.name} timed out after {limit:g}s "
                    f"(virtual); ranks {missing} never arrived")

    def _complete(self, call: _Call) -> dict[int, Any]:
        """Every rank gets all payloads in group order (new_group: the new group)."""
        g = call.group
        if call.kind == "new_group":
            keys = set(call.arrived.values())
            if len(keys) != 1:
                raise CollectiveMismatch(f"new_group called with different ranks on different ranks: {sorted(keys)}")
            self._groups += 1
            created = SimGroup(list(next(iter(keys))), f"group{self._groups}", self.world.timeout)
            return {r: created for r in g.ranks}
        ordered = [call.arrived[r] for r in g.ranks]
        return {r: ordered for r in g.ranks}


def _seconds(timeout: Any) -> float:
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
