"""Cyclic garbage collection kept off the host's objects while simulations run.

A full collection walks every object of the process (with torch imported, a quarter million
that no run made). Freezing them (CPython's ``gc.freeze``) before a run, or before a search of
thousands of runs, keeps collections to what the simulation allocates. Blocks nest: only the
outermost freezes and thaws, and a host that froze objects itself keeps its arrangement
(``gc.get_freeze_count`` walks the frozen objects, so it is asked once per outermost block)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


class _Garbage:
    """Finished runs and dropped clusters are cyclic garbage that a frozen heap keeps; a full
    collection comes first once enough runs or file data went by (amortized: thousands of small
    runs cost one collection)."""

    RUNS, BYTES = 1000, 256 << 20

    def __init__(self) -> None:
        self.runs = self.bytes = 0

    def note(self, live_bytes: int) -> None:
        self.runs += 1
        self.bytes += live_bytes

    def collect_if_due(self) -> None:
        if self.runs >= self.RUNS or self.bytes >= self.BYTES:
            gc.collect()
            self.runs = self.bytes = 0


garbage = _Garbage()


def young_gc() -> None:
    """Collect the young generations when they fill up, while automatic collection is off (during
    a run, a full collection would walk every rank's frames and grows with the number of ranks;
    in a series of runs, collecting as each run ends would walk what the series keeps again and
    again)."""
    if gc.get_count()[0] > 20_000:
        gc.collect(1)


_depth = [0]  # frozen_heap blocks open now


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Exclude the objects that exist now from cyclic collection until the block ends."""
    if _depth[0] or gc.get_freeze_count():
        _depth[0] += 1
        try:
            yield
        finally:
            _depth[0] -= 1
        return
    garbage.collect_if_due()
    gc.freeze()
    _depth[0] = 1
    try:
        yield
    finally:
        _depth[0] = 0
        gc.unfreeze()
