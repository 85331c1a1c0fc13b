"""The embedded default job of ``simfs run``: the makedirs race that Lingua shipped, and the
pattern that avoids it, each run over many seeds on a simulated two-node NFS cluster."""

from __future__ import annotations

import os

import torch.distributed as dist

OUTPUT = "/shared/run/logs"


def naive_makedirs(path: str = OUTPUT) -> bool:
    """Every rank creates the output directory with exist_ok=True."""
    os.makedirs(path, exist_ok=True)
    dist.barrier()
    return os.path.isdir(path)


def fixed_makedirs(path: str = OUTPUT) -> bool:
    """One rank creates it, a barrier orders everyone after the creation, then all use it."""
    if dist.get_rank() == 0:
        os.makedirs(path, exist_ok=True)
    dist.barrier()
    return os.path.isdir(path)
