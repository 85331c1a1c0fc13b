"""Per-process state inside a rank: environment, pid, hostname, uname, the random module's
global generator, os.urandom and tempfile's name generator."""

from __future__ import annotations

import os
import random
import socket
import tempfile
from collections.abc import MutableMapping
from typing import Any, Iterator

from ..runtime.scheduler import Task, current_task
from .registry import original, patch, patch_function

_RANDOM_FUNCTIONS = (
    "betavariate", "binomialvariate", "choice", "choices", "expovariate", "gammavariate", "gauss",
    "getrandbits", "getstate", "lognormvariate", "normalvariate", "paretovariate", "randbytes",
    "randint", "random", "randrange", "sample", "seed", "setstate", "shuffle", "triangular",
    "uniform", "vonmisesvariate", "weibullvariate",
)


class EnvironProxy(MutableMapping):
    """os.environ: the rank's own environment inside a rank, the real one elsewhere."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def _env(self) -> Any:
        task = current_task()
        return self._real if task is None else task.context.env

    def __getitem__(self, key: str) -> str:
        return self._env()[key]

    def __setitem__(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"str expected, not {type(value if isinstance(key, str) else key).__name__}")
        self._env()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._env()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._env()))

    def __len__(self) -> int:
        return len(self._env())

    def __contains__(self, key: object) -> bool:
        return key in self._env()

    def copy(self) -> dict[str, str]:
        return dict(self._env())

    def __repr__(self) -> str:
        return f"environ({dict(self._env())!r})"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _uname(task: Task) -> Any:
    real = original(os, "uname")()
    return os.uname_result((real.sysname, task.context.hostname, real.release, real.version, real.machine))


def _random_method(name: str) -> Any:
    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        return getattr(task.context.random, name)(*args, **kwargs)
    return sim


def _tempname_rng(self: Any) -> random.Random:
    task = current_task()
    if task is not None:
        return task.context.tempnames
    return _real_rng.fget(self)


_real_rng = tempfile._RandomNameSequence.__dict__["rng"]


def _gettempdir(task: Task) -> str:
    env = task.context.env
    for key in ("TMPDIR", "TEMP", "TMP"):
        value = env.get(key)
        if value and os.path.isdir(value):
            return os.path.abspath(value)
    return "/tmp"


def install() -> None:
    patch(os, "environ", EnvironProxy(os.environ))
    patch_function(os, "putenv", lambda task, key, value: None)
    patch_function(os, "unsetenv", lambda task, key: None)
    patch_function(os, "getpid", lambda task: task.context.pid)
    patch_function(os, "getppid", lambda task: task.context.pid - task.context.local_rank - 1)
    patch_function(os, "uname", _uname)
    patch_function(os, "urandom", lambda task, n: task.context.urandom(n))
    if hasattr(os, "getrandom"):
        patch_function(os, "getrandom", lambda task, n, flags=0: task.context.urandom(n))
    patch_function(socket, "gethostname", lambda task: task.context.hostname)
    patch_function(random, "_urandom", lambda task, n: task.context.urandom(n))
    for name in _RANDOM_FUNCTIONS:
        if hasattr(random, name):
            patch_function(random, name, _random_method(name))
    patch(tempfile._RandomNameSequence, "rng", property(_tempname_rng), scan=False)
    patch_function(tempfile, "gettempdir", _gettempdir)
    patch_function(tempfile, "gettempdirb", lambda task: os.fsencode(_gettempdir(task)))
