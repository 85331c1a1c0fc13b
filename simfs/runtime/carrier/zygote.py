"""The process every rank process of a run is forked from: forked from the host once, when the
run's ranks are made and before any starts, it forks a rank process when the host asks and
tells the host how each one ended.

Why not fork from the host: fork(2) copies the forking process's page tables, so its cost grows
with that process's memory. The host's grows while it starts ranks (each rank's state, and every
page the host writes after a fork is copied again for it), and each rank forked from it inherits
every descriptor the host holds for the ranks before it. Measured on 2 cores with torch imported:
a fork from the host took 11 ms per rank in a run of 256 ranks and 24 ms in one of 1024; from a
process that does nothing between forks it stays at ~6 ms, and a rank inherits the few
descriptors the zygote kept.

A zygote serves one run, or every run of a series that zygote_kept (kept.py) opens (a search's
examples): it knows the jobs it may start from its fork, and each run sends it the read-only
descriptors of that run's outboxes before its first rank. Forking a zygote costs the host a copy
of its page tables and the copy-on-write faults after it, and its exit a teardown: about 20 ms of
CPU a run, saved by a kept one.

The host asks for a rank process with the plain data it starts from (port/schema.RankSpec) and
keeps what it had of it: its pid, a pidfd (sent with SCM_RIGHTS), its socket, pipes and stacks
file (made by the host and handed to the zygote with the request).
A rank process's parent is the zygote, so the zygote reaps it and sends its wait status."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from ... import _real
from ...confinement import descriptors, kernel, mappings
from ...rank.intercept.registry import host_calls

# host -> zygote: (LAUNCH, rank, job, memory) and the rank's RankSpec, with the rank's descriptors;
# or (OUTBOXES, first, count, 0) with read-only outbox descriptors first.. of the run (count 0: the
# run is over, the zygote closes its copies)
_HEADER = struct.Struct("=qqqq")
LAUNCH, OUTBOXES = 1, 2
# bytes of a launch request (a RankSpec holds the rank's environment): a datagram of a Unix socket
# fits its sender's buffer, net.core.wmem_default (212,992 bytes) less the kernel's own 32
MAX_LAUNCH = 192 << 10
MAX_START = MAX_LAUNCH - _HEADER.size  # bytes of the RankSpec a launch request carries
# zygote -> host: (STARTED, pid, rank) with its pidfd, (ENDED, pid, status), or (NOT_FORKED, errno, rank)
# when fork(2) failed (RLIMIT_NPROC, memory): the zygote serves on
_REPORT = struct.Struct("=qqq")
STARTED, ENDED, NOT_FORKED = 1, 2, 3
MAX_DESCRIPTORS = 250  # per message: the kernel passes at most SCM_MAX_FD (253, include/net/scm.h)
NO_LIMIT = -1  # a launch's memory: no RLIMIT_DATA


@dataclass(frozen=True)
class Launched:
    """What a new rank process starts from, in it: its rank, the index of its job among the
    zygote's, its RLIMIT_DATA (None: none), its RankSpec, its descriptors (its socket, stacks
    memfd, stdout and stderr write ends, its own outbox), every outbox of the run read-only, and
    the zygote's pid (its parent)."""

    rank: int
    job: int
    memory: int | None
    start: bytes
    descriptors: list[int]
    outboxes: tuple[int, ...]
    zygote: int


Launch = Callable[[Launched], NoReturn]  # the new process's life


class ZygoteGone(OSError):
    """The zygote ended (killed with its node's host thread, or by the system)."""


class NotForked(OSError):
    """The zygote could not fork a rank's process: fork(2)'s error."""


class Zygote:
    """The host's handle on a run's zygote."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self._control = control
        self._ended: dict[int, int] = {}  # pid -> wait status, reported and not yet asked for

    @classmethod
    def fork(cls, keep: tuple[int, ...], launch: Launch, prepare: Callable[[], None]) -> Zygote:
        """Fork the zygote; it keeps descriptors 0-2 and ``keep`` (the rest become /dev/null),
        makes what every rank process it forks starts with (``prepare``) and serves until the host
        closes its end."""
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the zygote process (tests see what it does)
            host_end.close()
            _serve(zygote_end, keep, launch, prepare, parent)
        zygote_end.close()
        return cls(pid, host_end)

    def launch(self, rank: int, job: int, memory: int | None, start: bytes, descriptors: list[int]) -> None:
        """Ask for rank ``rank``'s process (``job``: the index of its job among the zygote's;
        ``start``: its RankSpec) with ``descriptors`` (sent as they are now: the caller may close its
        own right after); ``started`` says which process it is. Several may be asked for before the
        first is known, so that the zygote forks while the host makes the next rank's descriptors."""
        limit = NO_LIMIT if memory is None else memory
        self._send(_HEADER.pack(LAUNCH, rank, job, limit) + start, descriptors)

    def outboxes(self, readable: Sequence[int]) -> None:
        """A run's outboxes, read-only, for its ranks (before its first launch); none: the run is
        over, and the zygote closes the copies it held."""
        if not readable:
            self._send(_HEADER.pack(OUTBOXES, 0, 0, 0), [])
        for first in range(0, len(readable), MAX_DESCRIPTORS):
            chunk = list(readable[first:first + MAX_DESCRIPTORS])
            self._send(_HEADER.pack(OUTBOXES, first, len(chunk), 0), chunk)

    def alive(self) -> bool:
        """Whether the zygote still serves (not ended, by the system or with its thread)."""
        try:
            return _real.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def _send(self, message: bytes, descriptors: list[int]) -> None:
        try:
            with host_calls():
                socket.send_fds(self._control, [message], descriptors)
        except OSError as exc:
            raise ZygoteGone(f"the zygote is gone ({exc})") from None

    def started(self, rank: int) -> tuple[int, int]:
        """The pid and a pidfd of the process of ``rank``, the oldest launch not yet started;
        NotForked where fork(2) failed."""
        while True:
            kind, pid, detail, pidfd = self._report()
            if kind == NOT_FORKED:  # (pid: fork's errno)
                if detail != rank:
                    raise ZygoteGone(f"the zygote could not fork rank {detail}'s process, rank {rank}'s was next")
                raise NotForked(pid, os.strerror(pid))
            if kind == STARTED and pidfd is not None:
                if detail != rank:
                    raise ZygoteGone(f"the zygote started rank {detail}'s process, rank {rank}'s was next")
                return pid, pidfd
            self._ended[pid] = detail

    def wait(self, pid: int) -> int:
        """The wait status of process ``pid`` (one the zygote forked), once it ended."""
        while pid not in self._ended:
            kind, ended, status, pidfd = self._report()
            if pidfd is not None:
                _real.close(pidfd)
            if kind == ENDED:
                self._ended[ended] = status
        return self._ended.pop(pid)

    def _report(self) -> tuple[int, int, int, int | None]:
        try:
            with host_calls():  # the host's own calls, also when a rank's proxy task reads the report
                data, fds = _receive(self._control, _REPORT.size, 1)
        except OSError as exc:
            raise ZygoteGone(f"the zygote is gone ({exc})") from None
        if len(data) != _REPORT.size:
            raise ZygoteGone("the zygote is gone (its channel ended)")
        kind, pid, status = _REPORT.unpack(data)
        return kind, pid, status, fds[0] if fds else None

    def close(self) -> None:
        """The zygote reaps what it forked (the host killed them) and exits; reaped here."""
        self._control.close()
        with contextlib.suppress(ChildProcessError):  # reaped by alive() already
            _real.waitpid(self.pid, 0)


def _serve(control: socket.socket, keep: tuple[int, ...], launch: Launch, prepare: Callable[[], None],
           parent: int) -> NoReturn:
    """The zygote's life: fork a rank process for each request, report each one's end."""
    code = 0
    try:
        kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)  # it dies with the host's thread that forked it
        if os.getppid() != parent:
            os._exit(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the host's: it ends the ranks
        descriptors.null_all_but((0, 1, 2, control.fileno(), *keep))
        prepare()
        mappings.own_shared()  # the host's shared memory: a private copy, which every rank inherits
        zygote = os.getpid()
        children: dict[int, int] = {}  # pidfd -> pid
        outboxes: list[int] = []  # the current run's, read-only
        while True:
            ready = _real.readable([control.fileno(), *children], None)
            for pidfd in ready:
                if pidfd in children:
                    pid = children.pop(pidfd)
                    _real.close(pidfd)
                    _, status = _real.waitpid(pid, 0)
                    control.send(_REPORT.pack(ENDED, pid, status))
            if control.fileno() not in ready:
                continue
            data, fds = _receive(control, MAX_LAUNCH, MAX_DESCRIPTORS)
            if len(data) < _HEADER.size:  # the host closed its end: the run (or the series) is over
                break
            kind, rank, job, memory = _HEADER.unpack_from(data)
            if kind == OUTBOXES:
                if rank == 0:  # a new run's (or none: the last run is over)
                    for fd in outboxes:
                        _real.close(fd)
                    outboxes = []
                outboxes.extend(fds)
                continue
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in fds:
                    _real.close(fd)
                control.send(_REPORT.pack(NOT_FORKED, exc.errno or 0, rank))
                continue
            if pid == 0:
                control.close()
                for pidfd in children:
                    _real.close(pidfd)
                launch(Launched(rank, job, None if memory == NO_LIMIT else memory, data[_HEADER.size:], fds,
                                tuple(outboxes), zygote))
            for fd in fds:
                _real.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            socket.send_fds(control, [_REPORT.pack(STARTED, pid, rank)], [pidfd])
        for pid in children.values():  # killed by the host: gone at once
            _real.waitpid(pid, 0)
    except BaseException:  # noqa: BLE001 - the zygote never returns into the host's code
        import traceback

        traceback.print_exc()
        code = 70
    os._exit(code)


def _receive(channel: socket.socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """A message and the descriptors that came with it, close-on-exec as the sender's were (a
    rank that runs another program cuts its socket). socket.recv_fds drops its flags argument
    before Python 3.12, so MSG_CMSG_CLOEXEC alone would not do."""
    data, fds, _, _ = socket.recv_fds(channel, size, most)
    for fd in fds:
        os.set_inheritable(fd, False)
    return data, fds
