"""``open()`` and ``io.FileIO`` inside a rank: simulated file objects (rank/fileobj.py)."""

from __future__ import annotations

import builtins
import io
from typing import Any

from ...tasks.process import FD_BASE
from ...tasks.task import Task
from ..fileobj import ConsoleIO, SimFileIO, sim_open
from .registry import current, dispatcher, patch

_real_open = builtins.open
_RealFileIO = io.FileIO


def _open_in_rank(task: Task, *args: Any, **kwargs: Any) -> Any:
    return sim_open(task.context.sys, *args, **kwargs)


class _FileIO(_RealFileIO):
    """io.FileIO that becomes a SimFileIO inside a rank."""

    def __new__(cls, file: Any, mode: str = "r", closefd: bool = True, opener: Any = None) -> Any:
        task = current()
        if task is not None and isinstance(file, int) and 0 <= file < FD_BASE:
            task.context.console.check(file)
            return ConsoleIO(task.context.console, file, closefd)
        if task is not None:
            return SimFileIO(task.context.sys, file, mode.replace("b", ""), closefd, opener)
        if cls is _FileIO:
            return _RealFileIO(file, mode, closefd, opener)
        return super().__new__(cls)


def _open_code(task: Task, path: Any) -> Any:
    """io.open_code inside a rank: what open(path, 'rb') gives there (the Python installation
    and sys.path are read from the real disk, everything else from the simulated machine)."""
    return sim_open(task.context.sys, path, "rb")


def install() -> None:
    opener = dispatcher(_real_open, _open_in_rank)
    patch(builtins, "open", opener)
    patch(io, "open", opener, scan=False)
    patch(io, "FileIO", _FileIO, scan=False)
    patch(io, "open_code", dispatcher(io.open_code, _open_code), scan=False)
