"""Virtual time inside a rank: every clock of time, os.times, datetime.now/today and uuid.uuid1
read the simulation clock; time.sleep advances it without costing wall time."""

from __future__ import annotations

import datetime as dt
import errno
import math
import operator
import os
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import BypassError
from ...tasks.task import Task
from .registry import dispatcher, patch, patch_function

if TYPE_CHECKING:
    from ...tasks.kernel import Machine
    from ...tasks.process import Process

_MAX_SLEEP = (2**63 - 1) / 1e9
_SLEEP_ZERO = 1e-6  # sleep(0) still lets virtual time move, so spin loops terminate
_TAI_OFFSET = 37.0  # TAI - UTC since 2017-01-01 (IERS Bulletin C), what NTP gives Linux's CLOCK_TAI
_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of times(2)
_UUID_EPOCH = 0x01B21DD213814000  # 100 ns intervals from 1582-10-15 to 1970-01-01 (RFC 9562 5.1)


def _machine(task: Task) -> Machine:
    machine: Machine = task.context.sys.machine  # the rank's Process (opaque to the scheduler)
    return machine


def _wall(task: Task) -> float:
    return _machine(task).wall_time()


def _monotonic(task: Task) -> float:
    return _machine(task).now() + 1000.0


def _cpu(task: Task) -> float:
    """CPU time of a simulated process or thread: simfs charges computation no virtual time and
    has no CPU model, so it is the virtual time since the run began, as if each rank ran on a CPU
    of its own throughout (sleeps included). A clock that never moved would make every CPU-time
    measurement 0 and rates divide by zero. Python documents only differences as meaningful."""
    machine = _machine(task)
    return machine.now() - machine.run_start


def _tai(task: Task) -> float:
    return _wall(task) + _TAI_OFFSET


def _in_ns(clock: Callable[..., float]) -> Callable[..., int]:
    def sim(task: Task, *args: Any) -> int:
        return int(clock(task, *args) * 1e9)
    return sim


# Linux clock ids (clock_gettime(2), include/uapi/linux/time.h); a simulated node never suspends,
# so BOOTTIME is MONOTONIC, and has no NTP slewing, so MONOTONIC_RAW is too
_CLOCKS: dict[int, Callable[[Task], float]] = {
    0: _wall, 1: _monotonic,  # REALTIME, MONOTONIC
    2: _cpu, 3: _cpu,  # PROCESS_CPUTIME_ID, THREAD_CPUTIME_ID
    4: _monotonic, 5: _wall, 6: _monotonic, 7: _monotonic,  # MONOTONIC_RAW, REALTIME_COARSE, MONOTONIC_COARSE, BOOTTIME
    8: _wall, 9: _monotonic, 11: _tai,  # REALTIME_ALARM, BOOTTIME_ALARM, TAI
}


def clock_gettime(task: Task, clk_id: Any) -> float:
    clk = operator.index(clk_id)
    if clk < 0:  # a dynamic clock: clock_getcpuclockid(3), pthread_getcpuclockid(3), a PTP device
        raise BypassError(f"time.clock_gettime({clk})", "it reads a clock of a real process, thread or device",
                          "use time.monotonic() or time.process_time()")
    if clk not in _CLOCKS:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))  # as Linux for an unknown id
    return _CLOCKS[clk](task)


def times(task: Task) -> os.times_result:
    """os.times (times(2)): user time is the CPU time above, in whole clock ticks; no system time
    (simfs has no kernel) and no children's (a rank cannot start real processes)."""
    def ticks(seconds: float) -> float:
        return math.floor(seconds * _TICKS) / _TICKS
    return os.times_result((ticks(_cpu(task)), 0.0, 0.0, 0.0, ticks(_monotonic(task))))


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


def _local_now(real: Any, arity: int) -> Any:
    """strftime(fmt[, t]) and asctime([t]): without t, the local time now."""
    def sim(task: Task, *args: Any) -> str:
        text: str = real(*args) if len(args) == arity else real(*args, time.localtime(_wall(task)))
        return text
    return sim


def node_address(task: Task) -> int:
    """The simulated node's 48-bit MAC: locally administered unicast 02:00:00:00:NN:NN (IEEE 802
    U/L bit), so it is the node's, the same in every run, and never a real vendor's."""
    node: int = task.context.node
    return 0x02_00_00_00_00_00 | node


_last_uuid_time: weakref.WeakKeyDictionary[Process, int] = weakref.WeakKeyDictionary()


def uuid1(task: Task, node: int | None = None, clock_seq: int | None = None) -> uuid.UUID:
    """A version-1 UUID (RFC 9562 5.1) from virtual time, as CPython's Python fallback makes it:
    a timestamp that never repeats within the process, clock_seq from the process's random
    generator, the node's address."""
    proc = task.context
    stamp = int(_wall(task) * 1e7) + _UUID_EPOCH
    stamp = max(stamp, _last_uuid_time.get(proc, -1) + 1)
    _last_uuid_time[proc] = stamp
    seq = proc.random.getrandbits(14) if clock_seq is None else clock_seq
    fields = (stamp & 0xFFFFFFFF, (stamp >> 32) & 0xFFFF, (stamp >> 48) & 0x0FFF, (seq >> 8) & 0x3F, seq & 0xFF,
              node_address(task) if node is None else node)
    return uuid.UUID(fields=fields, version=1)


def _datetime_now(task: Task, cls: type[dt.datetime], tz: dt.tzinfo | None = None) -> dt.datetime:
    return cls.fromtimestamp(_wall(task), tz)


def _datetime_utcnow(task: Task, cls: type[dt.datetime]) -> dt.datetime:
    return cls.fromtimestamp(_wall(task), dt.timezone.utc).replace(tzinfo=None)


def _patch_classmethod(cls: type, name: str, sim: Callable[..., Any]) -> None:
    """Replace the classmethod ``cls.name`` on the class itself (datetime.datetime stays the C
    type that pandas, pyarrow and numpy check); a subclass (pandas' Timestamp) inherits it."""
    real = cls.__dict__[name]
    if getattr(getattr(real, "__func__", None), "__simfs_patched__", False):
        return

    def call_real(owner: type, *args: Any, **kwargs: Any) -> Any:
        return real.__get__(None, owner)(*args, **kwargs)

    patch(cls, name, classmethod(dispatcher(call_real, sim)), scan=False)


def install() -> None:
    for name, clock in (("time", _wall), ("monotonic", _monotonic), ("perf_counter", _monotonic),
                        ("process_time", _cpu), ("thread_time", _cpu), ("clock_gettime", clock_gettime)):
        patch_function(time, name, clock)
        patch_function(time, name + "_ns", _in_ns(clock))
    patch_function(time, "sleep", sleep)
    patch_function(time, "localtime", _struct(time.localtime))
    patch_function(time, "gmtime", _struct(time.gmtime))
    patch_function(time, "ctime", _struct(time.ctime))
    patch_function(time, "strftime", _local_now(time.strftime, 2))
    patch_function(time, "asctime", _local_now(time.asctime, 1))
    patch_function(os, "times", times)
    patch_function(uuid, "uuid1", uuid1)
    patch_function(uuid, "getnode", node_address)
    # datetime.now/utcnow read the system clock in C; date.today and datetime.today call
    # time.time(), patched above (CPython's Modules/_datetimemodule.c, date_today)
    _patch_classmethod(dt.datetime, "now", _datetime_now)
    _patch_classmethod(dt.datetime, "utcnow", _datetime_utcnow)
