"""A search's coverage of the fault space: the kinds of event its examples reached (stale answers
by cache, crashes by kind and the operation they came after, crash states, start skew, slow
operations, injected errnos), counted per example, in the finding and its text."""

from __future__ import annotations

import importlib
from collections import Counter

import _explore_jobs as jobs
import pytest
from conftest import MODEL, MODEL_CARRIER
from hypothesis import given
from hypothesis import strategies as st

import scenarios
import simfs
from scenarios.coverage import RARITY, Rarity
from scenarios.registry import get, load_library
from simfs.fs.journal import CrashState

explore_module = importlib.import_module("scenarios.explore")  # (the package's `explore` is the function)
SEARCH = {"nodes": 2, "ranks_per_node": 2, "carrier": MODEL_CARRIER, "isolate": False, "database": None}


def test_faults_reached_are_counted_per_example() -> None:
    found = scenarios.explore(jobs.rank0_makedirs, profile="nfs", faults=["skew", "slow"], max_examples=40,
                              **SEARCH)
    assert not found.failed
    assert set(found.coverage) == {"start skew", "slow operations"}
    assert all(0 < count < found.examples for count in found.coverage.values())  # swarm: some examples, not all
    (most, count), (other, fewer) = found.coverage.items()  # the most reached first
    assert count >= fewer
    assert f"reached: {most} ({count} of {found.examples} examples), {other} ({fewer})" in str(found)


def test_an_injected_errno_is_named_by_its_errno() -> None:
    found = scenarios.explore(jobs.rank0_makedirs, profile="nfs", faults=["errno"], max_examples=60, **SEARCH)
    assert found.failed  # an EIO or ENOSPC on rank 0's mkdir fails it
    injected = [kind for kind in found.coverage if kind.startswith("injected ")]
    assert injected and all(kind.split()[1] in ("EIO", "ENOSPC", "EDQUOT", "ESTALE") for kind in injected)
    assert found.record().coverage == found.coverage  # the report keeps it


def test_a_stale_answer_is_named_by_its_cache() -> None:
    found = scenarios.explore(jobs.lingua_makedirs, profile="beegfs", max_examples=20, **SEARCH)
    assert found.failed and found.found_at == 1  # the run with no faults: a stale 'not found'
    assert found.coverage == {"stale lookup answer": 1}


@pytest.mark.parametrize("job, cache", [(jobs.stat_after_another_node_appends, "attribute"),
                                        (jobs.reread_an_open_file, "data")])
def test_a_stale_file_answer_is_named_by_its_cache(job: object, cache: str) -> None:
    """A file's size from the attribute cache, its pages from the data cache, after another node
    changed it: the trace names the cache, the coverage counts it."""
    result = simfs.Cluster(2, 1, profile="nfs", seed=0, **MODEL).run(job)
    assert result.ok, result.summary()
    stale = [e for e in result.trace if e.stale]
    assert stale and all(e.rank == 1 and f"node 1's {cache} cache answered" in e.stale for e in stale)
    assert result.returns[1] != result.returns[0]  # what node 1 was told is not what the server holds
    found = scenarios.explore(job, profile="nfs", max_examples=10, **{**SEARCH, "ranks_per_node": 1})
    assert found.coverage.get(f"stale {cache} answer", 0) > 0


def test_crashes_are_counted_by_kind_operation_and_state() -> None:
    load_library()
    sc = get("latest-atomic")
    found = scenarios.explore(sc.job, recover=sc.recover, check=sc.check, nodes=2, ranks_per_node=1,
                              profile="local", crashes=True, max_examples=60, carrier=MODEL_CARRIER, isolate=False,
                              database=None)
    assert not found.failed
    crashes = [k for k in found.coverage if k.startswith(("power loss", "node crash"))]
    states = [k for k in found.coverage if k.startswith("crash state: ")]
    assert any(" after " in k for k in crashes) and states
    uncrashed = scenarios.explore(sc.job, recover=sc.recover, check=sc.check, nodes=2, ranks_per_node=1,
                                  profile="local", max_examples=20, carrier=MODEL_CARRIER, isolate=False,
                                  database=None)
    assert not any(k.startswith(("power loss", "node crash", "crash state")) for k in uncrashed.coverage)


def test_an_exhaustive_walk_counts_the_crash_states_it_restarted_on() -> None:
    """Each distinct crash state of the walk is an example: its power loss (during the job or
    after it) and the state the shared disk was left in."""
    load_library()
    sc = get("latest-atomic")
    found = scenarios.explore(sc.job, recover=sc.recover, check=sc.check, nodes=sc.nodes,
                              ranks_per_node=sc.ranks_per_node, profile="local", crashes="exhaustive",
                              carrier=MODEL_CARRIER, isolate=False, database=None)
    assert not found.failed
    during, after = (found.coverage.get(f"power loss {when} the job", 0) for when in ("during", "after"))
    assert during > 0 and during + after == found.examples - 1  # each state restarted on (1: the job's own run)
    assert {"crash state: a prefix kept", "crash state: everything kept"} <= set(found.coverage)


@pytest.mark.parametrize(("state", "kinds"), [
    (CrashState(0, data_kept=0), ["nothing unsynced kept"]),
    (CrashState(1, data_kept=1), ["a prefix kept"]),
    (CrashState(2, data_kept=3), ["everything kept"]),
    (CrashState(2, data_kept=3, omitted=1), ["a prefix kept", "an operation omitted"]),
    (CrashState(2, data_kept=3, torn=512), ["a prefix kept", "a torn write"]),
])
def test_a_crash_state_says_what_it_kept(state: CrashState, kinds: list[str]) -> None:
    states = [CrashState(0, data_kept=0), CrashState(1, data_kept=1), CrashState(2, data_kept=3), state]
    assert state.kinds(states) == kinds
    assert CrashState(0).kinds([CrashState(0)]) == ["nothing unsynced to lose"]


# -- steering: the rarity score Hypothesis's target phase climbs ---------------------------------------

@given(st.lists(st.frozensets(st.sampled_from("abcdef")), max_size=30))
def test_rarity_scores_a_kind_by_how_few_examples_reached_it_before(examples: list[frozenset[str]]) -> None:
    rarity, before = Rarity(), Counter[str]()
    for kinds in examples:
        value = rarity.score(kinds)
        assert value == pytest.approx(sum(1 / (1 + before[kind]) for kind in kinds))
        new = [kind for kind in kinds if not before[kind]]
        assert value >= len(new)  # an event no example reached before counts 1 at least
        before.update(kinds)
        if kinds:
            assert rarity.score(kinds) < value  # the same events again: rarer no more
            before.update(kinds)


@pytest.mark.parametrize("steer", [False, True])
def test_a_steered_search_gives_each_examples_rarity_to_the_target_phase(steer: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[tuple[float, str]] = []
    monkeypatch.setattr(explore_module, "hypothesis_target", lambda value, label: told.append((value, label)))
    found = scenarios.explore(jobs.rank0_makedirs, profile="nfs", faults=["skew", "slow"], max_examples=30,
                              steer=steer, **SEARCH)
    assert not found.failed
    if not steer:
        assert told == []
        return
    assert len(told) == found.examples - 1  # every drawn example (the first runs before Hypothesis)
    assert {label for _, label in told} == {RARITY}
    assert max(value for value, _ in told) >= 1  # the first example to reach an event


def test_a_steered_search_is_a_function_of_its_seed() -> None:
    runs = [scenarios.explore(jobs.lingua_makedirs, profile="beegfs", faults=["skew", "slow"], max_examples=40,
                              steer=True, seed=3, **SEARCH) for _ in range(2)]
    assert runs[0].found_at == runs[1].found_at and runs[0].coverage == runs[1].coverage


def test_a_passing_search_keeps_its_coverage_in_the_report() -> None:
    """A pass is where coverage matters most (a thorough pass or a shallow one): `simfs run`'s
    outcome keeps it though it keeps no finding, and its table and HTML count it."""
    from scenarios import runner
    from scenarios.cli import _tasks, parser
    from scenarios.reporting.coverage import coverage_cell, coverage_of

    (task,), _ = _tasks(parser().parse_args(["run", "--examples", "20", "--profile", "nfs", "makedirs-once"]))
    outcome, _ = runner._search(task, "nfs", None, b"passing-coverage")  # (simfs run calls it in a confined child)
    assert outcome.verdict == "pass" and outcome.finding is None
    assert 0 < outcome.coverage.get("start skew", 0) < outcome.examples
    assert coverage_of(outcome) == outcome.coverage
    assert f"{len(outcome.coverage)} kinds" in coverage_cell(outcome)
