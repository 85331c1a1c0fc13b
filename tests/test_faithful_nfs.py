"""The nfs profile follows the Linux NFS client: a failed create drops its dentry (fs/nfs/dir.c
nfs_mkdir/nfs_create/nfs_symlink: d_drop), so os.makedirs(exist_ok=True) never raises
FileExistsError on kernel NFS; changes are detected by the NFSv4 change attribute, while
NFSv3-style detection by timestamps (fs/nfs/nfs3xdr.c decode_fattr3 builds the change attribute
from ctime) misses a same-size change made within one tick of the server's clock, in the data
cache, the attribute cache and the lookup cache alike.

2 nodes; rank 0 is on node 0, the last rank on node 1."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

NFS = simfs.profiles.get("nfs")
TICK = 1.0  # a coarse server clock, so that 'within one tick' is easy to arrange
D = "/shared/d"
F = "/shared/f"


def _run(profile, job, *args, rpn: int = 1, seed: int = 0, choices=None) -> simfs.Result:
    return simfs.Cluster(nodes=2, ranks_per_node=rpn, profile=profile, seed=seed, **MODEL).run(
        job, *args, choices=choices)


def _ok(result: simfs.Result) -> dict:
    assert result.ok, result.summary()
    return result.returns


# -- a failed create drops the entry -----------------------------------------------------------------

def failed_create_job(kind: str):
    """Node 1 caches 'not found'; node 0 creates the name; node 1's create fails with EEXIST and
    its next stat must ask the server."""
    rank = dist.get_rank()
    last = dist.get_world_size() - 1
    if rank == last:
        assert not os.path.lexists(D)  # a negative entry on node 1
    dist.barrier()
    if rank == 0:
        if kind == "mkdir":
            os.mkdir(D)
        else:
            os.close(os.open(D, os.O_CREAT | os.O_WRONLY))
    dist.barrier()
    if rank != last:
        return None
    try:
        if kind == "mkdir":
            os.mkdir(D)
        elif kind == "create":
            os.close(os.open(D, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        else:
            os.symlink("/elsewhere", D)
    except FileExistsError:
        pass
    else:
        raise AssertionError("the create should have failed with EEXIST")
    return os.path.lexists(D)


@pytest.mark.parametrize("kind", ["mkdir", "create", "symlink"])
def test_a_failed_create_drops_the_cached_entry(kind: str) -> None:
    assert _ok(_run("nfs", failed_create_job, kind))[1] is True


@pytest.mark.parametrize("kind", ["mkdir", "create", "symlink"])
def test_without_the_drop_a_stale_entry_survives_eexist(kind: str) -> None:
    """The contrast (what beegfs models): the entry survives, lexists() says False."""
    assert _ok(_run(NFS.replace(eexist_drops_entry=False), failed_create_job, kind))[1] is False


def lingua_job(path: str) -> bool:
    """Lingua: every rank, `if not exists(d): makedirs(d, exist_ok=True)`, then a barrier."""
    if not os.path.exists(path):
        os.makedirs(path, exist_ok=True)
    dist.barrier()
    return os.path.isdir(path)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), path=st.sampled_from(["/shared/logs", "/shared/run/logs", "/shared/a/b/c"]),
       rpn=st.integers(1, 3))
def test_lingua_makedirs_never_fails_on_kernel_nfs_whatever_the_schedule(data, path: str, rpn: int) -> None:
    returns = _ok(_run("nfs", lingua_job, path, rpn=rpn, choices=data))
    assert all(returns.values())


# -- change detection: the change attribute vs timestamps ------------------------------------------

def rewrite_job(gap: float):
    """Node 1 reads the file (caching its data and attributes); node 0 rewrites it with the same
    size ``gap`` seconds after the first write; node 1 opens and reads it again."""
    rank = dist.get_rank()
    t0 = time.time()
    time.sleep(TICK - t0 % TICK + 0.1)  # start just after a tick
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"AAAA")
    dist.barrier()
    first = None
    if rank == 1:
        with open(F, "rb") as f:
            first = f.read()
    dist.barrier()
    if rank == 0:
        time.sleep(gap)
        with open(F, "wb") as f:
            f.write(b"BBBB")
    dist.barrier()
    if rank == 0:
        return None
    with open(F, "rb") as f:  # close-to-open: a GETATTR, compared as change_detection says
        second = f.read()
    return first, second, os.stat(F).st_size


@pytest.mark.parametrize("detection, gap, expected", [
    ("change_attr", 0.0, b"BBBB"),    # NFSv4: the change attribute moves on every write
    ("change_attr", 1.5, b"BBBB"),
    ("timestamps", 0.0, b"AAAA"),     # NFSv3: same size, same mtime/ctime tick: the old data stays
    ("timestamps", 1.5, b"BBBB"),     # a new tick: seen
])
def test_same_size_rewrite_within_one_tick(detection: str, gap: float, expected: bytes) -> None:
    profile = NFS.replace(change_detection=detection, mtime_granularity=TICK)
    first, second, size = _ok(_run(profile, rewrite_job, gap))[1]
    assert (first, second, size) == (b"AAAA", expected, 4)


def test_default_nfs_sees_a_same_size_rewrite_at_once() -> None:
    """NFSv4.2 (the default) on a 4 ms server clock: no tick to hide in."""
    assert _ok(_run("nfs", rewrite_job, 0.0))[1][1] == b"BBBB"


def held_rewrite_job():
    """As rewrite_job, but node 1 keeps reading through one descriptor after its attributes expire:
    the attribute cache decides alone (no open)."""
    rank = dist.get_rank()
    t0 = time.time()
    time.sleep(TICK - t0 % TICK + 0.1)
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"AAAA")
    dist.barrier()
    fd = None
    first = None
    if rank == 1:
        fd = os.open(F, os.O_RDONLY)
        first = os.pread(fd, 10, 0)
    dist.barrier()
    if rank == 0:
        with open(F, "r+b") as f:
            f.write(b"BBBB")
    dist.barrier()
    if rank == 0:
        return None
    time.sleep(NFS.acregmax + 1)  # the cached attributes have expired and been fetched again
    second = os.pread(fd, 10, 0)
    os.close(fd)
    return first, second


@pytest.mark.parametrize("detection, expected", [("change_attr", b"BBBB"), ("timestamps", b"AAAA")])
def test_attribute_revalidation_uses_the_same_change_detection(detection: str, expected: bytes) -> None:
    profile = NFS.replace(change_detection=detection, mtime_granularity=TICK)
    assert _ok(_run(profile, held_rewrite_job))[1] == (b"AAAA", expected)


def wcc_job():
    """Node 1 caches 'not found' for d/b; node 0 creates d/b; in the same tick node 1 creates
    d/a. The reply's pre-operation attributes tell node 1 whether someone else changed d since
    it cached it (NFS weak cache consistency)."""
    rank = dist.get_rank()
    if rank == 0:
        os.mkdir(D)
    dist.barrier()
    t0 = time.time()
    time.sleep(TICK - t0 % TICK + 0.1)
    if rank == 0:
        os.close(os.open(D + "/x", os.O_CREAT | os.O_WRONLY))  # d's times now read this tick
    dist.barrier()
    if rank == 1:
        assert not os.path.exists(D + "/b")  # caches d's attributes (this tick) and 'b: not found'
    dist.barrier()
    if rank == 0:
        os.close(os.open(D + "/b", os.O_CREAT | os.O_WRONLY))
    dist.barrier()
    if rank == 0:
        return None
    os.close(os.open(D + "/a", os.O_CREAT | os.O_WRONLY))
    return os.path.exists(D + "/b")


@pytest.mark.parametrize("detection, sees_b", [("change_attr", True), ("timestamps", False)])
def test_weak_cache_consistency_compares_as_change_detection_says(detection: str, sees_b: bool) -> None:
    profile = NFS.replace(change_detection=detection, mtime_granularity=TICK)
    assert _ok(_run(profile, wcc_job))[1] is sees_b


def tick_job(size_changes: bool, gap_ticks: int):
    rank = dist.get_rank()
    time.sleep(TICK - time.time() % TICK + 0.05)
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"AAAA")
    dist.barrier()
    if rank == 1:
        with open(F, "rb") as f:
            f.read()
    dist.barrier()
    if rank == 0:
        time.sleep(gap_ticks * TICK)
        with open(F, "wb") as f:
            f.write(b"BBBBB" if size_changes else b"BBBB")
    dist.barrier()
    if rank == 1:
        with open(F, "rb") as f:
            return f.read()
    return None


@settings(max_examples=20, deadline=None)
@given(data=st.data(), size_changes=st.booleans(), gap_ticks=st.integers(0, 3))
def test_nfsv3_misses_a_change_only_within_one_tick_and_only_at_the_same_size(data, size_changes: bool,
                                                                              gap_ticks: int) -> None:
    """Over any schedule: with timestamps, node 1 keeps the old data exactly when the rewrite has
    the same size and lands in the same tick; with the change attribute it never does."""
    for detection in ("change_attr", "timestamps"):
        profile = NFS.replace(change_detection=detection, mtime_granularity=TICK, jitter=0.0)
        seen = _ok(_run(profile, tick_job, size_changes, gap_ticks, choices=data))[1]
        stale = detection == "timestamps" and not size_changes and gap_ticks == 0
        assert seen == (b"AAAA" if stale else (b"BBBBB" if size_changes else b"BBBB")), (detection, seen)


def test_change_detection_is_documented() -> None:
    doc = simfs.profiles.describe("change_detection")
    assert "change_attr" in doc and "timestamps" in doc and "tick" in doc
    assert "decode_fattr3" in NFS.sources["change_detection"]
