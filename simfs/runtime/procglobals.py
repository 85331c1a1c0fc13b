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
        self._checkClosed()  # type: ignore[attr-defined]
        if self._fd == 0:
            raise io.UnsupportedOperation("not writable")
        self._console.check(self._fd)
        if self._host is None:
            return len(text)
        return self._host.write(text)  # type: ignore[no-any-return]

    def flush(self) -> None:
        self._checkClosed()  # type: ignore[attr-defined]
        if self._host is not None and self._fd != 0:
            self._host.flush()

    def read(self, size: int | None = -1) -> str:
        self._checkClosed()  # type: ignore[attr-defined]
        return ""

    def readline(self, size: int | None = -1) -> str:
        self._checkClosed()  # type: ignore[attr-defined]
        return ""

    def __repr__(self) -> str:
        return f"<simfs rank stream fd={self._fd}>"


def _fresh_fork_state(proc: Process, host: Any) -> Any:
    """filelock (4.x) tells a forked child by comparing os.getpid() with a module-wide state:
    each simulated process has its own, made for its pid."""
    state = type(host)()
    state.pid = proc.pid
    return state


# (module name, attribute, how a process gets its first value)
SLOTS: list[tuple[str, str, Make]] = [
    ("sys", "stdout", lambda proc, host: RankStream(host, 1, proc.console)),
    ("sys", "stderr", lambda proc, host: RankStream(host, 2, proc.console)),
    ("sys", "stdin", lambda proc, host: RankStream(None, 0, proc.console)),
    ("sys", "argv", lambda proc, host: list(host)),
    ("sys", "path", lambda proc, host: list(host)),
    ("sys", "excepthook", lambda proc, host: sys.__excepthook__),
    ("sys", "displayhook", lambda proc, host: sys.__displayhook__),
    ("sys", "unraisablehook", lambda proc, host: sys.__unraisablehook__),
    ("threading", "excepthook", lambda proc, host: threading.__excepthook__),
    ("random", "_inst", lambda proc, host: proc.random),
    ("filelock._api", "_FORK_STATE", _fresh_fork_state),
]


class ProcessGlobals:
    """Swaps the SLOTS values of one process in (``enter``) and the host's back (``leave``).
    A slot is active once its module is imported; values are kept per slot index."""

    def __init__(self) -> None:
        self._installed: Process | None = None
        self._slots: list[tuple[Any, str, Make]] = []  # (module, attribute, make) of active slots
        self._pending = list(SLOTS)  # slots whose module is not imported yet
        self._seen = -1  # len(sys.modules) when the pending slots were last looked at
        self._host: list[Any] = []
        self._tables: dict[int, list[Any]] = {}  # id(process) -> its values, by slot index

    def _activate(self) -> None:
        """Slots of modules imported since; their current value is the host's."""
        modules = sys.modules
        if len(modules) == self._seen:
            return
        self._seen = len(modules)
        for entry in list(self._pending):
            module = modules.get(entry[0])
            if module is not None:
                self._pending.remove(entry)
                self._slots.append((module, entry[1], entry[2]))
                self._host.append(getattr(module, entry[1]))

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
