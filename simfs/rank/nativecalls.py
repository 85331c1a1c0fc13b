"""A rank process's system calls on the real machine, made in the process itself under its
confinement (simfs/port/native.py): on its own real descriptors, on the paths its import system
reads, and on those the host answered Native for. Nothing of the host's is here: paths resolve
against the rank's working directory (the real one for the import system, as in the host)."""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import Any

from .. import _real
from ..port import native
from ..tasks.importreads import from_import_system
from ..tasks.process import Process

# the calls a rank process makes itself on one of its real descriptors (below process.FD_BASE);
# on a real descriptor every other call is the host's, which answers it as a greenlet rank's
ON_REAL_DESCRIPTORS = frozenset({"close", "read", "write", "isatty", "fstat", "stat"})
# the calls that would change the real machine: refused, as the host's system calls refuse them
_WRITES = {"mkdir": 0, "rmdir": 0, "unlink": 0, "remove": 0, "rename": 0, "replace": 0, "exchange": 0, "link": 0,
           "symlink": 1, "chmod": 0, "chown": 0, "utime": 0, "truncate": 0}  # -> the argument an error names


class NativeCalls:
    """The calls of one rank process on the real machine."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """System call ``name`` on the real machine."""
        shown = _WRITES.get(name)
        if shown is not None:
            raise native.refused(args[shown] if len(args) > shown else None)
        method = getattr(self, name, None)
        if method is None:  # a call on no path of the real machine: on a real descriptor, EBADF
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return method(*args, **kwargs)

    def _abs(self, path: Any, dir_fd: int | None = None) -> tuple[str, bool]:
        p, is_bytes = native.absolute(path, None)
        if p.startswith("/"):
            return p, is_bytes
        if dir_fd is not None:  # a real directory descriptor is not the host's to resolve against
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        base = _real.getcwd() if from_import_system() else self.proc.cwd
        return native.normalize(posixpath.join(base, p)), is_bytes

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        return native.open_file(self._abs(path, dir_fd)[0], flags, mode, path)

    def open_io(self, path: Any, flags: int, mode: int = 0o666) -> int:
        fd = self.open(path, flags, mode)
        if stat.S_ISDIR(_real.fstat(fd).st_mode):
            _real.close(fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return fd

    def close(self, fd: int) -> None:
        _real.close(fd)

    def read(self, fd: int, n: int) -> bytes:
        return _real.read(fd, n)

    def write(self, fd: int, data: Any) -> int:
        return _real.write(fd, data)

    def isatty(self, fd: int) -> bool:
        return _real.isatty(fd)

    def fstat(self, fd: int) -> os.stat_result:
        return _real.fstat(fd)

    def stat(self, path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return _real.fstat(path)
        return native.stat(self._abs(path, dir_fd)[0], follow_symlinks)

    def lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        return self.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def access(self, path: Any, mode: int, *, dir_fd: int | None = None, effective_ids: bool = False,
               follow_symlinks: bool = True) -> bool:
        return native.access(self._abs(path, dir_fd)[0], mode)

    def listdir(self, path: Any = ".") -> list[Any]:
        return native.listdir(*self._abs(path))

    def scandir(self, path: Any = ".") -> Any:
        return native.scandir(*self._abs(path))

    def readlink(self, path: Any, *, dir_fd: int | None = None) -> Any:
        return native.readlink(*self._abs(path, dir_fd))

    def statvfs(self, path: Any) -> os.statvfs_result:
        return native.statvfs(self._abs(path)[0])

    def getcwd(self) -> str:
        return _real.getcwd()

    def getcwdb(self) -> bytes:
        return os.fsencode(_real.getcwd())
