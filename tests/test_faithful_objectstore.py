"""The objectstore profile follows gcsfuse's documented defaults: the first flush of an object
wins and another node's later flush of an object it opened before that gets ESTALE
(docs/semantics.md, file-system.precondition-errors=true); directory times are faked and do not
move when entries are added (semantics.md 'Directory Inodes'; mountpoint-s3: mount time; s3fs:
the epoch), so rotation or cleanup by directory mtime breaks there.

2 nodes x 1 rank: rank 0 on node 0, rank 1 on node 1."""

from __future__ import annotations

import errno
import os
import time

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

OBJ = simfs.profiles.get("objectstore")
A = "/shared/a"
BASE = b"0123456789"


def _run(profile, job, *args, seed: int = 0, choices=None) -> simfs.Result:
    return simfs.Cluster(nodes=2, ranks_per_node=1, profile=profile, seed=seed, **MODEL).run(
        job, *args, choices=choices)


def _ok(result: simfs.Result) -> dict:
    assert result.ok, result.summary()
    return result.returns


def _close(f) -> str:
    try:
        f.close()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"


# -- the first flush wins ----------------------------------------------------------------------------

def racing_writers_job(new_object: bool):
    """Both nodes open the object (or create a new one), write their own bytes and close, in
    whatever order the schedule picks; then every node reads what is there."""
    rank = dist.get_rank()
    if rank == 0 and not new_object:
        with open(A, "wb") as f:
            f.write(BASE)
    dist.barrier()
    f = open(A, "wb" if new_object else "r+b", buffering=0)
    f.seek(rank * 5)
    f.write(b"N%d" % rank)
    outcome = _close(f)
    dist.barrier()
    time.sleep(OBJ.acregmax + 1)  # every cached attribute and entry has expired
    with open(A, "rb") as g:
        return outcome, g.read()


@settings(max_examples=30, deadline=None)
@given(data=st.data(), new_object=st.booleans())
def test_exactly_the_first_upload_wins_whatever_the_schedule(data, new_object: bool) -> None:
    returns = _ok(_run("objectstore", racing_writers_job, new_object, choices=data))
    outcomes = {rank: outcome for rank, (outcome, _) in returns.items()}
    assert sorted(outcomes.values()) == ["ESTALE", "ok"], outcomes
    (winner,) = [rank for rank, outcome in outcomes.items() if outcome == "ok"]
    base = bytearray(b"" if new_object else BASE)
    if len(base) < winner * 5:
        base.extend(bytes(winner * 5 - len(base)))
    base[winner * 5:winner * 5 + 2] = b"N%d" % winner
    assert {content for _, content in returns.values()} == {bytes(base)}  # the loser's bytes are gone


@pytest.mark.parametrize("profile", ["local", "nfs", "beegfs", "lustre"])
def test_posix_profiles_merge_both_writers(profile: str) -> None:
    returns = _ok(_run(profile, racing_writers_job, False))
    assert {outcome for outcome, _ in returns.values()} == {"ok"}
    assert {content for _, content in returns.values()} == {b"N0234N1789"}


def changed_after_open_job():
    """Node 1 opens the object; node 0 replaces it; only then node 1 writes and closes."""
    rank = dist.get_rank()
    if rank == 0:
        with open(A, "wb") as f:
            f.write(BASE)
    dist.barrier()
    f = open(A, "r+b", buffering=0) if rank == 1 else None
    dist.barrier()
    if rank == 0:
        with open(A, "wb") as g:
            g.write(b"replaced")
    dist.barrier()
    outcome = None
    if rank == 1:
        f.write(b"late")
        outcome = _close(f)
    dist.barrier()
    with open(A, "rb") as g:
        return outcome, g.read()


def test_an_object_changed_since_open_cannot_be_flushed() -> None:
    """semantics.md: 'Other mounts that have not updated their local file descriptors after the
    object is modified will encounter a syscall.ESTALE error'."""
    assert _ok(_run("objectstore", changed_after_open_job))[1] == ("ESTALE", b"replaced")


def one_after_the_other_job():
    """Node 0 writes and closes; then node 1 opens, writes and closes: no conflict."""
    rank = dist.get_rank()
    for turn in (0, 1):
        if rank == turn:
            with open(A, "ab") as f:
                f.write(b"T%d" % turn)
        dist.barrier()
    with open(A, "rb") as g:
        return g.read()


def test_writers_one_after_the_other_both_succeed() -> None:
    assert set(_ok(_run("objectstore", one_after_the_other_job)).values()) == {b"T0T1"}


def fsync_conflict_job():
    """As changed_after_open_job, but node 1 calls fsync (reports ESTALE), then close (reports
    nothing more: the error was reported once and the dirty data is gone)."""
    rank = dist.get_rank()
    if rank == 0:
        with open(A, "wb") as f:
            f.write(BASE)
    dist.barrier()
    fd = os.open(A, os.O_RDWR) if rank == 1 else None
    dist.barrier()
    if rank == 0:
        with open(A, "wb") as g:
            g.write(b"replaced")
    dist.barrier()
    result = None
    if rank == 1:
        os.write(fd, b"late")
        try:
            os.fsync(fd)
            synced = "ok"
        except OSError as exc:
            synced = errno.errorcode[exc.errno]
        try:
            os.close(fd)
            closed = "ok"
        except OSError as exc:
            closed = errno.errorcode[exc.errno]
        with open(A, "rb") as g:
            result = synced, closed, g.read()
    dist.barrier()
    return result


def test_a_failed_flush_loses_the_data_and_reports_its_error_once() -> None:
    assert _ok(_run("objectstore", fsync_conflict_job))[1] == ("ESTALE", "ok", b"replaced")


# -- faked directory times ---------------------------------------------------------------------------

def dir_mtime_job():
    """Rank 0 makes a directory; later each node adds a file to it; what is its mtime then?"""
    rank = dist.get_rank()
    if rank == 0:
        os.mkdir("/shared/run")
    dist.barrier()
    made = os.stat("/shared/run").st_mtime
    time.sleep(100)
    dist.barrier()
    with open(f"/shared/run/file{rank}", "wb") as f:
        f.write(b"x")
    dist.barrier()
    time.sleep(OBJ.acdirmax + 1)  # past any attribute cache
    os.listdir("/shared/run")
    return os.stat("/shared/run").st_mtime - made


@pytest.mark.parametrize("profile", ["objectstore", "local", "nfs", "beegfs", "lustre"])
def test_directory_mtime_moves_only_on_posix_profiles(profile: str) -> None:
    returns = _ok(_run(profile, dir_mtime_job))
    for moved in returns.values():
        if profile == "objectstore":
            assert moved == 0  # faked: never updated when entries are added
        else:
            assert moved >= 99


def cleanup_by_mtime_job():
    """A cleanup that deletes run directories 'idle' for an hour, by directory mtime, while a run
    keeps adding checkpoints to one of them (rotation by directory mtime)."""
    if dist.get_rank() == 0:
        os.mkdir("/shared/active")
        for step in range(5):
            time.sleep(1000)
            with open(f"/shared/active/step{step}", "wb") as f:
                f.write(b"x")
        return None
    time.sleep(4500)
    idle = time.time() - os.stat("/shared/active").st_mtime
    return idle > 3600  # True: the cleanup would delete an active run


@pytest.mark.parametrize("profile, deletes_active", [("objectstore", True), ("nfs", False), ("local", False)])
def test_cleanup_by_directory_mtime_breaks_on_objectstore(profile: str, deletes_active: bool) -> None:
    assert _ok(_run(profile, cleanup_by_mtime_job))[1] is deletes_active


def test_dir_mtime_is_a_documented_parameter() -> None:
    assert OBJ.dir_mtime == "fixed" and simfs.profiles.Profile().dir_mtime == "real"
    assert "does not keep track of modification time for directories" in OBJ.sources["dir_mtime"]
    assert "precondition-errors" in OBJ.sources["upload"]
