"""Ctrl-C held back across a step that must not be cut in two (the simulation thread's start)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Within the block a SIGINT is noted, not acted on; at the block's end the handler it found
    runs for it (Python's own raises KeyboardInterrupt there). Only the main thread runs Python's
    signal handlers: elsewhere, and where SIGINT is ignored or left to the kernel, the block runs
    as it is."""
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        yield
        return
    caught: list[FrameType | None] = []
    signal.signal(signal.SIGINT, lambda _signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
    if caught:
        handler(signal.SIGINT, caught[0])
