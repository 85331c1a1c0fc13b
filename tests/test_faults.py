"""Fault triggers and what faults record: node crashes (after N ops, at a virtual time, at a
matching op), validation of fault parameters, errno injection, slow ranks and operations,
collectives that hang on a crashed peer, Lustre client eviction, and restarts."""

from __future__ import annotations

import errno
import os
import re
import time

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs import profiles

_THIS_FILE = os.path.basename(__file__)
_NOTE_OPS = {"sleep", "crash", "disk-crash", "server-crash", "evict"}


def where_is(func: str) -> re.Pattern:
    """A CrashInfo/HangInfo ``where``: 'file:line in func' pointing into this file."""
    return re.compile(rf".*{re.escape(_THIS_FILE)}:\d+ in {func}$")


def fs_ops(result: simfs.Result, node: int | None = None, rank: int | None = None) -> list[simfs.TraceEvent]:
    """The ranks' filesystem operations in the trace (no sleeps, crashes or collectives)."""
    return [e for e in result.trace
            if e.rank >= 0 and e.op not in _NOTE_OPS and e.path != "WORLD"
            and (node is None or e.node == node) and (rank is None or e.rank == rank)]


# -- rank code ------------------------------------------------------------------------------------
def stat_loop(n: int) -> int:
    """``n`` lookups of distinct paths, so each operation is recognisable in the trace."""
    rank = dist.get_rank()
    for i in range(n):
        try:
            os.stat(f"/shared/r{rank}-{i}")
        except FileNotFoundError:
            pass
    return n


def exists_loop(n: int) -> int:
    """Like stat_loop, through a stdlib helper (os.path.exists)."""
    rank = dist.get_rank()
    for i in range(n):
        os.path.exists(f"/shared/r{rank}-{i}")
    return n


def makedirs_job() -> None:
    os.makedirs("/shared/a/b/c", exist_ok=True)


def sleepy_stat_loop(n: int) -> int:
    rank = dist.get_rank()
    for i in range(n):
        time.sleep(1.0)
        os.path.exists(f"/shared/r{rank}-{i}")
    return n


def mkdirs(names: list[str]) -> list[str]:
    rank = dist.get_rank()
    made = []
    for name in names:
        os.mkdir(f"/shared/{rank}-{name}")
        made.append(name)
    return made


def node_local_mkdirs() -> str:
    os.mkdir(f"/shared/n{dist.get_rank()}")
    return "done"


def listing(path: str) -> list[str]:
    return sorted(os.listdir(path))


def try_ops(n: int, path: str = "/shared") -> list[str]:
    out = []
    for _ in range(n):
        try:
            os.stat(path)
            out.append("ok")
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
    return out


def open_and_stat() -> dict[str, str]:
    out = {}
    with open("/shared/f", "w") as f:
        f.write("x")
    for name, call in (("stat", lambda: os.stat("/shared/f")), ("open", lambda: open("/shared/f").close()),
                       ("listdir", lambda: os.listdir("/shared"))):
        try:
            call()
            out[name] = "ok"
        except OSError as exc:
            out[name] = errno.errorcode[exc.errno]
    return out


def path_ops() -> dict[str, str]:
    out = {}
    for path in ("/shared/ckpt-1", "/shared/ckpt-2", "/shared/log"):
        try:
            with open(path, "w") as f:
                f.write("x")
            out[path] = "ok"
        except OSError as exc:
            out[path] = errno.errorcode[exc.errno]
    return out


def first_op_time() -> float:
    now = time.time()
    os.stat("/shared")
    return now


def timed_ops() -> dict[str, float]:
    t0 = time.monotonic()
    os.listdir("/shared")
    t1 = time.monotonic()
    os.stat("/shared")
    t2 = time.monotonic()
    with open("/shared/slow-1", "w") as f:
        f.write("x")
    t3 = time.monotonic()
    with open("/shared/fast-1", "w") as f:
        f.write("x")
    t4 = time.monotonic()
    return {"listdir": t1 - t0, "stat": t2 - t1, "slow": t3 - t2, "fast": t4 - t3}


def stat_then_barrier() -> int:
    os.stat("/shared")
    dist.barrier()
    return dist.get_rank()


def barrier_after_sleep() -> int:
    time.sleep(1.0)
    dist.barrier()
    return dist.get_rank()


def lustre_evicted_writer() -> dict:
    if dist.get_rank() == 1:
        time.sleep(20)
        with open("/shared/dirty", "rb") as f, open("/shared/synced", "rb") as g:
            return {"dirty": f.read(), "synced": g.read()}
    dirty = os.open("/shared/dirty", os.O_WRONLY | os.O_CREAT)
    os.write(dirty, b"dirty bytes")
    synced = os.open("/shared/synced", os.O_RDWR | os.O_CREAT)
    os.write(synced, b"synced bytes")
    os.fsync(synced)
    time.sleep(10)  # evicted at 5 s
    out: dict = {}
    for name, fd, call in (("write", dirty, lambda fd: os.write(fd, b"more")),
                           ("read", synced, lambda fd: os.pread(fd, 5, 0)),
                           ("fsync", synced, os.fsync),
                           ("close", dirty, os.close)):
        try:
            call(fd)
            out[name] = "ok"
        except OSError as exc:
            out[name] = errno.errorcode[exc.errno]
    try:
        os.close(synced)
    except OSError:
        pass
    with open("/shared/after", "wb") as f:  # a new open works normally
        f.write(b"after eviction")
    return out


def read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def negative_entry_then_wait() -> bool | None:
    """Node 1 caches 'no /shared/f'; node 0 creates it; node 1 still believes it missing."""
    rank = dist.get_rank()
    if rank == 1:
        assert not os.path.exists("/shared/f")
    dist.barrier()
    if rank == 0:
        with open("/shared/f", "w") as f:
            f.write("made")
    dist.barrier()
    if rank == 1:
        seen = os.path.exists("/shared/f")
        time.sleep(10)  # node 1 crashes here (at 5 s) in the crash variant
        return seen
    return None


def exists(path: str) -> bool:
    return os.path.exists(path)


# -- CrashNode: after_ops ----------------------------------------------------------------------------
@settings(max_examples=40)
@given(after_ops=st.integers(0, 14), per_rank=st.integers(0, 6), seed=st.integers(0, 2**20))
def test_crash_after_ops_fires_before_the_nodes_next_operation(after_ops, per_rank, seed):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", seed=seed,
                            faults=[simfs.CrashNode(node=0, after_ops=after_ops)])
    result = cluster.run(stat_loop, per_rank)
    node0 = fs_ops(result, node=0)
    planned = 2 * per_rank
    # exactly after_ops operations of node 0 happened (all of them, if it had fewer)
    assert len(node0) == min(after_ops, planned)
    # node 1 is untouched
    assert result.returns[2] == result.returns[3] == per_rank
    assert len(fs_ops(result, node=1)) == planned
    crash_events = [i for i, e in enumerate(result.trace) if e.op == "crash"]
    if after_ops >= planned:
        assert not crash_events and not result.crashed
        assert result.ok, result.summary()
        return
    assert len(crash_events) == 1
    crash_at = crash_events[0]
    assert result.trace[crash_at].path == "node0"
    assert all(result.trace.index(e) < crash_at for e in node0), "no op of node 0 after its crash"
    assert set(result.crashed) <= {0, 1} and result.crashed
    assert not result.errors
    traced_paths = {e.path for e in node0}
    triggering = [info for info in result.crashed.values() if info.path and info.path not in traced_paths]
    assert len(triggering) == 1, result.crashed
    info = triggering[0]
    done_by_rank = len(fs_ops(result, rank=info.rank))
    assert info.path == f"/shared/r{info.rank}-{done_by_rank}"  # its next planned operation
    assert info.op == "stat" and info.node == 0
    assert info.time == pytest.approx(result.trace[crash_at].time)
    assert where_is("stat_loop").match(info.where), info.where
    for rank, other in result.crashed.items():
        assert other.node == 0 and rank in (0, 1)
        if other.op:  # a rank that already ran is caught inside the job
            assert where_is("stat_loop").match(other.where), other.where
    # ranks of node 0 that finished before the crash returned normally
    for rank in (0, 1):
        assert (rank in result.crashed) != (rank in result.returns)


@pytest.mark.parametrize("job, args, func", [(exists_loop, (3,), "exists_loop"), (makedirs_job, (), "makedirs_job")])
def test_crash_where_points_at_rank_code_not_at_stdlib_helpers(job, args, func):
    """os.path.exists / os.makedirs are stdlib (frozen modules in 3.11): ``where`` must name
    the rank code's line that called them."""
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=0, after_ops=1)])
    result = cluster.run(job, *args)
    assert set(result.crashed) == {0}
    assert where_is(func).match(result.crashed[0].where), result.crashed[0].where


def test_crash_after_zero_ops_runs_nothing_on_the_node():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=1, after_ops=0)])
    result = cluster.run(stat_loop, 3)
    assert fs_ops(result, node=1) == []
    assert set(result.crashed) == {1} and result.returns == {0: 3}
    assert result.crashed[1].op == "stat" and result.crashed[1].path == "/shared/r1-0"


# -- CrashNode: at_time ----------------------------------------------------------------------------
@settings(max_examples=25)
@given(whole=st.integers(0, 6), seed=st.integers(0, 2**20))
def test_crash_at_time_stops_the_node_at_that_virtual_time(whole, seed):
    at = whole + 0.5
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed,
                            faults=[simfs.CrashNode(node=0, at_time=at)])
    result = cluster.run(sleepy_stat_loop, 5)
    node0 = fs_ops(result, node=0)
    assert all(e.time < at for e in node0)
    assert len(node0) == min(whole, 5)
    assert len(fs_ops(result, node=1)) == 5 and result.returns[1] == 5
    if whole >= 5:
        assert result.ok, result.summary()
        return
    info = result.crashed[0]
    assert info.node == 0 and info.time == pytest.approx(at)
    assert where_is("sleepy_stat_loop").match(info.where), info.where
    crash = next(e for e in result.trace if e.op == "crash")
    assert crash.time == pytest.approx(at)


def test_crash_at_time_counts_from_the_start_of_the_run():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=4)
    first = cluster.run(sleepy_stat_loop, 30)
    assert first.ok and first.virtual_time >= 30
    second = cluster.run(sleepy_stat_loop, 5, faults=[simfs.CrashNode(node=1, at_time=2.5)])
    assert second.crashed[1].time == pytest.approx(2.5)
    crash = next(e for e in second.trace if e.op == "crash")
    assert crash.time == pytest.approx(first.virtual_time + 2.5, abs=1e-3)
    assert len(fs_ops(second, node=1)) == 2


# -- CrashNode: on= ----------------------------------------------------------------------------------
def test_crash_on_op_fires_before_the_first_matching_op():
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=0, on="rmdir")])
    names = ["a", "b"]
    result = cluster.run(mkdirs, names)
    assert result.ok  # no rmdir: never fires
    result = cluster.run(lambda: (os.rmdir("/shared/0-a"), os.rmdir("/shared/0-b")))
    info = result.crashed[0]
    assert (info.op, info.path) == ("rmdir", "/shared/0-a")
    assert not any(e.op == "rmdir" for e in result.trace)
    assert cluster.run(listing, "/shared", faults=[]).returns[0] == ["0-a", "0-b"]


@settings(max_examples=20)
@given(names=st.lists(st.sampled_from(["ckpt-1", "ckpt-2", "log", "tmp", "ckpt-x"]), min_size=1, max_size=6,
                      unique=True), seed=st.integers(0, 2**16))
def test_crash_on_op_and_path_glob(names, seed):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed,
                            faults=[simfs.CrashNode(node=0, on="mkdir:/shared/0-ckpt-*")])
    result = cluster.run(mkdirs, names)
    first = next((i for i, n in enumerate(names) if n.startswith("ckpt-")), None)
    made0 = [e.path for e in fs_ops(result, node=0) if e.op == "mkdir"]
    assert result.returns[1] == names  # node 1's paths never match
    if first is None:
        assert result.ok and made0 == [f"/shared/0-{n}" for n in names]
        return
    assert made0 == [f"/shared/0-{n}" for n in names[:first]]
    info = result.crashed[0]
    assert (info.op, info.path, info.node) == ("mkdir", f"/shared/0-{names[first]}", 0)
    assert where_is("mkdirs").match(info.where), info.where
    after = cluster.run(listing, "/shared", faults=[]).returns[0]
    assert sorted(n for n in after if n.startswith("0-")) == sorted(f"0-{n}" for n in names[:first])


def test_crash_on_counts_only_the_crashing_nodes_operations():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=1, on="mkdir")])
    result = cluster.run(node_local_mkdirs)
    assert result.returns == {0: "done"}
    assert set(result.crashed) == {1} and result.crashed[1].path == "/shared/n1"


def test_run_faults_replace_the_clusters_faults():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=1, after_ops=1)])
    assert set(cluster.run(stat_loop, 3).crashed) == {1}
    assert cluster.run(stat_loop, 3, faults=[]).ok
    assert set(cluster.run(stat_loop, 3).crashed) == {1}  # the cluster's faults again
    assert set(cluster.run(stat_loop, 3, faults=[simfs.CrashNode(node=0, after_ops=1)]).crashed) == {0}


# -- validation ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda: simfs.CrashNode(node=0), "trigger"),
    (lambda: simfs.CrashServer(), "trigger"),
    (lambda: simfs.EvictClient(node=0), "trigger"),
    (lambda: simfs.CrashNode(node=0, after_ops=-1), "after_ops"),
    (lambda: simfs.CrashServer(after_ops=-3), "after_ops"),
    (lambda: simfs.CrashNode(node=0, after_ops=1.5), "after_ops"),
    (lambda: simfs.CrashNode(node=0, at_time=-1.0), "at_time"),
    (lambda: simfs.CrashNode(node=0, at_time=float("nan")), "at_time"),
    (lambda: simfs.CrashNode(node=0, on=""), "on"),
    (lambda: simfs.InjectErrno("ENOTANERRNO"), "ENOTANERRNO"),
    (lambda: simfs.InjectErrno("errorcode"), "errorcode"),
    (lambda: simfs.InjectErrno("EIO", probability=1.5), "probability"),
    (lambda: simfs.InjectErrno("EIO", probability=-0.1), "probability"),
    (lambda: simfs.InjectErrno("EIO", probability=float("nan")), "probability"),
    (lambda: simfs.InjectErrno("EIO", count=-1), "count"),
    (lambda: simfs.SlowRank(rank=0, delay=-1.0), "delay"),
    (lambda: simfs.SlowRank(rank=0, delay=float("nan")), "delay"),
    (lambda: simfs.SlowOps(delay=-2.0), "delay"),
    (lambda: simfs.SlowOps(delay=float("nan")), "delay"),
])
def test_fault_parameters_are_validated(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("fault, message", [
    (simfs.CrashNode(node=2, after_ops=1), "node 2"),
    (simfs.CrashNode(node=-1, after_ops=1), "node -1"),
    (simfs.EvictClient(node=5, after_ops=1), "node 5"),
    (simfs.SlowRank(rank=4, delay=1.0), "rank 4"),
    (simfs.SlowRank(rank=-1, delay=1.0), "rank -1"),
    (simfs.CrashServer(mount="/nowhere", after_ops=1), "/nowhere"),
    (simfs.EvictClient(node=0, mount="/bucket", after_ops=1), "/bucket"),
    (simfs.InjectErrno("EIO", ranks=(0, 7)), "7"),
    (simfs.SlowOps(delay=1.0, ranks=(9,)), "9"),
])
def test_faults_out_of_range_for_the_cluster_are_rejected(fault, message):
    with pytest.raises(ValueError, match=message):
        simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", faults=[fault])
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs")
    with pytest.raises(ValueError, match=message):
        cluster.run(stat_loop, 1, faults=[fault])


def test_valid_faults_are_accepted():
    faults = [simfs.CrashNode(node=1, after_ops=0), simfs.CrashServer(mount="/shared", at_time=0.0),
              simfs.EvictClient(node=0, mount="/bucket", on="open:/bucket/*"), simfs.InjectErrno("EIO", ranks=[3]),
              simfs.SlowRank(rank=3, delay=0.0), simfs.SlowOps(delay=0.0), simfs.InjectErrno("EDQUOT", count=0)]
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, mounts={"/shared": "nfs", "/bucket": "objectstore"},
                            faults=faults)
    assert cluster.faults == faults
    assert faults[3].ranks == (3,)


# -- InjectErrno -------------------------------------------------------------------------------------
def test_inject_errno_by_op():
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno("EIO", op="listdir")])
    result = cluster.run(open_and_stat)
    assert result.returns == {0: {"stat": "ok", "open": "ok", "listdir": "EIO"}}
    assert [e.outcome for e in result.trace if e.op == "listdir"] == ["EIO (injected)"]


def test_inject_errno_by_path_glob():
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno("EACCES", op="open", path="/shared/ckpt-*")])
    assert cluster.run(path_ops).returns == {0: {"/shared/ckpt-1": "EACCES", "/shared/ckpt-2": "EACCES",
                                                 "/shared/log": "ok"}}


def test_inject_errno_by_ranks():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno("ESTALE", op="stat", ranks=(1, 2))])
    result = cluster.run(try_ops, 3)
    assert result.returns == {0: ["ok"] * 3, 1: ["ESTALE"] * 3, 2: ["ESTALE"] * 3, 3: ["ok"] * 3}


@settings(max_examples=20)
@given(seed=st.integers(0, 2**30))
def test_inject_errno_probability_is_seeded_and_hits_both_ways(seed):
    def run() -> list[str]:
        cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=2, profile="nfs", seed=seed,
                                faults=[simfs.InjectErrno("EIO", op="stat", probability=0.5, ranks=(1,))])
        result = cluster.run(try_ops, 40)
        assert result.returns[0] == ["ok"] * 40
        return result.returns[1]

    outcomes = run()
    assert set(outcomes) == {"ok", "EIO"}
    assert run() == outcomes  # the same seed draws the same failures


@pytest.mark.parametrize("probability, expected", [(0.0, {"ok"}), (1.0, {"EIO"})])
def test_inject_errno_probability_extremes(probability, expected):
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=5,
                            faults=[simfs.InjectErrno("EIO", op="stat", probability=probability)])
    assert set(cluster.run(try_ops, 30).returns[0]) == expected


@settings(max_examples=25)
@given(count=st.integers(0, 8), per_rank=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_inject_errno_count_fails_only_the_first_matches(count, per_rank, seed):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed,
                            faults=[simfs.InjectErrno("EIO", op="stat", count=count)])
    result = cluster.run(try_ops, per_rank)
    assert result.ok, result.summary()
    stats = [e for e in result.trace if e.op == "stat"]
    outcomes = ["EIO" if e.outcome.startswith("EIO") else "ok" for e in stats]
    expected_failures = min(count, 2 * per_rank)
    assert outcomes == ["EIO"] * expected_failures + ["ok"] * (2 * per_rank - expected_failures)
    assert sum(r.count("EIO") for r in result.returns.values()) == expected_failures


# -- SlowRank / SlowOps -----------------------------------------------------------------------------
@settings(max_examples=25)
@given(delay=st.floats(0.0, 5000.0), slow=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_slow_rank_starts_late(delay, slow, seed):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", seed=seed,
                            faults=[simfs.SlowRank(rank=slow, delay=delay)])
    result = cluster.run(first_op_time)
    assert result.ok, result.summary()
    first = {r: min(e.time for e in fs_ops(result, rank=r)) for r in range(4)}
    assert first[slow] >= delay
    for rank in range(4):
        if rank != slow:
            assert first[rank] < 1.0
    # time.time() inside the ranks (epoch-based: compare with a tolerance for float rounding)
    assert result.returns[slow] - min(result.returns.values()) >= delay - 1e-5
    assert result.virtual_time >= delay


def test_slow_rank_delays_a_collective_for_everyone():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.SlowRank(rank=1, delay=300.0)])
    result = cluster.run(barrier_after_sleep)
    assert result.ok, result.summary()
    assert 301.0 <= result.virtual_time < 302.0


@settings(max_examples=20)
@given(delay=st.floats(0.5, 1000.0))
def test_slow_ops_add_virtual_time_to_matching_ops(delay):
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=2, profile="nfs", seed=0,
                            faults=[simfs.SlowOps(delay, op="listdir"),
                                    simfs.SlowOps(delay, path="/shared/slow-*", ranks=(1,))])
    result = cluster.run(timed_ops)
    assert result.ok, result.summary()
    for rank in (0, 1):
        times = result.returns[rank]
        assert times["listdir"] >= delay
        assert times["stat"] < 0.1
        assert times["fast"] < 0.1
    assert result.returns[0]["slow"] < 0.1
    # open, lseek(s), write and close of /shared/slow-1 are all slowed for rank 1
    slow_ops = [e for e in fs_ops(result, rank=1) if e.path == "/shared/slow-1"]
    assert len(slow_ops) >= 3
    assert result.returns[1]["slow"] >= len(slow_ops) * delay
    assert result.virtual_time >= delay * (1 + len(slow_ops))


# -- collectives with a crashed peer ----------------------------------------------------------------
def test_collective_times_out_in_virtual_time_when_a_peer_crashed():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", seed=0, collective_timeout=60.0,
                            faults=[simfs.CrashNode(node=1, after_ops=0)])
    result = cluster.run(stat_then_barrier)
    assert set(result.crashed) == {2, 3}
    assert set(result.hung) == {0, 1}
    for rank in (0, 1):
        hang = result.hung[rank]
        assert hang.rank == rank
        assert hang.waiting_for == [2, 3]
        assert "barrier" in hang.what
        assert hang.waited >= 60.0
    assert 60.0 <= result.virtual_time < 61.0
    assert result.wall_time < 5.0
    assert not result.ok
    assert "hung" in result.summary()


def test_collective_hang_reports_where_the_ranks_wait():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0, collective_timeout=60.0,
                            faults=[simfs.CrashNode(node=1, after_ops=0)])
    result = cluster.run(stat_then_barrier)
    assert set(result.hung) == {0}
    assert where_is("stat_then_barrier").match(result.hung[0].where), result.hung[0].where


def test_collective_timeout_defaults_to_torchs_thirty_minutes():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=0, after_ops=0)])
    result = cluster.run(stat_then_barrier)
    assert set(result.hung) == {1} and result.hung[1].waiting_for == [0]
    assert 1800.0 <= result.virtual_time < 1801.0
    assert result.wall_time < 5.0


# -- EvictClient -----------------------------------------------------------------------------------
def test_lustre_eviction_drops_dirty_data_and_fails_open_descriptors():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="lustre", seed=0,
                            faults=[simfs.EvictClient(node=0, at_time=5.0)])
    result = cluster.run(lustre_evicted_writer)
    assert result.ok, result.summary()
    assert result.returns[0] == {"write": "EIO", "read": "EIO", "fsync": "EIO", "close": "EIO"}
    # node 1 sees the synced data, not the evicted node's dirty bytes
    assert result.returns[1] == {"dirty": b"", "synced": b"synced bytes"}
    assert any(e.op == "evict" for e in result.trace)
    assert not result.crashed  # eviction is not a crash: the ranks keep running
    after = cluster.run(read_file, "/shared/after", faults=[])
    assert after.returns == {0: b"after eviction", 1: b"after eviction"}


def test_eviction_of_one_node_leaves_other_nodes_descriptors_working():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="lustre", seed=0,
                            faults=[simfs.EvictClient(node=1, at_time=5.0)])
    result = cluster.run(lustre_evicted_writer)
    assert result.ok, result.summary()
    assert result.returns[0] == {"write": "ok", "read": "ok", "fsync": "ok", "close": "ok"}


# -- crash and restart ----------------------------------------------------------------------------------
@pytest.mark.parametrize("crash", [True, False])
def test_restart_after_crash_has_no_stale_negative_entry(crash):
    prof = profiles.get("nfs").replace(acdirmin=60.0, acdirmax=60.0, acregmin=60.0, acregmax=60.0)
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile=prof, seed=0)
    faults = [simfs.CrashNode(node=1, at_time=5.0)] if crash else []
    first = cluster.run(negative_entry_then_wait, faults=faults)
    if crash:
        assert set(first.crashed) == {1}
    else:
        assert first.ok and first.returns[1] is False  # the stale negative entry hides the file
    assert first.virtual_time < 30.0  # the restart comes within the 60 s cache lifetime
    seen = cluster.run(exists, "/shared/f", faults=[]).returns
    assert seen[0] is True
    if crash:
        assert seen[1] is True, "the restarted node must not remember the negative entry"
    else:
        assert seen[1] is False, "a node that did not crash keeps its negative entry"


def test_restart_sees_the_durable_filesystem_and_runs_every_rank_again():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=2, profile="nfs", seed=0,
                            faults=[simfs.CrashNode(node=0, on="mkdir:/shared/1-b")])
    first = cluster.run(mkdirs, ["a", "b"])
    assert set(first.crashed) == {0, 1}
    assert first.returns == {2: ["a", "b"], 3: ["a", "b"]}
    second = cluster.run(listing, "/shared", faults=[])
    assert second.ok and set(second.returns) == {0, 1, 2, 3}
    for names in second.returns.values():
        assert {"2-a", "2-b", "3-a", "3-b", "1-a"} <= set(names)
        assert "1-b" not in names


def test_power_loss_between_runs_keeps_a_crash_state() -> None:
    """Cluster.power_loss() after a job that left unsynced data: the disks keep a crash state
    drawn from the cluster's seed (it raised 'a draw outside a run' before)."""
    def write() -> None:
        with open(f"/shared/unsynced-{dist.get_rank()}", "w") as f:
            f.write("x" * 100)

    said = []
    for _ in range(2):
        cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="local", seed=4)
        assert cluster.run(write).ok
        said.append(cluster.power_loss())
    assert said[0] == said[1] and any(line.startswith("node0:/shared") and "persisted" in line for line in said[0])
