"""(i) This project's own sharded checkpoint (``checkpoint``) under the layouts and crashes that
break others: a replicated item is written exactly once and every byte of every tensor once,
whatever mix of data and tensor parallelism saved it; a save over the directory of the last
checkpoint -- the overwrite that tears torch.distributed.checkpoint (``dcp-overwrite``) -- leaves
the old checkpoint whole until the new one is committed; a job that resumes from the newest step
directory it lists picks the one a crash left half written, where ``CheckpointManager.latest()``
names only committed ones; and rotation never deletes a checkpoint another job is loading."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import torch
import torch.distributed as dist

import checkpoint
import coord

from ._common import ALL_PROFILES, CRASH_PROFILES, BrokenCheckpoint, publish_step, read_step, scenario

FAMILY = "checkpoint"
ROOT = "/shared/ckpt"
MODEL = f"{ROOT}/model"  # the one directory the overwrite scenario saves into
RUN = f"{ROOT}/run"  # the step directories of the resume and rotation scenarios
RESUME_STEPS = (1, 2, 3)
LATEST = f"{ROOT}/latest"
STEPS = (1, 2)
ROWS, COLS = 6, 4  # the sharded weight's global shape


def _weight(step: int) -> torch.Tensor:
    """The full weight at ``step``: every element distinct, so a misplaced byte shows."""
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) + 1000.0 * step


def _state(step: int, split_dim: int) -> dict[str, Any]:
    """A DP x TP state dict on a mesh of nodes x ranks per node: a weight split over the node's
    ranks along ``split_dim`` (tensor parallel) and replicated over nodes (data parallel), a bias
    every rank replicates, and the step."""
    per_node, rank = int(os.environ["LOCAL_WORLD_SIZE"]), dist.get_rank()
    weight = checkpoint.Sharded.of(_weight(step), [checkpoint.Broadcast(), checkpoint.Split(split_dim)],
                                   (dist.get_world_size() // per_node, per_node), (rank // per_node, rank % per_node))
    return {"model": {"weight": weight, "bias": torch.full((COLS,), float(step))}, "step": step}


def _empty(split_dim: int) -> dict[str, Any]:
    state = _state(0, split_dim)
    state["model"]["weight"].local.zero_()
    state["model"]["bias"].zero_()
    return state


def _check_loaded(state: dict[str, Any], step: int, split_dim: int, where: str) -> None:
    """``state`` (loaded with ``split_dim``) holds exactly what step ``step`` saved."""
    expected = _state(step, split_dim)
    if state["step"] != step or not torch.equal(state["model"]["weight"].local, expected["model"]["weight"].local) \
            or not torch.equal(state["model"]["bias"], expected["model"]["bias"]):
        raise BrokenCheckpoint(f"{where} holds values of another step than {step} (rank {dist.get_rank()})")


def _check_manifest(path: str) -> None:
    """Each replicated item is stored once, and the chunks of the weight tile it exactly."""
    manifest = checkpoint.read_manifest(path)
    bias = manifest.tensors["model.bias"].chunks
    if len(bias) != 1:
        raise BrokenCheckpoint(f"the replicated bias is stored {len(bias)} times in {path}")
    weight = manifest.tensors["model.weight"].chunks
    covered = torch.zeros(ROWS, COLS, dtype=torch.int32)
    for chunk in weight:
        (r, c), (h, w) = chunk.offsets, chunk.shape
        covered[r:r + h, c:c + w] += 1
    if not bool((covered == 1).all()):
        raise BrokenCheckpoint(f"the weight's chunks in {path} cover some elements {int(covered.max())} times "
                               f"and some {int(covered.min())} times")


@scenario("checkpoint-dedup", nodes=2, ranks_per_node=2, max_examples=50,
          expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def checkpoint_dedup() -> None:
    """checkpoint.save of a weight split over each node's ranks, replicated over nodes; loaded split another way.

    Tensor parallel within a node, data parallel across nodes, and a bias every rank holds:
    each replicated item is written once, every element once, and the load equals the save."""
    path = f"{ROOT}/step-1"
    checkpoint.save(_state(1, split_dim=0), path)
    if dist.get_rank() == 0:
        _check_manifest(path)
    target = _empty(split_dim=1)
    checkpoint.load(target, path)
    _check_loaded(target, 1, 1, path)


def overwrite_recover() -> int:
    """The restarted job: `latest` says which save last returned; the one directory must hold
    that step or the next, whole."""
    step = read_step(LATEST)
    if step is None:
        return 0
    state = _empty(split_dim=0)
    try:
        checkpoint.load(state, MODEL)
    except checkpoint.CheckpointError as exc:
        raise BrokenCheckpoint(f"{MODEL} does not load though the save of step {step} returned: {exc}") from None
    loaded = int(state["step"])
    if loaded not in (step, step + 1):
        raise BrokenCheckpoint(f"{MODEL} holds step {loaded}, but the last save that returned was {step}")
    _check_loaded(state, loaded, 0, MODEL)  # a mix: its step says one, its tensors another
    return loaded


@scenario("checkpoint-overwrite", recover=overwrite_recover, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=300, expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def checkpoint_overwrite() -> None:
    """checkpoint.save into one directory, then the next step into the same one (DCP's torn overwrite).

    This is the overwrite that tears torch.distributed.checkpoint's checkpoint. The new save
    writes files under new names and commits a new manifest atomically; only then are the old
    files removed, so a crash at any point leaves the old or the new checkpoint."""
    for step in STEPS:
        checkpoint.save(_state(step, split_dim=0), MODEL)
        if dist.get_rank() == 0:
            publish_step(LATEST, step)
        dist.barrier()


def newest_dir_recover() -> int:
    """The restarted job: resume from the newest step directory it can list."""
    found = [int(m.group(1)) for name in (os.listdir(RUN) if os.path.isdir(RUN) else ())
             if (m := re.fullmatch(r"step-(\d+)", name))]
    if not found:
        return 0
    step = max(found)
    state = _empty(split_dim=0)
    try:
        checkpoint.load(state, f"{RUN}/step-{step}")
    except checkpoint.CheckpointError as exc:
        raise BrokenCheckpoint(f"the newest step directory, step-{step}, does not load: {exc}") from None
    _check_loaded(state, step, 0, f"{RUN}/step-{step}")
    return step


@scenario("checkpoint-resume-newest-dir", recover=newest_dir_recover, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=300, expect=dict.fromkeys(CRASH_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def checkpoint_resume_newest_dir() -> None:
    """checkpoint.save of each step into step-N; the restart resumes from the newest step-N it lists.

    A crash during a save leaves that step's directory without its manifest: the newest
    directory is not a checkpoint (OLMo, Lightning and others resume from a listing this way)."""
    for step in RESUME_STEPS:
        checkpoint.save(_state(step, split_dim=0), f"{RUN}/step-{step}")


def manager_recover() -> int:
    """The restarted job: resume from CheckpointManager.latest(), which must load."""
    manager = checkpoint.CheckpointManager(RUN, keep=2)
    latest = manager.latest()
    if latest is None:
        return 0
    state = _empty(split_dim=0)
    loaded = manager.load(state)
    _check_loaded(state, loaded, 0, manager.path(loaded))
    return loaded


@scenario("checkpoint-resume-latest", recover=manager_recover, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=100, expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def checkpoint_resume_latest() -> None:
    """CheckpointManager(keep=2).save of each step; the restart resumes from latest().

    latest() names the newest committed checkpoint only (a manifest is written last, atomically),
    and retention deletes a step's manifest before its files."""
    manager = checkpoint.CheckpointManager(RUN, keep=2)
    for step in RESUME_STEPS:
        manager.save(step, _state(step, split_dim=0))


ROTATIONS = 4


@scenario("checkpoint-rotate-while-loading", nodes=2, ranks_per_node=1, max_examples=50,
          expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def checkpoint_rotate_while_loading() -> None:
    """Node 0's job saves with keep=1 while node 1's job loads latest(), again and again.

    The loading job holds a lease on the step it reads; retention skips a leased step until
    the load is over, so no load finds its files deleted under it."""
    world = coord.get_comm()  # two jobs that share nothing but the filesystem: a group each
    saver, loader = world.subgroup([0]), world.subgroup([1])
    if saver is not None:
        manager = checkpoint.CheckpointManager(RUN, keep=1, comm=saver)
        for step in range(1, ROTATIONS + 1):
            manager.save(step, {"w": torch.full((64,), float(step)), "step": step})
            time.sleep(0.05)
    elif loader is not None:
        manager = checkpoint.CheckpointManager(RUN, keep=1, comm=loader)
        loaded = 0
        while loaded < ROTATIONS:
            if manager.latest() is None:
                time.sleep(0.01)
                continue
            state: dict[str, Any] = {"w": torch.zeros(64), "step": 0}
            loaded = manager.load(state)
            if state["step"] != loaded or not bool((state["w"] == float(loaded)).all()):
                raise BrokenCheckpoint(f"the load of step {loaded} read another step's values")
    world.barrier()
