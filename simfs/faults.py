"""Faults as plain data handed to a cluster, and the engine that fires them during a run."""

from __future__ import annotations

import errno
import fnmatch
import math
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from .kernel import Kernel
    from .process import Process

_FLUSH_ERRNOS = {"ENOSPC", "EDQUOT"}
_FLUSH_OPS = ("close", "fsync", "write", "truncate")


def _parse_on(on: str | None) -> tuple[str, str] | None:
    """``"rename"`` or ``"rename:/shared/ckpt/*"`` -> (op glob, path glob)."""
    if on is None:
        return None
    if not isinstance(on, str) or not on:
        raise ValueError(f"on= must be 'op' or 'op:path-glob', got {on!r}")
    op, _, path = on.partition(":")
    return (op or "*"), (path or "*")


def _non_negative(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value) and value >= 0


def _check_trigger(kind: str, after_ops: int | None, at_time: float | None, on: str | None) -> None:
    if after_ops is None and at_time is None and on is None:
        raise ValueError(f"{kind} needs a trigger: after_ops=, at_time= or on=")
    if after_ops is not None and (not isinstance(after_ops, int) or after_ops < 0):
        raise ValueError(f"{kind}: after_ops must be a non-negative int, got {after_ops!r}")
    if at_time is not None and not _non_negative(at_time):
        raise ValueError(f"{kind}: at_time must be a non-negative number, got {at_time!r}")
    _parse_on(on)


@dataclass(frozen=True)
class CrashNode:
    """A node loses power before its ``after_ops``-th+1 operation, at a virtual time, or at the
    first operation matching ``on``: its ranks die, its dirty data and caches are gone, its
    local disk keeps only what was durable."""

    node: int
    after_ops: int | None = None
    at_time: float | None = None
    on: str | None = None

    def __post_init__(self) -> None:
        _check_trigger("CrashNode", self.after_ops, self.at_time, self.on)


@dataclass(frozen=True)
class CrashServer:
    """The storage server of a mount restarts, losing what it had not made durable.
    ``after_ops`` counts operations of all ranks."""

    mount: str = "/shared"
    after_ops: int | None = None
    at_time: float | None = None
    on: str | None = None

    def __post_init__(self) -> None:
        _check_trigger("CrashServer", self.after_ops, self.at_time, self.on)


@dataclass(frozen=True)
class EvictClient:
    """The server evicts a node's client (Lustre): its dirty data is lost and its open
    files answer EIO until reopened."""

    node: int
    mount: str = "/shared"
    after_ops: int | None = None
    at_time: float | None = None
    on: str | None = None

    def __post_init__(self) -> None:
        _check_trigger("EvictClient", self.after_ops, self.at_time, self.on)


@dataclass(frozen=True)
class InjectErrno:
    """Make matching operations fail with an errno. ENOSPC and EDQUOT surface where data
    reaches the server (close or fsync on write-back mounts, write on write-through ones)."""

    name: str
    path: str = "*"
    op: str = "*"
    ranks: tuple[int, ...] | None = None
    probability: float = 1.0
    count: int | None = None

    def __post_init__(self) -> None:
        if not hasattr(errno, self.name) or not self.name.startswith("E"):
            raise ValueError(f"InjectErrno: unknown errno name {self.name!r} (e.g. 'ENOSPC', 'EIO')")
        if not 0 <= self.probability <= 1:
            raise ValueError(f"InjectErrno: probability must be in [0, 1], got {self.probability}")
        if self.count is not None and self.count < 0:
            raise ValueError(f"InjectErrno: count must be >= 0, got {self.count}")
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(self.ranks))

    @property
    def code(self) -> int:
        return getattr(errno, self.name)


@dataclass(frozen=True)
class SlowRank:
    """A rank starts ``delay`` virtual seconds late."""

    rank: int
    delay: float

    def __post_init__(self) -> None:
        if not _non_negative(self.delay):
            raise ValueError(f"SlowRank: delay must be a non-negative number, got {self.delay!r}")


@dataclass(frozen=True)
class SlowOps:
    """Matching operations take ``delay`` extra virtual seconds."""

    delay: float
    op: str = "*"
    path: str = "*"
    ranks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not _non_negative(self.delay):
            raise ValueError(f"SlowOps: delay must be a non-negative number, got {self.delay!r}")
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(self.ranks))


Fault = Union[CrashNode, CrashServer, EvictClient, InjectErrno, SlowRank, SlowOps]
FAULT_TYPES: dict[str, type] = {t.__name__: t for t in (CrashNode, CrashServer, EvictClient, InjectErrno, SlowRank, SlowOps)}


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    data = asdict(fault)
    if data.get("ranks") is not None:
        data["ranks"] = list(data["ranks"])
    return {"type": type(fault).__name__, **data}


def fault_from_dict(data: dict[str, Any]) -> Fault:
    data = dict(data)
    kind = data.pop("type", None)
    if kind not in FAULT_TYPES:
        raise ValueError(f"unknown fault type {kind!r}; known: {sorted(FAULT_TYPES)}")
    return FAULT_TYPES[kind](**data)


def _matches(glob: str, value: str) -> bool:
    return glob == "*" or fnmatch.fnmatchcase(value, glob)


class _Trigger:
    """A once-only fault with an operation-count, time or pattern trigger."""

    def __init__(self, fault: Any, node: int | None) -> None:
        self.fault = fault
        self.node = node  # count only this node's operations (None: all)
        self.on = _parse_on(fault.on)
        self.fired = False

    def due(self, op: str, path: str, node_ops: int, all_ops: int) -> bool:
        if self.fired:
            return False
        f = self.fault
        count = node_ops if self.node is not None else all_ops
        if f.after_ops is not None and count > f.after_ops:
            return True
        return self.on is not None and _matches(self.on[0], op) and _matches(self.on[1], path)


class FaultEngine:
    """Fires a run's faults; all randomness comes from the kernel's choice source."""

    def __init__(self, kernel: Kernel, faults: list[Fault]) -> None:
        self.kernel = kernel
        self.triggers: list[_Trigger] = []
        self.errnos: list[list] = []  # [fault, remaining count]
        self.slow_ops: list[SlowOps] = []
        self.start_delays: dict[int, float] = {}
        for fault in faults:
            if isinstance(fault, (CrashNode, EvictClient)):
                self.triggers.append(_Trigger(fault, fault.node if isinstance(fault, CrashNode) else None))
            elif isinstance(fault, CrashServer):
                self.triggers.append(_Trigger(fault, None))
            elif isinstance(fault, InjectErrno):
                self.errnos.append([fault, fault.count])
            elif isinstance(fault, SlowOps):
                self.slow_ops.append(fault)
            elif isinstance(fault, SlowRank):
                self.start_delays[fault.rank] = self.start_delays.get(fault.rank, 0.0) + fault.delay
            else:
                raise TypeError(f"not a simfs fault: {fault!r}")

    def arm_timers(self) -> None:
        for trig in self.triggers:
            if trig.fault.at_time is not None:
                self.kernel.sched.call_at(self.kernel.run_start + trig.fault.at_time,
                                          lambda t=trig: self._fire(t, repr(t.fault)), type(trig.fault).__name__)

    def before(self, proc: Process, op: str, path: str) -> None:
        """Called before each operation: crashes due now fire, other errnos surface."""
        kernel = self.kernel
        for trig in self.triggers:
            node = trig.node
            if (node is None or node == proc.node) and trig.due(op, path, kernel.node_ops[proc.node], kernel.total_ops):
                self._fire(trig, repr(trig.fault))
        for entry in self.errnos:
            fault = entry[0]
            if fault.name not in _FLUSH_ERRNOS and self._hit(entry, proc, op, path):
                raise OSError(fault.code, f"{os.strerror(fault.code)} (injected by simfs)")

    def flush_error(self, proc: Process, op: str, path: str) -> None:
        """Called where data reaches the server: ENOSPC / EDQUOT surface here."""
        for entry in self.errnos:
            fault = entry[0]
            if fault.name in _FLUSH_ERRNOS and op in _FLUSH_OPS and self._hit(entry, proc, op, path):
                raise OSError(fault.code, f"{os.strerror(fault.code)} (injected by simfs)")

    def _hit(self, entry: list, proc: Process, op: str, path: str) -> bool:
        fault, remaining = entry
        if remaining == 0:
            return False
        if fault.ranks is not None and proc.rank not in fault.ranks:
            return False
        if not (_matches(fault.op, op) and _matches(fault.path, path)):
            return False
        if fault.probability < 1 and self.kernel.choices.fraction() >= fault.probability:
            return False
        if remaining is not None:
            entry[1] = remaining - 1
        return True

    def delay(self, proc: Process, op: str, path: str) -> float:
        extra = 0.0
        for slow in self.slow_ops:
            if (slow.ranks is None or proc.rank in slow.ranks) and _matches(slow.op, op) and _matches(slow.path, path):
                extra += slow.delay
        return extra

    def _fire(self, trig: _Trigger, why: str) -> None:
        if trig.fired:
            return
        trig.fired = True
        fault = trig.fault
        if isinstance(fault, CrashNode):
            self.kernel.crash_node(fault.node, why)
        elif isinstance(fault, CrashServer):
            self.kernel.crash_server(fault.mount, why)
        else:
            self.kernel.evict_client(fault.node, fault.mount, why)
