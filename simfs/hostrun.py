"""The host's side of a run: its interpreter-wide state taken (HostGuard), the interception
installed and verified, the heap frozen, and everything put back after the run.

A series of runs in one thread (``series``: the restarts of an exhaustive crash walk) prepares
the host once: between its runs it puts back what rank code can change (the guard's state as the
series' runs start: the interception in place) and puts back any patch rank code replaced, and
the host is as it was when the series ends. A run in a series sees the interpreter exactly as a
run on its own does."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .runtime.carrier.preload import preload, prepare_c10d
from .runtime.heap import frozen_heap, young_gc
from .runtime.hostguard import HostGuard

_local = threading.local()  # .series: the guard of the series open in this thread, or None


@contextmanager
def series() -> Iterator[None]:
    """Runs in this block (in this thread) share one preparation of the host; blocks nest."""
    if getattr(_local, "series", None) is not None:
        yield
        return
    with prepared():  # as for one run, and the series' runs inside it
        _local.series = HostGuard(between_runs=True)  # the host as each run of the series starts
        collecting = gc.isenabled()
        gc.disable()  # young collections between the runs (young_gc), as during each
        try:
            yield
        finally:
            _local.series = None
            if collecting:
                gc.enable()


@contextmanager
def prepared(preloaded: tuple[str, ...] | None = None) -> Iterator[None]:
    """The host ready for one run during the block, and as it was after it. ``preloaded``: for a
    run of rank processes, the modules they start with besides torch (Cluster's ``preload``),
    imported first (runtime.carrier.preload), so that the interception's scan and the heap frozen
    for the run include them: imported in the run, they would stay out of the frozen heap of the
    zygote, and every rank forked from it would walk their objects in its cycle collections."""
    from .rank.intercept import install

    between: HostGuard | None = getattr(_local, "series", None)
    if between is not None:
        try:
            _preload(preloaded)
            install(modules_unchanged=between.modules_as_taken)  # puts back what the last run replaced
            yield
        finally:
            between.restore()
            young_gc()
        return
    guard = HostGuard()  # before the imports and install(): what they change (warnings filters...) is undone after
    try:
        _preload(preloaded)
        install()
        with frozen_heap():  # the host's objects need no cycle collection while ranks allocate
            yield
    finally:
        guard.restore()


def _preload(preloaded: tuple[str, ...] | None) -> None:
    if preloaded is not None:
        preload(preloaded)


def ready_to_fork() -> None:
    """In a process that forks a child per search (``simfs run``'s workers): install the
    interception and look through every imported module for what it and c10d replace, once, here,
    so that each child starts from it (with torch imported, each would otherwise spend ~0.3 s on it
    before its first example). The patches stay, as after any run in this process."""
    with prepared():
        pass
    prepare_c10d()
