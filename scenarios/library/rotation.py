"""(e) Deleting old checkpoints on a shared filesystem: by every node's local rank 0 (each
node thinks the directory is its own) against by global rank 0 alone, between barriers."""

from __future__ import annotations

import os
import shutil

import torch.distributed as dist

from ._common import ALL_PROFILES, node_leader, scenario, write_file

FAMILY = "rotation"
ROOT = "/shared/output"
STEPS = 3
KEEP = 1  # save_total_limit


def _rotate() -> None:
    """Delete every checkpoint but the newest KEEP (transformers' _rotate_checkpoints)."""
    names = sorted(os.listdir(ROOT), key=lambda name: int(name.rsplit("-", 1)[1]))
    for name in names[:-KEEP]:
        shutil.rmtree(os.path.join(ROOT, name))


def _train(rotates: bool) -> None:
    rank = dist.get_rank()
    for step in range(1, STEPS + 1):
        directory = f"{ROOT}/checkpoint-{step}"
        if rank == 0:
            os.makedirs(directory)
        dist.barrier()
        write_file(f"{directory}/rng_state_{rank}.pth", b"state")
        dist.barrier()
        if rotates:
            _rotate()
        dist.barrier()


@scenario("rotate-every-node", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def rotate_on_every_node() -> None:
    """Each node's local rank 0 deletes old checkpoints from the shared directory (transformers #20988).

    Two nodes rmtree the same directory at once: one deletes a file the other just listed, and
    shutil.rmtree raises FileNotFoundError, on every shared filesystem."""
    _train(rotates=node_leader())


@scenario("rotate-rank0", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def rotate_on_rank0() -> None:
    """Global rank 0 alone deletes old checkpoints, between barriers.

    One deleter, and no rank writes into a checkpoint while it is being deleted."""
    _train(rotates=dist.get_rank() == 0)
