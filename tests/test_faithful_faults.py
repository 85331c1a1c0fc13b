"""Faults as reality has them: a crashed rank is gone even if it catches BaseException; a crash
of a disk inside a node is that node's power loss (and the converse); the restarted job comes a
restart gap later, so survivors' caches age."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs.runtime.machine import WALL_EPOCH


def stubborn_job() -> str:
    """Rank 0 writes in a loop and swallows everything, even its own node's crash; then it
    tries to tell the others and to leave a mark. A dead process can do none of that."""
    if dist.get_rank() == 0:
        try:
            for i in range(100):
                with open(f"/shared/w{i}", "w") as f:
                    f.write("x")
        except BaseException:  # noqa: BLE001 - the job swallows everything on purpose, even its node's crash
            pass
        try:
            with open("/shared/survived", "w") as f:
                f.write("I should be dead")
        finally:
            with open("/shared/finally-ran", "w") as f:
                f.write("so should my finally blocks")
    dist.barrier()
    return "barrier passed"


@given(after_ops=st.integers(0, 30), seed=st.integers(0, 2**16))
@settings(max_examples=15)
def test_a_crashed_rank_runs_no_more_code_even_if_it_catches_base_exception(after_ops: int, seed: int) -> None:
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed, collective_timeout=60,
                            faults=[simfs.CrashNode(node=0, after_ops=after_ops)])
    result = cluster.run(stubborn_job)
    assert set(result.crashed) == {0}, result.summary()
    crash_time = next(e.time for e in result.trace if e.op == "crash")
    assert not [e for e in result.trace if e.rank == 0 and e.time > crash_time], "rank 0 acted after its crash"
    # rank 1 waits for a barrier rank 0 never reaches: torch's timeout, naming rank 0
    assert result.hung[1].waiting_for == [0] and 1 not in result.returns
    after = cluster.run(lambda: [os.path.exists(p) for p in ("/shared/survived", "/shared/finally-ran")],
                        faults=[])
    assert after.returns == {0: [False, False], 1: [False, False]}


def write_unsynced_then_mark() -> None:
    with open("/shared/data", "wb") as f:
        f.write(b"x" * 10_000)  # never fsynced: a power loss may lose it
    os.path.exists("/shared/mark")  # a CrashServer / CrashNode trigger


@pytest.mark.parametrize("fault", [simfs.CrashServer(mount="/shared", on="stat:/shared/mark"),
                                   simfs.CrashNode(node=0, on="stat:/shared/mark")])
def test_a_disk_inside_a_node_and_the_node_crash_together(fault: simfs.CrashServer | simfs.CrashNode) -> None:
    """`local` is a disk inside node 0: CrashServer of it kills node 0's ranks (it is the node's
    power loss), and CrashNode(0) crashes the disk (unsynced data may be lost)."""
    lost = 0
    for seed in range(20):
        cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=2, profile="local", seed=seed, faults=[fault])
        result = cluster.run(write_unsynced_then_mark)
        assert set(result.crashed) == {0, 1}, result.summary()
        assert any(e.op == "disk-crash" and e.path == "node0:/shared" for e in result.trace)
        after = cluster.run(lambda: os.path.getsize("/shared/data") if os.path.exists("/shared/data") else None,
                            faults=[])
        assert after.ok, after.summary()
        lost += after.returns[0] != 10_000
    assert lost > 0, "a power loss must be able to lose unsynced data of the node's own disk"


def test_a_network_server_crash_leaves_the_ranks_running() -> None:
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=1,
                            faults=[simfs.CrashServer(mount="/shared", on="stat:/shared/mark")])
    result = cluster.run(write_unsynced_then_mark)
    assert result.ok, result.summary()
    assert any(e.op == "server-crash" for e in result.trace)


def cache_a_negative_entry(path: str) -> float:
    if dist.get_rank() == 1:
        os.path.exists(path)  # node 1 caches "not there" (nfs: valid while the parent's attrs are)
    return time.time()


def create_and_crash(path: str) -> None:
    if dist.get_rank() == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("here")
        os.path.exists("/shared/mark")


def look(path: str) -> tuple[bool, float]:
    return os.path.exists(path), time.time()


@pytest.mark.parametrize("gap", [0.0, simfs.cluster.RESTART_GAP])
def test_the_restarted_job_comes_a_restart_gap_later(gap: float) -> None:
    """After a crash, the next run starts restart_gap virtual seconds later: a survivor's cached
    negative entry (nfs: up to acdirmax = 60 s) has expired after the default 90 s, not after 0."""
    path = "/shared/d/f"
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=4, restart_gap=gap)
    cluster.run(lambda: os.makedirs("/shared/d", exist_ok=True) if dist.get_rank() == 0 else None)
    cluster.run(cache_a_negative_entry, path)
    crashed = cluster.run(create_and_crash, path, faults=[simfs.CrashNode(node=0, on="stat:/shared/mark")])
    assert set(crashed.crashed) == {0}
    crash_time = max(e.time for e in crashed.trace) + WALL_EPOCH
    after = cluster.run(look, path, faults=[])
    seen, started = after.returns[1]
    assert started >= crash_time + gap
    assert seen is (gap > 60), "a survivor's stale negative entry lives until the parent's attributes expire"


def test_restart_gap_is_validated() -> None:
    with pytest.raises(ValueError, match="restart_gap"):
        simfs.Cluster(**MODEL, restart_gap=-1)


def lock_deleted_by_other_node() -> str | None:
    import fcntl

    if dist.get_rank() == 0:
        with open("/shared/lockfile", "w"):
            pass
    dist.barrier()
    fd = os.open("/shared/lockfile", os.O_RDWR) if dist.get_rank() == 0 else None
    dist.barrier()
    if dist.get_rank() == 1:
        os.unlink("/shared/lockfile")  # another node deletes the file rank 0 holds open
    dist.barrier()
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        return os.strerror(exc.errno)
    finally:
        os.close(fd)
    return "locked"


@pytest.mark.parametrize("profile, expected", [("nfs", "Stale file handle"), ("local", "locked"),
                                               ("beegfs", "locked")])
def test_flock_on_a_file_another_node_deleted(profile: str, expected: str) -> None:
    """NFS sends the lock by file handle: the file another node deleted answers ESTALE; a local
    disk keeps an open file alive, and node-local locks (BeeGFS) never ask the server."""
    result = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile=profile, seed=0).run(lock_deleted_by_other_node)
    assert result.returns[0] == expected, result.summary()
