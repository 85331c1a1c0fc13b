"""Draws from a choice source bound to one thread (Hypothesis' data object) made from the
simulation thread: each draw is forwarded to the owner's thread and answered there."""

from __future__ import annotations

import _thread
import queue
from typing import Any

from .. import _real
from ..choices import ChoiceSource


class AbortRun(BaseException):
    """The choice source gave up (Hypothesis stopped the example): unwind everything."""


class Marshal:
    """Forwards draws to the thread that owns a thread-bound choice source."""

    thread_bound = False

    def __init__(self, inner: ChoiceSource) -> None:
        self.inner = inner
        # (answered, [the draw, the source's exception], "choose" or "fraction", n)
        self._requests: queue.SimpleQueue[tuple[_thread.LockType, list[Any], str, int]] = queue.SimpleQueue()
        self.failure: BaseException | None = None

    def _ask(self, kind: str, arg: int) -> Any:
        if self.failure is not None:
            raise AbortRun()
        done = _real.allocate_lock()  # real: this runs inside ranks, where locks are simulated
        done.acquire()
        box: list[Any] = [None, None]
        self._requests.put((done, box, kind, arg))
        done.acquire()
        if box[1] is not None:
            raise AbortRun()
        return box[0]

    def choose(self, n: int) -> int:
        return self._ask("choose", n) if n > 1 else 0

    def fraction(self) -> float:
        value: float = self._ask("fraction", 0)
        return value

    def serve(self, timeout: float) -> None:
        """Answer pending draws (called on the owning thread)."""
        try:
            done, box, kind, arg = self._requests.get(timeout=timeout)
        except queue.Empty:
            return
        try:
            box[0] = self.inner.choose(arg) if kind == "choose" else self.inner.fraction()
        except BaseException as exc:  # noqa: BLE001 - e.g. Hypothesis' StopTest: re-raised on the owner's thread
            self.failure = exc
            box[1] = exc
        done.release()
