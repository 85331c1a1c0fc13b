"""The real descriptors a simulated process sees: 0, 1 and 2 (its console). Writes to 1 and 2
reach the host's console, stdin reads as /dev/null, and closing one closes it for this process
only. Every other real descriptor of the host is invisible (EBADF)."""

from __future__ import annotations

import errno
import os

from .. import _real

STD_FDS = (0, 1, 2)


def _ebadf() -> OSError:
    return OSError(errno.EBADF, os.strerror(errno.EBADF))


class Console:
    """One process's view of descriptors 0-2."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed: set[int] = set()

    def check(self, fd: int) -> None:
        if fd not in STD_FDS or fd in self.closed:
            raise _ebadf()

    def write(self, fd: int, data: bytes) -> int:
        self.check(fd)
        if fd == 0:
            raise _ebadf()
        return _real.write(fd, data)

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
