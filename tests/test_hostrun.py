"""A series of runs (simfs.hostrun.series, how an exhaustive walk runs its restarts) prepares the
host once, yet each of its runs sees the interpreter as a run on its own does, and the host is as
it was when the series ends: whatever the run before changed is put back in between."""

from __future__ import annotations

import builtins
import gc
import logging
import os
import random
import sys
import tempfile
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import simfs
from simfs import hostrun


def _replace_module() -> None:
    sys.modules["json"] = types.ModuleType("json")


_CACHED = logging.getLogger("simfs.test.series.cache")  # exists before any series


def _level_set_and_put_back() -> None:
    """isEnabledFor remembers its answer; a level assigned directly does not forget it."""
    _CACHED.setLevel(logging.DEBUG)
    _CACHED.isEnabledFor(logging.DEBUG)
    _CACHED.level = logging.NOTSET


def _replace_class_patch() -> None:
    tempfile._RandomNameSequence.rng = property(lambda self: random.Random(7))  # type: ignore[attr-defined]


def _one_name_generator() -> bool:
    """tempfile's names come from one generator per process (simfs's patch), not a new one each time."""
    names = tempfile._RandomNameSequence()  # type: ignore[attr-defined]
    return names.rng is names.rng


def _replace_patch() -> None:
    os.stat = lambda *args, **kwargs: "not simulated"  # type: ignore[assignment]  # what a rank may do


# (what a rank changes, what the next run looks at)
CHANGES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "recursion limit": (lambda: sys.setrecursionlimit(5000), sys.getrecursionlimit),
    "warnings filter": (lambda: warnings.simplefilter("error"), lambda: warnings.filters[:1]),
    "logging.basicConfig": (lambda: logging.basicConfig(level=logging.DEBUG),
                            lambda: (len(logging.getLogger().handlers), logging.getLogger().level)),
    "a logger's level": (lambda: logging.getLogger("simfs.test.series").setLevel(logging.DEBUG),
                         lambda: logging.getLogger("simfs.test.series").level),
    "a level set and put back": (_level_set_and_put_back, lambda: _CACHED.isEnabledFor(logging.DEBUG)),
    "a new builtin": (lambda: setattr(builtins, "simfs_series_name", 1),
                      lambda: hasattr(builtins, "simfs_series_name")),
    "a module replaced in sys.modules": (_replace_module, lambda: "dumps" in vars(sys.modules["json"])),
    "a patched function replaced": (_replace_patch, lambda: os.stat("/shared").st_mode != 0),
    "a patched class attribute replaced": (_replace_class_patch, _one_name_generator),
}


def _cluster() -> simfs.Cluster:
    return simfs.Cluster(nodes=1, ranks_per_node=2, profile="nfs", carrier="greenlet", isolate=False)


def _host() -> tuple[Any, ...]:
    return (sys.getrecursionlimit(), list(warnings.filters), list(logging.getLogger().handlers),
            logging.getLogger().level, logging.getLogger("simfs.test.series").level, dict(vars(builtins)),
            sys.modules.get("json"), os.stat, vars(tempfile._RandomNameSequence)["rng"],  # type: ignore[attr-defined]
            gc.isenabled(), gc.get_freeze_count())


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_run_of_a_series_sees_the_interpreter_of_a_run_on_its_own(name: str) -> None:
    change, look = CHANGES[name]
    alone = _cluster().run(look).returns  # what a run sees on its own
    before = _host()
    with hostrun.series():
        cluster = _cluster()
        changed = cluster.run(change)
        assert changed.ok, changed.summary()
        seen = cluster.run(look)
    assert seen.ok, seen.summary()
    assert seen.returns == alone, f"{name}: the run after the change saw {seen.returns}, a run on its own {alone}"
    assert _host() == before, f"{name}: the host changed"


def test_a_series_inside_a_series_is_the_same_series() -> None:
    before = _host()
    with hostrun.series():
        with hostrun.series():
            assert _cluster().run(CHANGES["recursion limit"][0]).ok
        assert _cluster().run(sys.getrecursionlimit).returns == {0: before[0], 1: before[0]}
    assert _host() == before
