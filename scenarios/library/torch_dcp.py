"""(h) Unmodified torch.distributed.checkpoint (DCP) under crashes. Saving again into the
directory of the last checkpoint rewrites its files in place: a crash in the middle leaves
some ranks' new data next to others' old data and the old ``.metadata`` (or none), and the
restarted job loads a mix or nothing. Saving each step into its own directory and committing
it (fsync, then an atomic `latest`) keeps the last complete checkpoint loadable. Each rank is a
process running torch's own c10d, as DCP runs on a real cluster."""

from __future__ import annotations

import os
import pickle
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict_loader import load
from torch.distributed.checkpoint.state_dict_saver import save

import coord

from ._common import CRASH_PROFILES, BrokenCheckpoint, commit, publish_step, read_step, scenario

FAMILY = "dcp"
ROOT = "/shared/dcp"
LATEST = f"{ROOT}/latest"
MODEL = f"{ROOT}/model"  # the one directory the naive job saves into
STEPS = (1, 2)


def _save(step: int, path: str) -> None:
    """dcp.save of this rank's tensor and the step (tiny: 4 floats per rank)."""
    state = {f"w{dist.get_rank()}": torch.full((4,), float(step)), "step": step}
    save(state, storage_writer=FileSystemWriter(path))


def _load(path: str) -> set[float]:
    """dcp.load of every rank's tensor and the step; the distinct values found (one per
    version the checkpoint mixes). Another node's 'not found' for .metadata may still be cached
    (gcsfuse: 5 s), so each rank first waits until it sees it."""
    try:
        coord.wait_visible(os.path.join(path, ".metadata"), timeout=60)
    except coord.WaitTimeout:
        raise BrokenCheckpoint(f"{path} has no .metadata: the committed checkpoint is gone") from None
    reader = FileSystemReader(path)
    try:
        reader.read_metadata()  # a torn .metadata is reported here, before dcp.load logs it
        names = [f"w{r}" for r in range(dist.get_world_size())]
        state: dict[str, Any] = {name: torch.zeros(4) for name in names}
        state["step"] = 0
        load(state, storage_reader=reader)
    except (CheckpointException, EOFError, pickle.UnpicklingError) as exc:
        raise BrokenCheckpoint(f"DCP cannot load {path}: {str(exc).splitlines()[0]}") from None
    return {float(state["step"]), *(float(x) for name in names for x in state[name].tolist())}


def overwrite_recover() -> int:
    """The restarted job: `latest` says which save last returned; the one directory must hold
    that step or the next, whole (all old or all new)."""
    step = read_step(LATEST)
    if step is None:
        return 0
    found = _load(MODEL)
    if len(found) != 1 or not found <= {float(step), float(step + 1)}:
        raise BrokenCheckpoint(f"{MODEL} mixes steps {sorted(found)} (the last save that returned was {step})")
    return int(found.pop())


def step_dir_recover() -> int:
    """The restarted job: load the step `latest` names; every value must be that step's."""
    step = read_step(LATEST)
    if step is None:
        return 0
    path = f"{ROOT}/step-{step}"
    found = _load(path)
    if found != {float(step)}:
        raise BrokenCheckpoint(f"{path} holds steps {sorted(found)}, not {step}")
    return step


@scenario("dcp-overwrite", recover=overwrite_recover, crashes=True, nodes=2, ranks_per_node=1, max_examples=300,
          carrier="process",
          expect=dict.fromkeys(CRASH_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def dcp_overwrite() -> None:
    """dcp.save into one directory, then dcp.save of the next step into the same directory (DCP torn overwrite).

    Each rank rewrites its __<rank>_0.distcp in place and rank 0 replaces .metadata last (delete,
    then rename): a crash in between loads as a mix of old and new values, a truncated file
    (CheckpointException) or no checkpoint at all, though the first save had returned. Whole-
    object uploads (gcsfuse) do not help: each file is whole, the set of them is not."""
    for step in STEPS:
        _save(step, MODEL)
        dist.barrier()
        if dist.get_rank() == 0:
            publish_step(LATEST, step)
        dist.barrier()


@scenario("dcp-step-dirs", recover=step_dir_recover, crashes=True, nodes=2, ranks_per_node=1, max_examples=30,
          carrier="process",  # (30: dcp-overwrite, its naive twin, fails by example 2 on every profile)
          expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def dcp_step_dirs() -> None:
    """dcp.save of each step into a new directory; rank 0 fsyncs it, then moves `latest` atomically.

    A save never touches the checkpoint `latest` names, and `latest` moves only once the new one
    is durable (DCP fsyncs .metadata before writing it and never fsyncs a directory, so the job
    does both)."""
    for step in STEPS:
        path = f"{ROOT}/step-{step}"
        _save(step, path)
        dist.barrier()
        if dist.get_rank() == 0:
            commit(path, (".metadata",))
            publish_step(LATEST, step)
        dist.barrier()
