"""The example database: a failure one search found is the first example the next search of the
same thing tries (in the caller's process, across the confined child, with rank processes, and in
`simfs run`), its replay string still reproduces it alone, a fixed job clears it, and the changes a
confined search asks for reach the real database exactly."""

from __future__ import annotations

import json
from pathlib import Path

import _explore_jobs as jobs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    InMemoryExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

import scenarios
from scenarios import database
from scenarios.cli import main

RACY = {"nodes": 2, "ranks_per_node": 2, "profile": "local", "max_examples": 100}
# the simple run (no faults) is example 1: a remembered failure is replayed as example 2
FIRST_DRAWN = 2


def _stored(db: DirectoryBasedExampleDatabase | InMemoryExampleDatabase, key: bytes) -> list[bytes]:
    return list(db.fetch(key))


@pytest.mark.parametrize(("carrier", "isolate"), [("greenlet", False), ("greenlet", True), ("process", True)])
def test_a_failure_found_once_is_the_first_example_of_the_next_search(tmp_path: Path, carrier: str,
                                                                       isolate: bool) -> None:
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    first = scenarios.explore(jobs.reads_before_the_write, **RACY, seed=0, database=db, isolate=isolate,
                              carrier=carrier)
    assert first.failed and first.found_at > FIRST_DRAWN  # the search had to look for it
    for seed in (0, 1, 2):  # another seed draws other examples, but the remembered one comes first
        again = scenarios.explore(jobs.reads_before_the_write, **RACY, seed=seed, database=db, isolate=isolate,
                                  carrier=carrier)
        assert again.failed and again.found_at == FIRST_DRAWN
        assert again.failure == first.failure
    replayed = scenarios.replay(again.replay)  # the replay string needs no database
    assert replayed.failed and replayed.failure == again.failure and replayed.trace == again.trace


def test_without_a_database_each_search_starts_from_nothing() -> None:
    first = scenarios.explore(jobs.reads_before_the_write, **RACY, seed=0, database=None, isolate=False,
                              carrier="greenlet")
    again = scenarios.explore(jobs.reads_before_the_write, **RACY, seed=0, database=None, isolate=False,
                              carrier="greenlet")
    assert first.found_at == again.found_at > FIRST_DRAWN


def test_a_fixed_job_clears_the_remembered_failure() -> None:
    db = InMemoryExampleDatabase()
    key = b"the-flag-race"
    found = scenarios.explore(jobs.reads_before_the_write, **RACY, database=db, database_key=key, isolate=True,
                              carrier="greenlet")
    assert found.failed and _stored(db, key)
    fixed = scenarios.explore(jobs.reads_after_the_write, **RACY, database=db, database_key=key, isolate=True,
                              carrier="greenlet")
    assert not fixed.failed
    assert _stored(db, key) == []  # replayed, passed, dropped (Hypothesis's reuse phase)


def test_the_key_names_the_search_not_its_seed_or_budget() -> None:
    target = scenarios.explore.__module__  # (any importable name will do for the job's)
    base = {"job": target, "recover": "", "check": "", "nodes": 2, "ranks_per_node": 2,
            "profile": __import__("simfs").profiles.get("nfs"), "kinds": ("cache",), "crashes": False,
            "carrier": "greenlet"}
    key = database.key(**base)
    assert database.key(**base) == key
    for field, other in (("job", "other:job"), ("nodes", 3), ("ranks_per_node", 1), ("kinds", ("skew",)),
                         ("crashes", True), ("carrier", "process"),
                         ("profile", __import__("simfs").profiles.get("beegfs"))):
        assert database.key(**{**base, field: other}) != key, field


def test_shared_databases_as_hypothesis_users_share_them() -> None:
    """A team's shared database read-only beside a local one (Hypothesis's recipe): the shared
    failure is replayed first and nothing is written to it."""
    shared = InMemoryExampleDatabase()
    scenarios.explore(jobs.reads_before_the_write, **RACY, database=shared, isolate=True, carrier="greenlet")
    before = {k: sorted(v) for k, v in shared.data.items()}
    local = InMemoryExampleDatabase()
    found = scenarios.explore(jobs.reads_before_the_write, **RACY, seed=5, isolate=True, carrier="greenlet",
                              database=MultiplexedDatabase(local, ReadOnlyDatabase(shared)))
    assert found.failed and found.found_at == FIRST_DRAWN
    assert {k: sorted(v) for k, v in shared.data.items()} == before
    assert any(local.data.values())  # what this search learnt is kept locally


@pytest.mark.parametrize(("kwargs", "named"), [({"database": 42}, "database"),
                                               ({"database_key": "text"}, "database_key"),
                                               ({"database_key": b""}, "database_key")])
def test_bad_databases_are_named(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        scenarios.explore(jobs.rank0_makedirs, nodes=1, ranks_per_node=1, profile="nfs", **kwargs)  # type: ignore[arg-type]


def test_simfs_run_remembers_failures_in_its_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    db = tmp_path / "db"
    args = ["run", "_explore_jobs:reads_before_the_write", "--profile", "local", "--carrier", "greenlet",
            "--examples", "100", "--jobs", "1", "--db", str(db)]
    found_at = []
    for run in ("first", "second"):
        assert main([*args, "--report", str(tmp_path / run)]) == 1
        report = json.loads((tmp_path / run / "report.json").read_text())
        found_at.append(report["outcomes"][0]["finding"]["found_at"])
    assert found_at[0] > FIRST_DRAWN and found_at[1] == FIRST_DRAWN
    assert any(db.rglob("*"))
    # '' (conftest's SIMFS_DB, the tests' default): no database, each run from nothing
    assert main([*args[:-2], "--report", str(tmp_path / "third")]) == 1
    report = json.loads((tmp_path / "third" / "report.json").read_text())
    assert report["outcomes"][0]["finding"]["found_at"] == found_at[0]


_keys = st.sampled_from([b"k", b"k.secondary"])  # a search's keys (its key b"k")
_values = st.binary(max_size=3)
_ops = st.lists(st.one_of(st.tuples(st.just("save"), _keys, _values, st.just(b"")),
                          st.tuples(st.just("delete"), _keys, _values, st.just(b"")),
                          st.tuples(st.just("move"), _keys, _values, _keys)), max_size=30)


@given(held=st.dictionaries(_keys, st.lists(_values, max_size=4)), ops=_ops)
def test_a_recorded_copy_and_the_database_it_came_from_agree(held: dict[bytes, list[bytes]],
                                                             ops: list[database.Op]) -> None:
    """The child's copy answers as the real database would, and the real database, given the
    copy's recorded changes, ends as the copy did."""
    real = InMemoryExampleDatabase()
    for k, values in held.items():
        for value in values:
            real.save(k, value)
    copy = database.Recorded({k: list(real.fetch(k)) for k in held})
    for op, at, value, dest in ops:
        getattr(copy, op)(*((at, dest, value) if op == "move" else (at, value)))
    assert database.apply(real, copy.ops, b"k") == 0
    for k in (b"k", b"k.secondary"):
        assert sorted(copy.fetch(k)) == sorted(real.fetch(k))


_foreign = st.sampled_from([b"other", b"k2", b"", b"k.secondary.x"])


@given(ops=_ops, foreign=st.lists(st.tuples(st.sampled_from(["save", "delete", "move"]), _foreign,
                                            st.binary(max_size=3)), min_size=1, max_size=5), data=st.data())
def test_the_caller_makes_only_the_changes_of_the_searchs_own_key(ops: list[database.Op], foreign: list,
                                                                   data: st.DataObject) -> None:
    """What the child sends is not trusted: a change under another search's key (as the source or
    the destination of a move) is not made, and is counted."""
    real = InMemoryExampleDatabase()
    real.save(b"other", b"kept")
    forged: list[database.Op] = [(op, at, value, b"k" if op == "move" else b"") for op, at, value in foreign]
    forged += [("move", b"k", b"v", b"other")]
    mixed = list(ops)
    for op in forged:
        mixed.insert(data.draw(st.integers(0, len(mixed))), op)
    assert database.apply(real, mixed, b"k") == len(forged)
    assert list(real.fetch(b"other")) == [b"kept"] and not list(real.fetch(b"k2"))


def test_the_caller_bounds_the_size_and_count_of_a_searchs_changes() -> None:
    real = InMemoryExampleDatabase()
    big = [("save", b"k", b"x" * (database.MAX_VALUE + 1), b"")]
    many = [("save", b"k", i.to_bytes(4, "big"), b"") for i in range(database.MAX_CHANGES + 5)]
    assert database.apply(real, big, b"k") == 1 and not list(real.fetch(b"k"))
    assert database.apply(real, many, b"k") == 5 and len(list(real.fetch(b"k"))) == database.MAX_CHANGES
