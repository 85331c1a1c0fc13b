"""The probe's results as plain, versioned data (msgspec), written as JSON (see SCHEMA.md in this
directory). Schema changes that remove, rename or retype a field bump ``SCHEMA``."""

from __future__ import annotations

import math
import os
from typing import Any, Literal

import msgspec

SCHEMA = 1


class Stats(msgspec.Struct, frozen=True):
    """Seconds over trials. ``not_seen``: trials that hit the timeout (left out of the
    percentiles, so with any of them the figures are lower bounds)."""

    n: int
    p50: float | None
    p99: float | None
    max: float | None
    not_seen: int = 0

    @classmethod
    def of(cls, values: list[float | None]) -> Stats:
        seen = sorted(v for v in values if v is not None)
        if not seen:
            return cls(len(values), None, None, None, len(values))

        def pct(q: float) -> float:  # nearest rank: a value that was measured
            return seen[max(math.ceil(q * len(seen)) - 1, 0)]

        return cls(len(values), pct(0.5), pct(0.99), seen[-1], len(values) - len(seen))


Op = Literal["mkdir", "create", "rename", "unlink", "overwrite"]
Mode = Literal["fresh", "looked", "listed"]


class Lag(msgspec.Struct, frozen=True):
    """One change made on rank 0's node and watched from the other nodes. ``mode``: 'fresh' (the
    observer never looked the name up), 'looked' (it had: 'not found', or the old file), 'listed'
    (as 'looked', and it lists the parent before each check)."""

    op: Op
    mode: Mode
    lag: Stats  # from the change (on rank 0's node) to the first time an observer saw it
    since_lookup: Stats  # from the observer's lookup to then: what a cache lifetime counts


class AttrLifetimes(msgspec.Struct, frozen=True):
    """Successive lifetimes of a node's cached attributes of an unchanged file or directory
    (nfstest_cache's method: change it just after the k-th expiry, see when the change shows).
    ``capped``: the last two agree (acXXmax reached); False with several: still growing when the
    probe stopped, so the last is a lower bound. ``next_at_least``: the lifetime after the last of
    ``periods`` (the first, when ``periods`` is empty) was not seen within the timeout: it lasts at
    least this many seconds."""

    kind: Literal["file", "dir"]
    first: Stats  # the first lifetime over trials (acXXmin)
    periods: list[float]  # first, second, ... lifetime (medians over trials); [] when the first outlived the timeout
    capped: bool
    next_at_least: float | None = None


class Caches(msgspec.Struct, frozen=True):
    negative_lifetime: Stats | None  # a 'not found' answer kept (mkdir/create after a lookup)
    positive_lifetime: Stats | None  # a found entry kept after the name was removed (unlink)
    listing_drops_negative: bool | None  # listing the parent ended a cached 'not found' early
    file: AttrLifetimes | None
    dir: AttrLifetimes | None
    mtime_granularity: float  # the server's timestamp tick, seconds (0: finer than 1 us)


class Consistency(msgspec.Struct, frozen=True):
    close_to_open: bool | None  # an open after the writer's close read the whole new content
    close_to_open_lag: Stats | None  # how long until it did
    rename_reads: int  # reads of a file replaced by rename again and again
    rename_torn: int  # ... that returned a mix or a part of versions
    rename_missing: int  # ... that found no file (ENOENT) or a stale handle
    same_tick: bool  # the overwrite kept the old mtime (one tick of the server's clock)
    same_tick_seen: bool | None  # a node that had read the old content read the new one
    same_tick_lag: Stats | None
    eexist_errno: str  # mkdir of a name another node made, after a cached 'not found'
    eexist_stale: bool | None  # isdir() right after that EEXIST still said False
    makedirs_raised: bool | None  # os.makedirs(exist_ok=True) raised FileExistsError there
    rename_over_open: str  # what a reader holding the replaced file open read: old, new, or an errno


class Contention(msgspec.Struct, frozen=True):
    ranks: int
    excl_trials: int
    excl_winners: list[int]  # winners of each O_CREAT|O_EXCL race of every rank
    excl_errors: list[str]  # errno names losers got other than EEXIST (sshfs: EPERM)
    makedirs_trials: int
    makedirs_raised: int  # FileExistsError from os.makedirs(exist_ok=True) raced by every rank
    makedirs_errors: list[str]  # other errno names it raised


class Locks(msgspec.Struct, frozen=True):
    """Whether a second holder was refused (True), granted (False), or an errno name."""

    flock_same_node: bool | str
    flock_cross_node: bool | str | None
    fcntl_same_node: bool | str
    fcntl_cross_node: bool | str | None
    flock_scope: Literal["cluster", "node", "none"] | None


class Rates(msgspec.Struct, frozen=True):
    fsync: Stats  # seconds per 4 KiB write + fsync
    create_per_s: float  # aggregate over ranks (mdtest: total ops / slowest rank's time)
    stat_per_s: float
    unlink_per_s: float
    create_latency: float  # median seconds per create on one rank
    write_mb_s: list[float]  # per rank, MB/s (1e6 bytes), data fsync'ed
    read_mb_s: list[float]  # per rank, reading another rank's file
    write_mb_s_total: float  # aggregate: all bytes / slowest rank's time
    read_mb_s_total: float
    capacity: float  # bytes the filesystem holds (statvfs)


class Verdict(msgspec.Struct, frozen=True):
    level: Literal["ok", "warn", "bad", "info"]
    topic: str
    text: str
    recommendation: str = ""


class ProbeReport(msgspec.Struct, frozen=True):
    schema: int
    simfs_version: str
    command: str
    started: str  # ISO 8601, UTC
    wall_time: float
    path: str
    paths: list[str]  # each rank's mount point of it
    hosts: list[str]  # each rank's host name
    world_size: int
    nodes: int
    observers: list[int]  # ranks that watched rank 0's changes (other nodes or mounts)
    quick: bool
    trials: int
    timeout: float
    clock_uncertainty: float
    needs_two_nodes: list[str]  # what a single-client run could not measure
    visibility: list[Lag]
    caches: Caches | None
    consistency: Consistency | None
    contention: Contention | None
    locks: Locks
    rates: Rates
    verdicts: list[Verdict]
    profile: dict[str, Any]  # the calibrated simfs profile's parameters, and "sources"


def write_report(report: ProbeReport, directory: str | os.PathLike[str]) -> str:
    """``directory``/probe.json (the directory made if missing); its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(os.fspath(directory), "probe.json")
    with open(path, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
    return path


def read_report(path: str | os.PathLike[str]) -> ProbeReport:
    with open(path, "rb") as f:
        data = f.read()
    try:
        return msgspec.json.decode(data, type=ProbeReport)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{os.fspath(path)}: not a simfs probe report: {exc}") from None
