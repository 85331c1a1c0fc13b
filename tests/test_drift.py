"""Ranks drift apart as on a real cluster: each leaves a collective when gloo's algorithm lets it
(simfs/runtime/algorithms.py, meeting.py) and after its own wake-up (runtime/wakeup.py), a store
wait alike, and the search pauses ranks between operations (Pause, the "drift" kind); the old
lockstep model stays for replay strings recorded with it."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import scenarios
import simfs
from scenarios.example import Example
from scenarios.explore import make_target
from scenarios.library import drift
from simfs.choices import ReplayChoices
from simfs.faults import Pause
from simfs.runtime import algorithms
from simfs.runtime.meeting import Meeting
from simfs.runtime.wakeup import SLICE

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so that 'tests._replay_jobs' is importable, as replay strings name it
    sys.path.insert(0, str(ROOT))

LATENCY = 5e-5  # simfs.Cluster's collective_latency
KINDS = ("barrier", "monitored_barrier", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
         "all_to_all", "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
         "reduce_scatter_tensor", "init_process_group")
EVERYONE = ("barrier", "monitored_barrier", "all_reduce", "reduce_scatter_tensor", "all_gather", "all_to_all",
            "all_gather_object", "init_process_group")  # no rank leaves before every rank arrived
EMPTY_AT_ONCE = ("all_reduce", "reduce_scatter_tensor", "all_gather")  # of 0 bytes: gloo returns at once


def _cluster(carrier: str = "greenlet", **options: Any) -> simfs.Cluster:
    options.setdefault("nodes", 2)
    options.setdefault("ranks_per_node", 2)
    options.setdefault("profile", "local")
    return simfs.Cluster(carrier=carrier, isolate=carrier == "process", **options)


def _exits(kind: str, n: int, root: int, nbytes: int, arrivals: list[float]) -> dict[int, float]:
    meeting = Meeting([algorithms.program(kind, n, me, root, nbytes) for me in range(n)], LATENCY, 1e10)
    for me in sorted(range(n), key=lambda i: arrivals[i]):
        meeting.arrive(me, arrivals[me])
    return meeting.exits


# -- the algorithms, timed ------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), n=st.integers(1, 9), data=st.data(), nbytes=st.sampled_from([0, 4, 4096, 3 << 20]))
def test_every_rank_leaves_no_earlier_than_it_arrived_and_never_before_what_it_waits_for(
        kind: str, n: int, data: st.DataObject, nbytes: int) -> None:
    root = data.draw(st.integers(0, n - 1))
    arrivals = data.draw(st.lists(st.sampled_from([0.0, 1e-5, 1e-3, 0.5]), min_size=n, max_size=n))
    exits = _exits(kind, n, root, nbytes, arrivals)
    assert sorted(exits) == list(range(n))  # once all arrived, everyone's exit is known
    for me, left in exits.items():
        assert left >= arrivals[me]
        if kind in EVERYONE and n > 1 and (kind not in EMPTY_AT_ONCE or nbytes):
            assert left >= max(arrivals) + LATENCY  # the last arrival's message reached it
        if kind in ("broadcast", "scatter") and me != root:
            assert left >= arrivals[root] + LATENCY  # its data came from the root


def test_a_broadcast_root_leaves_once_its_children_posted_before_a_rank_further_down_arrives() -> None:
    exits = _exits("broadcast", 4, 0, 4, [0.0, 0.0, 0.0, 1.0])
    assert exits[0] < 1.0 and exits[2] < 1.0  # rank 3 gets the data from rank 1 (gloo/broadcast.cc)
    assert exits[1] > 1.0 and exits[3] > exits[1]


def test_barrier_ranks_that_arrived_first_leave_one_latency_before_the_last() -> None:
    exits = _exits("barrier", 2, -1, 0, [0.0, 1.0])
    assert exits[0] == pytest.approx(1.0 + LATENCY)  # rank 1's message reached it
    assert exits[1] == pytest.approx(1.0 + 2 * LATENCY)  # its send waited for rank 0's notice


@pytest.mark.parametrize("kind", EMPTY_AT_ONCE)
def test_a_collective_of_nothing_returns_at_once(kind: str) -> None:
    assert _exits(kind, 4, -1, 0, [0.0, 1.0, 2.0, 3.0]) == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}


# -- in a run, both carriers ------------------------------------------------------------------------

def root_then_receivers() -> float:
    dist.broadcast(torch.tensor([dist.get_rank()]), src=0)
    return time.monotonic()


def late_leaf() -> float:
    if dist.get_rank() == 3:
        time.sleep(1.0)
    dist.broadcast(torch.tensor([dist.get_rank()]), src=0)
    return time.monotonic()


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_a_broadcast_root_leaves_before_its_receivers(carrier: str) -> None:
    result = _cluster(carrier).run(root_then_receivers, choices=ReplayChoices([]))  # no wake-up delays
    assert result.ok, result.summary()
    left = result.returns
    assert all(left[0] < left[r] for r in (1, 2, 3)), left
    result = _cluster(carrier).run(late_leaf, choices=ReplayChoices([]))
    assert result.ok, result.summary()
    assert result.returns[0] < result.returns[3] - 1.0 + 1e-3, result.returns  # before rank 3 even arrived


def barrier_times() -> float:
    dist.barrier()
    return time.monotonic()


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_barrier_ranks_leave_at_different_times(carrier: str) -> None:
    spreads = []
    for seed in range(4 if carrier == "process" else 12):
        result = _cluster(carrier, seed=seed).run(barrier_times)
        assert result.ok, result.summary()
        left = list(result.returns.values())
        assert min(left) >= 2 * LATENCY  # after the last arrival (all at 0) reached them
        spreads.append(max(left) - min(left))
    assert all(s < SLICE + 1e-3 for s in spreads)
    assert sum(s > 1e-5 for s in spreads) >= len(spreads) // 2, spreads  # the seed's wake-ups part them


def test_lockstep_releases_every_rank_at_once() -> None:
    result = _cluster(seed=3, collectives="lockstep").run(barrier_times)
    assert len(set(result.returns.values())) == 1


def test_collectives_is_checked() -> None:
    with pytest.raises(simfs.ConfigError, match="collectives"):
        simfs.Cluster(collectives="nccl")


def store_waiter() -> float:
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        time.sleep(1.0)
        store.set("ready", b"1")
        return time.monotonic()
    store.get("ready")
    return time.monotonic()


def test_a_store_wait_wakes_after_the_key_is_set_within_a_slice() -> None:
    result = _cluster("process", seed=1).run(store_waiter)
    assert result.ok, result.summary()
    set_at = result.returns[0]
    woke = [result.returns[r] for r in (1, 2, 3)]
    assert all(set_at - 1e-3 <= t <= set_at + SLICE + 1e-3 for t in woke), result.returns
    assert len(set(woke)) > 1  # each after its own wake-up


# -- pauses ------------------------------------------------------------------------------------------

def two_stats() -> None:
    os.path.exists("/shared/a")
    os.path.exists("/shared/b")


def test_a_pause_delays_its_rank_before_the_operation_it_names() -> None:
    result = _cluster(faults=[Pause(rank=1, before_op=1, seconds=2.5)]).run(two_stats)
    mine = [e for e in result.trace if e.rank == 1]
    assert [e.op for e in mine] == ["stat", "pause", "stat"]
    assert mine[2].time - mine[0].time == pytest.approx(2.5, abs=1e-3)
    assert "before stat at" in mine[1].outcome and "two_stats" in mine[1].outcome
    others = [e.time for e in result.trace if e.rank == 0]
    assert max(others) < 1e-3


@pytest.mark.parametrize("bad", [dict(before_op=-1, seconds=1.0), dict(before_op=0, seconds=-1.0),
                                 dict(before_op=0, seconds=float("inf")), dict(before_op=True, seconds=1.0)])
def test_bad_pauses_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(simfs.ConfigError, match="Pause"):
        Pause(rank=0, **bad)


def _pauses(sc: Any, seed: int, shrink_time: float) -> list[Pause]:
    found = scenarios.explore(sc.job, nodes=sc.nodes, ranks_per_node=sc.ranks_per_node, profile="beegfs",
                              max_examples=100, seed=seed, carrier="greenlet", database=None, shrink_time=shrink_time)
    assert found.failed, str(found)
    _, example, _ = scenarios.replaying.decode(found.replay)
    return [f for f in example.faults if isinstance(f, Pause)]


def test_a_pause_shrinks_away_when_the_failure_does_not_need_it() -> None:
    """flock-counter loses increments on BeeGFS, whose flock is node-local, without any pause."""
    sc = scenarios.registry.get("flock-counter")
    assert any(_pauses(sc, seed, 0) for seed in range(2))  # its first failing examples paused a rank
    assert [_pauses(sc, seed, 30) for seed in range(2)] == [[], []]


def test_a_finding_names_each_pause_in_words() -> None:
    target = make_target(drift.lock_released_early, recover=None, check=None, nodes=2, ranks_per_node=2,
                         profile="local", carrier="greenlet")
    example = Example(faults=(Pause(rank=0, before_op=6, seconds=0.01), Pause(rank=2, before_op=999, seconds=1.0)))
    found = scenarios.replay(scenarios.replaying.encode(target, example))
    assert found.failed, str(found)
    assert "rank 0 paused 10 ms before its write /shared/data at " in found.description
    assert "drift.py:" in found.description and "in _write" in found.description
    assert "rank 2 would have paused 1 s before its operation 1000, which it never reached" in found.description


# -- the search reaches the shapes on its defaults ---------------------------------------------------

@pytest.mark.parametrize("job", [drift.check_after_barrier, drift.check_after_allreduce, drift.check_after_broadcast])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_default_search_finds_a_race_after_a_collective_within_twenty_examples(job: Any, seed: int) -> None:
    """Shapes a real torchrun hits in at least one run in ten (reports/BENCHMARKS.md): within 20 at every seed."""
    found = scenarios.explore(job, nodes=1, ranks_per_node=4, profile="local", max_examples=20, seed=seed,
                              carrier="greenlet", database=None, shrink_time=0)
    assert found.failed and found.found_at <= 20, str(found)
    assert "Raced" in (found.failure.error if found.failure else "")


@pytest.mark.parametrize("job", [drift.check_before_broadcast, drift.version_file])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_default_search_finds_a_rare_race_within_two_hundred_examples(job: Any, seed: int) -> None:
    """Shapes a real torchrun hits in fewer than one run in ten: within 200 examples."""
    found = scenarios.explore(job, nodes=1, ranks_per_node=4, profile="local", max_examples=200, seed=seed,
                              carrier="greenlet", database=None, shrink_time=0)
    assert found.failed and found.found_at <= 200, str(found)
    assert "Raced" in (found.failure.error if found.failure else "")


@pytest.mark.parametrize("job", [drift.check_before_barrier, drift.check_before_allreduce, drift.check_then_barrier,
                                 drift.version_file_atomic])
def test_the_fixed_shapes_pass(job: Any) -> None:
    found = scenarios.explore(job, nodes=1, ranks_per_node=4, profile="local", max_examples=60, seed=0,
                              carrier="greenlet", database=None)
    assert not found.failed, str(found)


# -- replay strings recorded before gloo's algorithms --------------------------------------------------

OLD = json.loads((Path(__file__).parent / "_old_replays.json").read_text())  # made by the code at 82c105b


def _digest(trace: list[Any]) -> str:
    return hashlib.sha256(repr([tuple(e) for e in trace]).encode()).hexdigest()


@pytest.mark.parametrize("which", ["seeded", "drawn"])
def test_a_run_recorded_before_gloos_algorithms_replays_as_it_ran(which: str) -> None:
    recorded = OLD[which]
    result = simfs.replay(recorded["replay"])
    assert {str(k): list(v) if isinstance(v, tuple) else v for k, v in result.returns.items()} == \
        json.loads(json.dumps(recorded["returns"]))
    assert _digest(result.trace) == recorded["trace"]


def test_a_finding_recorded_before_gloos_algorithms_replays_as_it_failed() -> None:
    recorded = OLD["finding"]
    again = scenarios.replay(recorded["replay"])
    assert again.failed and again.failure is not None and again.failure.error == recorded["error"]
    assert hashlib.sha256(repr(list(again.trace)).encode()).hexdigest() == recorded["trace"]
