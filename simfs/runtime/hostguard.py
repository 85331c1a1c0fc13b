"""Interpreter-wide settings that rank code can change only through the shared interpreter
(recursion limit, switch interval, int digits, dlopen flags, garbage collector, warnings filters,
logging configuration, socket default timeout, threading's trace hooks, builtins, sys.modules,
the host's random generator): taken before a run and put back after it, so the host is as it
was. No bytecode is written while ranks run."""

from __future__ import annotations

import builtins
import collections
import gc
import io
import itertools
import logging
import operator
import random
import socket
import sys
import threading
import warnings
from collections.abc import Collection
from typing import Any

from .dictversion import DictWatch


def _loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                   if isinstance(lg, logging.Logger))]


_LOGGER_STATE = operator.attrgetter("handlers", "level", "propagate", "disabled")
_CACHE = operator.attrgetter("_cache")  # a logger's isEnabledFor answers (Manager._clear_cache empties them)


def _same_prefix(items: Collection[Any], saved: list[Any]) -> bool:
    """``items`` begins with the very objects of ``saved``, in order (identity, at C speed,
    allocating nothing: no collection starts)."""
    return len(items) >= len(saved) and all(map(operator.is_, itertools.islice(items, len(saved)), saved))


def _equal_prefix(items: Collection[Any], saved: list[Any]) -> bool:
    """``items`` begins with ``saved``'s elements, compared as ``==`` compares lists (identity
    first): several times faster than ``_same_prefix``, but an object whose ``__eq__`` says yes
    passes for the one it replaced."""
    return len(items) >= len(saved) and list(itertools.islice(items, len(saved))) == saved


class HostGuard:
    """What the host had before a run. ``between_runs``: the guard a series of runs restores
    between its runs, which compares sys.modules with ``==`` (a module object that claims
    equality fools only the series' own later runs: the guard that puts the host back when the
    series ends compares identities)."""

    def __init__(self, *, between_runs: bool = False) -> None:
        self._begins_with = _equal_prefix if between_runs else _same_prefix
        self.recursion = sys.getrecursionlimit()
        self.switch = sys.getswitchinterval()
        self.gc_threshold = gc.get_threshold()
        self.bytecode = sys.dont_write_bytecode
        self.filters = list(warnings.filters)
        self.timeout = socket.getdefaulttimeout()
        self.int_digits = sys.get_int_max_str_digits()
        self.dlopen = sys.getdlopenflags()
        self.thread_hooks = (threading._trace_hook, threading._profile_hook)  # type: ignore[attr-defined]  # private
        self.namespaces = [(vars(module), dict(vars(module))) for module in (builtins, io)]
        self.module_entries = (list(sys.modules), list(sys.modules.values()))
        self.modules_as_taken = True  # after restore(): sys.modules holds exactly these again
        self._modules = DictWatch(sys.modules)  # sys.modules untouched since it was last found right
        self._modules.mark()
        self.import_system = (list(sys.meta_path), list(sys.path_hooks))
        self.random = random._inst.getstate()
        self.logging_disable = logging.root.manager.disable
        self.logger_entries = list(logging.Logger.manager.loggerDict.values())  # placeholders too
        self.logger_objects = _loggers()
        self.logger_states: list[tuple[list[Any], int, bool, bool]] = [  # as _LOGGER_STATE reads them
            (list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in self.logger_objects]
        sys.dont_write_bytecode = True  # imports inside ranks must not write __pycache__ to the real disk

    def restore(self) -> None:
        self._restore_namespaces()
        self._restore_import_system()
        sys.setrecursionlimit(self.recursion)
        sys.set_int_max_str_digits(self.int_digits)
        sys.setdlopenflags(self.dlopen)
        threading._trace_hook, threading._profile_hook = self.thread_hooks  # type: ignore[attr-defined]  # private
        if random._inst.getstate() != self.random:
            random._inst.setstate(self.random)
        sys.setswitchinterval(self.switch)
        gc.set_threshold(*self.gc_threshold)
        sys.dont_write_bytecode = self.bytecode
        if warnings.filters != self.filters:
            warnings.filters[:] = self.filters  # type: ignore[index]  # a list (typeshed says Sequence)
            warnings._filters_mutated()  # type: ignore[attr-defined]  # private
        socket.setdefaulttimeout(self.timeout)
        logging.root.manager.disable = self.logging_disable
        self._restore_loggers()

    def _restore_loggers(self) -> None:
        entries = logging.Logger.manager.loggerDict.values()
        if len(entries) == len(self.logger_entries) and _same_prefix(entries, self.logger_entries) and \
                logging.root is self.logger_objects[0] and \
                list(map(_LOGGER_STATE, self.logger_objects)) == self.logger_states:
            # (the common case, checked at C speed: no logger changed or came); what isEnabledFor
            # remembered may date from a level the run set and put back itself
            collections.deque(map(dict.clear, map(_CACHE, self.logger_objects)), maxlen=0)
            return
        loggers = _loggers()
        known = set()
        for lg, (handlers, level, propagate, disabled) in zip(self.logger_objects, self.logger_states):
            known.add(id(lg))
            if lg.handlers != handlers:
                lg.handlers[:] = handlers
            lg.level, lg.propagate, lg.disabled = level, propagate, disabled
        for lg in loggers:
            if id(lg) not in known:
                # a logger made during the run: its handlers were rank code's (they write to the
                # rank's simulated streams and files); a NullHandler writes nowhere and is what a
                # library puts on a logger it keeps quiet (propagate=False), so it stays
                lg.handlers[:] = [h for h in lg.handlers if type(h) is logging.NullHandler]
        logging.Logger.manager._clear_cache()  # type: ignore[attr-defined]  # private

    def _restore_import_system(self) -> None:
        meta_path, path_hooks = self.import_system
        if sys.meta_path != meta_path:
            sys.meta_path[:] = meta_path
        if sys.path_hooks != path_hooks:
            sys.path_hooks[:] = path_hooks

    def _restore_namespaces(self) -> None:
        """builtins, io and sys.modules as they were (modules imported during the run stay: an
        import is a cache, but a replaced module or a new builtin is rank code's change). simfs's
        own open() is taken out too: the next run puts it back."""
        for space, saved in self.namespaces:
            if space != saved:
                for name in [n for n in space if n not in saved]:
                    del space[name]
                space.update(saved)
        modules, (names, values) = sys.modules, self.module_entries
        self.modules_as_taken = len(modules) == len(names)
        if self._modules.watches(modules) and self._modules.unchanged():
            return  # (the common case: no import, no change since it was last found right)
        if not (self._begins_with(modules, names) and self._begins_with(modules.values(), values)):
            # (else the common case, checked at C speed: imports during the run come after these)
            self.modules_as_taken = False
            for name, module in zip(names, values):
                if modules.get(name) is not module:
                    modules[name] = module
        self._modules.mark()
