"""Per-process state inside a rank: environment, pid, hostname, uname, the random module's
global generator, os.urandom and tempfile's name generator."""

from __future__ import annotations

import os
import random
import socket
import tempfile
from collections.abc import Iterator, MutableMapping
from typing import Any

from ...tasks.process import named_tempdir
from ...tasks.task import Task, current_task
from .registry import original, patch, patch_function

_RANDOM_FUNCTIONS = (
    "betavariate", "binomialvariate", "choice", "choices", "expovariate", "gammavariate", "gauss",
    "getrandbits", "getstate", "lognormvariate", "normalvariate", "paretovariate", "randbytes",
    "randint", "random", "randrange", "sample", "seed", "setstate", "shuffle", "triangular",
    "uniform", "vonmisesvariate", "weibullvariate",
)


class EnvironProxy(MutableMapping[str, str]):
    """os.environ: the rank's own environment inside a rank, the real one elsewhere."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self._real = real
        # a copy of the real environment, and the encoded entries it was made of (kept, not
        # replaced: a host that froze its objects keeps its count of frozen objects)
        self._real_data: dict[Any, Any] = {}
        self._real_copy: dict[str, str] = {}

    def _env(self) -> MutableMapping[str, str]:
        task = current_task()
        env: MutableMapping[str, str] = self._real if task is None or task.host_calls else task.context.env
        return env

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
        env = self._env()
        if env is not self._real:
            return dict(env)
        data = getattr(self._real, "_data", None)  # os._Environ's encoded entries: compared at C speed
        if data is None:
            return dict(env)
        if data != self._real_data:
            self._real_data.clear()
            self._real_data.update(data)
            self._real_copy.clear()
            self._real_copy.update(env)
        return dict(self._real_copy)

    def __repr__(self) -> str:
        return f"environ({dict(self._env())!r})"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class EnvironbProxy(MutableMapping[bytes, bytes]):
    """os.environb: the rank's environment as bytes inside a rank (the same environment as
    os.environ, as in a real process), the real one elsewhere."""

    def __init__(self, real: MutableMapping[bytes, bytes]) -> None:
        self._real = real

    def _env(self) -> MutableMapping[str, str] | None:
        task = current_task()
        env: MutableMapping[str, str] | None = None if task is None or task.host_calls else task.context.env
        return env

    def __getitem__(self, key: bytes) -> bytes:
        env = self._env()
        if env is None:
            return self._real[key]
        return os.fsencode(env[os.fsdecode(key)])

    def __setitem__(self, key: bytes, value: bytes) -> None:
        env = self._env()
        if env is None:
            self._real[key] = value
            return
        if not isinstance(key, bytes) or not isinstance(value, bytes):
            raise TypeError(f"bytes expected, not {type(value if isinstance(key, bytes) else key).__name__}")
        env[os.fsdecode(key)] = os.fsdecode(value)

    def __delitem__(self, key: bytes) -> None:
        env = self._env()
        if env is None:
            del self._real[key]
        else:
            del env[os.fsdecode(key)]

    def __iter__(self) -> Iterator[bytes]:
        env = self._env()
        return iter(list(self._real) if env is None else [os.fsencode(k) for k in env])

    def __len__(self) -> int:
        env = self._env()
        return len(self._real if env is None else env)

    def copy(self) -> dict[bytes, bytes]:
        return dict(self.items())

    def __repr__(self) -> str:
        return f"environ({dict(self.items())!r})"


def _atexit_register(task: Task, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """atexit inside a rank: run at the rank's normal exit, not at the host's."""
    task.context.atexit.append((fn, args, kwargs))
    return fn


def _atexit_unregister(task: Task, fn: Any) -> None:
    task.context.atexit[:] = [entry for entry in task.context.atexit if entry[0] != fn]


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
        rng: random.Random = task.context.tempnames
        return rng
    real: random.Random = _real_rng.fget(self)
    return real


_real_rng = tempfile._RandomNameSequence.__dict__["rng"]  # type: ignore[attr-defined]  # private: its rng property


def _gettempdir(task: Task) -> str:
    return named_tempdir(task.context.env, os.path.isdir)  # (isdir on the rank's simulated machine)


def install() -> None:
    patch(os, "environ", EnvironProxy(os.environ))
    patch(os, "environb", EnvironbProxy(os.environb), scan=False)
    import atexit

    patch_function(atexit, "register", _atexit_register)
    patch_function(atexit, "unregister", _atexit_unregister)
    patch_function(atexit, "_run_exitfuncs", lambda task: task.context.run_atexit())
    patch_function(atexit, "_clear", lambda task: task.context.atexit.clear())
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
    # tempfile's name generator class is private (typeshed omits it)
    patch(tempfile._RandomNameSequence, "rng", property(_tempname_rng), scan=False)  # type: ignore[attr-defined]
    patch_function(tempfile, "gettempdir", _gettempdir)
    patch_function(tempfile, "gettempdirb", lambda task: os.fsencode(_gettempdir(task)))
