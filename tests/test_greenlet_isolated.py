"""simfs.Cluster with greenlet ranks runs them in a confined child of the caller's process
(isolate=True, the default): the caller's objects stay the caller's, the filesystems the run
changed stay in the child, and what cannot work that way is refused with an error naming why."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs.errors import ConfigError, SimfsError

SEEN: list[int] = []


def _touch_the_callers_objects() -> int:
    SEEN.append(int(os.environ["RANK"]))
    os.environ["SIMFS_TEST_LEFT_BEHIND"] = "1"
    os.makedirs("/shared/out", exist_ok=True)
    return len(SEEN)


def test_the_callers_objects_stay_its_own() -> None:
    SEEN.clear()
    result = simfs.Cluster(nodes=2, ranks_per_node=1, carrier="greenlet").run(_touch_the_callers_objects)
    assert result.ok, result.summary()
    assert max(result.returns.values()) == 2  # the ranks shared one list: in the child
    assert SEEN == [] and "SIMFS_TEST_LEFT_BEHIND" not in os.environ


def test_isolate_false_runs_in_the_callers_process() -> None:
    SEEN.clear()
    try:
        cluster = simfs.Cluster(nodes=2, ranks_per_node=1, carrier="greenlet", isolate=False)
        assert cluster.run(_touch_the_callers_objects).ok
        assert sorted(SEEN) == [0, 1]
        assert cluster.run(lambda: os.path.isdir("/shared/out")).returns == {0: True, 1: True}  # runs again
    finally:
        SEEN.clear()
        os.environ.pop("SIMFS_TEST_LEFT_BEHIND", None)


def test_a_cluster_whose_filesystems_stayed_in_the_child_does_not_run_again() -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, carrier="greenlet")
    assert cluster.run(_touch_the_callers_objects).ok
    for again in (lambda: cluster.run(_touch_the_callers_objects), cluster.power_loss):
        with pytest.raises(SimfsError, match=r"confined child, which kept its filesystems.*carrier=.process."):
            again()


@settings(max_examples=1, database=None)
@given(st.data())
def test_hypothesis_data_cannot_cross_into_the_child(data: st.DataObject) -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, carrier="greenlet")
    with pytest.raises(ConfigError, match=r"scenarios\.explore, or pass isolate=False"):
        cluster.run(_touch_the_callers_objects, choices=data)


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_isolate_must_be_a_bool(bad: object) -> None:
    with pytest.raises(ConfigError, match="isolate"):
        simfs.Cluster(carrier="greenlet", isolate=bad)  # type: ignore[arg-type]
