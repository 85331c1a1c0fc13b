"""The embedded default job of ``simfs run``: failures the default profiles really produce, each
next to the pattern that avoids it, run over many seeds.

- ``beegfs``: Lingua's ``if not exists(d): makedirs(d, exist_ok=True)`` on every rank raises
  FileExistsError (prime-rl PR #2523: a 'not found' that outlives mkdir's EEXIST); one creator
  and a barrier does not.
- ``nfs``: a node that looked for a file before rank 0 wrote it keeps its cached 'not found' for
  up to acdirmin..acdirmax (30-60 s, nfs(5) lookupcache=all) after a barrier; waiting with
  revalidation (coord.wait_visible, which lists the parent) sees it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import torch.distributed as dist

import coord

OUTPUT = "/shared/logs"
DONE = "/shared/run/step-100.done"


def naive_makedirs(path: str = OUTPUT) -> bool:
    """Every rank: if not os.path.exists(d): os.makedirs(d, exist_ok=True); then a barrier (Lingua)."""
    if not os.path.exists(path):
        os.makedirs(path, exist_ok=True)
    dist.barrier()
    return os.path.isdir(path)


def fixed_makedirs(path: str = OUTPUT) -> bool:
    """Rank 0 creates the directory, a barrier orders everyone after the creation, then all use it."""
    if dist.get_rank() == 0:
        os.makedirs(path, exist_ok=True)
    dist.barrier()
    return os.path.isdir(path)


def _write_marker(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("done")


def naive_exists(path: str = DONE) -> bool:
    """Every rank looks for rank 0's file early (none yet); rank 0 writes it; after a barrier every
    rank checks os.path.exists(file)."""
    if dist.get_rank() == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    dist.barrier()
    os.path.exists(path)  # e.g. "resume if a checkpoint exists": caches 'not found' on this node
    dist.barrier()
    if dist.get_rank() == 0:
        _write_marker(path)
    dist.barrier()
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "rank 0 wrote it before the barrier, yet this node does not see it",
                                path)
    return True


def fixed_exists(path: str = DONE) -> bool:
    """The same, but after the barrier every rank waits with revalidation (coord.wait_visible lists
    the parent, which makes the NFS client drop its stale entry)."""
    if dist.get_rank() == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    dist.barrier()
    os.path.exists(path)
    dist.barrier()
    if dist.get_rank() == 0:
        _write_marker(path)
    dist.barrier()
    coord.wait_visible(path, timeout=120)
    return True


class Case(NamedTuple):
    """One demonstrated pattern: the job, the built-in profile it runs on, and whether it should fail."""

    job: Callable[..., Any]
    profile: str
    should_fail: bool


CASES = (
    Case(naive_makedirs, "beegfs", True),
    Case(fixed_makedirs, "beegfs", False),
    Case(naive_exists, "nfs", True),
    Case(fixed_exists, "nfs", False),
)
