"""The os module inside a rank: file calls go to the simulated process, calls that would
reach the real machine (processes, special files, mmap-like I/O) are refused by name."""

from __future__ import annotations

import errno
import os
from typing import Any, Callable

from ..errors import BypassError
from ..runtime.process import FD_BASE
from ..runtime.scheduler import Task
from .registry import original, patch_function

SYSCALLS = (
    "stat", "lstat", "fstat", "access", "listdir", "scandir", "readlink", "statvfs", "fstatvfs",
    "getcwd", "getcwdb", "chdir", "mkdir", "rmdir", "unlink", "remove", "rename", "replace", "link",
    "symlink", "chmod", "fchmod", "chown", "fchown", "utime", "truncate", "open", "close", "read",
    "pread", "write", "pwrite", "lseek", "fsync", "fdatasync", "ftruncate", "dup", "dup2", "isatty",
)

REFUSED = {
    "system": "it runs a real shell", "popen": "it runs a real shell", "fork": "it forks the real process",
    "forkpty": "it forks the real process", "posix_spawn": "it starts a real process",
    "posix_spawnp": "it starts a real process", "kill": "it signals real processes",
    "killpg": "it signals real processes", "mkfifo": "special files are not simulated",
    "mknod": "special files are not simulated", "chroot": "it changes the real root",
    "sendfile": "it copies between real descriptors", "copy_file_range": "it copies between real descriptors",
    "splice": "it copies between real descriptors", "posix_fallocate": "preallocation is not simulated",
    "posix_fadvise": "it advises the real kernel", "readv": "vectored I/O is not simulated",
    "writev": "vectored I/O is not simulated", "preadv": "vectored I/O is not simulated",
    "pwritev": "vectored I/O is not simulated", "fchdir": "directory descriptors cannot become the cwd",
    "memfd_create": "it creates a real file", "pathconf": "it asks the real kernel",
    "fpathconf": "it asks the real kernel",
}
for _name in ("execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
              "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"):
    REFUSED[_name] = "it runs a real program"

XATTRS = ("getxattr", "setxattr", "listxattr", "removexattr")


def _forward(name: str) -> Callable[..., Any]:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        return getattr(task.context.sys, name)(*args, **kwargs)
    return sim


def _refuse(name: str, why: str) -> Callable[..., Any]:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        raise BypassError(f"os.{name}", why)
    return sim


def _no_xattr(task: Task, *args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOTSUP, "simfs: extended attributes are not supported")


def _exit(task: Task, code: int) -> None:
    raise SystemExit(code)


def _per_fd(name: str, default: Callable[..., Any]) -> Callable[..., Any]:
    """Descriptor flags: simulated descriptors answer ``default``, real ones the real call."""
    def sim(task: Task, fd: int, *args: Any) -> Any:
        if fd >= FD_BASE:
            task.context.sys._fd(fd)
            return default(*args)
        return original(os, name)(fd, *args)
    return sim


def _closerange(task: Task, low: int, high: int) -> None:
    sys = task.context.sys
    for fd in [f for f in sys.proc.fds if low <= f < high]:
        sys.close(fd)


def _lchown(task: Task, path: Any, uid: int, gid: int) -> None:
    task.context.sys.chown(path, uid, gid, follow_symlinks=False)


def install() -> None:
    for name in SYSCALLS:
        if hasattr(os, name):
            patch_function(os, name, _forward(name))
    for name, why in REFUSED.items():
        if hasattr(os, name):
            patch_function(os, name, _refuse(name, why))
    for name in XATTRS:
        if hasattr(os, name):
            patch_function(os, name, _no_xattr)
    patch_function(os, "_exit", _exit)
    patch_function(os, "closerange", _closerange)
    patch_function(os, "lchown", _lchown)
    patch_function(os, "get_blocking", _per_fd("get_blocking", lambda: True))
    patch_function(os, "set_blocking", _per_fd("set_blocking", lambda blocking: None))
    patch_function(os, "get_inheritable", _per_fd("get_inheritable", lambda: False))
    patch_function(os, "set_inheritable", _per_fd("set_inheritable", lambda inheritable: None))
    patch_function(os, "device_encoding", _per_fd("device_encoding", lambda: None))
