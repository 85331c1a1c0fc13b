"""simfs.zygote_kept: the process-carrier runs of a series (a search's examples) fork their ranks
from one zygote, forked at the series' first run and ended with it; each run's ranks get that
run's own outboxes, a job the series does not know gets a zygote of its own, a zygote that died is
replaced, and the host has no child left when the series ends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import missing

import simfs
from simfs.confinement import landlock


@pytest.fixture(autouse=True)
def _needs_landlock() -> None:
    if not landlock.abi():
        missing("landlock", "rank processes confine themselves with Landlock (Linux 5.13+)")


def _children() -> set[int]:
    """This process's children, as /proc lists each of its threads'."""
    found: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        found |= {int(pid) for pid in Path(f"/proc/self/task/{tid}/children").read_text().split()}
    return found


def _sum_of_ranks() -> float:
    """An all-reduce through the outboxes: each rank's rank + 1, summed."""
    tensor = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(tensor)
    return float(tensor.item())


def _rank() -> int:
    return dist.get_rank()


def _run(job: object, ranks: int = 2) -> simfs.Result:
    result = simfs.Cluster(1, ranks, carrier="process").run(job)  # type: ignore[arg-type]  # a job
    assert result.ok, result.summary()
    return result


def test_a_series_forks_every_runs_ranks_from_one_zygote_and_ends_it() -> None:
    before = _children()
    with simfs.zygote_kept(_sum_of_ranks, _rank):
        first = _run(_sum_of_ranks)
        kept = _children() - before
        second = _run(_rank, ranks=3)  # another world size: new outboxes, one more rank
        third = _run(_sum_of_ranks, ranks=3)
        assert _children() - before == kept
    assert len(kept) == 1  # the zygote, which outlives each run but not the series
    assert _children() == before
    assert first.returns == {0: 3.0, 1: 3.0}
    assert second.returns == {0: 0, 1: 1, 2: 2}
    assert third.returns == {0: 6.0, 1: 6.0, 2: 6.0}


def test_a_job_the_series_does_not_know_gets_a_zygote_of_its_own() -> None:
    before = _children()
    with simfs.zygote_kept(_rank):
        _run(_rank)
        kept = _children() - before
        assert _run(_sum_of_ranks).returns == {0: 3.0, 1: 3.0}
        assert _run(lambda: dist.get_rank()).returns == {0: 0, 1: 1}  # a job with arguments would too
        assert _children() - before == kept  # theirs ended with their runs
    assert _children() == before


def test_a_kept_zygote_that_died_is_replaced() -> None:
    before = _children()
    with simfs.zygote_kept(_sum_of_ranks):
        _run(_sum_of_ranks)
        (zygote,) = _children() - before
        os.kill(zygote, signal.SIGKILL)
        while Path(f"/proc/{zygote}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            time.sleep(0.01)  # (dead, not yet reaped: what the next run finds)
        assert _run(_sum_of_ranks).returns == {0: 3.0, 1: 3.0}
        (replacement,) = _children() - before
        assert replacement != zygote
    assert _children() == before


def test_series_nest_and_the_outer_one_keeps_the_zygote() -> None:
    before = _children()
    with simfs.zygote_kept(_rank):
        _run(_rank)
        kept = _children() - before
        with simfs.zygote_kept(_sum_of_ranks):  # inside: the outer series' zygote and jobs
            _run(_rank)
            assert _children() - before == kept
        assert _children() - before == kept
    assert _children() == before
