"""(j) Unmodified DDP training whose ranks die with their node. Rank 0 saves the model every few
steps with ``torch.save`` over the one checkpoint file, as most training scripts do: a node crash
or power loss while it writes, or before the file's data reached the disk, leaves a truncated zip
archive, and the restarted job dies in ``torch.load`` ("failed finding central directory")
instead of resuming. Writing a temporary file, fsyncing it and renaming it over the checkpoint
keeps the previous one until the new one is whole. Each rank is a process running torch's own
c10d and DDP (the Reducer's bucketed all-reduces); the ranks left on the live node wait for the
dead ones in an all-reduce, and the restart is what is judged."""

from __future__ import annotations

import os
import pickle
import zipfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import coord

from ._common import CRASH_PROFILES, BrokenCheckpoint, scenario

FAMILY = "ddp"
ROOT = "/shared/ddp"
CHECKPOINT = f"{ROOT}/model.pt"
STEPS = 4
SAVE_EVERY = 2
Save = Callable[[dict[str, Any], str], None]


def _train(save: Save) -> None:
    """A few DDP steps on a small model; rank 0 saves {step, model} every SAVE_EVERY steps."""
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(ROOT, exist_ok=True)
        coord.fsync_dir(os.path.dirname(ROOT))  # the directory's own entry
    for step in range(1, STEPS + 1):
        batch = torch.full((8, 32), float(rank + step))
        optimizer.zero_grad()
        model(batch).square().mean().backward()
        optimizer.step()
        if step % SAVE_EVERY == 0 and rank == 0:
            save({"step": step, "model": model.module.state_dict()}, CHECKPOINT)
        dist.barrier()


def resume() -> int:
    """The restarted job: every rank loads the checkpoint if there is one (none: a fresh start)."""
    try:
        state = torch.load(CHECKPOINT, weights_only=True)
    except FileNotFoundError:
        return 0
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        said = " ".join(str(exc).split()[:12])
        raise BrokenCheckpoint(f"torch.load({CHECKPOINT!r}) failed: {type(exc).__name__}"
                               + (f": {said}" if said else "")) from None
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or step not in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY):
        raise BrokenCheckpoint(f"{CHECKPOINT} holds step {step!r}, which no save wrote")
    torch.nn.Linear(32, 32).load_state_dict(state["model"])
    return step


def _save_in_place(state: dict[str, Any], path: str) -> None:
    torch.save(state, path)


def _save_atomically(state: dict[str, Any], path: str) -> None:
    with coord.atomic_write(path, "wb") as f:
        torch.save(state, f)


@scenario("ddp-save-in-place", recover=resume, crashes=True, carrier="process", ranks_per_node=1, max_examples=75,
          expect={"local": "fail", "local-posix": "fail", "nfs": "fail", "lustre": "fail", "objectstore": "pass"},
          family=FAMILY, tags=("naive",))
def ddp_save_in_place() -> None:
    """DDP training; rank 0 torch.saves the model over the one checkpoint file every 2 steps (torn by a crash).

    The save truncates the file and writes the archive in pieces; a crash in between, or a power
    loss before the data was written back, leaves a file torch.load cannot read. An object store
    (gcsfuse) uploads the whole file at close, so there the old or the new one survives."""
    _train(_save_in_place)


@scenario("ddp-save-atomic", recover=resume, crashes=True, carrier="process", ranks_per_node=1, max_examples=40,
          expect=dict.fromkeys(CRASH_PROFILES, "pass"),
          family=FAMILY, tags=("fixed",))
def ddp_save_atomic() -> None:
    """DDP training; rank 0 torch.saves into a temporary file, fsyncs it and renames it over the checkpoint.

    coord.atomic_write: the new file is durable before the rename makes it the checkpoint, and the
    directory is fsynced after, so a crash leaves the previous checkpoint or the new one, whole."""
    _train(_save_atomically)
