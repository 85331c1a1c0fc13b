"""A snapshot of the host process and of real directories, taken before and after an attempt to
escape the simulation: what changed is reported, then put back so that one escape does not spoil
the tests after it. Everything here runs outside simulated ranks, on the real machine."""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import fcntl
import gc
import hashlib
import logging
import os
import pickle
import posix
import random
import resource
import select
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

CATCHABLE = sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP})
RLIMITS = {name: getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")}
TIMERS = {"ITIMER_REAL": signal.ITIMER_REAL, "ITIMER_VIRTUAL": signal.ITIMER_VIRTUAL,
          "ITIMER_PROF": signal.ITIMER_PROF}
RECORDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM,
            signal.SIGVTALRM, signal.SIGPROF)  # harmless while our recorders are installed
KEY_MODULES = ("os", "posix", "sys", "builtins", "io", "_io", "time", "threading", "signal", "pickle")
STD_FDS = (0, 1, 2)
STREAMS = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")
HOOKS = (("sys", "excepthook"), ("sys", "unraisablehook"), ("sys", "displayhook"), ("sys", "breakpointhook"),
         ("threading", "excepthook"), ("threading", "_trace_hook"), ("threading", "_profile_hook"))
_LIBC = ctypes.CDLL(None)
_ENVIRON = ctypes.POINTER(ctypes.c_char_p).in_dll(_LIBC, "environ")
ABSENT = "<absent>"
GROWING = ("real threads", "child processes")  # only new ones count: old ones may end meanwhile


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # real-time signals have no name
        return f"signal {sig}"


def c_environ() -> dict[bytes, bytes]:
    """The C library's environment (what posix.putenv/unsetenv change, unlike os.environ)."""
    entries = {}
    i = 0
    while _ENVIRON[i] is not None:
        key, _, value = _ENVIRON[i].partition(b"=")
        entries[key] = value
        i += 1
    return entries


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the descriptor listdir itself used
    return out


def _held(fds: Sequence[int]) -> dict[int, Any]:
    """Offset, status flags and descriptor flags of descriptors the host holds."""
    out: dict[int, Any] = {}
    for fd in fds:
        try:
            out[fd] = (os.lseek(fd, 0, os.SEEK_CUR), fcntl.fcntl(fd, fcntl.F_GETFL), fcntl.fcntl(fd, fcntl.F_GETFD))
        except OSError as exc:
            out[fd] = exc.strerror
    return out


def _tids() -> frozenset[int]:
    return frozenset(int(t) for t in os.listdir("/proc/self/task"))


def _children() -> frozenset[int]:
    pids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass
    return frozenset(pids)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _works(fn: Callable[[], Any]) -> str:
    try:
        fn()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - the snapshot records how it fails
        return f"{type(exc).__name__}: {exc}"[:200]


def _digest(path: str, size: int) -> str:
    if size > 1 << 20:
        return "large"
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: mode, size, mtime, a small file's digest, a symlink's target."""
    if not root.exists():
        return {}
    out: dict[str, tuple] = {".": (os.lstat(root).st_mode, os.lstat(root).st_mtime_ns)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if os.path.islink(path):
                extra = os.readlink(path)
            elif os.path.isfile(path):
                extra = _digest(path, st.st_size)
            else:
                extra = None
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, extra)
    return out


def _print_works() -> str:
    return _works(lambda: print(end="", flush=True))


class Host:
    """The host process as a set of named observations, plus what is needed to put it back.

    ``watched`` directories are real; ``blob`` is a host-owned object whose bytes must not
    change; ``listener`` a real listening socket that must receive no connection."""

    def __init__(self, watched: Sequence[Path], blob: bytes, listener: socket.socket,
                 held_fds: Sequence[int] = ()) -> None:
        self.watched = list(watched)
        self.blob = blob
        self.listener = listener
        self.held_fds = tuple(held_fds)
        self.received: list[int] = []
        self.pid = int(os.readlink("/proc/self"))
        self._builtins = dict(vars(builtins))
        self._saved_handlers = {sig: signal.getsignal(sig) for sig in RECORDED}
        for sig in RECORDED:
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: Any) -> None:
        self.received.append(signum)

    def close(self) -> None:
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)

    @contextlib.contextmanager
    def watch(self) -> Iterator[list[str]]:
        """Yields a list that, after the block, holds one line per change to the host; the
        changes are then undone (descriptors the host holds are put back from duplicates)."""
        saved = {fd: os.dup(fd) for fd in (*STD_FDS, *self.held_fds)}
        try:
            before = self.snapshot()
            problems: list[str] = []
            try:
                yield problems
            finally:
                problems.extend(self.diff(before, self.settle(before)))
                self.restore(before, saved)
        finally:
            for fd in saved.values():
                os.close(fd)

    # -- observing ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every observation, by name (values compare with ==)."""
        snap: dict[str, Any] = {
            "cwd": os.getcwd(), "umask": _umask(),
            "os.environ": dict(os.environ), "os.environb": dict(os.environb), "C environ": c_environ(),
            "descriptors": _fds(), "held descriptors (offset, flags)": _held(self.held_fds),
            "child processes": _children(),
            "signal mask": frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "signals received": tuple(self.received),
            "pid": (os.getpid(), self.pid, int(os.readlink("/proc/self"))),
            "pickle.dumps(os.getpid)": _works(lambda: pickle.dumps(os.getpid)),
            "pickle.dumps(os.stat)": _works(lambda: pickle.dumps(os.stat)),
            "print()": _print_works(),
            "sys.argv": list(sys.argv), "sys.path": list(sys.path), "sys.meta_path": list(sys.meta_path),
            "sys.path_hooks": list(sys.path_hooks),
            "sys.dont_write_bytecode": (sys.dont_write_bytecode, sys.flags.dont_write_bytecode),
            "sys.getrecursionlimit()": sys.getrecursionlimit(), "sys.getswitchinterval()": sys.getswitchinterval(),
            "sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile(),
            "sys.get_int_max_str_digits()": sys.get_int_max_str_digits(),
            "sys.getdlopenflags()": sys.getdlopenflags(),
            "gc": (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()),
            "root logger": (tuple(logging.root.handlers), logging.root.level, logging.root.manager.disable),
            "warnings.filters": list(warnings.filters),
            "builtins": {k: id(v) for k, v in vars(builtins).items()},
            "atexit callbacks": atexit._ncallbacks(),
            "socket.getdefaulttimeout()": socket.getdefaulttimeout(),
            "random state": hashlib.sha256(repr(random.getstate()).encode()).hexdigest(),
            "host-owned bytes": bytes(bytearray(self.blob)),
            "listener backlog": bool(select.select([self.listener], [], [], 0)[0]),
            "real threads": _tids(),
            "threading.stack_size()": threading.stack_size(),
        }
        for sig in CATCHABLE:
            snap[f"handler of {_signame(sig)}"] = signal.getsignal(sig)
        for name, which in TIMERS.items():
            snap[f"{name} armed"] = signal.getitimer(which)[0] > 0
        for name, which in RLIMITS.items():
            snap[f"resource.getrlimit({name})"] = resource.getrlimit(which)
        for name in STREAMS:
            stream = getattr(sys, name)
            snap[f"sys.{name}"] = (stream, getattr(stream, "closed", None))
        for owner, name in HOOKS:
            snap[f"{owner}.{name}"] = getattr(sys.modules[owner], name, ABSENT)
        for name in KEY_MODULES:
            snap[f"sys.modules[{name!r}]"] = sys.modules.get(name)
        for root in self.watched:
            snap[f"real tree {root}"] = _tree(root)
        return snap

    def settle(self, before: dict[str, Any], seconds: float = 1.0) -> dict[str, Any]:
        """A snapshot, after waiting a little for threads and children that are on their way out
        (the simulation thread ends just after run() returns)."""
        deadline = time.monotonic() + seconds
        while True:
            after = self.snapshot()
            moving = [k for k in GROWING if after[k] - before[k]]
            if not moving or time.monotonic() > deadline:
                return after
            time.sleep(0.02)

    @staticmethod
    def diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """One line per observation that changed."""
        out = []
        for key, old in before.items():
            new = after.get(key, ABSENT)
            if key in GROWING:
                if new - old:
                    out.append(f"host has new {key}: {sorted(new - old)}")
            elif new != old:
                out.append(f"host {key} changed: {_show(old, new)}")
        return out

    # -- putting back --------------------------------------------------------------------------------
    def restore(self, before: dict[str, Any], saved: dict[int, int]) -> None:
        """Undo what an escape changed (best effort; the diff has already been taken).
        ``saved`` maps descriptors the host holds to duplicates made before."""
        now = self.snapshot()
        if now == before:
            return
        for name in STREAMS:
            setattr(sys, name, before[f"sys.{name}"][0])
        for fd, copy in saved.items():
            if now["descriptors"].get(fd) != before["descriptors"].get(fd):
                os.dup2(copy, fd)
        for fd, state in before["held descriptors (offset, flags)"].items():
            if isinstance(state, tuple) and _held([fd])[fd] != state:
                with contextlib.suppress(OSError):
                    os.lseek(fd, state[0], os.SEEK_SET)
                    fcntl.fcntl(fd, fcntl.F_SETFL, state[1])
                    fcntl.fcntl(fd, fcntl.F_SETFD, state[2])
        if set(now["descriptors"]) - set(before["descriptors"]):
            gc.collect()  # objects that own new descriptors (left by a failed call) close their own
            for fd in set(_fds()) - set(before["descriptors"]):
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError):
            os.chdir(before["cwd"])
        os.umask(before["umask"])
        _restore_environment(before)
        signal.pthread_sigmask(signal.SIG_SETMASK, before["signal mask"])
        for name, which in TIMERS.items():
            if not before[f"{name} armed"]:
                signal.setitimer(which, 0)
        for sig in CATCHABLE:
            handler = before[f"handler of {_signame(sig)}"]
            if signal.getsignal(sig) != handler and handler is not None:
                signal.signal(sig, handler)
        for name, which in RLIMITS.items():
            if resource.getrlimit(which) != before[f"resource.getrlimit({name})"]:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(which, before[f"resource.getrlimit({name})"])
        _restore_sys(before)
        _restore_interpreter(before)
        for name in KEY_MODULES:
            if sys.modules.get(name) is not before[f"sys.modules[{name!r}]"]:
                sys.modules[name] = before[f"sys.modules[{name!r}]"]
        for key in set(vars(builtins)) - set(before["builtins"]):
            delattr(builtins, key)
        for key, value in self._builtins.items():
            if id(vars(builtins).get(key)) != id(value) and key in before["builtins"]:
                setattr(builtins, key, value)
        self.received.clear()
        self.received.extend(before["signals received"])
        while select.select([self.listener], [], [], 0)[0]:
            conn, _ = self.listener.accept()
            conn.close()


def _restore_environment(before: dict[str, Any]) -> None:
    if dict(os.environ) != before["os.environ"]:
        os.environ.clear()
        os.environ.update(before["os.environ"])
    wanted, current = before["C environ"], c_environ()
    for key in set(current) - set(wanted):
        posix.unsetenv(key)
    for key, value in wanted.items():
        if current.get(key) != value:
            posix.putenv(key, value)


def _restore_sys(before: dict[str, Any]) -> None:
    sys.argv[:] = before["sys.argv"]
    sys.path[:] = before["sys.path"]
    sys.meta_path[:] = before["sys.meta_path"]
    sys.path_hooks[:] = before["sys.path_hooks"]
    sys.dont_write_bytecode = before["sys.dont_write_bytecode"][0]
    sys.setrecursionlimit(before["sys.getrecursionlimit()"])
    sys.setswitchinterval(before["sys.getswitchinterval()"])
    sys.settrace(before["sys.gettrace()"])
    sys.setprofile(before["sys.getprofile()"])
    sys.set_int_max_str_digits(before["sys.get_int_max_str_digits()"])
    sys.setdlopenflags(before["sys.getdlopenflags()"])
    for owner, name in HOOKS:
        value = before[f"{owner}.{name}"]
        if value is not ABSENT:
            setattr(sys.modules[owner], name, value)


def _restore_interpreter(before: dict[str, Any]) -> None:
    enabled, threshold, _frozen = before["gc"]
    (gc.enable if enabled else gc.disable)()
    gc.set_threshold(*threshold)
    handlers, level, disable = before["root logger"]
    logging.root.handlers[:] = list(handlers)
    logging.root.setLevel(level)
    logging.disable(disable)
    warnings.filters[:] = before["warnings.filters"]
    socket.setdefaulttimeout(before["socket.getdefaulttimeout()"])
    threading.stack_size(before["threading.stack_size()"])


def _show(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        added = {k: new[k] for k in new.keys() - old.keys()}
        removed = {k: old[k] for k in old.keys() - new.keys()}
        changed = {k: (old[k], new[k]) for k in old.keys() & new.keys() if old[k] != new[k]}
        parts = [f"{label} {_short(v)}" for label, v in (("added", added), ("removed", removed),
                                                        ("changed", changed)) if v]
        return "; ".join(parts)
    if isinstance(old, (set, frozenset)) and isinstance(new, (set, frozenset)):
        return f"added {_short(sorted(new - old))}, removed {_short(sorted(old - new))}"
    return f"{_short(old)} -> {_short(new)}"


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.contextmanager
def host_only(name: str, value: Any, owner: Any = sys) -> Iterator[None]:
    """Set ``owner.name`` on the host for the duration (setup for an attempt), then put it back."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)
