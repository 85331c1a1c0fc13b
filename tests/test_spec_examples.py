"""The usage the issues promise, verbatim: if these break, the documented API broke."""

import os
import time

import torch.distributed as dist

import simfs


def job():
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs("/shared/run/ckpt")
    dist.barrier()
    with open(f"/shared/run/ckpt/part-{rank}", "w") as f:
        f.write(str(rank))
    time.sleep(90)                       # virtual: costs no wall time
    return sorted(os.listdir("/shared/run/ckpt"))


def test_issue_2_example_runs_as_written():
    cluster = simfs.Cluster(nodes=2, ranks_per_node=4, profile="nfs", seed=1)
    start = time.perf_counter()
    result = cluster.run(job)
    assert result.ok, result.errors          # errors: {rank: exception}
    assert result.returns[0] == [f"part-{r}" for r in range(8)]
    assert result.virtual_time >= 90
    assert time.perf_counter() - start < 30  # the 90 s sleep is virtual
    nfs5 = simfs.profiles.get("nfs").replace(acdirmin=5, acdirmax=5, flock="node")
    crashy = simfs.Cluster(nodes=2, ranks_per_node=1, profile=nfs5, seed=3,
                           faults=[simfs.CrashNode(node=1, after_ops=3), simfs.SlowRank(rank=0, delay=20.0)])
    r = crashy.run(job)                      # r.ok is False; r.crashed / r.hung say which ranks and where
    assert r.ok is False
    assert set(r.crashed) == {1}
    info = r.crashed[1]
    assert info.node == 1 and info.op and info.path.startswith("/shared/run/ckpt")
    assert info.where.startswith(__file__) and " in job" in info.where
    assert r.returns[0] == ["part-0", "part-1"]  # rank 1 created its file before its node died


def test_issue_2_example_replays_exactly():
    first = simfs.Cluster(nodes=2, ranks_per_node=4, profile="nfs", seed=1).run(job)
    again = simfs.replay(first.replay, job)
    assert again.trace == first.trace and again.returns == first.returns
