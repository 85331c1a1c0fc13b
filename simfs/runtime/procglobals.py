"""Interpreter-wide names that a real process owns alone (sys.stdout, sys.argv, the exception
hooks, libraries' fork-detection state keyed on the pid): each simulated process gets its own
value, swapped in while its tasks run; the host's values are back when the run ends."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from typing import Any

from .process import Process

Make = Callable[[Process, Any], Any]  # (process, the host's value) -> the process's first value
# (module, the value a rank made while importing it) -> the host's own value, for a module whose
# first import ran inside a rank (its import-time state then belongs to that rank)
HostMake = Callable[[Any, Any], Any]


class RankStream(io.TextIOBase):
    """A rank's sys.stdout/stderr: writes reach the host's stream of the run's start; closing or
    replacing it changes only the rank's own view. Its stdin reads as /dev/null does."""

    def __init__(self, host: Any, fd: int, console: Any) -> None:
        super().__init__()
        self._host = host
        self._fd = fd
        self._console = console  # the process's descriptors 0-2: os.close(1) closes this too

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._host, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._host, "errors", None)

    def writable(self) -> bool:
        return self._fd != 0

    def readable(self) -> bool:
        return self._fd == 0

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self._checkClosed()
        if self._fd == 0:
            raise io.UnsupportedOperation("not writable")
        self._console.check(self._fd)
        if self._host is None:
            return len(text)
        return self._host.write(text)  # type: ignore[no-any-return]

    def flush(self) -> None:
        self._checkClosed()
        if self._host is not None and self._fd != 0:
            self._host.flush()

    def read(self, size: int | None = -1) -> str:
        self._checkClosed()
        return ""

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]  # text, as TextIOBase's
        self._checkClosed()
        return ""

    def __repr__(self) -> str:
        return f"<simfs rank stream fd={self._fd}>"


def _fresh_fork_state(proc: Process, host: Any) -> Any:
    """filelock (>= 3.30) tells a forked child by comparing os.getpid() with a module-wide state:
    each simulated process has its own, made for its pid."""
    state = type(host)()
    state.pid = proc.pid
    return state


def _host_fork_state(module: Any, made: Any) -> Any:
    """The host's fork state when filelock was first imported inside a rank (made outside ranks,
    so it records the host's pid)."""
    return type(made)()


def _fresh_registry(proc: Process, host: Any) -> Any:
    """filelock (>= 3.22) keeps the paths each thread holds in a module-wide threading.local
    (``_registry``, in 4.x ``_REGISTRY``) and refuses an acquire that would wait forever on a
    path its own thread holds ("Deadlock: ... already held by a different FileLock instance in
    this thread"). Ranks are greenlets of one real thread: each process gets its own registry."""
    return type(host)()


def _host_registry(module: Any, made: Any) -> Any:
    return type(made)()


def _node_boot_id(proc: Process, host: Any) -> int:
    """filelock (>= 3.30) reads /proc/sys/kernel/random/boot_id once, at import, and folds it into
    the start token of every lock record: a process's is its node's boot id, as that file says."""
    return int(proc.sys.machine.fs.proc[proc.node].boot_id.replace("-", ""), 16)


def _host_boot_id(module: Any, made: Any) -> Any:
    """The host's boot id when filelock was first imported inside a rank: read again, outside ranks."""
    reread = getattr(module, "_read_boot_id", None)
    return reread() if callable(reread) else made


def _keep(module: Any, made: Any) -> Any:
    return made


# (module name, attribute, how a process gets its first value, the host's value when the module
# was first imported inside a rank). A slot whose module lacks the attribute (another version of
# the library) stays inactive.
SLOTS: list[tuple[str, str, Make, HostMake]] = [
    ("sys", "stdout", lambda proc, host: RankStream(host, 1, proc.console), _keep),
    ("sys", "stderr", lambda proc, host: RankStream(host, 2, proc.console), _keep),
    ("sys", "stdin", lambda proc, host: RankStream(None, 0, proc.console), _keep),
    ("sys", "argv", lambda proc, host: list(host), _keep),
    ("sys", "path", lambda proc, host: list(host), _keep),
    ("sys", "excepthook", lambda proc, host: sys.__excepthook__, _keep),
    ("sys", "displayhook", lambda proc, host: sys.__displayhook__, _keep),
    ("sys", "unraisablehook", lambda proc, host: sys.__unraisablehook__, _keep),
    ("threading", "excepthook", lambda proc, host: threading.__excepthook__, _keep),
    ("random", "_inst", lambda proc, host: proc.random, _keep),
    ("filelock._api", "_FORK_STATE", _fresh_fork_state, _host_fork_state),
    ("filelock._api", "_registry", _fresh_registry, _host_registry),
    ("filelock._api", "_REGISTRY", _fresh_registry, _host_registry),
    ("filelock._identity", "_BOOT_ID", _node_boot_id, _host_boot_id),
]


class ProcessGlobals:
    """Swaps the SLOTS values of one process in (``enter``) and the host's back (``leave``).
    A slot is active once its module is imported; values are kept per slot index."""

    def __init__(self) -> None:
        self._installed: Process | None = None
        self._slots: list[tuple[Any, str, Make]] = []  # (module, attribute, make) of active slots
        self._pending = list(SLOTS)  # slots whose module (or attribute) is not there yet
        self._seen = -1  # len(sys.modules) when the pending slots were last looked at
        self._host: list[Any] = []
        self._tables: dict[int, list[Any]] = {}  # id(process) -> its values, by slot index

    def _activate(self) -> None:
        """Slots of modules imported since. A module the host imported holds the host's value;
        one first imported inside a rank holds that rank's (the installed process's), and the
        host gets one made for it. A module without the slot's attribute (another version of
        the library) leaves the slot inactive; one still being imported is looked at again at
        the next switch."""
        modules = sys.modules
        if len(modules) == self._seen:
            return
        self._seen = len(modules)
        for entry in list(self._pending):
            module = modules.get(entry[0])
            if module is None:
                continue
            name = entry[1]
            if not hasattr(module, name):
                if getattr(getattr(module, "__spec__", None), "_initializing", False):
                    self._seen = -1  # its body is still running: the attribute may come
                continue
            self._pending.remove(entry)
            value = getattr(module, name)
            self._slots.append((module, name, entry[2]))
            if self._installed is None:
                self._host.append(value)
            else:
                self._tables[id(self._installed)].append(value)
                self._host.append(entry[3](module, value))

    def enter(self, proc: Process | None) -> None:
        if proc is self._installed:
            return
        self._activate()
        slots = self._slots
        current = self._installed
        saved = self._host if current is None else self._tables[id(current)]
        for i in range(len(saved)):  # the installed process may have reassigned its values
            owner, name, _ = slots[i]
            saved[i] = getattr(owner, name)
        if proc is None:
            values = self._host
        else:
            values = self._tables.setdefault(id(proc), [])
            while len(values) < len(slots):
                values.append(slots[len(values)][2](proc, self._host[len(values)]))
        for (owner, name, _), value in zip(slots, values):
            setattr(owner, name, value)
        self._installed = proc

    def leave(self) -> None:
        """The run is over: the host's values are installed again."""
        self.enter(None)
