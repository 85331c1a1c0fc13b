"""select.select and select.poll inside a rank: a wait on no descriptor is a wait in virtual time
(it costs no wall time), a rank's simulated files are always ready (select(2): regular files always
select true), a descriptor the process does not have is EBADF, and outside ranks they are real."""

from __future__ import annotations

import errno
import select
import time

import pytest

import simfs


def test_a_timeout_alone_waits_in_virtual_time() -> None:
    def job() -> tuple[list[list[int]], list[tuple[int, int]], float]:
        start = time.monotonic()
        chosen = select.select([], [], [], 30)
        polled = select.poll().poll(15_000)  # milliseconds
        return [list(x) for x in chosen], polled, time.monotonic() - start

    wall = time.perf_counter()
    result = simfs.Cluster().run(job)
    assert result.ok, result.summary()
    chosen, polled, waited = result.returns[0]
    assert chosen == [[], [], []] and polled == []
    assert waited == pytest.approx(45.0, abs=1e-3)
    assert time.perf_counter() - wall < 5.0  # 45 virtual seconds, not real ones


def test_simulated_files_are_always_ready_and_unknown_descriptors_are_ebadf() -> None:
    def job() -> tuple[object, ...]:
        start = time.monotonic()
        with open("/shared/data", "w+b") as f:
            chosen = select.select([f], [f.fileno()], [], 10)
            poller = select.poll()
            poller.register(f, select.POLLIN | select.POLLOUT)
            ready = poller.poll(0)
            try:
                select.select([12345], [], [], 0)
            except OSError as exc:
                bad = errno.errorcode.get(exc.errno or 0)
            both = select.POLLIN | select.POLLOUT
            return (chosen[0] == [f], chosen[1] == [f.fileno()], ready == [(f.fileno(), both)], bad,
                    time.monotonic() - start < 1.0)  # ready at once: the 10 s timeout did not pass

    result = simfs.Cluster().run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == (True, True, True, "EBADF", True)


def test_a_wait_on_nothing_without_a_timeout_leaves_the_rank_blocked() -> None:
    def job() -> None:
        select.select([], [], [])

    result = simfs.Cluster(watchdog=5).run(job)
    assert not result.ok and list(result.hung) == [0], result.summary()
    assert "select() on no descriptor" in result.summary()


def test_outside_ranks_select_is_the_real_one() -> None:
    start = time.perf_counter()
    assert select.select([], [], [], 0.05) == ([], [], [])
    assert time.perf_counter() - start >= 0.04
