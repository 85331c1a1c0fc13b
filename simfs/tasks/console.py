"""The real descriptors a simulated process sees: 0, 1 and 2 (its console). Writes to 1 and 2
are the rank's output: a rank process's reach its pipes, which the host keeps for its report, a
greenlet rank's go to that keeper directly (``sink``, simfs/capture.py), never to the host's own
console; stdin reads as /dev/null, and closing one closes it for this process only. Every other
real descriptor of the host is invisible (EBADF)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from .. import _real

STD_FDS = (0, 1, 2)


def _ebadf() -> OSError:
    return OSError(errno.EBADF, os.strerror(errno.EBADF))


class Console:
    """One process's view of descriptors 0-2."""

    __slots__ = ("closed", "sink")

    def __init__(self) -> None:
        self.closed: set[int] = set()
        # where writes to 1 and 2 go (fd, data) on greenlet ranks; None: the real descriptor (a rank process's pipe)
        self.sink: Callable[[int, bytes], None] | None = None

    def check(self, fd: int) -> None:
        if fd not in STD_FDS or fd in self.closed:
            raise _ebadf()

    def write(self, fd: int, data: bytes) -> int:
        self.check(fd)
        if fd == 0:
            raise _ebadf()
        if self.sink is None:
            return _real.write(fd, data)
        self.sink(fd, data)
        return len(data)

    def read(self, fd: int, n: int) -> bytes:
        self.check(fd)
        if fd != 0:
            raise _ebadf()
        return b""

    def close(self, fd: int) -> None:
        self.check(fd)
        self.closed.add(fd)

    def fstat(self, fd: int) -> os.stat_result:
        self.check(fd)
        return _real.fstat(fd)

    def isatty(self, fd: int) -> bool:
        self.check(fd)
        return False
