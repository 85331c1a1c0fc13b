"""Faults as plain data handed to a cluster (runtime/faultengine.py fires them during a run)."""

from __future__ import annotations

import errno
import math
from dataclasses import asdict, dataclass
from typing import Any

from . import plaindata
from .checks import MAX_SECONDS
from .errors import ConfigError


def parse_on(on: str | None) -> tuple[str, str] | None:
    """``"rename"`` or ``"rename:/shared/ckpt/*"`` -> (op glob, path glob)."""
    if on is None:
        return None
    if not isinstance(on, str) or not on:
        raise ConfigError(f"on= must be 'op' or 'op:path-glob', got {on!r}")
    op, _, path = on.partition(":")
    return (op or "*"), (path or "*")


def _non_negative(value: object) -> bool:
    """A finite duration in virtual seconds, at most a century (inf would stop the clock)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= MAX_SECONDS)


def _check_trigger(kind: str, after_ops: int | None, at_time: float | None, on: str | None) -> None:
    if after_ops is None and at_time is None and on is None:
        raise ConfigError(f"{kind} needs a trigger: after_ops=, at_time= or on=")
    if after_ops is not None and (not isinstance(after_ops, int) or after_ops < 0):
        raise ConfigError(f"{kind}: after_ops must be a non-negative int, got {after_ops!r}")
    if at_time is not None and not _non_negative(at_time):
        raise ConfigError(f"{kind}: at_time must be a finite number in [0, {MAX_SECONDS:g}] seconds, got {at_time!r}")
    parse_on(on)


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
class PowerLoss:
    """The whole cluster loses power at once (a job-wide crash): every rank dies, every node's
    caches and dirty data are gone, every storage server keeps only what a crash state allows.
    ``after_ops`` counts operations of all ranks."""

    after_ops: int | None = None
    at_time: float | None = None
    on: str | None = None

    def __post_init__(self) -> None:
        _check_trigger("PowerLoss", self.after_ops, self.at_time, self.on)


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
            raise ConfigError(f"InjectErrno: unknown errno name {self.name!r} (e.g. 'ENOSPC', 'EIO')")
        if not 0 <= self.probability <= 1:
            raise ConfigError(f"InjectErrno: probability must be in [0, 1], got {self.probability}")
        if self.count is not None and self.count < 0:
            raise ConfigError(f"InjectErrno: count must be >= 0, got {self.count}")
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(self.ranks))

    @property
    def code(self) -> int:
        code: int = getattr(errno, self.name)  # the name was checked to be an errno's
        return code


@dataclass(frozen=True)
class SlowRank:
    """A rank starts ``delay`` virtual seconds late."""

    rank: int
    delay: float

    def __post_init__(self) -> None:
        if not _non_negative(self.delay):
            raise ConfigError(f"SlowRank: delay must be a finite number of seconds in [0, {MAX_SECONDS:g}], "
                              f"got {self.delay!r}")


@dataclass(frozen=True)
class SlowOps:
    """Matching operations take ``delay`` extra virtual seconds."""

    delay: float
    op: str = "*"
    path: str = "*"
    ranks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not _non_negative(self.delay):
            raise ConfigError(f"SlowOps: delay must be a finite number of seconds in [0, {MAX_SECONDS:g}], "
                              f"got {self.delay!r}")
        if self.ranks is not None:
            object.__setattr__(self, "ranks", tuple(self.ranks))


@dataclass(frozen=True)
class Pause:
    """Rank ``rank`` stops for ``seconds`` before its operation ``before_op`` (its filesystem
    operations counted from 0, every thread's): what it does between operations that costs no
    virtual time (rank 0 logs, evaluates, saves), or the OS preempting it (a scheduler slice, a
    page-cache stall, a garbage collection). A pause at an operation the rank never reaches never
    happens."""

    rank: int
    before_op: int
    seconds: float

    def __post_init__(self) -> None:
        if not isinstance(self.before_op, int) or isinstance(self.before_op, bool) or self.before_op < 0:
            raise ConfigError(f"Pause: before_op must be a non-negative int, got {self.before_op!r}")
        if not _non_negative(self.seconds):
            raise ConfigError(f"Pause: seconds must be a finite number in [0, {MAX_SECONDS:g}], got {self.seconds!r}")


Fault = CrashNode | CrashServer | PowerLoss | EvictClient | InjectErrno | SlowRank | SlowOps | Pause
FAULT_TYPES: dict[str, type[Fault]] = {t.__name__: t
                                 for t in (CrashNode, CrashServer, PowerLoss, EvictClient, InjectErrno, SlowRank,
                                            SlowOps, Pause)}
plaindata.register(*FAULT_TYPES.values())  # (a search's child sends back the examples it ran)


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    data = asdict(fault)
    if data.get("ranks") is not None:
        data["ranks"] = list(data["ranks"])
    return {"type": type(fault).__name__, **data}


def fault_from_dict(data: dict[str, Any]) -> Fault:
    data = dict(data)
    kind = data.pop("type", None)
    if kind not in FAULT_TYPES:
        raise ConfigError(f"unknown fault type {kind!r}; known: {sorted(FAULT_TYPES)}")
    return FAULT_TYPES[kind](**data)
