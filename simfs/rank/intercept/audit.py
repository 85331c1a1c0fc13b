"""The backstop (PEP 578): an audit hook that refuses, while rank code runs, every event by which
CPython itself would change the real machine or the host process - a write to a real file, a
real process, socket, database, foreign call, signal or resource limit - whatever reached it
(C code holding the original functions, modules imported before simfs, ctypes...). Reads of
the Python installation and of sys.path stay allowed, so imports keep working."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from ...errors import BypassError
from .registry import current

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_EXCL
_installed = False

_FOREIGN, _FOREIGN_WHY = "ctypes.", "foreign calls reach the real machine and the host's memory"
# events that are refused outright inside a rank, and why
_REFUSED = {
    "subprocess.Popen": "a real child process would read and write the real disk",
    "os.system": "it runs a real shell", "os.exec": "it runs a real program", "os.fork": "it forks the real process",
    "os.forkpty": "it forks the real process", "os.posix_spawn": "it starts a real process",
    "os.spawn": "it starts a real process", "os.startfile": "it starts a real program",
    "os.kill": "it signals a real process", "os.killpg": "it signals real processes",
    "os.putenv": "it changes the real environment", "os.unsetenv": "it changes the real environment",
    "os.chdir": "it changes the host's working directory",
    "os.chmod": "it changes the real disk", "os.chown": "it changes the real disk",
    "os.chflags": "it changes the real disk", "os.lchflags": "it changes the real disk",
    "os.mkdir": "it changes the real disk", "os.remove": "it changes the real disk",
    "os.rename": "it changes the real disk", "os.rmdir": "it changes the real disk",
    "os.symlink": "it changes the real disk", "os.link": "it changes the real disk",
    "os.truncate": "it changes the real disk", "os.utime": "it changes the real disk",
    "os.setxattr": "it changes the real disk", "os.removexattr": "it changes the real disk",
    "os.getxattr": "it reads the real disk", "os.listxattr": "it reads the real disk",
    "resource.setrlimit": "it changes the host's resource limits",
    "resource.prlimit": "it changes a real process's resource limits",
    "signal.pthread_kill": "it signals a real thread",
    "sys.settrace": "it would trace the simulator itself", "sys.setprofile": "it would profile the simulator itself",
    "sys.addaudithook": "an audit hook stays in the host process for good",
    "builtins.input": "it reads the host's terminal", "webbrowser.open": "it starts a real program",
    "fcntl.fcntl": "it acts on a real descriptor", "fcntl.ioctl": "it acts on a real descriptor",
    "fcntl.flock": "it locks a real file", "fcntl.lockf": "it locks a real file",
}
_REFUSED_PREFIXES = {
    "socket.": "real network and Unix sockets are not simulated",
    _FOREIGN: _FOREIGN_WHY,
    "syslog.": "it writes the real system log", "urllib.": "it reaches the real network",
    "http.client.": "it reaches the real network", "ftplib.": "it reaches the real network",
    "smtplib.": "it reaches the real network", "poplib.": "it reaches the real network",
    "imaplib.": "it reaches the real network", "nntplib.": "it reaches the real network",
    "telnetlib.": "it reaches the real network",
}

Rule = Callable[[str, tuple[Any, ...]], None]


def _refuse(event: str, why: str) -> Rule:
    def rule(name: str, args: tuple[Any, ...]) -> None:
        raise BypassError(f"{event}{_shown(args)}", why)
    return rule


def _shown(args: tuple[Any, ...]) -> str:
    return "(" + ", ".join(repr(a)[:60] for a in args[:3]) + ")"


def _readable(path: Any) -> bool:
    """An absolute path of the Python installation or sys.path, read-only in ranks."""
    task = current()
    if task is None or isinstance(path, int):
        return False
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    return text.startswith("/") and task.context.sys.machine.is_real(os.path.normpath(text))


def _open(name: str, args: tuple[Any, ...]) -> None:
    path, mode, flags = (list(args) + [None, None, None])[:3]
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
    if writing:
        raise BypassError(f"open{_shown(args)}", "it writes the real disk outside the simulation")
    if not _readable(path):
        raise BypassError(f"open{_shown(args)}", "it reads the real disk outside the simulation",
                          "only the Python installation and sys.path are readable inside a rank")


def _listing(name: str, args: tuple[Any, ...]) -> None:
    if not _readable(args[0] if args else "."):
        raise BypassError(f"{name}{_shown(args)}", "it lists the real disk outside the simulation")


def _sqlite(name: str, args: tuple[Any, ...]) -> None:
    if not (args and args[0] in (":memory:", b":memory:")):
        raise BypassError(f"sqlite3.connect{_shown(args)}", "SQLite opens the real file in C",
                          "use sqlite3.connect(':memory:')")


def _mmap(name: str, args: tuple[Any, ...]) -> None:
    if not (args and args[0] == -1):
        raise BypassError(f"mmap.mmap{_shown(args)}", "memory-mapped I/O bypasses Python's file calls",
                          "read the file through open() instead")


def _importing() -> bool:
    """True while a module is being imported (importlib's frames are on the stack)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == "<frozen importlib._bootstrap>":
            return True
        frame = frame.f_back
    return False


def _load_library(name: str, args: tuple[Any, ...]) -> None:
    """ctypes loading a shared library is allowed while a module is imported (torch, for one,
    loads its libraries so); any other ctypes use in a rank is refused."""
    if not _importing():
        raise BypassError(f"{name}{_shown(args)}", _FOREIGN_WHY)


_RULES: dict[str, Rule | None] = {
    "open": _open, "os.listdir": _listing, "os.scandir": _listing, "sqlite3.connect": _sqlite,
    "sqlite3.connect/handle": None, "mmap.__new__": _mmap, "ctypes.dlopen": _load_library,
    "ctypes.dlsym": _load_library, "ctypes.dlsym/handle": _load_library,
}


def _rule(event: str) -> Rule | None:
    """The rule of an event (looked up once per event name)."""
    if event in _REFUSED:
        rule: Rule | None = _refuse(event, _REFUSED[event])
    else:
        rule = next((_refuse(event, why) for prefix, why in _REFUSED_PREFIXES.items() if event.startswith(prefix)),
                    None)
    _RULES[event] = rule
    return rule


def _hook(event: str, args: tuple[Any, ...]) -> None:
    try:
        rule = _RULES[event]
    except KeyError:
        rule = _rule(event)
    if rule is None or current() is None:
        return
    rule(event, args)


def trust_the_kernel() -> None:
    """In a rank process that the kernel confines (runtime/carrier): a foreign call acts on the
    process's own memory, and what it does to the machine the kernel refuses, so ctypes is
    allowed there (libraries use it: filelock's renameat2, torch's loaders, C extensions)."""
    for event in [e for e in _RULES if e.startswith(_FOREIGN)]:
        _RULES[event] = None
    _REFUSED_PREFIXES.pop(_FOREIGN, None)


def kernel_trusted() -> bool:
    """Whether this is a rank process the kernel confines (trust_the_kernel was called)."""
    return _FOREIGN not in _REFUSED_PREFIXES


def install() -> None:
    """Add the hook (once per process: audit hooks cannot be removed; outside ranks it only
    looks the event up in a dict)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
