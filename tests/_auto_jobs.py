"""Jobs for tests/test_autocarrier.py (importable, so their replay strings name them)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

SEEN: list[int] = []  # a module-level registry each example appends to
TRACE = "/shared/trace"  # (tests/_explore_jobs.py: the race greenlet ranks can host)


def makedirs_once() -> None:
    """Keeps no per-process state: greenlet ranks can host it."""
    os.makedirs(TRACE, exist_ok=True)


def keeps_a_registry() -> None:
    SEEN.append(dist.get_rank())
    os.makedirs(TRACE, exist_ok=True)


def draws_from_torch() -> float:
    """torch's generator is per process: each rank process starts with the zygote's state, greenlet
    ranks share one, so the ranks' draws differ between the carriers (no module-level name changes)."""
    return float(torch.rand(1))
