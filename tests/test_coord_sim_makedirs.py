"""coord.makedirs_once, wait_for and wait_visible inside simfs clusters (2 nodes x 4 ranks, every
profile, many seeds, slow ranks and NFS lags), side by side with the naive patterns they replace:
every rank calling ``os.makedirs(exist_ok=True)`` (Lingua) and rank 0's mkdir followed by a fixed
10 s wait that each waiter starts when it arrives (OLMo)."""

from __future__ import annotations

import os
import time

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import coord
import simfs
from _coord_sim import LAG, PROFILES, RPN, WORLD, cluster, ok

NAIVE_ERRORS = (FileExistsError, FileNotFoundError)


_cluster = cluster


def _ok(result: simfs.Result) -> dict:
    return ok(result, WORLD)


def _use(path: str) -> tuple[bool, list[str]]:
    """What 'usable right now' means on this rank: isdir, and a file can be made inside."""
    name = f"rank{dist.get_rank()}"
    with open(os.path.join(path, name), "w") as f:
        f.write(name)
    return os.path.isdir(path), name


# -- makedirs_once: every rank can use the directory as soon as it returns --------------------------

def makedirs_once_job(path: str, scope: str, lookup_first: bool, stagger: float) -> tuple:
    rank = dist.get_rank()
    if lookup_first and rank % 2:
        os.path.exists(path)  # caches 'not found' on this node (and its parent's attributes)
    time.sleep(stagger * (rank % 3))
    coord.makedirs_once(path, scope=scope, timeout=120)
    return _use(path)


def _path(where: str, depth: int) -> str:
    tail = "/".join(f"d{i}" for i in range(depth))
    return f"/tmp/work/{tail}" if where == "local" else f"/shared/run/{tail}"


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("scope,where", [("global", "shared"), ("node", "local"), ("node", "shared")])
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 3), lookup_first=st.booleans(),
       stagger=st.sampled_from([0.0, 0.01, 5.0]), slow=st.sampled_from([None, 0, 1, 4]),
       delay=st.floats(0.0, 200.0))
@settings(max_examples=12)
def test_makedirs_once_directory_is_usable_on_every_rank(profile, scope, where, seed, depth, lookup_first, stagger,
                                                         slow, delay) -> None:
    path = _path(where, depth)
    faults = [] if slow is None else [simfs.SlowRank(rank=slow, delay=delay)]
    result = _cluster(profile, seed, faults).run(makedirs_once_job, path, scope, lookup_first, stagger)
    returns = _ok(result)
    for rank, (isdir, name) in returns.items():
        assert isdir and name == f"rank{rank}"
    if slow is not None:
        assert result.virtual_time >= delay  # every rank waited for the slow one instead of failing


def listing_job(path: str) -> list[str]:
    coord.makedirs_once(path)
    _use(path)
    dist.barrier()
    return sorted(os.listdir(path)) if dist.get_rank() == 0 else []


@pytest.mark.parametrize("profile", list(PROFILES))
def test_makedirs_once_files_of_all_ranks_land_in_one_directory(profile) -> None:
    cluster = _cluster(profile, seed=11)
    _ok(cluster.run(listing_job, "/shared/a/b"))
    # the restarted job (cold caches) sees the one directory with every rank's file
    after = _ok(cluster.run(lambda: sorted(os.listdir("/shared/a/b")), faults=[]))
    assert after[WORLD - 1] == [f"rank{r}" for r in range(WORLD)]


# -- naive: every rank os.makedirs(exist_ok=True) -------------------------------------------------

def naive_makedirs_job(path: str, lookup_first: bool) -> tuple:
    if lookup_first:
        os.path.exists(path)
    os.makedirs(path, exist_ok=True)
    return _use(path)


@pytest.mark.parametrize("path,lookup_first", [
    ("/shared/logs", True),        # mkdir EEXIST, then isdir() answered by the cached 'not found'
    ("/shared/run/logs", False),   # the parent's EEXIST is swallowed, the child's mkdir meets a stale entry
    ("/shared/run/logs", True),
])
def test_naive_makedirs_fails_on_beegfs_where_makedirs_once_succeeds(path, lookup_first) -> None:
    """The trap needs a 'not found' that survives EEXIST: BeeGFS (prime-rl PR #2523), not kernel
    NFS, whose failed mkdir drops the entry (fs/nfs/dir.c nfs_mkdir: d_drop)."""
    naive_failures = []
    for seed in range(12):
        naive = _cluster("beegfs", seed).run(naive_makedirs_job, path, lookup_first)
        if not naive.ok:
            naive_failures.append(seed)
            assert not naive.crashed and not naive.hung
            assert naive.errors and all(isinstance(e, NAIVE_ERRORS) for e in naive.errors.values()), naive.summary()
        fixed = _cluster("beegfs", seed).run(makedirs_once_job, path, "global", lookup_first, 0.0)
        assert all(isdir for isdir, _ in _ok(fixed).values())
    assert naive_failures, "the naive per-rank makedirs never failed on beegfs"


def test_naive_makedirs_is_fine_on_nfs_and_coherent_profiles() -> None:
    """The contrast that makes the beegfs failure meaningful: kernel NFS drops the entry of a
    failed mkdir, and a coherent disk has no stale entry at all."""
    for profile in ("local", "lustre", "nfs"):
        for seed in range(5):
            assert all(isdir for isdir, _ in _ok(_cluster(profile, seed).run(
                naive_makedirs_job, "/shared/run/logs", True)).values())


# -- makedirs_once errors: a CoordError on every rank, never a hang -------------------------------

def blocked_job(path: str, scope: str, block_on_nodes: list[int]) -> str:
    """A file sits where the directory should go (on some nodes for node-local paths)."""
    rank = dist.get_rank()
    node = rank // RPN
    if rank % RPN == 0 and (node in block_on_nodes if path.startswith("/tmp") else rank == 0):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("not a directory")
    dist.barrier()
    try:
        coord.makedirs_once(path, scope=scope, timeout=30)
    except coord.CoordError as exc:
        return f"CoordError: {exc}"
    return "returned"


@pytest.mark.parametrize("profile", list(PROFILES))
def test_makedirs_once_creator_failure_raises_coord_error_on_every_rank(profile) -> None:
    result = _cluster(profile, seed=5).run(blocked_job, "/shared/out/ckpt", "global", [])
    returns = _ok(result)
    for message in returns.values():
        assert message.startswith("CoordError: ") and "rank 0 could not create it" in message
        assert "/shared/out/ckpt" in message and "FileExistsError" in message
    assert result.virtual_time < 60  # nobody waited for a timeout


@pytest.mark.parametrize("block_on_nodes", [[0, 1], [1], [0]])
def test_makedirs_once_node_scope_creator_failure_raises_everywhere(block_on_nodes) -> None:
    """scope='node': a node whose local rank 0 cannot create the node-local directory must make
    every rank raise (the docstring: 'raises on every rank if any rank could not create or see
    it'), not leave the healthy nodes waiting in a collective for ranks that already raised."""
    result = _cluster("nfs", seed=6).run(blocked_job, "/tmp/scratch/x", "node", block_on_nodes)
    assert not result.hung, result.summary()
    returns = _ok(result)
    for message in returns.values():
        assert message.startswith("CoordError: ") and "could not create it" in message


def injected_job(path: str) -> str:
    try:
        coord.makedirs_once(path, timeout=30)
    except coord.CoordError as exc:
        return str(exc)
    return "returned"


@pytest.mark.parametrize("profile", ["local", "nfs", "objectstore"])
def test_makedirs_once_io_error_of_the_creator_reaches_every_rank(profile) -> None:
    cluster = _cluster(profile, seed=2, faults=[simfs.InjectErrno("EIO", op="mkdir", path="/shared/io/*", ranks=(0,))])
    returns = _ok(cluster.run(injected_job, "/shared/io/dir"))
    assert all("rank 0 could not create it" in m and "Input/output error" in m for m in returns.values()), returns


def test_makedirs_once_rejects_an_unknown_scope() -> None:
    def job() -> str:
        try:
            coord.makedirs_once("/shared/x", scope="cluster")
        except ValueError as exc:
            return str(exc)
        return "accepted"

    assert all("scope must be 'global' or 'node'" in m for m in _ok(_cluster("local").run(job)).values())


# -- OLMo: rank 0 mkdirs, each waiter starts a fixed 10 s wait when it arrives --------------------

D = "/shared/ckpt/step100"


def olmo_job(variant: str, creator_sleep: float) -> tuple:
    rank = dist.get_rank()
    if variant == "makedirs_once":
        if rank == 0:
            time.sleep(creator_sleep)
        coord.makedirs_once(D)
        return ("ok",) + _use(D)
    if rank == 0:
        time.sleep(creator_sleep)
        os.makedirs(D, exist_ok=True)
    if variant == "barrier+wait_visible":
        dist.barrier()
        coord.wait_visible(D, timeout=10, is_dir=True)
        return ("ok",) + _use(D)
    try:  # naive: OLMo's wait_for(lambda: path.exists(), timeout=10), clock started on arrival
        coord.wait_for(lambda: os.path.exists(D), timeout=10, what=f"{D} to exist")
    except coord.WaitTimeout as exc:
        return ("WaitTimeout", exc.what, exc.waited, exc.tries, str(exc))
    return ("ok",) + _use(D)


@pytest.mark.parametrize("profile", ["local", "nfs", "lustre", "objectstore"])
@pytest.mark.parametrize("slow_how", ["SlowRank", "sleep"])
@given(seed=st.integers(0, 2**32 - 1), delay=st.floats(10.5, 600.0))
@settings(max_examples=5)
def test_slow_creator_times_out_fixed_waits_but_not_makedirs_once(profile, slow_how, seed, delay) -> None:
    faults = [simfs.SlowRank(rank=0, delay=delay)] if slow_how == "SlowRank" else []
    sleep = delay if slow_how == "sleep" else 0.0
    naive = _ok(_cluster(profile, seed, faults).run(olmo_job, "naive", sleep))
    timed_out = sorted(r for r, out in naive.items() if out[0] == "WaitTimeout")
    assert timed_out == list(range(1, WORLD)), naive  # every waiter gave up before rank 0 even started
    for rank in timed_out:
        _, what, waited, tries, message = naive[rank]
        assert what == f"{D} to exist" and 10.0 <= waited < 10.5 and tries >= 2
        assert message.startswith(f"timed out after {waited:.1f}s and {tries} tries waiting for {D} to exist")
        assert "NFS" in message and "acdirmin" in message and "barrier" in message
    for fixed in ("makedirs_once", "barrier+wait_visible"):
        result = _cluster(profile, seed, faults).run(olmo_job, fixed, sleep)
        assert all(out == ("ok", True, f"rank{r}") for r, out in _ok(result).items())
        assert result.virtual_time >= delay


# -- NFS negative caching: wait_visible revalidates, a plain exists() poll waits out the ttl ------

def lag_job(poll: str) -> tuple:
    """Node 1 looked the directory up (cached 'not found', parent attributes cached for LAG s),
    rank 0 creates it, a barrier orders everyone after the creation, then each rank waits."""
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(os.path.dirname(D), exist_ok=True)
    dist.barrier()
    if rank >= RPN:
        assert not os.path.exists(D)
    dist.barrier()
    if rank == 0:
        os.mkdir(D)
    dist.barrier()
    start = time.monotonic()
    try:
        if poll == "wait_visible":
            coord.wait_visible(D, timeout=10, is_dir=True)
        elif poll == "fixed_wait":
            coord.wait_for(lambda: os.path.exists(D), timeout=10, what=f"{D} to exist")
        else:  # a patient plain poll: how long the stale cache really lasts
            while not os.path.exists(D):
                time.sleep(0.5)
    except coord.WaitTimeout as exc:
        return ("WaitTimeout", time.monotonic() - start, str(exc))
    return ("ok", time.monotonic() - start, _use(D)[0])


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_wait_visible_sees_through_nfs_negative_cache(seed) -> None:
    fast = _ok(_cluster("nfs_lag", seed).run(lag_job, "wait_visible"))
    slow = _ok(_cluster("nfs_lag", seed).run(lag_job, "exists_poll"))
    fixed = _ok(_cluster("nfs_lag", seed).run(lag_job, "fixed_wait"))
    for rank in range(WORLD):
        assert fast[rank][0] == "ok" and fast[rank][2] is True and fast[rank][1] < 1.0, fast[rank]
        if rank < RPN:  # rank 0's own node sees its mkdir at once, whatever the waiting
            assert slow[rank][1] < 1.0 and fixed[rank][0] == "ok"
        else:  # the other node's plain poll waits out the cached 'not found' ...
            assert slow[rank][0] == "ok" and LAG - 5 < slow[rank][1] <= LAG + 1, slow[rank]
            # ... and a fixed 10 s wait fails although the directory exists on the server
            assert fixed[rank][0] == "WaitTimeout" and "NFS" in fixed[rank][2], fixed[rank]


def test_wait_visible_timeout_message_says_what_how_long_and_why() -> None:
    def job() -> tuple:
        try:
            coord.wait_visible("/shared/never", timeout=7.5, what="the marker /shared/never")
        except coord.WaitTimeout as exc:
            return exc.what, exc.waited, exc.tries, str(exc), isinstance(exc, TimeoutError)
        return None

    for what, waited, tries, message, is_timeout in _ok(_cluster("nfs", 3).run(job)).values():
        assert what == "the marker /shared/never" and 7.5 <= waited < 8 and tries >= 3 and is_timeout
        assert f"timed out after {waited:.1f}s and {tries} tries waiting for the marker /shared/never" in message
        assert "NFS" in message


def test_makedirs_once_under_nfs_lag_with_slow_creator_returns_quickly_after_creation() -> None:
    """The lag scenario with makedirs_once: node 1 cached 'not found', rank 0 starts 30 s late;
    every rank returns right after the creation, not a ttl later."""
    def job() -> tuple:
        os.path.exists(D)
        coord.makedirs_once(D)
        return time.monotonic(), _use(D)[0]

    result = _cluster("nfs_lag", 4, [simfs.SlowRank(rank=0, delay=30.0)]).run(job)
    times = [t for t, ok in _ok(result).values() if ok]
    assert len(times) == WORLD and max(times) - min(times) < 1.0
    assert 30.0 <= result.virtual_time < 31.0
