"""carrier="auto" (scenarios/autocarrier.py): a search runs on greenlet ranks only where the job
cannot tell them from rank processes, and every answer it gives is the rank processes' answer."""

from __future__ import annotations

import _auto_jobs as jobs
import _auto_stack_job
import _explore_jobs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scenarios
from scenarios import statewatch
from scenarios.runner import Task, run_task


def test_a_job_greenlets_can_host_is_searched_on_them_and_its_finding_replays_on_rank_processes() -> None:
    finding = scenarios.explore(_explore_jobs.lingua_makedirs, nodes=2, ranks_per_node=2, profile="beegfs",
                                max_examples=100, seed=0)
    assert finding.failed and finding.target.carrier == "process", finding
    assert finding.searched_on == "greenlet", finding
    assert finding.carrier_note.startswith("searched on greenlet ranks") and \
        "ran again on rank processes" in finding.carrier_note, finding.carrier_note
    again = scenarios.replay(finding.replay)
    assert again.target.carrier == "process"
    assert again.failed and again.failure == finding.failure and again.trace == finding.trace


def test_a_job_that_changes_a_module_global_is_searched_on_rank_processes() -> None:
    finding = scenarios.explore(jobs.keeps_a_registry, nodes=1, ranks_per_node=2, profile="nfs", max_examples=10,
                                seed=0)
    assert not finding.failed, finding
    assert finding.searched_on == "process", finding
    assert finding.carrier_note.startswith("searched on rank processes") and \
        "_auto_jobs.SEEN" in finding.carrier_note, finding.carrier_note


def test_a_difference_a_confirming_run_finds_ends_the_greenlet_search() -> None:
    finding = scenarios.explore(jobs.draws_from_torch, nodes=1, ranks_per_node=2, profile="local", max_examples=5,
                                seed=0)
    assert not finding.failed, finding
    assert "set aside: example 1 ran differently on rank processes: returns" in finding.carrier_note, finding
    assert finding.examples >= 5  # the search ran again, whole, on rank processes


def test_a_job_that_names_a_training_stack_is_searched_on_rank_processes() -> None:
    finding = scenarios.explore(_auto_stack_job.wraps_a_model, nodes=1, ranks_per_node=2, profile="nfs", max_examples=3,
                                seed=0)
    assert finding.carrier_note.startswith("searched on rank processes") and \
        "torch.nn.parallel" in finding.carrier_note, finding.carrier_note


def test_the_same_finding_in_process_as_isolated() -> None:
    kwargs = dict(nodes=2, ranks_per_node=2, profile="beegfs", max_examples=100, seed=0)
    isolated = scenarios.explore(_explore_jobs.lingua_makedirs, **kwargs)
    here = scenarios.explore(_explore_jobs.lingua_makedirs, isolate=False, **kwargs)
    assert here.replay == isolated.replay and here.carrier_note == isolated.carrier_note


# -- the state watch ---------------------------------------------------------------------------------

def _fresh_module(name: str) -> object:
    import sys
    import types

    module = types.ModuleType(name)
    sys.modules[name] = module
    return module


CHANGES = {
    "rebind": lambda m: setattr(m, "value", object()),
    "bind": lambda m: setattr(m, "new", 1),
    "delete": lambda m: delattr(m, "value"),
    "dict item": lambda m: m.cache.__setitem__("k", object()),
    "list append": lambda m: m.items.append(1),
    "class attribute": lambda m: setattr(m.Kind, "count", 2),
    "thread-local": lambda m: setattr(m.local, "x", object()),
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(CHANGES)), max_size=3, unique=True))
def test_the_watch_names_each_change_of_a_module_and_nothing_else(changes: list[str]) -> None:
    import sys
    import threading

    module = _fresh_module("job_module_for_the_watch")
    try:
        module.value, module.cache, module.items, module.local = object(), {}, [], threading.local()
        module.Kind = type("Kind", (), {"__module__": module.__name__, "count": 1})
        before = statewatch.snapshot()
        replaced = module.value  # (kept: a new object at a freed one's address has its id)
        for change in changes:
            CHANGES[change](module)
        moved = statewatch.changed(before, statewatch.snapshot())
        expected = {"rebind": "value", "bind": "new", "delete": "value", "dict item": "cache", "list append": "items",
                    "class attribute": "Kind.count", "thread-local": "local"}
        assert moved == sorted({f"{module.__name__}.{expected[c]}" for c in changes}), (changes, moved)
        assert replaced is not None
    finally:
        del sys.modules["job_module_for_the_watch"]


def test_a_module_first_imported_during_the_example_is_no_change() -> None:
    before = statewatch.snapshot()
    module = _fresh_module("imported_during_the_example")
    try:
        module.anything = {}
        assert statewatch.changed(before, statewatch.snapshot()) == []
    finally:
        import sys

        del sys.modules["imported_during_the_example"]


@pytest.mark.parametrize("name", ["simfs.runtime.sigint", "scenarios.mix", "hypothesis.core"])
def test_simfs_and_the_searchs_own_modules_are_not_watched(name: str) -> None:
    import importlib

    module = importlib.import_module(name)
    before = statewatch.snapshot()
    module._watch_probe = 1  # type: ignore[attr-defined]
    try:
        assert statewatch.changed(before, statewatch.snapshot()) == []
    finally:
        del module._watch_probe  # type: ignore[attr-defined]


# -- simfs run: a job's search on auto --------------------------------------------------------------


@pytest.mark.parametrize(("job", "carrier", "why"), [
    ("makedirs_once", "greenlet", "searched on greenlet ranks (the job showed no per-process state)"),
    ("keeps_a_registry", "process", "_auto_jobs.SEEN"),
])
def test_simfs_run_searches_a_job_on_auto_and_says_where(job: str, carrier: str, why: str) -> None:
    """`simfs run FILE.py:job` takes auto, as explore does: its search and the confirming rank
    processes run in children of the task's confined child, the job imported only there."""
    outcome = run_task(Task(f"{jobs.__file__}:{job}", "nfs", nodes=1, ranks_per_node=2, examples=20))
    assert outcome.verdict == "pass" and outcome.error == "", outcome
    assert outcome.carrier == carrier and why in outcome.carrier_note, outcome


def test_simfs_run_reports_a_finding_of_auto_from_rank_processes() -> None:
    """Searched on greenlet ranks, the finding is the rank processes' run, and replays there."""
    outcome = run_task(Task(f"{_explore_jobs.__file__}:lingua_makedirs", "beegfs", examples=100))
    assert outcome.verdict == "fail" and outcome.carrier == "greenlet" and outcome.finding is not None, outcome
    again = scenarios.replay(outcome.finding.replay)
    assert again.target.carrier == "process" and again.failed, again
    assert again.failure == outcome.finding.failure and again.trace == outcome.finding.trace
