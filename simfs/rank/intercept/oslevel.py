"""The os (and posix) module inside a rank, by construction: every function of posix is either
simulated (file calls go to the simulated process), pure (it only computes, or reads what a
process may read), or refused with BypassError naming it. A function a new Python adds is
refused until it is classified here."""

from __future__ import annotations

import errno
import os
import posix
from collections.abc import Callable
from typing import Any

from ...errors import BypassError
from ...tasks.process import FD_BASE
from ...tasks.task import Task
from .registry import patch_function

# forwarded to the simulated process's system calls (runtime/syscalls)
SYSCALLS = (
    "stat", "lstat", "fstat", "access", "listdir", "scandir", "readlink", "statvfs", "fstatvfs",
    "getcwd", "getcwdb", "chdir", "mkdir", "rmdir", "unlink", "remove", "rename", "replace", "link",
    "symlink", "chmod", "fchmod", "chown", "fchown", "utime", "truncate", "open", "close", "read",
    "pread", "write", "pwrite", "lseek", "fsync", "fdatasync", "ftruncate", "dup2", "isatty", "sync",
)
# calls whose first argument is a descriptor: 0-2 are the process's console (tasks/console.py)
_FD_CALLS = {"fstat", "close", "read", "write", "isatty", "fsync", "fdatasync", "lseek", "ftruncate", "dup",
             "dup2", "pread", "pwrite", "fchmod", "fchown", "fstatvfs", "device_encoding",
             "get_blocking", "set_blocking", "get_inheritable", "set_inheritable"}

# posix functions that only compute or report what any process may know: the same in a rank
PURE = {
    "WCOREDUMP", "WEXITSTATUS", "WIFCONTINUED", "WIFEXITED", "WIFSIGNALED", "WIFSTOPPED", "WSTOPSIG",
    "WTERMSIG", "_path_normpath", "confstr", "cpu_count", "ctermid", "fspath", "get_terminal_size",
    "getegid", "geteuid", "getgid", "getgrouplist", "getgroups", "getloadavg", "getlogin", "getresgid",
    "getresuid", "getuid", "major", "makedev", "minor", "sched_get_priority_max", "sched_get_priority_min",
    "sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_yield",
    "strerror", "sysconf", "waitstatus_to_exitcode", "getpriority",
}

REASONS = {
    "system": "it runs a real shell", "popen": "it runs a real shell", "fork": "it forks the real process",
    "forkpty": "it forks the real process", "posix_spawn": "it starts a real process",
    "posix_spawnp": "it starts a real process", "killpg": "process groups are not simulated",
    "mkfifo": "special files are not simulated", "mknod": "special files are not simulated",
    "chroot": "it changes the real root", "sendfile": "it copies between real descriptors",
    "copy_file_range": "it copies between real descriptors", "splice": "it copies between real descriptors",
    "posix_fallocate": "preallocation is not simulated", "posix_fadvise": "it advises the real kernel",
    "readv": "vectored I/O is not simulated", "writev": "vectored I/O is not simulated",
    "preadv": "vectored I/O is not simulated", "pwritev": "vectored I/O is not simulated",
    "fchdir": "directory descriptors cannot become the cwd", "memfd_create": "it creates a real file",
    "pathconf": "it asks the real kernel", "fpathconf": "it asks the real kernel",
    "pipe": "real pipes are not simulated", "pipe2": "real pipes are not simulated",
    "openpty": "real terminals are not simulated", "login_tty": "real terminals are not simulated",
    "eventfd": "real event descriptors are not simulated", "pidfd_open": "it opens a real process",
}
for _name in ("execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
              "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"):
    REASONS[_name] = "it runs a real program"
_CREDENTIALS = "it changes the real process's credentials"
for _name in ("setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
              "setgroups", "initgroups"):
    REASONS[_name] = _CREDENTIALS


def _forward(name: str) -> Callable[..., Any]:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        return getattr(task.context.sys, name)(*args, **kwargs)
    return sim


def _console(name: str, sim: Callable[..., Any]) -> Callable[..., Any]:
    """Descriptors below FD_BASE are real ones: a process sees only its console (0-2)."""
    def dispatch(task: Task, fd: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(fd, int) and not isinstance(fd, bool) and 0 <= fd < FD_BASE:
            return _on_console(task, name, fd, *args)
        return sim(task, fd, *args, **kwargs)
    return dispatch


def _on_console(task: Task, name: str, fd: int, *args: Any) -> Any:
    console = task.context.console
    if name in ("write", "read", "close", "fstat", "isatty"):
        return getattr(console, name)(fd, *args)
    console.check(fd)
    if name in ("fsync", "fdatasync"):
        return None
    if name in ("get_blocking", "get_inheritable"):
        return name == "get_blocking"
    if name in ("set_blocking", "set_inheritable", "device_encoding"):
        return None
    raise BypassError(f"os.{name}({fd}, ...)", "it acts on a real descriptor of the host")


def refuse(name: str, why: str) -> Callable[..., Any]:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        raise BypassError(f"os.{name}", why)
    return sim


def _no_xattr(task: Task, *args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOTSUP, "simfs: extended attributes are not supported")


def _exit(task: Task, code: int) -> None:
    """os._exit: the process ends now, running no finally blocks or atexit handlers."""
    proc = task.context
    proc.sys.machine.end_process(proc, None if code == 0 else SystemExit(code))


def _abort(task: Task) -> None:
    """os.abort: SIGABRT's default action (the process dies; with a handler, it runs first)."""
    import signal

    proc = task.context
    proc.sys.machine.deliver(proc, signal.SIGABRT, "os.abort")
    from ...errors import RankKilled

    proc.sys.machine.end_process(proc, RankKilled(proc.rank, signal.SIGABRT, "os.abort"))


def _closerange(task: Task, low: int, high: int) -> None:
    sys = task.context.sys
    for fd in sys.descriptors(low, high):
        sys.close(fd)
    for fd in range(max(low, 0), min(high, 3)):
        task.context.console.closed.add(fd)


def _umask(task: Task, mask: int) -> int:
    proc = task.context
    previous: int = proc.umask
    proc.umask = mask & 0o777
    return previous


def _no_children(task: Task, *args: Any, **kwargs: Any) -> Any:
    raise ChildProcessError(errno.ECHILD, os.strerror(errno.ECHILD))


def _setting(name: str, default: Callable[[Task], Any]) -> Callable[..., Any]:
    """Per-process values a rank may set for itself (session, group, niceness, affinity)."""
    def sim(task: Task, *args: Any) -> Any:
        settings = task.context.settings
        if name.startswith("get"):
            return settings.get(name[3:], default(task))
        settings[name[3:]] = args[-1] if args else task.context.pid
        return task.context.pid if name == "setsid" else None
    return sim


def _nice(task: Task, increment: int) -> int:
    settings = task.context.settings
    settings["nice"] = settings.get("nice", 0) + increment
    return int(settings["nice"])


def _dup(task: Task, fd: int) -> int:
    """os.dup of a simulated descriptor is refused: its only users are C code that then needs a
    real descriptor (numpy.ndarray.tofile, fdopen), which would fail obscurely."""
    raise BypassError("os.dup of a simulated file",
                      "C code such as numpy.ndarray.tofile needs a real descriptor to write into",
                      "write through Python instead, e.g. f.write(array.tobytes())")


def _not_a_terminal(task: Task, fd: int) -> str:
    raise OSError(errno.ENOTTY, os.strerror(errno.ENOTTY))


_SPECIAL: dict[str, Callable[..., Any]] = {
    "_exit": _exit, "abort": _abort, "closerange": _closerange,
    "lchown": lambda task, path, uid, gid: task.context.sys.chown(path, uid, gid, follow_symlinks=False),
    "get_blocking": lambda task, fd: (task.context.sys._fd(fd), True)[1],
    "set_blocking": lambda task, fd, blocking: (task.context.sys._fd(fd), None)[1],
    "get_inheritable": lambda task, fd: (task.context.sys._fd(fd), False)[1],
    "set_inheritable": lambda task, fd, inheritable: (task.context.sys._fd(fd), None)[1],
    "device_encoding": lambda task, fd: (task.context.sys._fd(fd), None)[1],
    "dup": _dup, "umask": _umask, "register_at_fork": lambda task, **hooks: None, "nice": _nice,
    "wait": _no_children, "waitpid": _no_children, "wait3": _no_children, "wait4": _no_children,
    "waitid": _no_children,
    "getpgid": lambda task, pid: task.context.settings.get("pgid", task.context.pid),
    "getpgrp": lambda task: task.context.settings.get("pgid", task.context.pid),
    "getsid": lambda task, pid: task.context.settings.get("sid", task.context.pid),
    "setpgid": _setting("setpgid", lambda task: task.context.pid),
    "setpgrp": _setting("setpgrp", lambda task: task.context.pid),
    "setsid": _setting("setsid", lambda task: task.context.pid),
    "setpriority": lambda task, which, who, prio: task.context.settings.__setitem__("priority", prio),
    "sched_setaffinity": lambda task, pid, mask: task.context.settings.__setitem__("affinity", set(mask)),
    "sched_setparam": lambda task, pid, param: None, "sched_setscheduler": lambda task, pid, policy, param: None,
    "tcgetpgrp": lambda task, fd: task.context.pid, "tcsetpgrp": lambda task, fd, pgid: None,
    "ttyname": _not_a_terminal,
    "eventfd_read": refuse("eventfd_read", REASONS["eventfd"]),
    "eventfd_write": refuse("eventfd_write", REASONS["eventfd"]),
}


def install() -> None:
    """Patch what is simulated here; patch_everything_else() runs last and refuses the rest."""
    for name in SYSCALLS:
        if hasattr(os, name):
            sim = _forward(name)
            patch_function(os, name, _console(name, sim) if name in _FD_CALLS else sim)
    for name, sim in _SPECIAL.items():
        if hasattr(os, name):
            patch_function(os, name, _console(name, sim) if name in _FD_CALLS else sim)
    for name in ("getxattr", "setxattr", "listxattr", "removexattr"):
        if hasattr(os, name):
            patch_function(os, name, _no_xattr)


def patch_everything_else() -> None:
    """Every posix function not simulated by now, and not pure, is refused inside ranks."""
    for name in dir(posix):
        value = getattr(posix, name)
        if name.startswith("__") or isinstance(value, type) or not callable(value) or name in PURE:
            continue
        if getattr(value, "__simfs_patched__", False):
            continue
        why = REASONS.get(name, "it acts on the real machine outside the simulation")
        owner = os if getattr(os, name, None) is value else posix
        patch_function(owner, name, refuse(name, why))
    for name in ("popen", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve",
                 "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"):
        if hasattr(os, name) and not getattr(getattr(os, name), "__simfs_patched__", False):
            patch_function(os, name, refuse(name, REASONS[name]))
