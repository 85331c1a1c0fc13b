"""Interpreter-wide names that a real process owns alone (sys.stdout, sys.argv, the exception
hooks, libraries' thread-locals and fork-detection state keyed on the pid): each simulated
process gets its own value, swapped in while its tasks run; the host's values are back when the
run ends. A library's state is recognised by kind or name in any of its modules, so a release
that moves it to another module keeps it per process."""

from __future__ import annotations

import _thread
import io
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
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


def _fresh(proc: Process, host: Any) -> Any:
    """A new one of its kind, as a new process's import makes it."""
    return type(host)()


def _host_fresh(module: Any, made: Any) -> Any:
    """The host's own, made outside ranks."""
    return type(made)()


def _fresh_fork_state(proc: Process, host: Any) -> Any:
    """filelock (>= 3.30) tells a forked child by comparing os.getpid() with the pid its
    module-wide fork state recorded at import (``pid``; since 4.3 ``process_identity``, the pid
    and the pid namespace, which a rank's /proc does not show, so None as on kernels without
    /proc/self/ns/pid): each simulated process has its own, made for its pid."""
    state = type(host)()
    if hasattr(state, "process_identity"):
        state.process_identity = (proc.pid, None)
    else:
        state.pid = proc.pid
    return state


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


@dataclass(frozen=True)
class Slot:
    """Interpreter-wide state a real process owns alone: the globals of top-level module
    ``package`` and of its submodules that ``which`` names, or whose value it recognises (state
    found by kind, wherever a release of the library keeps it), with how a process gets its first
    value (``make``) and the host's value when the module was first imported inside a rank
    (``host``). Globals that are one object (``from ._registry import REGISTRY``) are one state."""

    package: str
    which: str | type
    make: Make
    host: HostMake = _keep


SLOTS: list[Slot] = [
    Slot("sys", "stdout", lambda proc, host: RankStream(host, 1, proc.console)),
    Slot("sys", "stderr", lambda proc, host: RankStream(host, 2, proc.console)),
    Slot("sys", "stdin", lambda proc, host: RankStream(None, 0, proc.console)),
    Slot("sys", "argv", lambda proc, host: list(host)),
    Slot("sys", "path", lambda proc, host: list(host)),
    Slot("sys", "excepthook", lambda proc, host: sys.__excepthook__),
    Slot("sys", "displayhook", lambda proc, host: sys.__displayhook__),
    Slot("sys", "unraisablehook", lambda proc, host: sys.__unraisablehook__),
    Slot("threading", "excepthook", lambda proc, host: threading.__excepthook__),
    Slot("random", "_inst", lambda proc, host: proc.random),
    # filelock's process state, in whichever module a release keeps it: its real thread-locals
    # (per real thread, and every rank is a greenlet of the one real thread), among them the
    # registry of paths each thread holds (>= 3.22; it refuses an acquire that would wait on a
    # path its own thread holds: "Deadlock: ... already held by a different FileLock instance");
    # the fork state (>= 3.30) and the boot id (>= 3.30)
    Slot("filelock", _thread._local, _fresh, _host_fresh),
    Slot("filelock", "_FORK_STATE", _fresh_fork_state, _host_fresh),
    Slot("filelock", "_BOOT_ID", _node_boot_id, _host_boot_id),
]


# a package's slots: by the name of the global, and by the type of its value
_Finders = tuple[dict[str, Slot], dict[type, Slot]]


class _Bound:
    """An active slot: the module attributes that hold one value of it."""

    __slots__ = ("bindings", "slot")

    def __init__(self, slot: Slot, module: Any, name: str) -> None:
        self.slot = slot
        self.bindings: list[tuple[Any, str]] = [(module, name)]

    def value(self) -> Any:
        owner, name = self.bindings[0]
        return getattr(owner, name)

    def install(self, value: Any) -> None:
        for owner, name in self.bindings:
            setattr(owner, name, value)


def _initializing(module: Any) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class ProcessGlobals:
    """Swaps the SLOTS values of one process in (``enter``) and the host's back (``leave``).
    A slot is active once a module of its package holding a matching global is imported;
    values are kept per active slot, by index."""

    def __init__(self) -> None:
        self._installed: Process | None = None
        self._bound: list[_Bound] = []
        self._packages: dict[str, _Finders] = {}
        for slot in SLOTS:
            named, kinds = self._packages.setdefault(slot.package, ({}, {}))
            if isinstance(slot.which, str):
                named[slot.which] = slot
            else:
                kinds[slot.which] = slot
        self._prefixes = tuple(self._packages)
        self._looked: set[str] = set()  # modules looked at (a module still being imported is not)
        self._seen = -1  # len(sys.modules) when modules were last looked at
        self._host: list[Any] = []
        self._tables: dict[int, list[Any]] = {}  # id(process) -> its values, by slot index

    def _activate(self) -> None:
        """Slots in modules imported since. A module the host imported holds the host's value;
        one first imported inside a rank holds that rank's (the installed process's), and the
        host gets one made for it. A module still being imported is looked at again at the next
        switch (its globals may not all be there yet)."""
        modules = sys.modules
        if len(modules) == self._seen:
            return
        self._seen = len(modules)
        looked = self._looked
        for name in [name for name in modules if name.startswith(self._prefixes) and name not in looked]:
            module = modules[name]
            finders = self._packages.get(name.partition(".")[0])
            if finders is not None and _initializing(module):
                self._seen = -1
                continue
            looked.add(name)
            if finders is not None:
                self._find(finders, module)

    def _find(self, finders: _Finders, module: Any) -> None:
        named, kinds = finders
        found = vars(module)
        for attribute, slot in named.items():
            if attribute in found:
                self._bind(slot, module, attribute, found[attribute])
        types = tuple(kinds)
        for attribute, value in list(found.items()) if types else ():
            if isinstance(value, types) and attribute not in named:
                slot = next(slot for kind, slot in kinds.items() if isinstance(value, kind))
                self._bind(slot, module, attribute, value)

    def _bind(self, slot: Slot, module: Any, name: str, value: Any) -> None:
        for bound in self._bound:
            if bound.slot is slot and bound.value() is value:  # another module's name for it
                bound.bindings.append((module, name))
                return
        self._bound.append(_Bound(slot, module, name))
        if self._installed is None:
            self._host.append(value)
        else:
            self._tables[id(self._installed)].append(value)
            self._host.append(slot.host(module, value))

    def enter(self, proc: Process | None) -> None:
        if proc is self._installed:
            return
        self._activate()
        bound = self._bound
        current = self._installed
        saved = self._host if current is None else self._tables[id(current)]
        for i in range(len(saved)):  # the installed process may have reassigned its values
            saved[i] = bound[i].value()
        if proc is None:
            values = self._host
        else:
            values = self._tables.setdefault(id(proc), [])
            while len(values) < len(bound):
                values.append(bound[len(values)].slot.make(proc, self._host[len(values)]))
        for each, value in zip(bound, values):
            each.install(value)
        self._installed = proc

    def leave(self) -> None:
        """The run is over: the host's values are installed again."""
        self.enter(None)
