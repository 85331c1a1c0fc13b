"""Interpreter-wide settings that rank code can change only through the shared interpreter
(recursion limit, switch interval, garbage collector, warnings filters, logging configuration,
socket default timeout): taken before a run and put back after it, so the host is as it was.
No bytecode is written while ranks run."""

from __future__ import annotations

import gc
import logging
import socket
import sys
import warnings
from typing import Any


def _loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                   if isinstance(lg, logging.Logger))]


class HostGuard:
    """What the host had before a run."""

    def __init__(self) -> None:
        self.recursion = sys.getrecursionlimit()
        self.switch = sys.getswitchinterval()
        self.gc_threshold = gc.get_threshold()
        self.bytecode = sys.dont_write_bytecode
        self.filters = list(warnings.filters)
        self.timeout = socket.getdefaulttimeout()
        self.logging_disable = logging.root.manager.disable
        self.loggers: list[tuple[logging.Logger, list[Any], int, bool, bool]] = [
            (lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in _loggers()]
        sys.dont_write_bytecode = True  # imports inside ranks must not write __pycache__ to the real disk

    def restore(self) -> None:
        sys.setrecursionlimit(self.recursion)
        sys.setswitchinterval(self.switch)
        gc.set_threshold(*self.gc_threshold)
        sys.dont_write_bytecode = self.bytecode
        if warnings.filters != self.filters:
            warnings.filters[:] = self.filters
            warnings._filters_mutated()  # type: ignore[attr-defined]
        socket.setdefaulttimeout(self.timeout)
        logging.root.manager.disable = self.logging_disable
        known = set()
        for lg, handlers, level, propagate, disabled in self.loggers:
            known.add(id(lg))
            if lg.handlers != handlers:
                lg.handlers[:] = handlers
            lg.level, lg.propagate, lg.disabled = level, propagate, disabled
        for lg in _loggers():
            if id(lg) not in known:
                lg.handlers.clear()  # a logger made during the run: its handlers were rank code's
        logging.Logger.manager._clear_cache()  # type: ignore[attr-defined]
