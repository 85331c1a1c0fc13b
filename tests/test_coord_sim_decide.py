"""coord.rank0_decides inside simfs clusters (2 nodes x 4 ranks): every rank follows one decision,
while the naive pattern (each rank asking ``os.path.exists(marker)`` on its own, right after rank 0
created the marker) splits the job on NFS when the other node cached a 'not found'."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import coord
import simfs
from _coord_sim import RPN, WORLD, cluster, ok

PROFILES = ["local", "nfs", "lustre", "objectstore"]
MARKER = "/shared/ckpt/latest"


def _ok(result: simfs.Result) -> dict:
    return ok(result, WORLD)


_cluster = cluster


def resume_job(variant: str, probe_ranks: list[int], delay: float, collective: bool, src: int = 0) -> tuple:
    """A restartable job: some ranks probed for a checkpoint marker early (caching 'not found'),
    rank 0 writes the marker ``delay`` seconds later, a barrier orders everyone after the write,
    then each rank decides whether to resume from it or start fresh."""
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(os.path.dirname(MARKER), exist_ok=True)
    dist.barrier()
    if rank in probe_ranks:
        os.path.exists(MARKER)
    dist.barrier()
    time.sleep(delay)
    if rank == 0:
        with open(MARKER, "w") as f:
            f.write("step-100")
    dist.barrier()
    if variant == "naive":
        resume = os.path.exists(MARKER)
    else:
        resume = coord.rank0_decides(lambda: os.path.exists(MARKER), src=src)
    if collective:  # what a resuming rank does next: receive the training state from rank 0
        if resume:
            box = [{"step": 100} if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
        else:
            dist.barrier()
    return resume


@pytest.mark.parametrize("collective", [False, True])
def test_naive_exists_splits_the_job_where_rank0_decides_does_not(collective) -> None:
    """nfs defaults: the directory ttl is drawn in [30, 60] s; the marker is written 40 s after
    the probe, so whether node 1 still trusts its 'not found' depends on the seed."""
    split, agreed = [], []
    for seed in range(16):
        naive = _cluster("nfs", seed).run(resume_job, "naive", list(range(WORLD)), 40.0, collective)
        if collective:
            if not naive.ok:  # ranks on different branches met in different collectives
                split.append(seed)
                assert any(isinstance(e, simfs.CollectiveMismatch) for e in naive.errors.values()) or naive.hung
        else:
            decisions = _ok(naive)
            if len(set(decisions.values())) > 1:
                split.append(seed)
                # rank 0's node sees the marker it just wrote; the other node answers from its cache
                assert all(decisions[r] for r in range(RPN)) and not any(decisions[r] for r in range(RPN, WORLD))
            else:
                agreed.append(seed)
        fixed = _ok(_cluster("nfs", seed).run(resume_job, "fixed", list(range(WORLD)), 40.0, collective))
        assert set(fixed.values()) == {True}
    assert split, "each rank's own exists() never disagreed"
    if not collective:
        assert agreed, "with a 40 s gap some ttl draws expire first: the naive pattern passes for those seeds"


@pytest.mark.parametrize("profile", PROFILES + ["nfs_lag"])
@given(seed=st.integers(0, 2**32 - 1), probe_ranks=st.lists(st.integers(0, WORLD - 1), unique=True),
       delay=st.sampled_from([0.0, 1.0, 45.0, 120.0]), collective=st.booleans(), slow=st.integers(0, WORLD - 1),
       slow_delay=st.sampled_from([0.0, 30.0]))
@settings(max_examples=12)
def test_rank0_decides_gives_every_rank_rank0s_answer(profile, seed, probe_ranks, delay, collective, slow,
                                                      slow_delay) -> None:
    prof = simfs.profiles.get("nfs").replace(acdirmin=60, acdirmax=60) if profile == "nfs_lag" else profile
    faults = [simfs.SlowRank(rank=slow, delay=slow_delay)]
    result = _cluster(prof, seed, faults).run(resume_job, "fixed", probe_ranks, delay, collective)
    assert _ok(result) == {r: True for r in range(WORLD)}  # rank 0 always sees the marker it wrote


@given(seed=st.integers(0, 2**32 - 1), src=st.integers(RPN, WORLD - 1))
@settings(max_examples=10)
def test_a_lagging_decider_is_still_followed_by_everyone(seed, src) -> None:
    """A decider on the lagging node may answer False, but everyone follows that answer: the job
    takes one branch and its collectives line up."""
    prof = simfs.profiles.get("nfs").replace(acdirmin=60, acdirmax=60)
    decisions = _ok(_cluster(prof, seed).run(resume_job, "fixed", list(range(WORLD)), 0.0, True, src))
    assert set(decisions.values()) == {False}  # node 1 still trusts its cached 'not found'


class Corrupt(ValueError):
    pass


def failing_job(src: int) -> tuple:
    def decide() -> str:
        raise Corrupt(f"manifest of step 100 is corrupt (seen by rank {dist.get_rank()})")

    try:
        coord.rank0_decides(decide, src=src)
    except Corrupt as exc:
        return "original", type(exc).__name__, str(exc)
    except coord.CoordError as exc:
        return "CoordError", type(exc).__name__, str(exc)
    return "returned", "", ""


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("src", [0, 5])
def test_exception_in_fn_is_original_on_decider_and_coord_error_elsewhere(profile, src) -> None:
    returns = _ok(_cluster(profile, seed=3).run(failing_job, src))
    message = f"manifest of step 100 is corrupt (seen by rank {src})"
    assert returns[src] == ("original", "Corrupt", message)
    for rank in set(range(WORLD)) - {src}:
        kind, name, text = returns[rank]
        assert (kind, name) == ("CoordError", "CoordError")
        assert f"rank {src} failed while deciding for everyone" in text and f"Corrupt: {message}" in text


def test_rank0_decides_returns_arbitrary_objects_and_runs_fn_once() -> None:
    def job() -> tuple:
        calls = []

        def decide() -> dict:
            calls.append(dist.get_rank())
            return {"resume_from": "/shared/ckpt/step-100", "ranks": list(range(WORLD))}

        return coord.rank0_decides(decide), calls

    returns = _ok(_cluster("nfs", 1).run(job))
    expected = {"resume_from": "/shared/ckpt/step-100", "ranks": list(range(WORLD))}
    for rank, (value, calls) in returns.items():
        assert value == expected and calls == ([0] if rank == 0 else [])
