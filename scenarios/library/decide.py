"""(c) Ranks that decide from their own os.path.exists() diverge when their nodes' caches
disagree, and the ones that took the other branch never reach the collective the rest wait
in. coord.rank0_decides makes one rank's answer everyone's."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist

import coord

from ._common import ALL_PROFILES, read_file, scenario, write_file

FAMILY = "decide"
RUN = "/shared/run"
CKPT = f"{RUN}/model.pt"


def _evaluate() -> None:
    """Every rank loads the checkpoint and the metrics are gathered (a collective)."""
    size = len(read_file(CKPT))
    metrics: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(metrics, size)


def _train(exists: Callable[[], bool]) -> None:
    """Resume if a checkpoint exists (none yet), train, rank 0 saves, then evaluate it if it exists.
    Training is an all-reduce, which no rank leaves before every rank arrived: rank 0 saves only
    after every rank looked for a checkpoint to resume from."""
    coord.makedirs_once(RUN)
    if exists():
        _evaluate()
    dist.all_reduce(torch.zeros(1))  # a training step's gradients
    if dist.get_rank() == 0:
        write_file(CKPT, b"step 1")
    dist.barrier()
    if exists():
        _evaluate()


@scenario("decide-from-exists", expect={"nfs": "fail", "objectstore": "fail", "local": "pass", "lustre": "pass"},
          family=FAMILY, tags=("naive",))
def each_rank_decides() -> None:
    """Each rank checks os.path.exists(ckpt) to resume, then again to evaluate the one rank 0 saved.

    Its first 'not found' stays in the node's cache (NFS lookupcache=all: 30-60 s; gcsfuse:
    5 s), so after rank 0 saved and a barrier the other node skips the evaluation and the ranks
    that evaluate hang in all_gather_object. Not run on BeeGFS: whether its client keeps a plain
    'not found' is inferred, not documented."""
    _train(lambda: os.path.exists(CKPT))


def _exists_for_everyone() -> bool:
    if not coord.rank0_decides(lambda: os.path.exists(CKPT)):
        return False
    coord.wait_visible(CKPT, timeout=120)  # rank 0 saw it: wait until this node does too
    return True


@scenario("decide-rank0-decides", expect=dict.fromkeys(ALL_PROFILES, "pass"),
          family=FAMILY, tags=("fixed",))
def rank0_decides() -> None:
    """Rank 0 answers exists() for everyone (coord.rank0_decides), then every rank waits until it sees the file.

    One answer, broadcast: no rank takes the other branch, so none waits alone in a collective;
    coord.wait_visible revalidates the caches before a node that looked early opens the file."""
    _train(_exists_for_everyone)
