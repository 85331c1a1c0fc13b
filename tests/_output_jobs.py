"""Jobs whose ranks print and warn at every example: `simfs run` keeps it from the console."""

from __future__ import annotations

import os
import warnings

import torch.distributed as dist


def _speak() -> None:
    warnings.warn("a rank warns at every example", UserWarning, stacklevel=1)
    print("printed by a rank at every example")


def warns_and_passes() -> None:
    _speak()
    dist.barrier()


def warns_and_races() -> None:
    """Every rank creates the directory (the Lingua #49 pattern): fails on BeeGFS."""
    _speak()
    if not os.path.exists("/shared/trace"):
        os.makedirs("/shared/trace", exist_ok=True)
    dist.barrier()
