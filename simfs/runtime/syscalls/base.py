"""Plumbing shared by the system calls of a simulated process: path resolution against its cwd,
its descriptor table, and the wrapper that traces an operation, applies faults and costs time."""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ... import _real
from ...fs.inode import Attr
from ...fs.mount import Mount
from ...port import native
from ...tasks.process import Process
from .openfile import NullFile, OpenFile

if TYPE_CHECKING:
    from ..machine import Machine

T = TypeVar("T")


def frozen(data: Any) -> bytes:
    """Bytes the caller cannot change any more: bytes objects (also seen through a memoryview
    that covers them, as buffered writers pass large writes) are kept without a copy."""
    if type(data) is bytes:
        return data
    if type(data) is memoryview and type(data.obj) is bytes and data.nbytes == len(data.obj) and data.contiguous:
        return data.obj
    return bytes(data)


def _shown(path: Any) -> Any:
    """How os names a path in its errors: str or bytes (a Path becomes its str)."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def _errname(code: int | None) -> str:
    return errno.errorcode.get(code or 0, str(code))

class SyscallsBase:
    """The os module as one simulated process sees it (the shared part)."""

    def __init__(self, machine: Machine, proc: Process) -> None:
        self.machine = machine
        self.proc = proc
        self.vfs = machine.vfs[proc.node]
        self._reval = False
        self._last_stat: tuple[Attr, Mount, os.stat_result] | None = None

    # -- plumbing ----------------------------------------------------------------------------
    def _abs(self, path: Any, dir_fd: int | None = None) -> tuple[str, bool]:
        p, is_bytes = native.absolute(path, None)
        if not p.startswith("/"):
            if dir_fd is not None:
                base = self._fd(dir_fd).path
            else:  # the import system resolves a relative sys.path entry against the host's directory
                base = _real.getcwd() if self.machine.imports_here() else self.proc.cwd
            p = native.normalize(posixpath.join(base, p))
        return self._proc_self(p), is_bytes

    def _proc_self(self, path: str) -> str:
        """/proc/self is the calling process's own /proc/<pid> (and /proc is filled when looked at)."""
        if path.startswith("/proc") and (len(path) == 5 or path[5] == "/"):
            self.machine.fs.proc[self.proc.node].ensure()
            if path == "/proc/self" or path.startswith("/proc/self/"):
                return f"/proc/{self.proc.pid}{path[10:]}"
        return path

    def _fd(self, fd: Any) -> OpenFile:
        """The open file ``fd`` names; EINVAL for /dev/null, which the calls that take it ask
        for first (``_null``)."""
        of = self._described(fd)
        if isinstance(of, NullFile):
            raise OSError(errno.EINVAL, "simfs does not simulate this call on /dev/null", NullFile.path)
        return of

    def _null(self, fd: Any) -> NullFile | None:
        """The open /dev/null ``fd`` names, if it names one."""
        of = self.proc.fds.get(_number(fd))
        return of if isinstance(of, NullFile) else None

    def _real_fd(self, fd: int) -> int:
        """A real descriptor the host opened for this process; EBADF for every other one: the
        host's own descriptors (its channels, consoles, logs) are never a rank's."""
        if fd not in self.proc.real_fds:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return fd

    def _described(self, fd: Any) -> OpenFile | NullFile:
        """What ``fd`` names, an OpenFile or a NullFile; EBADF where it names nothing."""
        of: OpenFile | NullFile | None = self.proc.fds.get(_number(fd))
        if of is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return of

    def _op(self, name: str, path: str, shown: Any, fn: Callable[[], T], shown2: Any = None) -> T:
        """Run one operation: faults first, then the work, then trace and virtual cost."""
        machine = self.machine
        start = machine.begin(self.proc, name, path)
        try:
            try:
                result = fn()
            except OSError as exc:
                if exc.errno != errno.ESTALE or self._reval or not path.startswith("/"):
                    raise
                self._reval = True  # Linux retries a path walk that met a stale handle, uncached
                try:
                    result = fn()
                finally:
                    self._reval = False
        except OSError as exc:
            machine.finish(self.proc, name, path, start, _errname(exc.errno))
            if exc.filename is None and shown is not None:
                raise OSError(exc.errno, exc.strerror, _shown(shown), None, _shown(shown2)) from None
            raise
        machine.finish(self.proc, name, path, start, "ok")
        return result

    def _real_write_refused(self, shown: Any) -> OSError:
        return native.refused(shown)

    def _stat_result(self, mount: Mount, attr: Attr) -> os.stat_result:
        """A stat result whose times read on the same clock as time.time() in the rank (the
        last one is reused while the attributes are the same: a stat_result is immutable)."""
        last = self._last_stat
        if last is not None and last[0] is attr and last[1] is mount:
            return last[2]
        result = self._make_stat(mount, attr)
        self._last_stat = (attr, mount, result)
        return result

    def _make_stat(self, mount: Mount, attr: Attr) -> os.stat_result:
        size = attr.size
        mtime, ctime = attr.mtime + self.machine.epoch, attr.ctime + self.machine.epoch
        fields = [attr.st_mode, attr.ino, self.machine.dev_of(mount), attr.nlink, 0, 0, size,
                  int(mtime), int(mtime), int(ctime), mtime, mtime, ctime,
                  int(mtime * 1e9), int(mtime * 1e9), int(ctime * 1e9),
                  4096, (size + 511) // 512, 0]
        return os.stat_result(fields[:os.stat_result.n_fields])


def _number(fd: Any) -> int:
    """A descriptor's number, from it or from a file object holding it."""
    return fd if isinstance(fd, int) else int(fd.fileno())
