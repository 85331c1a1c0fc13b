"""Fires a run's faults: crashes and evictions at their trigger, errnos on matching operations,
slow operations. All randomness comes from the run's choice source."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..faults import (
    CrashNode,
    CrashServer,
    EvictClient,
    Fault,
    InjectErrno,
    Pause,
    PowerLoss,
    SlowOps,
    SlowRank,
    parse_on,
)

if TYPE_CHECKING:
    from ..tasks.process import Process

# Space errors surface only where data reaches the server, as a full server's ENOSPC does
# (syscalls/files.py: write() where the mount claims space at write -- a local disk's delalloc
# reservation, fs/ext4/inode.c ext4_da_reserve_space, or Lustre grants -- and close()/fsync()
# with dirty data on write-back mounts, fs/nfs/file.c nfs_file_flush). Never at open(O_TRUNC):
# a truncation frees space.
FLUSH_ERRNOS = {"ENOSPC", "EDQUOT"}
_FLUSH_OPS = ("close", "fsync", "write")


def _matches(glob: str, value: str) -> bool:
    return glob == "*" or fnmatch.fnmatchcase(value, glob)


class _Trigger:
    """A once-only fault with an operation-count, time or pattern trigger."""

    def __init__(self, fault: CrashNode | CrashServer | PowerLoss | EvictClient, node: int | None) -> None:
        self.fault = fault
        self.node = node  # count only this node's operations (None: all)
        self.on = parse_on(fault.on)
        self.fired = False

    def due(self, op: str, path: str, node_ops: int, all_ops: int) -> bool:
        if self.fired:
            return False
        f = self.fault
        count = node_ops if self.node is not None else all_ops
        if f.after_ops is not None and count > f.after_ops:
            return True
        return self.on is not None and _matches(self.on[0], op) and _matches(self.on[1], path)


class _Countdown:
    """An injected errno and how many more times it may surface (None: no limit)."""

    __slots__ = ("fault", "remaining")

    def __init__(self, fault: InjectErrno, remaining: int | None) -> None:
        self.fault = fault
        self.remaining = remaining


class FaultEngine:
    """The faults of one run. ``fire(fault, why)`` carries out a crash or an eviction."""

    def __init__(self, faults: list[Fault], *, fraction: Callable[[], float],
                 call_at: Callable[[float, Callable[[], None], str], Any], fire: Callable[[Any, str], None],
                 run_start: float) -> None:
        self._fraction = fraction
        self._call_at = call_at
        self._fire_fault = fire
        self.run_start = run_start
        self.triggers: list[_Trigger] = []
        self.errnos: list[_Countdown] = []
        self.slow_ops: list[SlowOps] = []
        self.start_delays: dict[int, float] = {}
        self.pauses: dict[tuple[int, int], float] = {}  # (rank, before its operation) -> seconds
        for fault in faults:
            if isinstance(fault, (CrashNode, EvictClient)):
                self.triggers.append(_Trigger(fault, fault.node if isinstance(fault, CrashNode) else None))
            elif isinstance(fault, (CrashServer, PowerLoss)):
                self.triggers.append(_Trigger(fault, None))
            elif isinstance(fault, InjectErrno):
                self.errnos.append(_Countdown(fault, fault.count))
            elif isinstance(fault, SlowOps):
                self.slow_ops.append(fault)
            elif isinstance(fault, SlowRank):
                self.start_delays[fault.rank] = self.start_delays.get(fault.rank, 0.0) + fault.delay
            elif isinstance(fault, Pause):
                key = (fault.rank, fault.before_op)
                self.pauses[key] = self.pauses.get(key, 0.0) + fault.seconds
            else:
                raise ConfigError(f"not a simfs fault: {fault!r}")

    def arm_timers(self) -> None:
        for trig in self.triggers:
            if trig.fault.at_time is not None:
                def fire(t: _Trigger = trig) -> None:
                    self._fire(t, repr(t.fault))

                self._call_at(self.run_start + trig.fault.at_time, fire, type(trig.fault).__name__)

    def before(self, proc: Process, op: str, path: str, node_ops: int, all_ops: int) -> None:
        """Called before each operation: crashes due now fire, other errnos surface."""
        for trig in self.triggers:
            node = trig.node
            if (node is None or node == proc.node) and trig.due(op, path, node_ops, all_ops):
                self._fire(trig, repr(trig.fault))
        for entry in self.errnos:
            fault = entry.fault
            if fault.name not in FLUSH_ERRNOS and self._hit(entry, proc, op, path):
                raise OSError(fault.code, f"{os.strerror(fault.code)} (injected by simfs)")

    def flush_error(self, proc: Process, op: str, path: str) -> None:
        """Called where data reaches the server (and only there): ENOSPC / EDQUOT surface here.
        The caller hands the error to the same path as a full server's ENOSPC."""
        for entry in self.errnos:
            fault = entry.fault
            if fault.name in FLUSH_ERRNOS and op in _FLUSH_OPS and self._hit(entry, proc, op, path):
                raise OSError(fault.code, f"{os.strerror(fault.code)} (injected by simfs)")

    def _hit(self, entry: _Countdown, proc: Process, op: str, path: str) -> bool:
        fault, remaining = entry.fault, entry.remaining
        if remaining == 0:
            return False
        if fault.ranks is not None and proc.rank not in fault.ranks:
            return False
        if not (_matches(fault.op, op) and _matches(fault.path, path)):
            return False
        if fault.probability < 1 and self._fraction() >= fault.probability:
            return False
        if remaining is not None:
            entry.remaining = remaining - 1
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
        self._fire_fault(trig.fault, why)
