"""Standard-library pieces that reach the real machine underneath os: shutil's fast paths,
fcntl locks, mmap and subprocess."""

from __future__ import annotations

import fcntl
import mmap
import os
import shutil
import stat
import subprocess
from typing import Any

from ..errors import BypassError
from ..runtime.process import FD_BASE
from ..runtime.scheduler import Task
from .registry import original, patch, patch_function


def _rmtree(task: Task, path: Any, ignore_errors: bool = False, onerror: Any = None, *,
            onexc: Any = None, dir_fd: Any = None) -> None:
    """shutil.rmtree over the simulated os calls (the fd-based variant needs dir_fd opens)."""

    def fail(func: Any, name: Any, exc: BaseException) -> None:
        if ignore_errors:
            return
        if onexc is not None:
            onexc(func, name, exc)
        elif onerror is not None:
            onerror(func, name, (type(exc), exc, exc.__traceback__))
        else:
            raise exc

    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise OSError("Cannot call rmtree on a symbolic link")
    except OSError as exc:
        fail(os.path.islink, path, exc)
        return
    try:
        entries = list(os.scandir(path))
    except OSError as exc:
        fail(os.scandir, path, exc)
        entries = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            _rmtree(task, entry.path, ignore_errors, onerror, onexc=onexc)
            continue
        try:
            os.unlink(entry.path)
        except OSError as exc:
            fail(os.unlink, entry.path, exc)
    try:
        os.rmdir(path)
    except OSError as exc:
        fail(os.rmdir, path, exc)


def _no_sendfile(task: Task, fsrc: Any, fdst: Any) -> None:
    raise shutil._GiveupOnFastCopy()


def _descriptor(fd: Any) -> int:
    return fd if isinstance(fd, int) else fd.fileno()


def _flock(task: Task, fd: Any, operation: int) -> None:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "flock")(fd, operation)
    task.context.sys.lock(fd, operation, posix=False)
    return None


def _lockf(task: Task, fd: Any, cmd: int, len: int = 0, start: int = 0, whence: int = 0) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "lockf")(fd, cmd, len, start, whence)
    task.context.sys.lock(fd, cmd, posix=True)
    return None


def _fcntl(task: Task, fd: Any, cmd: int, arg: Any = 0) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "fcntl")(fd, cmd, arg)
    of = task.context.sys._fd(fd)
    if cmd == fcntl.F_GETFD:
        return fcntl.FD_CLOEXEC
    if cmd == fcntl.F_GETFL:
        return of.flags
    if cmd in (fcntl.F_SETFD, fcntl.F_SETFL):
        return 0
    raise BypassError(f"fcntl.fcntl(cmd={cmd})", "record locks through fcntl() are not simulated",
                      "use fcntl.lockf() or fcntl.flock()")


def _ioctl(task: Task, fd: Any, *args: Any) -> Any:
    if _descriptor(fd) < FD_BASE:
        return original(fcntl, "ioctl")(fd, *args)
    raise BypassError("fcntl.ioctl", "ioctls on simulated files are not simulated")


class _Mmap(mmap.mmap):
    """mmap.mmap refuses inside a rank: mapped memory is outside the simulation."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from .registry import current

        if current() is not None:
            raise BypassError("mmap.mmap", "memory-mapped I/O bypasses Python's file calls",
                              "read the file through open() instead (e.g. torch.load(..., mmap=False))")
        return super().__new__(cls, *args, **kwargs)


def _execute_child(self: subprocess.Popen, *args: Any, **kwargs: Any) -> Any:
    """subprocess.Popen refuses inside a rank (however it was imported): a real child process
    would read and write the real disk."""
    from .registry import current

    if current() is not None:
        raise BypassError("subprocess.Popen", "a real child process would read and write the real disk")
    return _real_execute_child(self, *args, **kwargs)


_real_execute_child = subprocess.Popen._execute_child


def install() -> None:
    patch_function(shutil, "rmtree", _rmtree)
    if hasattr(shutil, "_fastcopy_sendfile"):
        patch_function(shutil, "_fastcopy_sendfile", _no_sendfile, scan=False)
    patch_function(fcntl, "flock", _flock)
    patch_function(fcntl, "lockf", _lockf)
    patch_function(fcntl, "fcntl", _fcntl)
    patch_function(fcntl, "ioctl", _ioctl)
    patch(mmap, "mmap", _Mmap)
    patch(subprocess.Popen, "_execute_child", _execute_child, scan=False)
