"""What a confined process keeps of the descriptors it inherited: its console (0-2) made its own
(stdin /dev/null, stdout and stderr the pipes its parent reads, simfs/relay.py) and the few it was
given; every other inherited descriptor (the caller's files, sockets, pipes, a worker pool's
result pipe, a terminal) is replaced by /dev/null, so code in the process cannot reach them and
objects that still name them close a harmless descriptor later."""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from .. import _real

# the logging handlers on the console, found in a zygote before its forks (find_console_handlers):
# (handler, 1 or 2); None elsewhere, where keep_only looks through every logger itself
_console_handlers: list[tuple[Any, int]] | None = None


def keep_only(keep: tuple[int, ...], stdout: int, stderr: int) -> None:
    """Make 0 /dev/null, 1 ``stdout`` and 2 ``stderr`` (pipe write ends, closed here after), and
    every other descriptor but ``keep`` /dev/null; ``sys.stdin``, ``sys.stdout`` and ``sys.stderr``
    then read and write 0, 1 and 2 (the parent's may have been a capture of its own, pytest's), and
    so do the logging handlers that wrote to the parent's."""
    null = _real.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    _real.close(null)
    null_all_but((0, 1, 2, *keep))
    handlers = _handlers_on_console() if _console_handlers is None else _console_handlers
    sys.stdin = _stream(0, "r")
    sys.stdout = _stream(1, "w")
    sys.stderr = _stream(2, "w")
    for handler, fd in handlers:  # they write to this process's console now, not the parent's
        try:
            handler.setStream(sys.stdout if fd == 1 else sys.stderr)
        except AttributeError:  # a handler that looks sys.stderr up itself (logging.lastResort's)
            pass


def find_console_handlers() -> None:
    """In a zygote, before it forks: the logging handlers on its console, which each process it
    forks repoints in keep_only without looking through every logger (~0.9 ms and ~320 copied
    pages a rank process, with torch imported)."""
    global _console_handlers
    _console_handlers = _handlers_on_console()


def _handlers_on_console() -> list[tuple[Any, int]]:
    """logging handlers made before the process became its own (a library's, at import: transformers
    adds one on the console), with the descriptor of the console stream each writes to: they must
    write to this process's console, as they would in a process that imported the library itself,
    not the parent's (now /dev/null)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return []
    consoles = {id(sys.stdout): 1, id(sys.stderr): 2, id(sys.__stdout__): 1, id(sys.__stderr__): 2}
    found = []
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):  # (a PlaceHolder has none)
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in consoles:
                found.append((handler, consoles[id(stream)]))
    return found


def null_all_but(keep: tuple[int, ...]) -> None:
    """Every descriptor of this process but ``keep`` replaced by /dev/null (not closed: an object
    that still names one closes a harmless descriptor later, not one this process opened since)."""
    null = _real.open(os.devnull, os.O_RDWR)
    kept = {null, *keep}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in kept:
            try:
                os.dup2(null, fd)
            except OSError:
                pass  # the descriptor listdir itself used, already closed
    _real.close(null)


def _stream(fd: int, mode: str) -> io.TextIOWrapper:
    """A text stream on ``fd``, as a new process's own (line-buffered: what it prints reaches its
    parent line by line)."""
    return io.TextIOWrapper(io.FileIO(fd, mode, closefd=False), encoding="utf-8", errors="backslashreplace",
                            line_buffering=True)
