"""Interpreter-wide names that a real process owns alone (sys.stdout, sys.argv, the exception
hooks, the random module's generator): on greenlet ranks, which share one interpreter, each
simulated process gets its own value, swapped in while its tasks run; the host's values are back
when the run ends. No library's state is here: a job whose libraries keep per-process state of
their own (filelock's fork state and thread-locals, for one) runs on rank processes, the default."""

from __future__ import annotations

import functools
import io
import operator
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..tasks import showing
from ..tasks.process import Process

Make = Callable[[Process, Any], Any]  # (process, the host's value) -> the process's first value


class RankStream(io.TextIOBase):
    """A rank's sys.stdout/stderr: writes are the rank's output on its console's descriptor
    (tasks/console.py: kept with the run's result, simfs/capture.py); closing or replacing it
    changes only the rank's own view. Its stdin reads as /dev/null does."""

    def __init__(self, fd: int, console: Any) -> None:
        super().__init__()
        self._fd = fd
        self._console = console  # the process's descriptors 0-2: os.close(1) closes this too

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return "backslashreplace"

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
        self._console.write(self._fd, text.encode("utf-8", "backslashreplace"))
        return len(text)

    def flush(self) -> None:
        self._checkClosed()

    def read(self, size: int | None = -1) -> str:
        self._checkClosed()
        return ""

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]  # text, as TextIOBase's
        self._checkClosed()
        return ""

    def __repr__(self) -> str:
        return f"<simfs rank stream fd={self._fd}>"


@dataclass(frozen=True)
class Slot:
    """Interpreter-wide state a real process owns alone: global ``name`` of module ``module``,
    with how a process gets its first value from the host's (``make``)."""

    module: str
    name: str
    make: Make


SLOTS: list[Slot] = [
    Slot("sys", "stdout", lambda proc, host: RankStream(1, proc.console)),
    Slot("sys", "stderr", lambda proc, host: RankStream(2, proc.console)),
    Slot("sys", "stdin", lambda proc, host: RankStream(0, proc.console)),
    Slot("sys", "__stdout__", lambda proc, host: RankStream(1, proc.console)),
    Slot("sys", "__stderr__", lambda proc, host: RankStream(2, proc.console)),
    Slot("sys", "argv", lambda proc, host: list(host)),
    Slot("sys", "path", lambda proc, host: list(host)),
    Slot("sys", "excepthook", lambda proc, host: sys.__excepthook__),
    Slot("sys", "displayhook", lambda proc, host: sys.__displayhook__),
    Slot("sys", "unraisablehook", lambda proc, host: sys.__unraisablehook__),
    Slot("threading", "excepthook", lambda proc, host: threading.__excepthook__),
    Slot("random", "_inst", lambda proc, host: proc.random),
    Slot("warnings", "showwarning", lambda proc, host: showing.first_showwarning()),
    Slot("warnings", "_showwarnmsg_impl", lambda proc, host: showing.showwarnmsg_impl),
]


class ProcessGlobals:
    """Swaps the SLOTS values of one process in (``enter``) and the host's back (``leave``): a
    switch between processes reads and writes the module dictionaries at C speed."""

    def __init__(self) -> None:
        self._installed: Process | None = None
        self._groups, self._spaces, self._read = _layout()
        self._host: list[tuple[Any, ...]] = self._values()
        self._tables: dict[int, list[tuple[Any, ...]]] = {}  # id(process) -> its values, by space

    def _values(self) -> list[tuple[Any, ...]]:
        return [read(space) for read, (space, _) in zip(self._read, self._spaces)]

    def enter(self, proc: Process | None) -> None:
        if proc is self._installed:
            return
        current = self._installed
        saved = self._values()  # the process may have reassigned them
        if current is None:
            self._host = saved
        else:
            self._tables[id(current)] = saved
        if proc is None:
            values = self._host
        else:
            values = self._tables.get(id(proc)) or self._tables.setdefault(id(proc), self._first_values(proc))
        for (space, names), those in zip(self._spaces, values):
            space.update(zip(names, those))
        self._installed = proc

    def _first_values(self, proc: Process) -> list[tuple[Any, ...]]:
        return [tuple(slot.make(proc, host) for slot, host in zip(group, hosts))
                for group, hosts in zip(self._groups, self._host)]

    def leave(self) -> None:
        """The run is over: the host's values are installed again."""
        self.enter(None)


Space = tuple[dict[str, Any], tuple[str, ...]]  # a module's dictionary, the names of SLOTS in it


@functools.cache
def _layout() -> tuple[list[list[Slot]], list[Space], list[Callable[[dict[str, Any]], tuple[Any, ...]]]]:
    """SLOTS by module, as a process's values are kept: the slots, the module dictionaries with
    their names, and a reader of each (simfs imports every module of SLOTS)."""
    groups: dict[str, list[Slot]] = {}
    for slot in SLOTS:
        groups.setdefault(slot.module, []).append(slot)
    spaces = [(vars(sys.modules[module]), tuple(slot.name for slot in group)) for module, group in groups.items()]
    return list(groups.values()), spaces, [_reader(names) for _, names in spaces]


def _reader(names: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """Reads ``names`` of a module dictionary as a tuple, at C speed."""
    get = operator.itemgetter(*names)
    if len(names) > 1:
        return get  # a tuple for several names
    return lambda space: (get(space),)
