"""Module-level rank jobs for the replay and CLI tests (importable as ``tests._replay_jobs``,
so a replay string can name them)."""

from __future__ import annotations

import os
import random
import time
from os import system  # noqa: F401 - a stdlib function, imported by name: a replay string must not run it

import torch.distributed as dist

OUT = "/shared/out"


def schedule_sensitive() -> tuple:
    """What each rank sees depends on the schedule, the cache lifetimes and latency draws."""
    rank = dist.get_rank()
    time.sleep(random.uniform(0.0, 2.0))
    try:
        os.makedirs(OUT, exist_ok=True)
    except OSError as exc:  # the NFS makedirs trap is one of the possible outcomes
        seen_error = type(exc).__name__
    else:
        seen_error = ""
    try:
        with open(f"{OUT}/r{rank}", "w") as f:
            f.write(f"{rank} {time.time():.6f}")
        wrote = True
    except OSError:
        wrote = False
    time.sleep(random.uniform(0.0, 40.0))
    try:
        listing = sorted(os.listdir(OUT))
    except OSError as exc:
        listing = [type(exc).__name__]
    return rank, seen_error, wrote, listing, round(time.time(), 6)


def always_ok() -> int:
    """Rank 0 creates the directory, everyone writes after a barrier."""
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(OUT, exist_ok=True)
    dist.barrier()
    with open(f"{OUT}/r{rank}", "w") as f:
        f.write(str(rank))
    dist.barrier()
    return rank


def fails_on_rank1() -> int:
    """Rank 1 raises; the others succeed."""
    rank = dist.get_rank()
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    return rank


def read_env() -> str:
    """Returns a variable of the rank's environment (set through ``Cluster(env=...)``)."""
    return os.environ.get("SIMFS_TEST_VALUE", "<unset>")


def barrier_times() -> list:
    """Virtual times around collectives (they depend on the collective latency and bandwidth)."""
    times = [time.monotonic()]
    dist.barrier()
    times.append(time.monotonic())
    dist.all_gather_object([None] * dist.get_world_size(), b"x" * 100_000)
    times.append(time.monotonic())
    return times


def write_named(name: str, *, size: int = 1) -> list:
    """A job with arguments: each rank writes ``size`` bytes under ``name``."""
    rank = dist.get_rank()
    time.sleep(random.uniform(0.0, 3.0))
    with open(f"/shared/{name}-{rank}", "wb") as f:
        f.write(b"x" * size)
    return sorted(os.listdir("/shared"))


def collective_timing() -> tuple:
    """When each rank leaves a barrier, a broadcast and an all-reduce, and what it then saw."""
    import torch

    rank = dist.get_rank()
    times = []
    dist.barrier()
    times.append(round(time.monotonic(), 9))
    seed = torch.tensor([rank + 1])
    dist.broadcast(seed, src=0)
    times.append(round(time.monotonic(), 9))
    if rank == 0:
        with open("/shared/marker", "w") as f:
            f.write("x")
    seen = os.path.exists("/shared/marker")
    dist.all_reduce(seed)
    times.append(round(time.monotonic(), 9))
    return rank, times, seen, int(seed.item())
