"""simfs.runtime.dictversion: a dict's version tag says whether it changed (how a series of runs
skips comparing sys.modules entry by entry), and nothing that leaves it as it was counts as a change."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simfs.runtime.dictversion import TAGS_WORK, DictWatch

keys = st.sampled_from(["a", "b", "c"])
changes = st.one_of(
    st.tuples(st.just("set"), keys, st.integers(0, 3)), st.tuples(st.just("pop"), keys, st.none()),
    st.tuples(st.just("update"), keys, st.integers(0, 3)), st.tuples(st.just("setdefault"), keys, st.integers(0, 3)),
    st.tuples(st.just("clear"), st.none(), st.none()), st.tuples(st.just("read"), keys, st.none()))


def _apply(d: dict[str, int], op: str, key: Any, value: Any) -> None:
    if op == "set":
        d[key] = value
    elif op == "pop":
        d.pop(key, None)
    elif op == "update":
        d.update({key: value})
    elif op == "setdefault":
        d.setdefault(key, value)
    elif op == "clear":
        d.clear()
    else:
        _ = d.get(key), list(d.items()), len(d), key in d


def test_the_tags_work_on_the_cpython_that_ci_runs() -> None:
    if sys.implementation.name == "cpython" and (3, 10) <= sys.version_info[:2] <= (3, 13):
        assert TAGS_WORK
    else:
        pytest.skip(f"no dict version tags on {sys.implementation.name} {sys.version_info[:2]}: every dict counts "
                    "as changed")


@given(start=st.dictionaries(keys, st.integers(0, 3)), ops=st.lists(changes, max_size=12))
def test_a_dict_is_unchanged_exactly_when_no_operation_changed_it(start: dict[str, int],
                                                                   ops: list[tuple[str, Any, Any]]) -> None:
    d = dict(start)
    watch = DictWatch(d)
    watch.mark()
    for op, key, value in ops:
        before = dict(d)
        _apply(d, op, key, value)
        if d != before:
            assert not watch.unchanged(), (op, key, value)
        if op == "read":
            assert watch.unchanged() == TAGS_WORK
        watch.mark()
    assert watch.watches(d) and not watch.watches(dict(d))
