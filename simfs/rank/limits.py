"""Which resource limit (getrlimit(2)) a failed call ran into, its value and what to change. A
rank process inherits the host's limits (fork(2)), so a login node's, a batch job's or a CI
container's ``ulimit`` reaches every rank; a rank's RLIMIT_DATA is ``Cluster(rank_memory=...)``."""

from __future__ import annotations

import errno
import os
import resource
from dataclasses import dataclass

from ..errors import RankCannotStart
from .intercept.registry import host_calls


@dataclass(frozen=True)
class Limit:
    """A resource limit: its name, its resource, its row in proc(5)'s /proc/PID/limits, the option
    of the shell's ``ulimit`` that sets it (bash(1)), what it counts and what a process's use of it is."""

    name: str
    resource: int
    row: str
    option: str
    counts: str
    use: str = ""


AS = Limit("RLIMIT_AS", resource.RLIMIT_AS, "Max address space", "v", "bytes", "mapped")
DATA = Limit("RLIMIT_DATA", resource.RLIMIT_DATA, "Max data size", "d", "bytes", "in use")
NOFILE = Limit("RLIMIT_NOFILE", resource.RLIMIT_NOFILE, "Max open files", "n", "descriptors", "open")
NPROC = Limit("RLIMIT_NPROC", resource.RLIMIT_NPROC, "Max processes", "u", "processes")
FSIZE = Limit("RLIMIT_FSIZE", resource.RLIMIT_FSIZE, "Max file size", "f", "bytes")
# the limits whose excess fails a call with each errno: mmap(2) and brk(2) ENOMEM (RLIMIT_AS, and
# RLIMIT_DATA for private writable memory), open(2) EMFILE, fork(2) EAGAIN (RLIMIT_NPROC; and
# pthread_create(3) EAGAIN where its stack cannot be mapped), truncate(2) and write(2) EFBIG
_LIMITS = {errno.ENOMEM: (AS, DATA), errno.EMFILE: (NOFILE,), errno.EAGAIN: (NPROC, AS), errno.EFBIG: (FSIZE,)}
# failures that carry no errno, by their text: CPython's (Modules/_threadmodule.c) when a thread
# cannot start, glibc's (elf/dl-load.c) when a library cannot be mapped
_TEXTS = {"can't start new thread": errno.EAGAIN, "failed to map segment from shared object": errno.ENOMEM}
# what the process uses of a limit: proc(5)'s /proc/self/status lines, in KiB
_STATUS = {AS.name: "VmSize:", DATA.name: "VmData:"}


@dataclass(frozen=True)
class Reached:
    """A limit a call ran into: its soft and hard values (RLIM_INFINITY: none), what the process
    used of it (None: not known), and whether it is the run's own Cluster(rank_memory=...)."""

    limit: Limit
    value: int
    hard: int
    used: int | None
    rank_memory: bool = False

    def advice(self) -> str:
        """The limit, its value and what to change, as an error message's last part."""
        used = "" if self.used is None else f", {_amount(self.used, self.limit, unit=False)} {self.limit.use}"
        option = f"ulimit -{self.limit.option}"
        said = f"{self.limit.name} ({option}) is {_amount(self.value, self.limit)}{used}"
        if self.rank_memory:
            return f"{said}, the run's Cluster(rank_memory=...): raise it"
        if self.hard == resource.RLIM_INFINITY:
            return f"{said}: raise it where the run starts ({option} unlimited)"
        return f"{said}: raise it where the run starts ({option}; its hard limit is {_amount(self.hard, self.limit)})"


def reached(error: BaseException, rank_memory: int | None = None, pid: int | None = None) -> Reached | None:
    """The limit ``error`` (or what caused it) ran into in process ``pid`` (None: this one), or
    None: none of its limits fails a call so (every limit that would is unlimited). Of two that
    would, the one with less left (``rank_memory``: the process's RLIMIT_DATA is the run's)."""
    with host_calls():  # simfs's own calls (getuid, reads of /proc), also while rank code runs
        limits = _LIMITS.get(_errno(error) or 0, ())
        found = [r for r in (_reached(limit, rank_memory, pid) for limit in limits) if r is not None]
    return min(found, key=lambda r: r.value - (r.used or 0), default=None)


def of(limit: Limit) -> Reached | None:
    """``limit`` as this process has it, or None where it is unlimited."""
    with host_calls():
        return _reached(limit, None, None)


def cannot_start(rank: int, failure: str, error: BaseException, rank_memory: int | None = None,
                 pid: int | None = None) -> RankCannotStart:
    """The error of rank ``rank``'s process that could not start (``failure``: what failed, in
    process ``pid``, None: this one)."""
    limit = reached(error, rank_memory, pid)
    if limit is None:
        return RankCannotStart(rank, failure)
    return RankCannotStart(rank, failure, limit.limit.name, limit.value, limit.advice())


def _errno(error: BaseException) -> int | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno:
            return current.errno
        if isinstance(current, MemoryError):
            return errno.ENOMEM
        text = str(current)
        for known, code in _TEXTS.items():
            if known in text:
                return code
        current = current.__cause__ or current.__context__
    return None


def _reached(limit: Limit, rank_memory: int | None, pid: int | None) -> Reached | None:
    value, hard = resource.getrlimit(limit.resource) if pid is None else _limits_of(pid, limit)
    if value == resource.RLIM_INFINITY:
        return None
    if limit is NPROC and os.getuid() == 0:  # root's processes are not counted against it (fork(2))
        return None
    return Reached(limit, value, hard, _used(limit, pid), limit is DATA and rank_memory is not None)


def _limits_of(pid: int, limit: Limit) -> tuple[int, int]:
    """Process ``pid``'s soft and hard ``limit`` (proc(5): /proc/PID/limits, which anyone may read;
    prlimit(2) needs its credentials); this process's where that cannot be read."""
    try:
        with open(f"/proc/{pid}/limits") as limits:
            row = next(line for line in limits if line.startswith(limit.row))
    except (OSError, StopIteration):
        return resource.getrlimit(limit.resource)
    soft, hard = (resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in row[len(limit.row):].split()[:2])
    return soft, hard


def _used(limit: Limit, pid: int | None) -> int | None:
    """What process ``pid`` (None: this one) uses of ``limit`` now, where the kernel says (not
    RLIMIT_NPROC's, which counts the user's processes)."""
    proc = "/proc/self" if pid is None else f"/proc/{pid}"
    try:
        if limit is NOFILE:
            return len(os.listdir(f"{proc}/fd")) - (pid is None)  # less the descriptor that lists it
        line = _STATUS.get(limit.name)
        if line is None:
            return None
        with open(f"{proc}/status") as status:
            kib = next((text.split()[1] for text in status if text.startswith(line)), None)
    except OSError:
        return None
    return None if kib is None else int(kib) << 10


def _amount(value: int, limit: Limit, unit: bool = True) -> str:
    if limit.counts != "bytes":
        return f"{value:,} {limit.counts}" if unit else f"{value:,}"
    for name, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift:
            return f"{value / (1 << shift):.4g} {name}"
    return f"{value} bytes"
