"""What confined processes write to their stdout and stderr, read from the pipes this process
gives them (never the caller's terminal or files) and handed to a sink: a rank process's to the
run's capture of its output (simfs/capture.py), an isolated child's (simfs/supervise.py) shown on
this process's own ``sys.stdout`` and ``sys.stderr`` with control and escape sequences made
visible (simfs.visible, ``Shown``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

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


Sink = Callable[[bytes], None]  # takes what a pipe held, in pieces; b"" once, at the pipe's end


class Shown:
    """A sink that shows what arrives on ``sys.<stream>`` ("stdout" or "stderr"), made visible."""

    def __init__(self, stream: str) -> None:
        self._decoder = VisibleDecoder()
        self._stream = stream

    def __call__(self, data: bytes) -> None:
        text = self._decoder.decode(data, final=not data)
        if text:
            target = getattr(sys, self._stream)
            target.write(text)
            target.flush()


class Relay:
    """The read ends of the output pipes of this process's confined children."""

    def __init__(self) -> None:
        self._open: dict[int, Sink] = {}

    def add(self, fd: int, sink: Sink) -> None:
        """Hand what arrives on ``fd`` to ``sink``."""
        self._open[fd] = sink

    @property
    def fds(self) -> list[int]:
        return list(self._open)

    def pump(self, fd: int) -> None:
        """Hand on what ``fd`` holds now, at most _BURST bytes (a writer that never stops cannot keep
        the caller here); at its end, close it."""
        sink = self._open.get(fd)
        if sink is None:
            return
        for _ in range(_BURST // _CHUNK):
            try:
                data = _real.read(fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                del self._open[fd]
                _real.close(fd)
            sink(data)
            if not data:
                return

    def finish(self, timeout: float) -> None:
        """Hand on what is left until every pipe ends (its writers are gone), at most ``timeout``
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
