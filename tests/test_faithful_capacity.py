"""Capacity and space errors: every mount has a capacity (Profile.capacity); its server counts the
bytes of file data it holds (freed by unlink, truncation and crash recovery) and refuses what
does not fit with ENOSPC where the data reaches it: at write() on a local disk (ext4 delalloc
reserves space at write: fs/ext4/inode.c ext4_da_reserve_space) and on Lustre (grants), at
close()/fsync() on write-back mounts (fs/nfs/file.c nfs_file_flush). An injected ENOSPC/EDQUOT
(InjectErrno) fires at exactly those points, through the same code, and never at open(O_TRUNC).
os.statvfs reports the capacity and the free space.

1 node x 1 rank unless said otherwise."""

from __future__ import annotations

import errno
import os

import pytest
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

P = "/shared/data"
AT_WRITE = ("local", "lustre")
AT_CLOSE = ("nfs", "beegfs", "objectstore")


def _profile(name: str, capacity: float) -> simfs.Profile:
    return simfs.profiles.get(name).replace(capacity=float(capacity))


def _cluster(profile, faults=(), nodes: int = 1) -> simfs.Cluster:
    return simfs.Cluster(nodes=nodes, ranks_per_node=1, profile=profile, seed=0, **MODEL,
                         faults=list(faults))


def _ok(result: simfs.Result) -> dict:
    assert result.ok, result.summary()
    return result.returns


def _err(fn, *args):
    try:
        return fn(*args)
    except OSError as exc:
        return errno.errorcode[exc.errno]


def read_back(path: str = P) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


# -- where ENOSPC surfaces ---------------------------------------------------------------------------

def fill_job(first: int, second: int):
    """Write ``first`` bytes, then ``second`` more through os.write; fsync, close. Returns what
    each call returned (a count, 'ok', or the errno name)."""
    fd = os.open(P, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    out = [_err(os.write, fd, b"a" * first), _err(os.write, fd, b"b" * second)]
    out.append(_err(os.write, fd, b"c"))
    out.append(_err(os.fsync, fd) or "ok")
    out.append(_err(os.close, fd) or "ok")
    return out


@pytest.mark.parametrize("profile", AT_WRITE)
def test_enospc_at_write_where_space_is_claimed_at_write(profile: str) -> None:
    """The part that fits is written and counted (a short write), the next write gets ENOSPC;
    fsync and close have nothing left to report."""
    cluster = _cluster(_profile(profile, 10_000))
    assert _ok(cluster.run(fill_job, 8000, 4000))[0] == [8000, 2000, "ENOSPC", "ok", "ok"]
    assert _ok(cluster.run(read_back))[0] == b"a" * 8000 + b"b" * 2000


@pytest.mark.parametrize("profile", ["nfs", "beegfs"])
def test_enospc_at_fsync_on_write_back_mounts(profile: str) -> None:
    """write() only fills the page cache; the WRITEs at fsync meet the full server: what fits is
    on the server, the rest is lost, fsync reports it, close has nothing more to say."""
    cluster = _cluster(_profile(profile, 10_000))
    assert _ok(cluster.run(fill_job, 8000, 4000))[0] == [8000, 4000, 1, "ENOSPC", "ok"]
    assert _ok(cluster.run(read_back))[0] == b"a" * 8000 + b"b" * 2000


def close_job(n: int):
    with open(P, "wb") as f:
        f.write(b"x" * n)
    return "closed"


@pytest.mark.parametrize("profile", AT_CLOSE)
def test_enospc_at_close_on_write_back_mounts(profile: str) -> None:
    cluster = _cluster(_profile(profile, 1000))
    result = cluster.run(close_job, 5000)
    assert isinstance(result.errors.get(0), OSError) and result.errors[0].errno == errno.ENOSPC, result.summary()
    assert any(e.op == "close" and e.outcome == "ENOSPC" for e in result.trace)
    assert not any(e.op == "write" and e.outcome != "ok" for e in result.trace)


def rewrite_job(n: int):
    """open('wb') truncates the existing file first, freeing its space, then writes again."""
    with open(P, "wb") as f:
        f.write(b"y" * n)
    return read_back()


@pytest.mark.parametrize("profile", [*AT_WRITE, *AT_CLOSE])
def test_open_wb_truncates_first_so_a_same_size_rewrite_fits(profile: str) -> None:
    cluster = _cluster(_profile(profile, 10_000))
    _ok(cluster.run(close_job, 9000))
    assert _ok(cluster.run(rewrite_job, 9000))[0] == b"y" * 9000


def free_then_write_job(how: str):
    with open(P, "wb") as f:
        f.write(b"x" * 9000)
    full = _err(_write_other, 5000)
    if how == "unlink":
        os.unlink(P)
    else:
        os.truncate(P, 1000)
    again = _err(_write_other, 5000)
    return full, again


def _write_other(n: int) -> str:
    with open("/shared/other", "wb") as f:
        f.write(b"z" * n)
    return "ok"


@pytest.mark.parametrize("profile", ["local", "nfs"])
@pytest.mark.parametrize("how", ["unlink", "truncate"])
def test_unlink_and_truncate_free_space(profile: str, how: str) -> None:
    assert _ok(_cluster(_profile(profile, 10_000)).run(free_then_write_job, how))[0] == ("ENOSPC", "ok")


def extend_job():
    """An extending truncate allocates nothing (a hole, as ext4_setattr leaves): never ENOSPC."""
    with open(P, "wb") as f:
        f.truncate(1 << 30)
    return os.stat(P).st_size


@pytest.mark.parametrize("profile", ["local", "nfs", "lustre"])
def test_an_extending_truncate_allocates_nothing(profile: str) -> None:
    assert _ok(_cluster(_profile(profile, 10_000)).run(extend_job))[0] == 1 << 30


def rename_then_close_job():
    """The rename sends the dirty data first (and meets the full server): the rename succeeds,
    the error is kept and reported by the close, not lost."""
    f = open(P, "wb")
    f.write(b"x" * 5000)
    f.flush()
    os.rename(P, P + ".renamed")
    return _err(f.close) or "ok"


def test_an_implicit_flush_keeps_its_error_for_close() -> None:
    assert _ok(_cluster(_profile("nfs", 1000)).run(rename_then_close_job))[0] == "ENOSPC"


# -- statvfs -----------------------------------------------------------------------------------------

def statvfs_job():
    before = os.statvfs("/shared")
    with open(P, "wb") as f:
        f.write(b"x" * 40960)
    after = os.statvfs("/shared")
    os.unlink(P)
    freed = os.statvfs("/shared")
    return ([before.f_frsize, before.f_blocks, before.f_bfree, before.f_bavail], after.f_bfree, freed.f_bfree)


@pytest.mark.parametrize("profile", ["local", "nfs", "beegfs", "lustre"])
def test_statvfs_reports_the_capacity_and_what_is_used(profile: str) -> None:
    capacity = 1 << 30
    (frsize, blocks, free, avail), after, freed = _ok(_cluster(_profile(profile, capacity)).run(statvfs_job))[0]
    assert frsize * blocks == capacity
    assert free == avail == blocks
    assert after == blocks - 10 and freed == blocks


def test_statvfs_of_an_unlimited_mount_is_a_large_number() -> None:
    (frsize, blocks, free, _), _, _ = _ok(_cluster("objectstore").run(statvfs_job))[0]
    assert frsize * blocks >= 1 << 50 and free == blocks


@pytest.mark.parametrize("name", simfs.profiles.names())
def test_default_capacities_are_stated(name: str) -> None:
    profile = simfs.profiles.get(name)
    assert profile.capacity == {"local": 2**40, "local-posix": 2**40, "objectstore": float("inf")}.get(name, 2**50)
    assert "capacity" in profile.sources


def crash_job():
    with open(P, "wb") as f:
        f.write(b"x" * 8000)
        f.flush()
        os.fsync(f.fileno())  # durable
    with open("/shared/volatile", "wb") as f:
        f.write(b"v" * 8000)  # on the server, not durable (close does not COMMIT in this variant)
    try:
        os.stat("/shared/crash-here")
    except FileNotFoundError:
        pass


def usage_job():
    st_ = os.statvfs("/shared")
    return st_.f_blocks - st_.f_bfree, read_back(), read_back("/shared/volatile")


@pytest.mark.parametrize("seed", range(6))
def test_crash_recovery_recounts_the_space(seed: int) -> None:
    """A server crash keeps only what was durable (and what a crash state keeps of the rest);
    the space of what it lost is free again."""
    profile = _profile("nfs", 1 << 20).replace(data_durable="fsync")
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile=profile, seed=seed,
                            faults=[simfs.CrashServer(on="stat:/shared/crash-here")])
    cluster.run(crash_job)
    used_blocks, durable, volatile = _ok(cluster.run(usage_job, faults=[]))[0]
    assert durable == b"x" * 8000
    assert used_blocks == (8000 + len(volatile or b"") + 4095) // 4096


# -- injected ENOSPC / EDQUOT: the same points, the same path ---------------------------------------

@pytest.mark.parametrize("name", ["ENOSPC", "EDQUOT"])
@pytest.mark.parametrize("profile", [*AT_WRITE, *AT_CLOSE])
def test_injected_space_errors_fire_where_data_reaches_the_server_never_at_open(profile: str, name: str) -> None:
    fault = simfs.InjectErrno(name, path=P)
    cluster = _cluster(profile)
    _ok(cluster.run(close_job, 3))
    outcome = _ok(cluster.run(existing_then_rewrite_job_only, faults=[fault]))[0]
    if profile in AT_WRITE:
        assert outcome == ["open", f"write:{name}"]
    else:
        assert outcome == ["open", "write", f"fsync:{name}"]


def existing_then_rewrite_job_only():
    outcome = []
    try:
        fd = os.open(P, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        return ["open:" + errno.errorcode[exc.errno]]
    outcome.append("open")
    for name, call in (("write", lambda: os.write(fd, b"new data")), ("fsync", lambda: os.fsync(fd))):
        try:
            call()
            outcome.append(name)
        except OSError as exc:
            outcome.append(f"{name}:{errno.errorcode[exc.errno]}")
            break
    try:
        os.close(fd)
    except OSError as exc:
        outcome.append(f"close:{errno.errorcode[exc.errno]}")
    return outcome


def clean_fsync_job():
    """fsync and close with no dirty data send nothing: nothing to fail."""
    with open(P, "wb") as f:
        f.write(b"data")
    fd = os.open(P, os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
    return read_back()


@pytest.mark.parametrize("profile", AT_CLOSE)
def test_injected_space_error_needs_dirty_data(profile: str) -> None:
    fault = simfs.InjectErrno("ENOSPC", path=P, op="fsync")
    assert _ok(_cluster(profile, [fault]).run(clean_fsync_job))[0] == b"data"


def cause_job():
    """Create, write 100 bytes, fsync, close: the first error and the file afterwards."""
    fd = os.open(P, os.O_WRONLY | os.O_CREAT)
    out = None
    for name, call in (("write", lambda: os.write(fd, b"x" * 100)), ("fsync", lambda: os.fsync(fd))):
        try:
            call()
        except OSError as exc:
            out = f"{name}:{errno.errorcode[exc.errno]}"
            break
    close = _err(os.close, fd) or "ok"
    return out, close, read_back()


@pytest.mark.parametrize("profile", [*AT_WRITE, *AT_CLOSE])
def test_a_full_server_and_an_injected_enospc_fail_the_same_way(profile: str) -> None:
    full = _ok(_cluster(_profile(profile, 0)).run(cause_job))[0]
    injected = _ok(_cluster(profile, [simfs.InjectErrno("ENOSPC", path=P)]).run(cause_job))[0]
    assert full == injected
    where = "write" if profile in AT_WRITE else "fsync"
    # the file was created at open; on an object store a new object appears only at its upload
    assert full == (f"{where}:ENOSPC", "ok", None if profile == "objectstore" else b"")


# -- a property over random workloads ----------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["append", "rewrite", "truncate", "unlink", "fsync"]),
                         st.integers(0, 3), st.integers(0, 6000)), max_size=12)


def workload_job(ops: list[tuple[str, int, int]], capacity: int):
    """Random writes, rewrites, truncations and unlinks of four files; after each step the space
    used (statvfs) never passes the capacity, and every error is ENOSPC."""
    errors = []
    for op, which, n in ops:
        path = f"/shared/w{which}"
        try:
            if op == "append":
                with open(path, "ab") as f:
                    f.write(b"a" * n)
            elif op == "rewrite":
                with open(path, "wb") as f:
                    f.write(b"r" * n)
            elif op == "truncate":
                with open(path, "ab") as f:
                    f.truncate(n)
            elif op == "unlink":
                if os.path.exists(path):
                    os.unlink(path)
            else:
                with open(path, "ab") as f:
                    f.write(b"s" * n)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as exc:
            errors.append(exc.errno)
        st_ = os.statvfs("/shared")
        used = (st_.f_blocks - st_.f_bfree) * st_.f_frsize
        assert used <= capacity + st_.f_frsize, (used, capacity)
    sizes = sum(os.stat(f"/shared/w{i}").st_size for i in range(4) if os.path.exists(f"/shared/w{i}"))
    return set(errors), sizes


@settings(max_examples=40, deadline=None)
@given(ops=OPS, capacity=st.integers(0, 20_000), profile=st.sampled_from(["local", "nfs", "lustre", "objectstore"]))
def test_usage_never_exceeds_the_capacity_and_errors_are_enospc(ops, capacity: int, profile: str) -> None:
    errors, _ = _ok(_cluster(_profile(profile, capacity)).run(workload_job, ops, capacity))[0]
    assert errors <= {errno.ENOSPC}
