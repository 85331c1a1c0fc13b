"""scenarios.explore: the search finds, shrinks and replays real bug patterns, passes correct
ones, crashes at uniform points, walks crash states exhaustively, and rejects bad input."""

from __future__ import annotations

import collections
import gc
import os

import _explore_jobs as jobs
import pytest
import torch.distributed as dist
from conftest import MODEL_CARRIER
from hypothesis import given, settings
from hypothesis import strategies as st

import scenarios
from scenarios.draws import BufferChoices, position, uniform_position


def test_the_issue_example_is_found_shrunk_and_replays_exactly() -> None:
    finding = scenarios.explore(jobs.lingua_makedirs, nodes=2, ranks_per_node=2, profile="beegfs",
                                max_examples=200, seed=0)
    assert finding.failed
    assert finding.failure is not None and finding.failure.kind == "raised"
    assert finding.failure.error.startswith("FileExistsError")
    assert "_explore_jobs.py" in finding.failure.where  # the user's line, not simfs's
    text = str(finding)
    assert text.index("root cause") < text.index("replay")
    assert "stale" in text  # the cache that answered stale is named
    again = scenarios.replay(finding.replay)
    assert again.failed and again.trace == finding.trace and again.failure == finding.failure


def test_the_fix_passes_every_example() -> None:
    # (greenlet ranks: 200 examples of a job that keeps no per-process state; rank processes took
    # ~50 s of CI for the same verdict, and test_explore_isolated searches on them)
    finding = scenarios.explore(jobs.rank0_makedirs, nodes=2, ranks_per_node=2, profile="beegfs",
                                max_examples=200, seed=0, carrier=MODEL_CARRIER)
    assert not finding.failed and finding.examples >= 200
    assert "no failure" in str(finding)


@pytest.mark.parametrize("host_froze", [False, True])
def test_the_search_freezes_the_host_objects_and_leaves_the_host_as_it_was(host_froze: bool) -> None:
    """Full collections between examples walk only what the search made; the host's own freeze
    (servers freeze after start-up) is neither thawed nor added to (a search in this process:
    isolate=False)."""
    frozen_during: list[int] = []

    def check(result: object) -> bool:
        frozen_during.append(gc.get_freeze_count())
        return True

    if host_froze:
        gc.freeze()
    try:
        before = gc.get_freeze_count()
        finding = scenarios.explore(jobs.rank0_makedirs, check=check, nodes=1, ranks_per_node=2, profile="nfs",
                                    max_examples=5, seed=0, isolate=False)
        assert not finding.failed
        # (frozen objects still die when their last reference goes: the count may only fall)
        after = gc.get_freeze_count()
        assert 0 < after <= before if host_froze else after == 0
        during = frozen_during[1:]  # (the first check judges the simple run, before the search)
        assert during and all(0 < count <= before if host_froze else count > 0 for count in during)
    finally:
        gc.unfreeze()


def test_the_root_cause_comes_first() -> None:
    finding = scenarios.explore(jobs.rank1_raises, nodes=2, ranks_per_node=2, profile="local", max_examples=5)
    assert finding.failed and finding.failure is not None
    assert (finding.failure.rank, finding.failure.kind) == (1, "raised")
    assert "rank 1 broke" in finding.failure.error
    assert "Traceback" in finding.failure.traceback


def test_same_seed_same_finding() -> None:
    a, b = (scenarios.explore(jobs.lingua_makedirs, nodes=2, ranks_per_node=4, profile="beegfs", max_examples=50,
                              seed=7) for _ in range(2))
    assert a.replay == b.replay and a.examples == b.examples


def test_a_closure_replays_in_this_process_only() -> None:
    made = []

    def job() -> None:
        made.append(1)
        if not os.path.exists("/shared/x"):
            os.makedirs("/shared/x", exist_ok=True)
        dist.barrier()

    finding = scenarios.explore(job, nodes=2, ranks_per_node=2, profile="beegfs", max_examples=50)
    assert finding.failed and scenarios.replay(finding.replay).failed


def test_crashes_find_a_tracker_written_in_place() -> None:
    finding = scenarios.explore(jobs.save_tracker_in_place, recover=jobs.resume, crashes=True, nodes=2,
                                ranks_per_node=2, profile="nfs", max_examples=300, seed=0, carrier=MODEL_CARRIER)
    assert finding.failed and finding.failure is not None
    assert finding.failure.run == 1  # the restarted job is what breaks
    assert "lost power" in finding.description
    again = scenarios.replay(finding.replay)
    assert again.failed and again.trace == finding.trace


def test_crashes_pass_an_atomic_tracker() -> None:
    finding = scenarios.explore(jobs.save_tracker_atomically, recover=jobs.resume, crashes=True, nodes=2,
                                ranks_per_node=2, profile="nfs", max_examples=150, seed=0, carrier=MODEL_CARRIER)
    assert not finding.failed, str(finding)


def test_exhaustive_crash_states_find_and_pass() -> None:
    naive = scenarios.explore(jobs.save_tracker_in_place, recover=jobs.resume, crashes="exhaustive", nodes=1,
                              ranks_per_node=2, profile="local")
    assert naive.failed and naive.failure is not None and naive.failure.run == 1
    assert scenarios.replay(naive.replay).trace == naive.trace
    assert "the cluster stayed down until" in naive.description  # every restart starts when the job ended
    fixed = scenarios.explore(jobs.save_tracker_atomically, recover=jobs.resume, crashes="exhaustive", nodes=1,
                              ranks_per_node=2, profile="local")
    assert not fixed.failed, str(fixed)
    tried = int(fixed.notes[0].split()[0])
    assert 1 < tried == fixed.examples - 1  # each distinct state tried once (run, or known by its answers)


def test_crash_positions_are_uniform() -> None:
    """Crash points drawn with Hypothesis's integers() cluster near operation 0; ours do not."""
    counts: collections.Counter[int] = collections.Counter()

    @settings(max_examples=2000, database=None)
    @given(uniform_position, st.binary(min_size=4, max_size=4))
    def draw(raw: bytes, _noise: bytes) -> None:
        counts[position(raw, 10)] += 1

    draw()
    total = sum(counts.values())
    assert set(counts) == set(range(10))
    assert max(counts.values()) < 0.16 * total and min(counts.values()) > 0.05 * total


@given(st.binary(max_size=64), st.lists(st.integers(1, 5000), max_size=80))
def test_buffer_choices_stay_in_range_and_turn_simple_past_the_end(data: bytes, sizes: list[int]) -> None:
    choices = BufferChoices(data, data)
    for n in sizes:
        assert 0 <= choices.choose(n) < n
        assert 0.0 <= choices.fraction() < 1.0
    spent = BufferChoices(b"", b"")
    assert spent.choose(7) == 0 and spent.fraction() == 0.0


@pytest.mark.parametrize("kwargs, fragment", [
    ({"nodes": 0}, "nodes"),
    ({"ranks_per_node": -1}, "ranks_per_node"),
    ({"max_examples": 0}, "max_examples"),
    ({"faults": ["skew", "gremlins"]}, "gremlins"),
    ({"crashes": True}, "recover"),
    ({"crashes": "sometimes"}, "crashes"),
    ({"profile": "nope"}, "nope"),
    ({"shrink_time": -1}, "shrink_time"),
])
def test_bad_input_is_named(kwargs: dict[str, object], fragment: str) -> None:
    args: dict[str, object] = {"nodes": 1, "ranks_per_node": 1, "profile": "local", **kwargs}
    with pytest.raises(ValueError, match=fragment):
        scenarios.explore(jobs.rank0_makedirs, **args)  # type: ignore[arg-type]


def test_a_corrupt_replay_string_is_named() -> None:
    with pytest.raises(ValueError, match="replay string"):
        scenarios.replay("scenarios1:not-base64!")
    with pytest.raises(ValueError, match="scenarios1:"):
        scenarios.replay("simfs1:abc")
