"""What confined processes write to their stdout and stderr, shown on this process's own
``sys.stdout`` and ``sys.stderr`` with control and escape sequences made visible (simfs.visible):
each such process writes to pipes this process reads, never to the caller's terminal or files."""

from __future__ import annotations

import os
import sys

from . import _real
from .visible import VisibleDecoder

_CHUNK = 1 << 16
_BURST = 1 << 20  # bytes shown per call of pump


def pipe() -> tuple[int, int]:
    """(read end, write end) of a pipe for one stream: the read end does not block, neither end
    is inherited by a program a process runs (dup2 onto 1 or 2 in the child makes a copy that is)."""
    read, write = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(read, False)
    return read, write


class Relay:
    """The read ends of the output pipes of this process's confined children."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[VisibleDecoder, str]] = {}

    def add(self, fd: int, stream: str) -> None:
        """Show what arrives on ``fd`` on ``sys.<stream>`` ("stdout" or "stderr")."""
        self._open[fd] = (VisibleDecoder(), stream)

    @property
    def fds(self) -> list[int]:
        return list(self._open)

    def pump(self, fd: int) -> None:
        """Show what ``fd`` holds now, at most _BURST bytes (a writer that never stops cannot keep the
        caller here); at its end, close it."""
        entry = self._open.get(fd)
        if entry is None:
            return
        decoder, stream = entry
        for _ in range(_BURST // _CHUNK):
            try:
                data = _real.read(fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                del self._open[fd]
                _real.close(fd)
            text = decoder.decode(data, final=not data)
            if text:
                target = getattr(sys, stream)
                target.write(text)
                target.flush()
            if not data:
                return

    def finish(self, timeout: float) -> None:
        """Show what is left until every pipe ends (its writers are gone), at most ``timeout``
        seconds; then close what is still open."""
        deadline = _real.monotonic() + timeout
        while self._open and (left := deadline - _real.monotonic()) > 0:
            for fd in _real.readable(self.fds, left):
                self.pump(fd)
        self.close()

    def close(self) -> None:
        for fd in list(self._open):
            self.pump(fd)
        for fd in list(self._open):
            del self._open[fd]
            _real.close(fd)
