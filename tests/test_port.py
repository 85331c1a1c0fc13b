"""What a rank asks of the simulated kernel is served by the host's objects on every carrier: a
rank process holds no copy of them that a call could reach instead (os.sync flushed a forked copy
of the node's caches, fcntl(F_GETFL) read a descriptor table the rank does not hold)."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

import simfs

SIZE = 10_000


def _sync_then_read() -> int | None:
    """Rank 0 (node 0) writes without closing and calls os.sync(); rank 1 (node 1) opens the file a
    minute of virtual time later: what sync(2) sent to the server is what it reads."""
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    if rank == 0:
        f = open("/shared/data", "wb")
        f.write(b"x" * SIZE)
        f.flush()
        os.sync()
        dist.barrier()
        dist.barrier()
        f.close()
        return None
    dist.barrier()
    time.sleep(60)
    with open("/shared/data", "rb") as f:
        seen = len(f.read())
    dist.barrier()
    return seen


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_os_sync_reaches_the_server_for_other_nodes(carrier: str) -> None:
    result = simfs.Cluster(2, 1, profile="nfs", carrier=carrier).run(_sync_then_read)
    assert result.ok, result.summary()
    assert result.returns[1] == SIZE


def _flags() -> list[int]:
    fd = os.open("/shared/f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        return [fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND, fcntl.fcntl(fd, fcntl.F_GETFD)]
    finally:
        os.close(fd)


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_fcntl_reads_the_descriptors_flags(carrier: str) -> None:
    result = simfs.Cluster(1, 1, carrier=carrier).run(_flags)
    assert result.ok, result.summary()
    assert result.returns[0] == [os.O_APPEND, fcntl.FD_CLOEXEC]
