"""Rank programs for tests/test_explore.py (importable, so their replay strings name them)."""

from __future__ import annotations

import os

import torch.distributed as dist

import coord

TRACE = "/shared/trace"


def lingua_makedirs() -> None:
    """Every rank: exists-then-makedirs (Lingua #49)."""
    if not os.path.exists(TRACE):
        os.makedirs(TRACE, exist_ok=True)
    dist.barrier()


def rank0_makedirs() -> None:
    if dist.get_rank() == 0:
        os.makedirs(TRACE, exist_ok=True)
    dist.barrier()


def rank1_raises() -> None:
    """Rank 1 fails; the others then wait at the barrier until it times out."""
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 broke")
    dist.barrier()


def _shard(step: int, rank: int) -> str:
    return f"step {step} rank {rank} " * 40


def _write_step(step: int) -> str:
    """Rank 0 makes the step's directory; every rank writes and fsyncs its shard there."""
    rank = dist.get_rank()
    directory = f"/shared/ckpt/step-{step}"
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
    dist.barrier()
    with open(f"{directory}/shard-{rank}", "w") as f:
        f.write(_shard(step, rank))
        f.flush()
        os.fsync(f.fileno())
    dist.barrier()
    return directory


def save_tracker_in_place() -> None:
    """Two checkpoints; rank 0 then writes 'latest' in place (truncate, write)."""
    for step in (1, 2):
        _write_step(step)
        if dist.get_rank() == 0:
            with open("/shared/ckpt/latest", "w") as f:
                f.write(str(step))
        dist.barrier()


def save_tracker_atomically() -> None:
    """The same, done right: the shards' entries made durable (their directory and its parent
    fsynced), then the tracker replaced atomically (coord.atomic_write: temp file, fsync, rename)."""
    for step in (1, 2):
        directory = _write_step(step)
        if dist.get_rank() == 0:
            coord.fsync_dir(directory)
            coord.fsync_dir("/shared/ckpt")
            with coord.atomic_write("/shared/ckpt/latest", "w") as f:
                f.write(str(step))
        dist.barrier()


def resume() -> int | None:
    """Load the checkpoint 'latest' names; it must be complete."""
    rank = dist.get_rank()
    try:
        with open("/shared/ckpt/latest") as f:
            step = int(f.read())
    except FileNotFoundError:
        return None
    with open(f"/shared/ckpt/step-{step}/shard-{rank}") as f:
        if f.read() != _shard(step, rank):
            raise RuntimeError(f"checkpoint step-{step} is incomplete")
    return step


def reads_before_the_write() -> None:
    """Rank 3 asks for the file rank 0 writes without waiting for it: fails only in the
    interleavings where rank 3 asks first, which the search takes a few examples to reach."""
    if dist.get_rank() == 0:
        with open("/shared/flag", "w") as f:
            f.write("written")
    elif dist.get_rank() == 3:
        for _ in range(3):
            os.listdir("/shared")
        assert os.path.exists("/shared/flag"), "rank 3 asked before rank 0 wrote"
    dist.barrier()


def reads_after_the_write() -> None:
    """The fix: rank 3 asks after a barrier."""
    if dist.get_rank() == 0:
        with open("/shared/flag", "w") as f:
            f.write("written")
    dist.barrier()
    if dist.get_rank() == 3:
        assert os.path.exists("/shared/flag")


def stat_after_another_node_appends() -> int:
    """Both nodes stat a file; node 0 rewrites it longer; node 1's cached attributes may still
    say the old size (acregmin..acregmax)."""
    if dist.get_rank() == 0:
        with open("/shared/f", "w") as f:
            f.write("one")
    dist.barrier()
    os.path.getsize("/shared/f")
    dist.barrier()
    if dist.get_rank() == 0:
        with open("/shared/f", "w") as f:
            f.write("second!")
    dist.barrier()
    return os.path.getsize("/shared/f")


def reread_an_open_file() -> tuple[str, str]:
    """Rank 1 keeps a file open and reads it again after rank 0 rewrote it in place (same size):
    no open revalidates it, so node 1's cached pages may answer."""
    if dist.get_rank() == 0:
        with open("/shared/f", "w") as f:
            f.write("aaa")
    dist.barrier()
    with open("/shared/f") as f:
        first = f.read()
        dist.barrier()
        if dist.get_rank() == 0:
            with open("/shared/f", "r+") as g:
                g.write("bbb")
        dist.barrier()
        f.seek(0)
        return first, f.read()
