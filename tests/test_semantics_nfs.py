"""NFS-specific semantics on a 2-node cluster (rank 0 on node 0, rank 1 on node 1): ESTALE on
a file another node unlinked, and silly rename of a file the unlinking node still has open.
Coherent profiles (local, lustre) are the contrast: POSIX keeps an unlinked open file alive."""

from __future__ import annotations

import errno
import os
import time

import pytest
import torch.distributed as dist
from conftest import MODEL

import simfs

T = 10.0  # exact attribute ttl of the nfs variant used here
NFS_T = simfs.profiles.get("nfs").replace(acdirmin=T, acdirmax=T, acregmin=T, acregmax=T)
PROFILES = {"local": "local", "nfs": NFS_T, "lustre": "lustre", "objectstore": "objectstore"}
F = "/shared/f"
PAYLOAD = b"payload"


def _cluster(profile, seed: int = 0) -> simfs.Cluster:
    return simfs.Cluster(nodes=2, ranks_per_node=1, profile=profile, seed=seed, **MODEL)


def _run_ok(cluster: simfs.Cluster, job, *args) -> dict:
    result = cluster.run(job, *args)
    assert result.ok, result.summary()
    return result.returns


def _pread(fd: int):
    """The bytes read, or the errno name the read failed with."""
    try:
        return os.pread(fd, 100, 0)
    except OSError as exc:
        return errno.errorcode[exc.errno]


def unlinked_elsewhere_job(read_first: bool, offsets: tuple[float, ...]):
    """Node 0 holds the file open (having read it or not); node 1 unlinks it; node 0 reads again."""
    rank = dist.get_rank()
    if rank == 0:
        with open(F, "wb") as f:
            f.write(PAYLOAD)
    dist.barrier()
    t0 = time.monotonic()
    fd, first = None, None
    if rank == 0:
        fd = os.open(F, os.O_RDONLY)
        if read_first:
            first = _pread(fd)
    dist.barrier()
    if rank == 1:
        os.unlink(F)
    dist.barrier()
    if rank == 1:
        return None
    seen = []
    for offset in offsets:
        wait = t0 + offset - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        seen.append(_pread(fd))
    os.close(fd)
    return first, seen


@pytest.mark.parametrize("profile", list(PROFILES))
def test_uncached_read_of_a_file_unlinked_by_another_node(profile: str) -> None:
    first, seen = _run_ok(_cluster(PROFILES[profile], seed=1), unlinked_elsewhere_job, False, (0.0,))[0]
    assert first is None
    # nothing cached: the read goes to the server, which no longer has the file on nfs/objectstore
    assert seen == ([PAYLOAD] if profile in ("local", "lustre") else ["ESTALE"])


@pytest.mark.parametrize("profile", ["local", "nfs", "lustre"])
def test_cached_read_turns_estale_once_attributes_expire(profile: str) -> None:
    first, seen = _run_ok(_cluster(PROFILES[profile], seed=2), unlinked_elsewhere_job, True, (0.0, T - 0.5, T + 0.5))[0]
    assert first == PAYLOAD
    if profile == "nfs":  # cached data while the attributes are valid, then revalidation meets ESTALE
        assert seen == [PAYLOAD, PAYLOAD, "ESTALE"]
    else:
        assert seen == [PAYLOAD, PAYLOAD, PAYLOAD]


def silly_rename_job():
    """Rank 0 opens the file and unlinks it itself; both nodes list the directory while it is
    open and after rank 0 closes it (rank 0 reads after its attributes expired)."""
    rank = dist.get_rank()
    fd = None
    exists = None
    if rank == 0:
        with open(F, "wb") as f:
            f.write(PAYLOAD)
        fd = os.open(F, os.O_RDONLY)
        os.unlink(F)
        exists = os.path.exists(F)
    dist.barrier()
    during = sorted(os.listdir("/shared"))
    dist.barrier()
    data = None
    if rank == 0:
        time.sleep(T + 1.0)  # attributes expired: the read must ask the server
        data = _pread(fd)
        os.close(fd)
    dist.barrier()
    return exists, during, data, sorted(os.listdir("/shared"))


@pytest.mark.parametrize("profile", ["local", "nfs", "lustre"])
def test_unlinking_an_open_file(profile: str) -> None:
    returns = _run_ok(_cluster(PROFILES[profile], seed=3), silly_rename_job)
    exists, during0, data, after0 = returns[0]
    _, during1, _, after1 = returns[1]
    assert exists is False
    assert data == PAYLOAD  # the unlinking node keeps reading its open file
    assert after0 == after1 == []  # after the last close nothing is left
    assert during0 == during1  # one server: every node lists the same names
    if profile == "nfs":  # silly rename: a hidden .nfs name stands in while the file is open
        assert len(during0) == 1 and during0[0].startswith(".nfs")
    else:
        assert during0 == []


def appended_under_flock_job(rounds: int) -> bytes:
    """Each node appends its rank ``rounds`` times to one file, each time under an exclusive flock
    taken on a file opened once (so close-to-open never revalidates it)."""
    import fcntl

    with open(F, "ab+") as f:
        for _ in range(rounds):
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            f.seek(0, os.SEEK_END)
            f.write(str(dist.get_rank()).encode())
            f.flush()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            time.sleep(0.001)
    dist.barrier()
    with open(F, "rb") as f:
        return f.read()


@pytest.mark.parametrize("seed", range(4))
def test_an_nfs_lock_is_a_cache_coherency_point(seed: int) -> None:
    """fs/nfs/file.c: do_setlk drops the file's cached attributes and data once the server grants
    the lock, do_unlk writes dirty data back first, so appends under a lock lose nothing."""
    returns = _run_ok(_cluster(NFS_T, seed), appended_under_flock_job, 5)
    assert sorted(returns[0]) == sorted(b"0000011111")
