"""Several shared mounts in one cluster: each keeps its own semantics, renames cannot cross
them, the longest mount point wins, and every other path is private to its node."""

import errno
import os
import time

import torch.distributed as dist

import simfs

MOUNTS = {"/shared": "local", "/bucket": "objectstore", "/shared/scratch": "nfs"}


def _cluster(seed: int = 0) -> simfs.Cluster:
    return simfs.Cluster(nodes=2, ranks_per_node=1, mounts=MOUNTS, seed=seed)


def visibility_before_close():
    """Node 0 writes (without closing) a file on each mount; node 1 looks."""
    rank = dist.get_rank()
    handles = []
    if rank == 0:
        for mount in ("/shared", "/bucket"):
            f = open(f"{mount}/f", "wb")
            f.write(b"data")
            f.flush()
            handles.append(f)
    dist.barrier()
    seen = {m: os.path.exists(f"{m}/f") for m in ("/shared", "/bucket")} if rank == 1 else None
    dist.barrier()
    for f in handles:
        f.close()
    return seen


def test_each_mount_keeps_its_profile():
    result = _cluster().run(visibility_before_close)
    assert result.ok, result.summary()
    # a coherent local-disk profile shows the open file at once; an object store only after close
    assert result.returns[1] == {"/shared": True, "/bucket": False}


def cross_mount_rename():
    with open("/shared/a", "wb") as f:
        f.write(b"a")
    try:
        os.rename("/shared/a", "/bucket/a")
    except OSError as exc:
        error = exc.errno
    else:
        error = None
    devs = {m: os.stat(m).st_dev for m in ("/", "/shared", "/bucket", "/shared/scratch")}
    return error, devs


def test_rename_across_mounts_is_exdev_and_devices_differ():
    result = simfs.Cluster(mounts=MOUNTS).run(cross_mount_rename)
    assert result.ok, result.summary()
    error, devs = result.returns[0]
    assert error == errno.EXDEV
    assert len(set(devs.values())) == 4


def nested_mount():
    """/shared/scratch is its own (nfs) mount inside /shared (local): a name cached as missing
    on node 1 stays missing there for the nfs ttl, while /shared itself is coherent."""
    rank = dist.get_rank()
    if rank == 1:
        os.path.exists("/shared/scratch/d")
        os.path.exists("/shared/d")
    dist.barrier()
    if rank == 0:
        os.mkdir("/shared/scratch/d")
        os.mkdir("/shared/d")
    dist.barrier()
    if rank == 1:
        before = (os.path.exists("/shared/scratch/d"), os.path.exists("/shared/d"))
        time.sleep(61)  # past nfs's acdirmax
        return before, os.path.exists("/shared/scratch/d")
    return None


def test_the_longest_mount_point_wins():
    result = _cluster(seed=4).run(nested_mount)
    assert result.ok, result.summary()
    (scratch_before, shared_before), scratch_after = result.returns[1]
    assert shared_before is True  # local profile: coherent
    assert scratch_before is False and scratch_after is True  # nfs: stale negative entry, then the ttl


def node_private():
    rank = dist.get_rank()
    with open("/tmp/mine", "w") as f:
        f.write(str(rank))
    dist.barrier()
    with open("/tmp/mine") as f:
        return f.read(), sorted(os.listdir("/")), os.listdir("/shared")


def test_other_paths_are_private_to_each_node():
    result = _cluster().run(node_private)
    assert result.ok, result.summary()
    assert result.returns[0][0] == "0" and result.returns[1][0] == "1"
    assert {"bucket", "shared", "tmp"} <= set(result.returns[0][1])  # mount points show in '/'
    assert result.returns[0][2] == ["scratch"]  # and a nested one in the mount around it
