"""(d) The `latest` tracker that names the newest checkpoint: written in place (Megatron's
latest_checkpointed_iteration.txt) against coord.atomic_write after a durable checkpoint.
A crash strikes anywhere; the restarted job must resume from a complete checkpoint (or start
fresh if none was committed), never from a torn tracker or a partial checkpoint."""

from __future__ import annotations

import os

import torch.distributed as dist

from ._common import (
    CRASH_PROFILES,
    BrokenCheckpoint,
    commit,
    content,
    publish_step,
    read_file,
    read_step,
    scenario,
    write_file,
)

FAMILY = "latest"
ROOT = "/shared/checkpoints"
LATEST = f"{ROOT}/latest"
STEPS = (1, 2)
SHARD_BYTES = 6000  # more than a 4 KiB block: a crash can tear it


def _step_dir(step: int) -> str:
    return f"{ROOT}/iter_{step:07d}"


def _shard_path(step: int, rank: int) -> str:
    return f"{_step_dir(step)}/rank-{rank}.pt"


def _shard(step: int, rank: int) -> bytes:
    return content(f"step {step} rank {rank}", SHARD_BYTES)


def _save(durable: bool) -> None:
    """Each step: rank 0 makes the step directory, every rank writes its shard, then rank 0
    points the tracker at the step (in place, or durably and atomically)."""
    rank = dist.get_rank()
    for step in STEPS:
        if rank == 0:
            os.makedirs(_step_dir(step))
        dist.barrier()
        write_file(_shard_path(step, rank), _shard(step, rank), durable=durable)
        dist.barrier()
        if rank == 0 and durable:
            commit(_step_dir(step))
            publish_step(LATEST, step)
        elif rank == 0:
            with open(LATEST, "w") as f:
                f.write(str(step))
        dist.barrier()


def resume() -> int:
    """The restarted job: read `latest` and load this rank's shard of the step it names (0: no
    checkpoint was committed, start fresh)."""
    step = read_step(LATEST)
    if step is None:
        return 0
    rank = dist.get_rank()
    try:
        shard = read_file(_shard_path(step, rank))
    except FileNotFoundError:
        raise BrokenCheckpoint(f"latest names step {step}, but rank {rank}'s shard is missing") from None
    if shard != _shard(step, rank):
        raise BrokenCheckpoint(f"latest names step {step}, but rank {rank}'s shard holds {len(shard)} bytes of "
                               f"something else: the crash tore it")
    return step


@scenario("latest-in-place", recover=resume, crashes=True, nodes=2, ranks_per_node=1, max_examples=200,
          expect={**dict.fromkeys(CRASH_PROFILES, "fail"), "objectstore": "pass"}, family=FAMILY, tags=("naive",))
def tracker_in_place() -> None:
    """Shards written without fsync, then rank 0 rewrites `latest` in place with open('w').write (Megatron's tracker).

    open('w') truncates on the server at once and the new text follows at close: a node
    crashing in between leaves an empty tracker; a power loss can keep the tracker but not the
    unsynced shards. gcsfuse uploads a file whole at close, so there the naive code survives."""
    _save(durable=False)


@scenario("latest-atomic", recover=resume, crashes=True, nodes=2, ranks_per_node=1, max_examples=100,
          expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def tracker_atomic() -> None:
    """Shards fsynced, the step directory fsynced, then `latest` replaced with coord.atomic_write.

    The tracker moves only once the checkpoint it names is durable, and it changes by one rename:
    every crash leaves the old step or the new one."""
    _save(durable=True)
