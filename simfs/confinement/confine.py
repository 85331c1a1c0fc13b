"""``confine()``: the kernel confinement a process applies to itself before it runs untrusted rank
code, so that what simfs's Python-level routing misses is refused by the kernel, never performed.

Layers, each doing what the one before cannot:

- ``prctl(PR_SET_NO_NEW_PRIVS)`` first: Landlock and seccomp require it of an unprivileged
  process, and no later execve(2) can gain privileges (setuid binaries, file capabilities).
- Capabilities dropped when the process holds some (root): see capabilities.py.
- Landlock (landlock(7), Linux 5.13+, unprivileged): readable and executable only the system, the
  Python installation, the import path and /etc but its secrets (readable.py: not the user's home,
  /tmp or /run, so no real FIFO, socket or terminal), nothing writable but the caller's
  ``writable`` paths and /dev/null; from ABI 4 no TCP bind or connect, from ABI 6 no abstract Unix socket or signal
  outside the domain. Its domain also forbids tracing processes outside it (ABI 1).
- A seccomp filter built from an allow-list of the kernel's system call table (seccomp.py,
  policy.py) for what Landlock does not see: new sockets of every family (EACCES; that covers UDP,
  pathname and abstract Unix sockets, netlink and packet sockets, on every kernel with seccomp
  filters, 3.5+, and without privileges), io_uring, real files' metadata, other processes' limits,
  priorities, affinity and memory, the kernel's keyrings, System V and POSIX IPC, locks on real
  files, a terminal's input queue, namespaces and mounts, new process groups and sessions, and for
  a rank process any new process. A network namespace (``unshare(CLONE_NEWNET)``) was weighed and
  set aside: it needs root (or a user namespace, which changes how files' owners are seen), costs
  ~0.7 ms to create here plus an asynchronous teardown under a kernel-wide lock (the filter: ~0.5 ms
  to load, nothing measurable per allowed call), and it still lets a process connect to the host's
  pathname Unix sockets (/run/docker.sock...), which are looked up in the filesystem, not in the
  namespace.

Only /dev/null is a writable device: programs open it to discard output (``os.devnull``,
``subprocess.DEVNULL``) and its writes change nothing. Every other device stays read-only: /dev/tty
writes to the user's terminal past the rank's own stdout, /dev/shm is a real tmpfs, /dev/sd* are
disks. Descriptors the process already holds keep the access they were opened with (that is how
simfs.isolated's child reports back).

Cost, measured on Linux 6.18 (x86_64): confine() takes ~2 ms; afterwards an open(2) costs ~0.3 us
more (Landlock checks the path), other calls nothing measurable; simfs run searches take as long
as before, within run-to-run noise.

What a kernel cannot refuse (no Landlock, an older ABI, a machine without a filter) is reported:
``confine()`` returns a Confinement naming what is confined and what is not, and ``announce()``
warns once per process, naming what is not."""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .. import plaindata
from . import capabilities, kernel, landlock, readable, seccomp

SINKS = ("/dev/null",)

# What the kernel can refuse, each: (the Landlock ABI that refuses it or None, whether the seccomp
# filter does); landlock(7) "Kernel versions" and seccomp.REFUSED
WRITES = "file creation, writes, removal, renames and links"
READS = "reads outside the system, the Python installation and the import path"
TRUNCATE = "truncate(2) of a file by path"
DEVICE_IOCTL = "ioctls on newly opened devices"
TRACING = "tracing processes outside the confinement"
TCP = "TCP bind and connect"
SOCKETS = "new sockets of any family (UDP, Unix, netlink, packet...)"
ABSTRACT_UNIX = "abstract Unix sockets outside the confinement"
SIGNALS = "signals to processes outside the confinement"
METADATA = "changes of files' mode, owner, times and extended attributes"
IO_URING = "io_uring"
OTHER_PROCESSES = "other processes' resource limits, priorities, affinity, memory and descriptors"
KERNEL_OBJECTS = "the kernel's keyrings, System V and POSIX IPC, locks on real files"
TERMINAL = "a terminal's input queue, console and process group"
NAMESPACES = "namespaces, mounts, new process groups and sessions"
NEW_PROCESSES = "new processes (a rank process starts threads only)"
_COVERAGE: dict[str, tuple[int | None, bool]] = {
    WRITES: (1, False), READS: (1, False), TRACING: (1, True), TRUNCATE: (landlock.TRUNCATE_ABI, False),
    TCP: (landlock.NET_ABI, True), DEVICE_IOCTL: (landlock.IOCTL_DEV_ABI, False),
    ABSTRACT_UNIX: (landlock.SCOPE_ABI, True), SIGNALS: (landlock.SCOPE_ABI, False),
    SOCKETS: (None, True), METADATA: (None, True), IO_URING: (None, True), OTHER_PROCESSES: (None, True),
    KERNEL_OBJECTS: (None, True), TERMINAL: (None, True), NAMESPACES: (None, True),
}
PRIVILEGES = "privileged operations (capabilities)"


class ConfinementWarning(UserWarning):
    """The kernel does not confine everything simfs asks it to (an old kernel, no Landlock...)."""


@dataclass(frozen=True)
class Confinement:
    """What the kernel now refuses this process (what -> by which mechanism) and what it does not
    (what -> why not)."""

    landlock_abi: int  # 0: no Landlock
    confined: Mapping[str, str]
    unconfined: Mapping[str, str]

    def __str__(self) -> str:
        lines = [f"confined: {what} ({how})" for what, how in self.confined.items()]
        return "\n".join(lines + [f"NOT confined: {what} ({why})" for what, why in self.unconfined.items()])


def confine(writable: Iterable[str] = (), kind: str = "rank", extra_readable: Iterable[str] = ()) -> Confinement:
    """Confine the calling process, which must have one thread (the kernel confines the calling
    thread and the threads and processes it starts later), for good: ``writable`` paths stay
    writable (their data, not their metadata). ``kind``: the system call policy, "rank" (a rank
    process: threads but no new process) or "child" (simfs.isolated's child, which forks rank
    processes). What it may read: readable.py, and beneath ``extra_readable``. Raises OSError
    when the kernel refuses a step it offers, so a process is never left half confined without
    saying so."""
    coverage = _COVERAGE if kind == "child" else {**_COVERAGE, NEW_PROCESSES: (None, True)}
    if sys.platform != "linux":
        return Confinement(0, {}, dict.fromkeys([PRIVILEGES, *coverage], f"Linux only; this is {sys.platform}"))
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise RuntimeError(f"confine: the process has {threads} threads, the kernel would confine only the "
                           "calling one; confine before starting any thread")
    kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)
    _confined_here[0] = True
    confined: dict[str, str] = {}
    if capabilities.held():
        capabilities.drop()
        confined[PRIVILEGES] = "capabilities dropped"
    else:
        confined[PRIVILEGES] = "no capability held"
    version = landlock.abi()
    if version:
        roots, writable = readable.roots(extra_readable), tuple(writable)
        if _prepared is not None and _prepared[0] == (roots, writable):
            landlock.enforce(_prepared[1])
            release()  # code this process runs next could add rules to it, for every process forked with it
        else:
            landlock.restrict(version, roots, writable, SINKS)
    no_filter = _filter(kind)
    have = f"Landlock ABI {version}" if version else "no Landlock"
    unconfined: dict[str, str] = {}
    for what, (since, by_filter) in coverage.items():
        how = []
        if since is not None and version >= since:
            how.append(have)
        if by_filter and not no_filter:
            how.append("seccomp")
        if how:
            confined[what] = " and ".join(how)
        else:
            needs = [f"Landlock ABI {since}+"] if since is not None else []
            needs += ["a seccomp filter"] if by_filter else []
            unconfined[what] = f"needs {' or '.join(needs)}; here: {have}" + (f", {no_filter}" if by_filter else "")
    return Confinement(version, confined, unconfined)


_confined_here = [False]


def confined_here() -> bool:
    """Whether this process confined itself (or was forked from one that did)."""
    return _confined_here[0]


# the Landlock ruleset prepare() made: ((what it lets be read, written), its descriptor)
_prepared: tuple[tuple[tuple[str, ...], tuple[str, ...]], int] | None = None


def prepare() -> None:
    """What confine() can do before a fork, done here (Landlock's ABI, its ruleset for what may be
    read now, made again when that changed; the filters' programs): each forked process then
    confines itself in a few system calls (confine() before it sheds inherited descriptors)."""
    global _prepared
    if sys.platform == "linux":
        version = landlock.abi()
        key = (readable.roots(), ())
        if version and (_prepared is None or _prepared[0] != key):
            if _prepared is not None:
                os.close(_prepared[1])
            _prepared = (key, landlock.ruleset(version, key[0], (), SINKS))
        if seccomp.available():
            seccomp.compiled("rank")
            seccomp.compiled("child")


def release() -> None:
    """Close what prepare() keeps open (the ranks are forked: the caller is left as it was)."""
    global _prepared
    if _prepared is not None:
        os.close(_prepared[1])
        _prepared = None


def prepared_key() -> object:
    """What the prepared ruleset lets be read and written (None: none is prepared): a process
    forked with it confines ranks as a new one would while this stays the same."""
    return None if _prepared is None else _prepared[0]


def prepared_descriptors() -> tuple[int, ...]:
    """What prepare() keeps open for confine() (a process that sheds inherited descriptors before it
    confines itself keeps these)."""
    return () if _prepared is None else (_prepared[1],)


def _filter(kind: str) -> str:
    """Install the seccomp filter; why not, or "" when it is installed."""
    if not seccomp.available():
        return f"no seccomp filter for {kernel.MACHINE}"
    try:
        seccomp.install(kind)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return "no seccomp filters in this kernel (CONFIG_SECCOMP_FILTER)"
    return ""


_announced = False


def announce(confinement: Confinement) -> None:
    """Warn (ConfinementWarning), once per process, naming what the kernel does not confine."""
    global _announced
    if confinement.unconfined and not _announced:
        _announced = True
        missing = "; ".join(f"{what} ({why})" for what, why in confinement.unconfined.items())
        warnings.warn(f"simfs: rank code runs only partly confined by the kernel; NOT refused: {missing}",
                      ConfinementWarning, stacklevel=3)


plaindata.register(Confinement)
