"""Simulated torch.distributed: process groups whose collectives meet in virtual time, with
torch's timeouts (a collective that can never complete names the ranks it waits for)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollectiveMismatch
from ..report import HangInfo, user_frame
from ..tasks.groups import SimGroup, named_group
from ..tasks.task import DONE, Task, current_task, task_frame
from ..tasks.waitqueue import WaitQueue
from .algorithms import program
from .meeting import Meeting
from .scheduler import Scheduler
from .wakeup import Wakeups

DEFAULT_TIMEOUT = 1800.0  # torch's default for gloo and NCCL: 30 minutes
# how ranks leave a collective: "gloo", each when gloo's algorithm lets it and its thread wakes;
# "lockstep", every member at once (the model replay strings recorded before "gloo" ran with)
GLOO, LOCKSTEP = "gloo", "lockstep"
COLLECTIVES = (GLOO, LOCKSTEP)


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
    root: int = -1  # the group index of a rooted collective's root (-1: none)
    arrived: dict[int, Any] = field(default_factory=dict)
    results: dict[int, Any] | None = None
    mismatch: str = ""
    consumed: int = 0
    queue: WaitQueue = field(default=None)  # type: ignore[assignment]  # set as soon as it is made
    meeting: Meeting | None = None  # gloo's programs in progress (None: every rank leaves at once)
    wakes: list[float] = field(default_factory=list)  # each member's wake-up after its last wait
    exits: dict[int, tuple[float, list[Any]]] = field(default_factory=dict)  # rank -> when it leaves, with what
    left: set[int] = field(default_factory=set)  # the members that left it
    leaving: WaitQueue = field(default=None)  # type: ignore[assignment]  # who waits for the others to leave


class DistWorld:
    """The process groups of one run. With ``wakeups`` each rank leaves a collective when gloo's
    algorithm lets it (runtime/algorithms.py, meeting.py) plus its own wake-up; without, every
    member leaves at once, at the last arrival plus one latency and the transfer (the model of
    replay strings recorded before gloo's algorithms were)."""

    def __init__(self, sched: Scheduler, world_size: int, *, latency: float, bandwidth: float,
                 timeout: float, initialized: bool, note: Callable[[int, str, str, str], None],
                 native: bool = False, wakeups: Wakeups | None = None) -> None:
        self.sched = sched
        self.wakeups = wakeups
        self.native = native  # rank processes run torch's c10d on these groups (simfs/rank/c10d)
        self._note = note  # trace: (rank, collective, group, outcome)
        self.latency = latency
        self.bandwidth = bandwidth
        self.world = SimGroup(list(range(world_size)), "WORLD", timeout)
        self.initialized = {r: initialized for r in range(world_size)}
        self.initialized_by_job = {r: False for r in range(world_size)}
        self.hangs: dict[int, HangInfo] = {}
        self._used: dict[str, SimGroup] = {}  # the groups collectives were called on, by name
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
            self.world.timeouts[rank] = seconds("init_process_group", timeout)
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
            created.timeouts[rank] = seconds("new_group", timeout)
        return created

    # -- the meeting point ----------------------------------------------------------------------
    def collective(self, rank: int, group: Any, kind: str, payload: Any, *, timeout: float | None = None,
                   nbytes: int = 0, root: int = -1) -> Any:
        """Arrive at the next collective of ``group`` (``root``: the group index of a rooted
        collective's root; ``timeout``: this call's own); return this rank's result once it may leave."""
        g = self.group(group, rank)
        if not isinstance(root, int) or not -1 <= root < len(g.ranks):
            raise ValueError(f"{kind} on {g.name}: root {root!r} is not a rank of the group (0..{len(g.ranks) - 1})")
        self._used[g.name] = g
        sched = self.sched
        error = _backend_error()
        self._note(rank, kind, g.name, "aborted" if g.aborted else "arrived")
        if g.aborted:
            raise error(f"[simfs] {kind} on {g.name}: the process group was aborted ({g.aborted})")
        seq = g.next_seq[rank]
        g.next_seq[rank] = seq + 1
        call = g.calls.get(seq)
        if call is None:
            call = g.calls[seq] = self._new_call(kind, g, seq, root, nbytes)
        elif call.kind != kind or call.root != root:
            first = next(iter(call.arrived))
            call.mismatch = (f"collective mismatch in {g.name} at call #{seq}: rank {first} called "
                             f"{_named(call.kind, call.root)}, rank {rank} called {_named(kind, root)}")
            g.aborted = call.mismatch
            sched.notify_all(call.queue)  # the ranks already waiting learn it now, not at their timeout
            self._wake_leavers(g)
            raise CollectiveMismatch(call.mismatch)
        call.arrived[rank] = payload
        limit = g.timeout_of(rank) if timeout is None else seconds(kind, timeout)
        if call.meeting is None:
            return self._lockstep(call, rank, limit, error, nbytes)
        return self._as_gloo(call, rank, limit, error)

    def _alive(self, rank: int) -> bool:
        task = self.sched.mains.get(rank)
        return task is not None and task.state != DONE

    def _new_call(self, kind: str, g: SimGroup, seq: int, root: int, nbytes: int) -> _Call:
        call = _Call(kind, g, seq, self.sched.now, root)

        def peers(c: _Call = call) -> list[int]:
            return [r for r in c.group.ranks if r not in c.arrived]

        def staying(c: _Call = call) -> list[int]:
            return [r for r in c.group.ranks if r not in c.left]

        call.queue = WaitQueue(f"{kind} #{seq} on {g.name}", peers)
        if self.wakeups is not None:
            call.leaving = WaitQueue(f"{kind} #{seq} on {g.name} until every member left it", staying)
            n = len(g.ranks)
            call.meeting = Meeting([program(kind, n, me, root, nbytes) for me in range(n)], self.latency,
                                   self.bandwidth)
            call.wakes = [self.wakeups.delay() for _ in range(n)]
        return call

    def _lockstep(self, call: _Call, rank: int, limit: float, error: type[Exception], nbytes: int) -> Any:
        """Every member leaves at once: the last arrival plus one latency and the transfer."""
        g, sched = call.group, self.sched
        if len(call.arrived) == len(g.ranks):
            call.results = self._complete(call)
            sched.notify_all(call.queue)
        else:
            if not sched.block(call.queue, limit):
                return self._timed_out(call, rank, limit, error)
            if call.mismatch:
                raise CollectiveMismatch(call.mismatch)
            if call.results is None:
                raise error(f"[simfs] {call.kind} on {g.name}: the process group was aborted ({g.aborted})")
        result = call.results[rank]
        call.consumed += 1
        if call.consumed == len(g.ranks):
            del g.calls[call.seq]
        sched.elapse(self.latency + nbytes / self.bandwidth)
        return result

    def _as_gloo(self, call: _Call, rank: int, limit: float, error: type[Exception]) -> Any:
        """Each member leaves when gloo's program lets it, after its wake-up, with the payloads
        that reached it; a rank that wrote a payload into this call leaves the next one only once
        every member left this one (a rank process's outbox slot is written again then)."""
        g, sched = call.group, self.sched
        assert call.meeting is not None  # made by _new_call with wakeups
        known = call.meeting.arrive(g.group_rank(rank), sched.now)
        if len(call.arrived) == len(g.ranks):
            call.results = self._complete(call)
        for index in known:
            member = g.ranks[index]
            seen = call.results[member] if call.results is not None else [call.arrived.get(r) for r in g.ranks]
            call.exits[member] = (call.meeting.exits[index] + call.wakes[index], seen)
        if known:
            sched.notify_all(call.queue)
        deadline = sched.now + limit
        while rank not in call.exits:
            if call.mismatch:
                raise CollectiveMismatch(call.mismatch)
            if g.aborted:
                raise error(f"[simfs] {call.kind} on {g.name}: the process group was aborted ({g.aborted})")
            if not sched.block(call.queue, deadline - sched.now):
                return self._timed_out(call, rank, limit, error)
        at, result = call.exits[rank]
        sched.elapse(max(0.0, at - sched.now))
        call.left.add(rank)
        if len(call.left) == len(g.ranks):
            del g.calls[call.seq]
        sched.notify_all(call.leaving)
        before = g.calls.get(call.seq - 1)
        if before is not None and before.arrived.get(rank) is not None:
            while any(m not in before.left and self._alive(m) for m in g.ranks) and not g.aborted:
                sched.block(before.leaving)
        return result

    def gone(self, rank: int) -> None:
        """Rank ``rank``'s process ended: members waiting for it to leave a call stop waiting."""
        for g in self._used.values():
            self._wake_leavers(g)

    def _wake_leavers(self, g: SimGroup) -> None:
        """Members waiting for others to leave a call of ``g`` look again (one is gone, or ``g``
        was aborted: they wait no more)."""
        for call in list(g.calls.values()):
            if call.leaving is not None:
                self.sched.notify_all(call.leaving)

    def _timed_out(self, call: _Call, rank: int, limit: float, error: type[Exception]) -> Any:
        g = call.group
        missing = [r for r in g.ranks if r not in call.arrived]
        task = current_task()
        assert task is not None  # the rank that waited
        self.hangs[rank] = HangInfo(rank, f"{call.kind} #{call.seq} on {g.name}", call.started,
                                    self.sched.now - call.started, missing, self.where(task))
        g.aborted = f"rank {rank} timed out in {call.kind} waiting for ranks {missing}"
        self._wake_leavers(g)
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


def _named(kind: str, root: int) -> str:
    return kind if root < 0 else f"{kind} from group rank {root}"


def seconds(where: str, timeout: Any) -> float:
    """A timeout (seconds or a timedelta) as seconds; ValueError naming ``where`` unless it is a
    number >= 0 (NaN, infinities and negative times are no timeout torch can wait)."""
    value = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: timeout {timeout!r} is not a number of seconds >= 0")
    return float(value)
