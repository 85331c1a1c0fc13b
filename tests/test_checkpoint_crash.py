"""checkpoint under crashes, searched by scenarios.explore: every crash state the persistence
model allows for a small 4-rank overwrite (exhaustive), and drawn crashes (node, server, whole
cluster) during larger saves and rotations. After the restart, load gives the old or the new
checkpoint, never a mix, and CheckpointManager.latest() is loadable. The ranks are greenlets of
the search's process (conftest.MODEL_CARRIER): checkpoint keeps no per-process state, and the
search is about 12 times faster than with a process per rank."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from _checkpoint_cases import assert_same
from conftest import MODEL_CARRIER

import checkpoint
import scenarios
from scenarios.library.sharded import checkpoint_overwrite, overwrite_recover

PROFILES = ("local", "nfs", "objectstore")
ROOT = "/shared/run"
STEPS = (1, 2, 3)
ROWS = 16  # rows of each tensor of the larger state dict


@pytest.mark.parametrize("profile", PROFILES)
def test_every_crash_state_of_a_4_rank_overwrite_leaves_the_old_or_the_new_checkpoint(profile: str) -> None:
    finding = scenarios.explore(checkpoint_overwrite, recover=overwrite_recover, crashes="exhaustive", nodes=2,
                                ranks_per_node=2, profile=profile, carrier=MODEL_CARRIER)
    assert not finding.failed, str(finding)
    assert finding.examples > 10  # crash states were tried, not a single run


def _state(step: int) -> dict[str, object]:
    """Eight ranks: a weight split by rows, an embedding split by columns, a replicated norm,
    optimizer-like nested state, and the step; every element says which step wrote it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    weight = torch.arange(ROWS * 8, dtype=torch.float32).reshape(ROWS, 8) + 1000 * step
    embedding = torch.arange(8 * world, dtype=torch.float64).reshape(8, world) - 1000 * step
    return {
        "model": {
            "weight": checkpoint.Sharded.of(weight, [checkpoint.Split(0)], (world,), (rank,)),
            "embedding": checkpoint.Sharded.of(embedding, [checkpoint.Split(1)], (world,), (rank,)),
            "norm": torch.full((8,), float(step)),
        },
        "optim": {"state": [{"step": step, "exp_avg": torch.full((4,), step * 0.5)}], "lr": 0.1},
        "step": step,
    }


def _blank() -> dict[str, object]:
    state = _state(0)
    for part in (state["model"]["weight"], state["model"]["embedding"]):  # type: ignore[index]
        part.local.fill_(-1)
    return state


def rotating_saves() -> None:
    manager = checkpoint.CheckpointManager(ROOT, keep=2)
    for step in STEPS:
        manager.save(step, _state(step))


def resume_latest() -> int:
    """latest() loads, whole: every element of every tensor is that step's."""
    manager = checkpoint.CheckpointManager(ROOT, keep=2)
    latest = manager.latest()
    if latest is None:
        return 0
    state = _blank()
    assert manager.load(state) == latest
    assert_same(state, _state(latest), f"rank {dist.get_rank()}: latest() step {latest}")
    for step in manager.steps():  # every step it still lists loads whole too
        state = _blank()
        manager.load(state, step)
        assert_same(state, _state(step), f"rank {dist.get_rank()}: step {step}")
    return latest


@pytest.mark.slow  # 8 ranks, a drawn crash in most examples: run by .ci/run
@pytest.mark.parametrize("profile", PROFILES)
def test_drawn_crashes_during_8_rank_saves_and_rotations_resume_from_a_loadable_latest(profile: str) -> None:
    finding = scenarios.explore(rotating_saves, recover=resume_latest, crashes=True, nodes=2, ranks_per_node=4,
                                profile=profile, max_examples=25, seed=0, carrier=MODEL_CARRIER)
    assert not finding.failed, str(finding)
    assert finding.examples >= 25


@pytest.mark.slow  # a search with crashes over 8 ranks: run by .ci/run
def test_the_search_finds_a_mix_when_the_old_files_are_removed_before_the_commit() -> None:
    """The property can fail: a job that deletes the old checkpoint before saving the new one
    leaves nothing loadable if it crashes in between."""

    def delete_then_save() -> None:
        for step in STEPS:
            if dist.get_rank() == 0 and os.path.isdir(f"{ROOT}/latest"):
                for name in os.listdir(f"{ROOT}/latest"):
                    os.unlink(f"{ROOT}/latest/{name}")
            dist.barrier()
            checkpoint.save(_state(step), f"{ROOT}/latest")

    def resume() -> None:
        if os.path.isdir(f"{ROOT}/latest"):
            state = _blank()
            checkpoint.load(state, f"{ROOT}/latest")

    finding = scenarios.explore(delete_then_save, recover=resume, crashes=True, nodes=2, ranks_per_node=2,
                                profile="nfs", max_examples=100, carrier=MODEL_CARRIER)
    assert finding.failed, str(finding)
