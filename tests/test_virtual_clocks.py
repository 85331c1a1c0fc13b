"""Every clock a rank reads follows virtual time (and is the real one outside ranks): the clocks
of time read through clock_gettime, CPU time, asctime, os.times and uuid.uuid1."""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import simfs

HOUR = 3600.0
EPOCH = 1_767_225_600.0  # simfs's virtual 0: 2026-01-01T00:00:00Z


def _uuid_seconds(u: uuid.UUID) -> float:
    return (u.time - 0x01B21DD213814000) / 1e7  # RFC 9562 5.1: 100 ns units since 1582-10-15


# name -> a reading in seconds (of the epoch for wall clocks); lambdas, so each call looks the
# function up when it runs (simfs patches on the first run)
CLOCKS: dict[str, Callable[[], float]] = {
    "clock_gettime(REALTIME)": lambda: time.clock_gettime(time.CLOCK_REALTIME),
    "clock_gettime(MONOTONIC)": lambda: time.clock_gettime(time.CLOCK_MONOTONIC),
    "clock_gettime(MONOTONIC_RAW)": lambda: time.clock_gettime(time.CLOCK_MONOTONIC_RAW),
    "clock_gettime(BOOTTIME)": lambda: time.clock_gettime(time.CLOCK_BOOTTIME),
    "clock_gettime(TAI)": lambda: time.clock_gettime(time.CLOCK_TAI),
    "clock_gettime(PROCESS_CPUTIME_ID)": lambda: time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID),
    "clock_gettime_ns(REALTIME)": lambda: time.clock_gettime_ns(time.CLOCK_REALTIME) / 1e9,
    "clock_gettime_ns(MONOTONIC)": lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e9,
    "process_time": lambda: time.process_time(),
    "process_time_ns": lambda: time.process_time_ns() / 1e9,
    "thread_time": lambda: time.thread_time(),
    "thread_time_ns": lambda: time.thread_time_ns() / 1e9,
    "asctime": lambda: time.mktime(time.strptime(time.asctime())),
    "os.times().user": lambda: os.times().user,
    "os.times().elapsed": lambda: os.times().elapsed,
    "uuid1": lambda: _uuid_seconds(uuid.uuid1()),
}
WALL = {"clock_gettime(REALTIME)", "clock_gettime(TAI)", "clock_gettime_ns(REALTIME)", "asctime", "uuid1"}


def _read_around_a_sleep(name: str) -> tuple[float, float]:
    before = CLOCKS[name]()
    time.sleep(HOUR)
    return before, CLOCKS[name]()


@pytest.mark.parametrize("name", sorted(CLOCKS))
def test_clock_follows_virtual_time_in_a_rank_and_real_time_outside(name: str) -> None:
    real_before = CLOCKS[name]()
    wall0 = time.perf_counter()
    runs = [simfs.Cluster(nodes=1, ranks_per_node=2, seed=7).run(_read_around_a_sleep, name) for _ in range(2)]
    wall = time.perf_counter() - wall0
    assert all(r.ok for r in runs), runs[0].summary()
    assert runs[0].returns == runs[1].returns  # the same seed, the same readings
    assert wall < 5.0
    for before, after in runs[0].returns.values():
        assert after - before == pytest.approx(HOUR, abs=1.0), (name, before, after)
        if name in WALL:  # virtual 0 is the simulated epoch (TAI is 37 s ahead of it)
            assert EPOCH <= before <= EPOCH + 60, (name, before)
    real_after = CLOCKS[name]()  # outside ranks the clock is the host's: it did not move by an hour
    assert 0 <= real_after - real_before < HOUR / 2, (name, real_before, real_after)
    if name in WALL:
        assert abs(real_after - time.time()) < 60


def _clock_errors() -> dict[str, str]:
    out = {}
    for label, clk in (("unknown", 10), ("dynamic", -6)):
        try:
            time.clock_gettime(clk)
        except simfs.BypassError as exc:
            out[label] = "BypassError: " + str(exc)
        except OSError as exc:
            out[label] = errno.errorcode[exc.errno or 0]
    return out


def test_clock_gettime_refuses_what_it_cannot_simulate() -> None:
    result = simfs.Cluster(nodes=1, ranks_per_node=1, seed=0).run(_clock_errors)
    assert result.ok, result.summary()
    got = result.returns[0]
    assert got["unknown"] == "EINVAL"  # clock_gettime(2): an id Linux does not know
    assert got["dynamic"].startswith("BypassError: time.clock_gettime(-6)")


def _uuids() -> dict[str, Any]:
    first, second = uuid.uuid1(), uuid.uuid1()
    return {"node": first.node, "getnode": uuid.getnode(), "version": first.version,
            "ordered": second.time > first.time, "explicit": uuid.uuid1(node=5, clock_seq=9)}


def test_uuid1_carries_the_simulated_node_and_never_repeats() -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=1, seed=3).run(_uuids)
    assert result.ok, result.summary()
    for rank, got in result.returns.items():
        assert got["node"] == got["getnode"] == 0x020000000000 | rank  # node = rank here
        assert got["version"] == 1 and got["ordered"]
        assert (got["explicit"].node, got["explicit"].clock_seq) == (5, 9)
    assert uuid.getnode() not in {got["node"] for got in result.returns.values()}  # the host keeps its own
