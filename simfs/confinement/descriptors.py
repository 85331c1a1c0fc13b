"""What a confined process keeps of the descriptors it inherited: its console (0-2) made its own
(stdin /dev/null, stdout and stderr the pipes its parent reads, simfs/relay.py) and the few it was
given; every other inherited descriptor (the caller's files, sockets, pipes, a worker pool's
result pipe, a terminal) is replaced by /dev/null, so code in the process cannot reach them and
objects that still name them close a harmless descriptor later."""

from __future__ import annotations

import io
import os
import sys

from .. import _real


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
    parents = {id(sys.stdout): 1, id(sys.stderr): 2, id(sys.__stdout__): 1, id(sys.__stderr__): 2}
    sys.stdin = _stream(0, "r")
    sys.stdout = _stream(1, "w")
    sys.stderr = _stream(2, "w")
    _repoint_log_handlers({parent: sys.stdout if fd == 1 else sys.stderr for parent, fd in parents.items()})


def _repoint_log_handlers(consoles: dict[int, io.TextIOWrapper]) -> None:
    """logging handlers made before the process became its own (a library's, at import: transformers
    adds one on the console) write to this process's console, as they would have in a process that
    imported the library itself; they named the parent's, now /dev/null."""
    logging = sys.modules.get("logging")
    if logging is None:
        return
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):  # (a PlaceHolder has none)
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in consoles:
                try:
                    handler.setStream(consoles[id(stream)])
                except AttributeError:  # a handler that looks sys.stderr up itself (logging.lastResort's)
                    pass


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
