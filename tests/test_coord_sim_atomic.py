"""coord.atomic_write inside simfs clusters (2 nodes x 4 ranks): readers on other nodes only ever
see a complete old or new version while writers keep replacing a file; crashes of the writer's
node or of the storage server never leave a partial target; an exception in the block keeps the
old content. Side by side, the naive replacement that names its temporary file from ``random``
after ``random.seed(0)`` (every rank draws the same name) corrupts the file or fails."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import time

import pytest
import torch.distributed as dist
from hypothesis import example, given, settings
from hypothesis import strategies as st

import coord
import simfs
from _coord_sim import PROFILES, WORLD, cluster, ok

DIR = "/shared/data"
TARGET = f"{DIR}/model.bin"
ESTALE_PROFILES = {"nfs", "nfs_lag", "objectstore"}  # another node replacing a file a reader holds open
WRITERS = (0, 5)  # one writer on each node; every other rank reads


_cluster, _ok = cluster, ok


def version(number: int, writer: int) -> bytes:
    """Self-checking content: sizes differ between versions, a SHA-256 trailer seals each."""
    body = f"v{number}:w{writer}:".encode() * (200 + 53 * number + 7 * writer)
    return body + hashlib.sha256(body).hexdigest().encode()


def identify(data: bytes) -> str:
    """'v<n>:w<r>' for a complete version, 'CORRUPT(<size>)' for anything else."""
    body, seal = data[:-64], data[-64:]
    if len(data) <= 64 or hashlib.sha256(body).hexdigest().encode() != seal:
        return f"CORRUPT({len(data)})"
    return body.split(b":")[0].decode() + ":" + body.split(b":")[1].decode()


def _setup() -> None:
    if dist.get_rank() == 0:
        os.makedirs(DIR, exist_ok=True)
        coord.fsync_dir("/shared")  # the directory itself must survive a server crash too
        with coord.atomic_write(TARGET) as f:
            f.write(version(0, 0))
    dist.barrier()


def _naive_replace(data: bytes) -> None:
    random.seed(0)  # as every rank of a job that seeds for reproducibility does
    tmp = f"{TARGET}.tmp{random.randint(0, 10**6)}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, TARGET)


def replace_job(how: str, rounds: int, pause: float) -> dict:
    """Writers replace the file ``rounds`` times; readers read it repeatedly meanwhile."""
    _setup()
    rank = dist.get_rank()
    seen: list[str] = []
    errors: list[str] = []
    if rank in WRITERS:
        for number in range(1, rounds + 1):
            data = version(number, rank)
            try:
                if how == "atomic":
                    with coord.atomic_write(TARGET) as f:
                        f.write(data)
                elif how == "atomic_text":
                    with coord.atomic_write(TARGET, "w", encoding="latin-1", newline="") as f:
                        f.write(data.decode("latin-1"))
                else:
                    _naive_replace(data)
            except OSError as exc:
                errors.append(f"write {errno.errorcode.get(exc.errno, exc.errno)}")
            time.sleep(pause)
    else:
        for _ in range(3 * rounds):
            try:
                with open(TARGET, "rb") as f:
                    seen.append(identify(f.read()))
            except OSError as exc:
                errors.append(f"read {errno.errorcode.get(exc.errno, exc.errno)}")
            time.sleep(pause / 3)
    dist.barrier()
    return {"seen": seen, "errors": errors, "leftovers": sorted(os.listdir(DIR)) if rank == 0 else None}


def _valid_versions(rounds: int) -> set[str]:
    return {"v0:w0"} | {f"v{n}:w{w}" for n in range(1, rounds + 1) for w in WRITERS}


@pytest.mark.parametrize("profile", list(PROFILES))
@given(seed=st.integers(0, 2**32 - 1), rounds=st.integers(1, 5), pause=st.sampled_from([0.0, 0.001, 0.5, 30.0]),
       how=st.sampled_from(["atomic", "atomic_text"]))
@settings(max_examples=10)
def test_readers_see_only_complete_old_or_new_versions(profile, seed, rounds, pause, how) -> None:
    returns = _ok(_cluster(profile, seed).run(replace_job, how, rounds, pause))
    valid = _valid_versions(rounds)
    for rank, out in returns.items():
        assert set(out["seen"]) <= valid, (rank, out["seen"])
        if rank in WRITERS or profile not in ESTALE_PROFILES:
            assert out["errors"] == [], (rank, out["errors"])
        else:  # NFS semantics: a file replaced by another node is gone under an open reader
            assert set(out["errors"]) <= {"read ESTALE"}, (rank, out["errors"])
    assert returns[0]["leftovers"] == ["model.bin"]  # no temporary file left behind


@given(data=st.data())
@settings(max_examples=4)
def test_readers_see_only_complete_versions_under_hypothesis_schedules(data) -> None:
    returns = _ok(_cluster("nfs").run(replace_job, "atomic", 3, 0.001, choices=data))
    assert all(set(out["seen"]) <= _valid_versions(3) for out in returns.values())


@pytest.mark.parametrize("profile", list(PROFILES))
def test_naive_seeded_random_temp_name_collides_where_atomic_write_does_not(profile) -> None:
    broken = []
    for seed in range(32):  # on a local disk two writers overlap within microseconds in few seeds
        naive = _ok(_cluster(profile, seed).run(replace_job, "naive", 4, 0.0))
        corrupt = [s for out in naive.values() for s in out["seen"] if s.startswith("CORRUPT")]
        failed_writes = [e for r in WRITERS for e in naive[r]["errors"]]
        if corrupt or failed_writes:
            broken.append(seed)
        fixed = _ok(_cluster(profile, seed).run(replace_job, "atomic", 4, 0.0))
        assert all(set(out["seen"]) <= _valid_versions(4) for out in fixed.values())
        assert not [e for r in WRITERS for e in fixed[r]["errors"]]
    assert broken, f"two writers sharing one temporary name never clashed on {profile}"


def test_naive_temp_names_are_identical_on_every_rank() -> None:
    """Why the naive pattern collides: every rank's seeded ``random`` yields the same name,
    while atomic_write's temporary names differ per host, process and call."""
    def job() -> tuple:
        random.seed(0)
        naive = f"{TARGET}.tmp{random.randint(0, 10**6)}"
        random.seed(0)
        return naive, coord.atomic.unique_suffix()

    returns = _ok(_cluster("nfs", 1).run(job))
    assert len({naive for naive, _ in returns.values()}) == 1
    assert len({suffix for _, suffix in returns.values()}) == WORLD


def open_reader_job() -> list:
    """Rank 1 opens the file (nothing read, nothing cached yet); rank 0 (same node) replaces it;
    rank 1 reads through its descriptor, then reopens."""
    _setup()
    rank = dist.get_rank()
    reads = []
    fd = os.open(TARGET, os.O_RDONLY) if rank == 1 else None
    dist.barrier()
    if rank == 0:
        with coord.atomic_write(TARGET) as f:
            f.write(version(1, 0))
    dist.barrier()
    if rank == 1:
        try:
            reads.append(identify(os.pread(fd, 1 << 20, 0)))
        except OSError as exc:
            reads.append(errno.errorcode[exc.errno])
        os.close(fd)
        reads.append(read_job())
    return reads


@pytest.mark.parametrize("profile", ["local", "lustre", "nfs"])
def test_open_reader_on_the_writers_node_keeps_the_old_version(profile) -> None:
    """POSIX keeps a replaced file alive for its open descriptors; the Linux NFS client gets the
    same effect on the renaming node by silly-renaming a busy rename target (fs/nfs/dir.c,
    nfs_rename), as it does for unlink. (Readers on other nodes may get ESTALE: allowed above.)"""
    assert _ok(_cluster(profile, seed=5).run(open_reader_job))[1] == ["v0:w0", "v1:w0"]


# -- crashes ---------------------------------------------------------------------------------------

def writer_job(rounds: int, pause: float) -> None:
    if dist.get_rank() != 0:
        time.sleep(rounds * pause + 1)
        return
    for number in range(1, rounds + 1):
        with coord.atomic_write(TARGET) as f:
            f.write(version(number, 0))
        time.sleep(pause)


def inplace_writer_job() -> None:
    if dist.get_rank() == 0:
        with open(TARGET, "wb") as f:  # the unsafe contrast: truncate and rewrite in place
            f.write(version(1, 0))


def read_job() -> str:
    with open(TARGET, "rb") as f:
        return identify(f.read())


def _restart_reads(cluster: simfs.Cluster) -> set[str]:
    return set(_ok(cluster.run(read_job, faults=[])).values())


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("on", ["rename:*.tmp.*", "fsync:*.tmp.*", "write:*.tmp.*", "open:*.tmp.*",
                                "fsync:/shared/data"])
def test_writer_node_crash_at_a_step_of_atomic_write_leaves_old_content(profile, on) -> None:
    cluster = _cluster(profile, seed=3, rpn=1)
    _ok(cluster.run(_setup))
    result = cluster.run(writer_job, 1, 0.0, faults=[simfs.CrashNode(node=0, on=on)])
    assert 0 in result.crashed, result.summary()
    expected = {"v1:w0"} if on.startswith("fsync:/shared/data") else {"v0:w0"}  # the rename was done
    if profile == "local" and on.startswith("fsync:/shared/data"):
        # a `local` shared mount is node 0's own disk: the crash is its power loss, before the
        # directory fsync made the rename durable, so either complete version may come back
        assert _restart_reads(cluster) in ({"v0:w0"}, {"v1:w0"})
        return
    assert _restart_reads(cluster) == expected


@pytest.mark.parametrize("profile", list(PROFILES))
@given(seed=st.integers(0, 2**32 - 1), at=st.floats(0.0, 3.0), rounds=st.integers(1, 4))
@settings(max_examples=8)
def test_writer_node_crash_at_any_time_leaves_a_complete_version(profile, seed, at, rounds) -> None:
    cluster = _cluster(profile, seed, rpn=1)
    _ok(cluster.run(_setup))
    cluster.run(writer_job, rounds, 0.5, faults=[simfs.CrashNode(node=0, at_time=at)])
    seen = _restart_reads(cluster)
    assert len(seen) == 1 and seen <= {f"v{n}:w0" for n in range(rounds + 1)}, seen


@pytest.mark.parametrize("profile", list(PROFILES))
@given(seed=st.integers(0, 2**32 - 1), after_ops=st.integers(0, 40), rounds=st.integers(1, 3))
@example(seed=3, after_ops=2, rounds=1)  # objectstore: the crash lands right after the rename
@example(seed=0, after_ops=15, rounds=2)  # local: the crash lands between a write and its fsync
@settings(max_examples=12)
def test_server_crash_at_any_point_leaves_a_complete_version(profile, seed, after_ops, rounds) -> None:
    """CrashServer keeps only what was durable, plus a drawn prefix of the rest (one omitted,
    the last write torn): atomic_write's fsync, rename and directory fsync leave old or new.
    On the object store the rename is a server-side copy then a delete, each acknowledged
    (durable) before the next request: the target is the old or the new object, never empty."""
    cluster = _cluster(profile, seed, rpn=1)
    _ok(cluster.run(_setup))
    cluster.run(writer_job, rounds, 0.0, faults=[simfs.CrashServer(after_ops=after_ops)])  # ops of this run
    seen = _restart_reads(cluster)
    assert len(seen) == 1 and seen <= {f"v{n}:w0" for n in range(rounds + 1)}, (profile, seen)


def test_server_crash_tears_an_in_place_rewrite_on_local_disk() -> None:
    """The contrast that shows the crash check has teeth: writing the target in place, some
    server crash point leaves it empty or torn."""
    outcomes = set()
    for after_ops in range(6):
        for seed in range(4):
            cluster = _cluster("local", seed, rpn=1)
            _ok(cluster.run(_setup))
            cluster.run(inplace_writer_job, faults=[simfs.CrashServer(after_ops=after_ops)])
            outcomes |= _restart_reads(cluster)
    assert any(o.startswith("CORRUPT") for o in outcomes), outcomes


# -- an exception inside the block --------------------------------------------------------------------

class Interrupted(RuntimeError):
    pass


def aborted_job() -> tuple:
    _setup()
    rank = dist.get_rank()
    outcome = None
    if rank == 5:
        try:
            with coord.atomic_write(TARGET) as f:
                f.write(version(1, rank)[:1000])
                raise Interrupted("serialization failed half-way")
        except Interrupted as exc:
            outcome = str(exc)
    dist.barrier()
    with open(TARGET, "rb") as f:
        content = identify(f.read())
    return outcome, content, sorted(os.listdir(DIR))


@pytest.mark.parametrize("profile", list(PROFILES))
def test_exception_in_block_keeps_old_content_and_leaves_no_temp_file(profile) -> None:
    returns = _ok(_cluster(profile, seed=4).run(aborted_job))
    assert returns[5][0] == "serialization failed half-way"
    for rank, (_, content, names) in returns.items():
        assert content == "v0:w0" and names == ["model.bin"], (rank, content, names)


def test_atomic_write_keeps_the_target_mode_and_rejects_read_modes() -> None:
    def job() -> tuple:
        _setup()
        if dist.get_rank() == 0:
            os.chmod(TARGET, 0o600)
            with coord.atomic_write(TARGET) as f:
                f.write(version(1, 0))
        dist.barrier()
        try:
            with coord.atomic_write(TARGET, "rb"):
                pass
        except ValueError as exc:
            refused = str(exc)
        else:
            refused = ""
        return os.stat(TARGET).st_mode & 0o777, read_job(), refused

    for mode, content, refused in _ok(_cluster("local", 2).run(job)).values():
        assert mode == 0o600 and content == "v1:w0" and "mode must be one of" in refused
