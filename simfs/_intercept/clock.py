"""Virtual time inside a rank: time.*, and datetime.now/today, read the simulation clock;
time.sleep advances it without costing wall time."""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import TYPE_CHECKING, Any

from ..runtime.scheduler import Task
from .registry import current, patch, patch_function

if TYPE_CHECKING:
    from ..runtime.machine import Machine

_MAX_SLEEP = (2**63 - 1) / 1e9
_SLEEP_ZERO = 1e-6  # sleep(0) still lets virtual time move, so spin loops terminate


def _machine(task: Task) -> Machine:
    machine: Machine = task.context.sys.machine  # the rank's Process (opaque to the scheduler)
    return machine


def _wall(task: Task) -> float:
    return _machine(task).wall_time()


def _monotonic(task: Task) -> float:
    return _machine(task).now() + 1000.0


def sleep(task: Task, seconds: float) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"'{type(seconds).__name__}' object cannot be interpreted as an integer or float")
    if math.isnan(seconds) or seconds < 0:
        raise ValueError("sleep length must be non-negative")
    if seconds > _MAX_SLEEP:  # as CPython: nanoseconds in a signed 64-bit integer
        raise OverflowError("timestamp too large to convert to C _PyTime_t")
    machine = _machine(task)
    proc = task.context
    machine.note("sleep", "", f"{seconds:g}s", rank=proc.rank, node=proc.node)
    machine.sched.elapse(max(float(seconds), _SLEEP_ZERO))


def _struct(fn: Any) -> Any:
    def sim(task: Task, secs: float | None = None) -> Any:
        return fn(_wall(task) if secs is None else secs)
    return sim


def _strftime(real: Any) -> Any:
    def sim(task: Task, fmt: str, t: Any = None) -> str:
        text: str = real(fmt, time.localtime(_wall(task)) if t is None else t)
        return text
    return sim


class _RealInstances(type):
    """isinstance/issubclass against the stand-in class answer as for the real one."""

    __real__: type  # set by each class made with it

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls.__real__)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.__real__)


_RealDatetime = dt.datetime
_RealDate = dt.date


class SimDatetime(_RealDatetime, metaclass=_RealInstances):
    """datetime.datetime whose now()/utcnow()/today() read the simulation clock in a rank."""

    __real__ = _RealDatetime

    # instances stay real datetimes: __new__ and the constructors return the real class's
    def __new__(cls, *args: Any, **kwargs: Any) -> dt.datetime:  # type: ignore[misc]
        return _RealDatetime(*args, **kwargs)

    @classmethod
    def now(cls, tz: Any = None) -> dt.datetime:  # type: ignore[override]  # a real datetime
        task = current()
        if task is None:
            return _RealDatetime.now(tz)
        return _RealDatetime.fromtimestamp(_wall(task), tz)

    @classmethod
    def utcnow(cls) -> dt.datetime:  # type: ignore[override]  # a real datetime
        task = current()
        if task is None:
            return _RealDatetime.now(dt.timezone.utc).replace(tzinfo=None)
        return _RealDatetime.fromtimestamp(_wall(task), dt.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls) -> dt.datetime:  # type: ignore[override]  # a real datetime
        return cls.now()


class SimDate(_RealDate, metaclass=_RealInstances):
    """datetime.date whose today() reads the simulation clock in a rank."""

    __real__ = _RealDate

    def __new__(cls, *args: Any, **kwargs: Any) -> dt.date:  # type: ignore[misc]  # instances stay real dates
        return _RealDate(*args, **kwargs)

    @classmethod
    def today(cls) -> dt.date:  # type: ignore[override]  # a real date
        task = current()
        if task is None:
            return _RealDate.today()
        return _RealDate.fromtimestamp(_wall(task))


def install() -> None:
    patch_function(time, "time", _wall)
    patch_function(time, "time_ns", lambda task: int(_wall(task) * 1e9))
    for name in ("monotonic", "perf_counter"):
        patch_function(time, name, _monotonic)
        patch_function(time, name + "_ns", lambda task: int(_monotonic(task) * 1e9))
    patch_function(time, "sleep", sleep)
    patch_function(time, "localtime", _struct(time.localtime))
    patch_function(time, "gmtime", _struct(time.gmtime))
    patch_function(time, "ctime", _struct(time.ctime))
    patch_function(time, "strftime", _strftime(time.strftime))
    patch(dt, "datetime", SimDatetime)
    patch(dt, "date", SimDate)
