"""checkpoint is durable when save returns: a power loss of the whole cluster right after the job
(two saves into a directory it created, then CheckpointManager saves with retention) leaves, in
every crash state the persistence model allows, the checkpoint the last save wrote."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from _checkpoint_cases import assert_same
from conftest import MODEL_CARRIER

import checkpoint
import simfs
from scenarios.exhaustive import CrashWalk
from scenarios.target import Target

PROFILES = ("local", "local-posix", "nfs", "objectstore")
MODEL = "/shared/ck/model"  # /shared/ck does not exist before the first save
RUN = "/shared/run/steps"


def _state(step: int) -> dict[str, object]:
    rank = dist.get_rank()
    return {f"weight{rank}": torch.full((4,), float(10 * step + rank)), "step": step}


def _loads(path: str, step: int) -> None:
    state = _state(0)
    checkpoint.load(state, path)
    assert_same(state, _state(step), f"rank {dist.get_rank()}: {path}")


def two_saves() -> None:
    checkpoint.save(_state(1), MODEL)
    checkpoint.save(_state(2), MODEL)


def the_second_save_loads() -> None:
    _loads(MODEL, 2)


def managed_saves() -> None:
    manager = checkpoint.CheckpointManager(RUN, keep=1)
    for step in (1, 2):
        manager.save(step, _state(step))


def the_last_step_loads() -> None:
    manager = checkpoint.CheckpointManager(RUN, keep=1)
    assert manager.latest() == 2
    _loads(manager.path(2), 2)


def _every_state_after_the_job(job: Callable[[], None], recover: Callable[[], None], profile: str) -> int:
    """The restarted job on every distinct crash state of a power loss right after ``job``;
    how many there were (a failure fails the test, naming the state)."""
    target = Target(job, 2, 2, simfs.profiles.get(profile), recover=recover, carrier=MODEL_CARRIER)
    walk = CrashWalk(target, limit=1000, during_job=False)
    assert walk.simple.failure is None, walk.simple.failure
    for cut, failure in walk.restarts():
        assert failure is None, f"{walk.example(cut).crash}: {failure}"
    return len(walk.cuts)


@pytest.mark.parametrize("profile", PROFILES)
def test_a_checkpoint_survives_every_crash_state_after_save_returned(profile: str) -> None:
    assert _every_state_after_the_job(two_saves, the_second_save_loads, profile) >= 1


@pytest.mark.parametrize("profile", PROFILES)
def test_a_managed_checkpoint_survives_every_crash_state_after_save_returned(profile: str) -> None:
    assert _every_state_after_the_job(managed_saves, the_last_step_loads, profile) >= 1
