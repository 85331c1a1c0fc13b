"""What survives crashes, per profile: node crashes (dirty data and caches lost), server
crashes (only what was made durable survives, unsynced operations persist as the profile's
crash order allows), node-local disks, and ENOSPC/EDQUOT where data reaches the server."""

from __future__ import annotations

import errno
import os
import time
from collections import Counter

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs import profiles
from simfs.fs.inode import ROOT
from simfs.fs.server import Server

SECTOR = profiles.get("local").torn_sector  # 4096
# the local disk under strict POSIX persistence: what these tests walk (ext4's ordering: test_persistence_models)
POSIX_LOCAL = profiles.get("local").replace(persistence="posix")
BIG = bytes(range(256)) * 40  # 10240 bytes: three sectors, the last one partial
CRASH_MARK = "/shared/crash-here"  # a stat of this path is where CrashServer fires


# -- helpers ---------------------------------------------------------------------------------------
def read_or_none(path: str) -> bytes | None:
    """A file's bytes, or None if the name does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_paths(paths: list[str]) -> dict[str, bytes | None]:
    return {p: read_or_none(p) for p in paths}


def ls_or_none(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return None


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_crash_point() -> None:
    try:
        os.stat(CRASH_MARK)
    except FileNotFoundError:
        pass


def server_crash_cluster(profile: str | simfs.Profile = POSIX_LOCAL, seed: int = 0, nodes: int = 1) -> simfs.Cluster:
    return simfs.Cluster(**MODEL, nodes=nodes, ranks_per_node=1, profile=profile, seed=seed,
                         faults=[simfs.CrashServer(mount="/shared", on=f"stat:{CRASH_MARK}")])


def assert_power_lost(result: simfs.Result) -> None:
    """A crash of a disk inside node 0 (the `local` profile) is a power loss of that node: its
    rank dies at the crash point and the disk keeps what a crash state allows."""
    assert set(result.crashed) == {0} and not result.errors, result.summary()
    assert any(e.op == "disk-crash" and e.path == "node0:/shared" for e in result.trace), result.summary()


def restart_read(cluster: simfs.Cluster, paths: list[str]) -> dict[str, bytes | None]:
    """The restarted job (no faults) reads ``paths`` on rank 0."""
    result = cluster.run(read_paths, paths, faults=[])
    assert result.ok, result.summary()
    return result.returns[0]


def classify(got: bytes | None, data: bytes) -> str:
    if got is None:
        return "missing"
    if got == data:
        return "full"
    if got == b"":
        return "empty"
    return "partial"


def assert_torn_prefix(got: bytes | None, data: bytes, sector: int = SECTOR) -> None:
    """A file written once by an unsynced write: absent, or a sector-aligned prefix, or whole."""
    if got is None or got == data:
        return
    assert len(got) % sector == 0 and len(got) < len(data), (len(got), sector)
    assert got == data[:len(got)]


# -- rank code ---------------------------------------------------------------------------------------
def nfs_closed_and_dirty(closed: bytes, dirty: bytes, crash_wait: float) -> None:
    if dist.get_rank() == 0:
        with open("/shared/closed", "wb") as f:
            f.write(closed)
        f = open("/shared/dirty", "wb")
        f.write(dirty)
        f.flush()  # reaches the node's client (a write syscall), not the server
        time.sleep(crash_wait)
        f.close()


def nfs_fsync_without_close(data: bytes) -> None:
    if dist.get_rank() == 0:
        fd = os.open("/shared/synced", os.O_WRONLY | os.O_CREAT)
        os.write(fd, data)
        os.fsync(fd)
        time.sleep(100)
        os.close(fd)


def stat_size(path: str) -> int:
    return os.stat(path).st_size


def stat_then_wait(path: str) -> int | None:
    size = None
    if dist.get_rank() == 0:
        size = os.stat(path).st_size  # node 0 caches the attributes
    dist.barrier()
    if dist.get_rank() == 1:
        with open(path, "ab") as f:
            f.write(b"more")
    dist.barrier()
    if dist.get_rank() == 0:
        time.sleep(10)  # the crash (at 5 s) comes while node 0 holds the cached attributes
    return size


def write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def server_write(mode: str, data: bytes) -> None:
    """Create /shared/f with ``data``; mode: 'none', 'file' (fsync), 'both' (fsync + dir fsync)."""
    fd = os.open("/shared/f", os.O_WRONLY | os.O_CREAT)
    os.write(fd, data)
    if mode in ("file", "both"):
        os.fsync(fd)
    os.close(fd)
    if mode == "both":
        fsync_dir("/shared")
    mark_crash_point()


def server_durable_then_noise(data: bytes, noise: list[bytes]) -> None:
    """A durable file, then unsynced noise: other files, a directory, a rename."""
    server_write_durable("/shared/keep", data)
    os.mkdir("/shared/dir")
    for i, chunk in enumerate(noise):
        write_file(f"/shared/dir/n{i}", chunk)
    write_file("/shared/tmp", b"t")
    os.rename("/shared/tmp", "/shared/renamed")
    mark_crash_point()


def server_write_durable(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    fsync_dir(os.path.dirname(path))


def server_atomic_replace(sync_after_rename: bool) -> None:
    write_file("/shared/final", b"old")
    fd = os.open("/shared/final", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    server_write_durable("/shared/tmp", BIG)
    os.rename("/shared/tmp", "/shared/final")
    if sync_after_rename:
        fsync_dir("/shared")
    mark_crash_point()


def nfs_namespace_and_close() -> None:
    if dist.get_rank() != 0:
        return
    os.mkdir("/shared/d")
    write_file("/shared/d/tmp", BIG)
    os.rename("/shared/d/tmp", "/shared/d/final")
    write_file("/shared/d/plain", b"closed, never fsynced")
    mark_crash_point()


def objectstore_overwrite(opener: str) -> None:
    if dist.get_rank() == 0:
        f = open("/shared/obj", opener)
        f.write(b"NEW")
        f.flush()
        time.sleep(5)  # the crash comes before the close that would upload
        f.close()


def objectstore_new_object() -> None:
    if dist.get_rank() == 0:
        f = open("/shared/new", "wb")
        f.write(b"abc")
        f.flush()
        time.sleep(5)
        f.close()


def local_disk_writes() -> None:
    """On each node's /tmp: one file made durable, one left unsynced."""
    server_write_durable("/tmp/durable", BIG)
    write_file("/tmp/volatile", BIG)
    time.sleep(10)


def errno_at_close_os(name: str) -> tuple[int, str]:
    """Returns (bytes os.write accepted, errno name of close) when the error surfaces at close."""
    fd = os.open("/shared/x1", os.O_WRONLY | os.O_CREAT)
    n = os.write(fd, b"payload")
    try:
        os.close(fd)
    except OSError as exc:
        return n, errno.errorcode[exc.errno]
    return n, "closed"


def errno_at_close_python() -> str:
    f = open("/shared/x2", "w")
    f.write("payload")
    try:
        f.close()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "closed"


def errno_at_fsync() -> tuple[int, str]:
    fd = os.open("/shared/x3", os.O_WRONLY | os.O_CREAT)
    n = os.write(fd, b"payload")
    try:
        os.fsync(fd)
    except OSError as exc:
        return n, errno.errorcode[exc.errno]
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return n, "synced"


def errno_at_write() -> str:
    fd = os.open("/shared/x4", os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"payload")
    except OSError as exc:
        return "write:" + errno.errorcode[exc.errno]
    finally:
        os.close(fd)
    return "written"


def unmatched_path_write() -> str:
    with open("/shared/y", "w") as f:
        f.write("fine")
    return "ok"


# -- node crash: dirty data and caches ----------------------------------------------------------------
@settings(max_examples=15)
@given(closed=st.binary(min_size=1, max_size=20000), dirty=st.binary(min_size=1, max_size=20000),
       crash_at=st.floats(0.5, 50.0), seed=st.integers(0, 2**16))
def test_nfs_node_crash_keeps_closed_data_and_loses_dirty_data(closed, dirty, crash_at, seed):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed,
                            faults=[simfs.CrashNode(node=0, at_time=crash_at)])
    result = cluster.run(nfs_closed_and_dirty, closed, dirty, 100.0)
    assert set(result.crashed) == {0}
    assert result.returns == {1: None} and not result.errors
    after = cluster.run(read_paths, ["/shared/closed", "/shared/dirty"], faults=[])
    assert after.ok, after.summary()
    for rank in (0, 1):  # the restarted node 0 and the surviving node 1 agree
        assert after.returns[rank]["/shared/closed"] == closed
        # the name was created on the server at open; the bytes never left node 0
        assert after.returns[rank]["/shared/dirty"] == b""


def test_nfs_without_crash_the_same_job_keeps_both_files():
    """Control for the test above: the dirty file is lost because of the crash, not the job."""
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=1)
    assert cluster.run(nfs_closed_and_dirty, b"c", b"d", 1.0).ok
    assert restart_read(cluster, ["/shared/closed", "/shared/dirty"]) == {"/shared/closed": b"c", "/shared/dirty": b"d"}


def test_nfs_fsync_commits_data_of_a_file_never_closed():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=2,
                            faults=[simfs.CrashNode(node=0, at_time=10.0)])
    result = cluster.run(nfs_fsync_without_close, BIG)
    assert set(result.crashed) == {0}
    assert restart_read(cluster, ["/shared/synced"]) == {"/shared/synced": BIG}


@pytest.mark.parametrize("crash", [True, False])
def test_node_crash_forgets_cached_attributes(crash):
    """Node 0 caches a file's attributes (acregmin=acregmax=60), node 1 appends. After its
    crash, node 0 asks the server again; a node that did not crash still serves its cache."""
    prof = profiles.get("nfs").replace(acregmin=60.0, acregmax=60.0, acdirmin=60.0, acdirmax=60.0)
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile=prof, seed=3)
    cluster.run(write_file, "/shared/f", b"1234")
    faults = [simfs.CrashNode(node=0, at_time=5.0)] if crash else []
    first = cluster.run(stat_then_wait, "/shared/f", faults=faults)
    if crash:
        assert set(first.crashed) == {0}
    else:
        assert first.ok and first.returns[0] == 4
    # the restart happens well inside node 0's 60 s attribute cache lifetime
    assert first.virtual_time < 30
    size = cluster.run(stat_size, "/shared/f", faults=[]).returns
    # both ranks wrote the same 4 bytes, node 1 appended 4
    if crash:
        assert size == {0: 8, 1: 8}
    else:
        assert size[1] == 8
        assert size[0] == 4, "a node that did not crash keeps its cached attributes across runs"


# -- objectstore: close uploads the whole object ------------------------------------------------------
def test_objectstore_new_object_does_not_exist_until_close():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="objectstore", seed=0,
                            faults=[simfs.CrashNode(node=0, at_time=1.0)])
    assert set(cluster.run(objectstore_new_object).crashed) == {0}
    after = cluster.run(read_paths, ["/shared/new"], faults=[])
    assert after.returns == {0: {"/shared/new": None}, 1: {"/shared/new": None}}
    # without the crash the close uploads it
    cluster.run(objectstore_new_object, faults=[])
    after = cluster.run(read_paths, ["/shared/new"], faults=[])
    assert after.returns[1] == {"/shared/new": b"abc"}


@pytest.mark.parametrize("opener, uploaded", [("r+b", b"NEWoldold"), ("wb", b"NEW")])
def test_objectstore_crash_before_close_keeps_the_old_object_whole(opener, uploaded):
    """Objects change only when close uploads them: a crash before the close leaves the old
    object intact (also when the open truncated it: the truncation is part of the upload)."""
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="objectstore", seed=0)
    cluster.run(write_file, "/shared/obj", b"oldoldold")
    crashed = cluster.run(objectstore_overwrite, opener, faults=[simfs.CrashNode(node=0, at_time=1.0)])
    assert set(crashed.crashed) == {0}
    after = cluster.run(read_paths, ["/shared/obj"], faults=[])
    assert after.returns[1] == {"/shared/obj": b"oldoldold"}
    assert after.returns[0] == {"/shared/obj": b"oldoldold"}
    assert cluster.run(objectstore_overwrite, opener, faults=[]).ok
    final = cluster.run(read_paths, ["/shared/obj"], faults=[]).returns
    assert final[0] == {"/shared/obj": uploaded}


# -- server crash on a local-disk profile used as the shared mount: a power loss of node 0 -----------
def crash_outcomes(mode: str, seeds: range, data: bytes = BIG) -> Counter:
    outcomes: Counter = Counter()
    for seed in seeds:
        cluster = server_crash_cluster(seed=seed)
        result = cluster.run(server_write, mode, data)
        assert_power_lost(result)
        got = restart_read(cluster, ["/shared/f"])["/shared/f"]
        assert_torn_prefix(got, data)
        outcomes[classify(got, data)] += 1
    return outcomes


def test_server_crash_fsync_of_file_and_directory_is_durable_for_every_seed():
    assert crash_outcomes("both", range(30)) == Counter(full=30)


def test_server_crash_without_any_fsync_loses_or_tears_the_file():
    outcomes = crash_outcomes("none", range(80))
    assert set(outcomes) <= {"missing", "empty", "partial", "full"}
    # each non-durable outcome happens for some crash state
    assert outcomes["missing"] > 0, outcomes
    assert outcomes["empty"] > 0, outcomes
    assert outcomes["partial"] > 0, outcomes


def test_server_crash_file_fsync_without_directory_fsync_may_lose_the_entry():
    outcomes = crash_outcomes("file", range(40))
    # the data was durable: whenever the name survives, the content is whole
    assert set(outcomes) <= {"missing", "full"}, outcomes
    assert outcomes["missing"] > 0 and outcomes["full"] > 0, outcomes


@settings(max_examples=25)
@given(data=st.data(), size=st.integers(1, 3 * SECTOR + 100), mode=st.sampled_from(["none", "file", "both"]))
def test_server_crash_invariants_over_hypothesis_crash_states(data, size, mode):
    """Hypothesis drives every draw of the run (crash state included)."""
    payload = bytes(i % 251 for i in range(size))
    cluster = server_crash_cluster()
    result = cluster.run(server_write, mode, payload, choices=data)
    assert_power_lost(result)
    got = restart_read(cluster, ["/shared/f"])["/shared/f"]
    if mode == "both":
        assert got == payload
    elif mode == "file":
        assert got in (None, payload)
    else:
        assert_torn_prefix(got, payload)


@settings(max_examples=30)
@given(draws=st.lists(st.integers(0, 2**16), max_size=40), payload=st.binary(min_size=1, max_size=9000),
       noise=st.lists(st.binary(max_size=5000), max_size=4))
def test_server_crash_durable_file_survives_any_state_of_later_unsynced_work(draws, payload, noise):
    cluster = server_crash_cluster()
    result = cluster.run(server_durable_then_noise, payload, noise, choices=simfs.ReplayChoices(draws))
    assert_power_lost(result)
    after = restart_read(cluster, ["/shared/keep", "/shared/tmp", "/shared/renamed"])
    assert after["/shared/keep"] == payload
    # the rename persists as a unit: never both names, never neither (tmp's entry is unsynced,
    # so "neither" is allowed only when the create of tmp itself was lost)
    assert not (after["/shared/tmp"] is not None and after["/shared/renamed"] is not None)
    listing = cluster.run(ls_or_none, "/shared/dir", faults=[]).returns[0]
    if listing is not None:
        assert set(listing) <= {f"n{i}" for i in range(len(noise))}


@pytest.mark.parametrize("sync_after_rename", [False, True])
def test_server_crash_tmp_fsync_rename_is_atomic(sync_after_rename):
    """write tmp + fsync + fsync dir, rename over final: after any crash state the final name
    holds either the old or the new content, whole; with a dir fsync after the rename, the new."""
    seen = set()
    for seed in range(40):
        cluster = server_crash_cluster(seed=seed)
        result = cluster.run(server_atomic_replace, sync_after_rename)
        assert_power_lost(result)
        after = restart_read(cluster, ["/shared/final", "/shared/tmp"])
        final, tmp = after["/shared/final"], after["/shared/tmp"]
        assert final in (b"old", BIG, None)
        if final == b"old":
            assert tmp == BIG  # the rename did not persist: tmp is still there, whole
        elif final == BIG:
            assert tmp is None  # the rename persisted whole
        seen.add(final)
    if sync_after_rename:
        assert seen == {BIG}
    else:
        assert BIG in seen and b"old" in seen, seen


@pytest.mark.parametrize("seed", range(5))
def test_nfs_server_crash_keeps_closed_files_and_namespace_operations(seed):
    """nfs: close commits the data (data_durable='close'), every namespace operation is durable
    when acknowledged (entry_durable='op'): no fsync needed."""
    cluster = server_crash_cluster("nfs", seed=seed, nodes=2)
    result = cluster.run(nfs_namespace_and_close)
    assert result.ok, result.summary()
    assert sum(e.op == "server-crash" for e in result.trace) == 1
    after = cluster.run(read_paths, ["/shared/d/final", "/shared/d/tmp", "/shared/d/plain"], faults=[])
    for rank in (0, 1):
        assert after.returns[rank] == {"/shared/d/final": BIG, "/shared/d/tmp": None,
                                       "/shared/d/plain": b"closed, never fsynced"}


def lustre_write_close_then_overwrite(data: bytes, later: bytes) -> None:
    """Rank 0: write and close a file (no fsync), then overwrite its start in place (no fsync)."""
    if dist.get_rank() != 0:
        return
    write_file("/shared/f", data)
    with open("/shared/f", "r+b") as f:
        f.write(later)
    mark_crash_point()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), data=st.binary(min_size=1, max_size=9000), later=st.binary(max_size=100))
def test_lustre_surviving_clients_replay_unsynced_writes_after_a_server_restart(seed, data, later):
    """Lustre (data_durable='replayed'): a client resends what the OST had not committed, close()
    or not, so a server restart alone loses no acknowledged write; a power loss of the whole
    cluster takes the clients with it."""
    expected = later + data[len(later):] if len(later) <= len(data) else later
    cluster = server_crash_cluster("lustre", seed=seed, nodes=2)
    result = cluster.run(lustre_write_close_then_overwrite, data, later)
    assert result.ok, result.summary()
    assert any(e.op == "server-crash" and "again" in e.outcome for e in result.trace), result.summary()
    after = cluster.run(read_paths, ["/shared/f"], faults=[])
    assert [r["/shared/f"] for r in after.returns.values()] == [expected, expected]


def test_lustre_power_loss_takes_the_unsynced_writes_with_the_clients():
    lost = []
    for seed in range(20):
        cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="lustre", seed=seed)
        assert cluster.run(lustre_write_close_then_overwrite, BIG, b"x").ok
        cluster.power_loss()
        lost.append(cluster.run(read_paths, ["/shared/f"]).returns[0]["/shared/f"] != b"x" + BIG[1:])
    assert any(lost)


def update_across_a_restart() -> tuple[float, float]:
    """Rank 0 uploads /shared/f and keeps /shared/same; both opened for update, the server
    restarts, then the update is written and closed. Returns the mtime of /shared/same before
    and after the restart."""
    if dist.get_rank() != 0:
        return (0.0, 0.0)
    for path in ("/shared/f", "/shared/same"):
        server_write_durable(path, b"old")
    before = os.stat("/shared/same").st_mtime
    with open("/shared/f", "r+b") as f:
        f.write(b"new")
        mark_crash_point()
    return before, os.stat("/shared/same").st_mtime


@pytest.mark.parametrize("profile", ["objectstore", "nfs", "lustre"])
def test_a_server_restart_does_not_change_files_it_kept(profile):
    """A restart keeps the change attribute (object generation) of what it did not lose: an
    update begun before it is not refused with ESTALE, and times stay (they were bumped for
    every inode before)."""
    cluster = server_crash_cluster(profile, nodes=2)
    result = cluster.run(update_across_a_restart)
    assert result.ok, result.summary()
    assert any(e.op == "server-crash" for e in result.trace)
    before, after = result.returns[0]
    assert before == after
    assert cluster.run(read_paths, ["/shared/f"], faults=[]).returns[1] == {"/shared/f": b"new"}


def test_a_file_the_restart_took_back_gets_a_new_change_attribute():
    server = Server(profiles.get("nfs"), lambda: 0.0, "s")
    ino, _, _ = server.create(ROOT, "f", 0o644, exclusive=True)
    server.write(ino, 0, b"durable")
    server.commit(ino)
    server.sync_dir(ROOT)
    kept = server.getattr(ino).change
    server.write(ino, 0, b"LOST")
    lost = server.getattr(ino).change
    server.crash(simfs.ReplayChoices([0] * 64))
    restored = server.getattr(ino)
    assert server.content(ino) == b"durable"
    assert restored.change not in (kept, lost) and restored.change > lost


def test_beegfs_server_restart_loses_unsynced_writes():
    """BeeGFS clients keep nothing for replay (no client recovery): a storage server restart
    loses what it had not synced to its disk."""
    lost = []
    for seed in range(20):
        cluster = server_crash_cluster("beegfs", seed=seed, nodes=2)
        assert cluster.run(lustre_write_close_then_overwrite, BIG, b"x").ok
        lost.append(cluster.run(read_paths, ["/shared/f"], faults=[]).returns[0]["/shared/f"] != b"x" + BIG[1:])
    assert any(lost)


@pytest.mark.parametrize("seed", range(5))
def test_objectstore_server_crash_keeps_uploaded_objects(seed):
    cluster = server_crash_cluster("objectstore", seed=seed)
    result = cluster.run(server_write, "none", BIG)
    assert result.ok, result.summary()
    assert restart_read(cluster, ["/shared/f"]) == {"/shared/f": BIG}


# -- Server.crash, states enumerated with ReplayChoices ----------------------------------------------
class _ArityProbe:
    """ReplayChoices that also records the range of each draw, to walk every crash state."""

    def __init__(self, draws: list[int]) -> None:
        self.inner = simfs.ReplayChoices(draws)
        self.arities: list[int] = []

    def choose(self, n: int) -> int:
        value = self.inner.choose(n)
        if n > 1:
            assert 0 <= value < n
            self.arities.append(n)
        return value

    def fraction(self) -> float:
        raise AssertionError("a crash state is made of discrete choices")


def all_crash_states(build):
    """Yield (draws, crashed server) for every distinct sequence of crash draws."""
    draws: list[int] = []
    while True:
        server = build()
        probe = _ArityProbe(draws)
        server.crash(probe)
        full = draws + [0] * (len(probe.arities) - len(draws))
        yield full, server
        i = len(full) - 1
        while i >= 0 and full[i] + 1 >= probe.arities[i]:
            i -= 1
        if i < 0:
            return
        draws = full[:i] + [full[i] + 1]


def new_server(profile: simfs.Profile | str = POSIX_LOCAL) -> Server:
    return Server(profiles.get(profile), lambda: 0.0, "/shared")


def state_of(server: Server, name: str) -> bytes | None:
    ino = server.lookup(ROOT, name)
    return None if ino is None else server.content(ino)


def build_unsynced_write(profile=POSIX_LOCAL, data=BIG):
    def build() -> Server:
        server = new_server(profile)
        ino, created, _ = server.create(ROOT, "f", 0o644, False)
        assert created
        server.write(ino, 0, data)
        return server
    return build


def test_server_crash_states_of_an_unsynced_create_and_write():
    outcomes = {state_of(s, "f") for _, s in all_crash_states(build_unsynced_write())}
    assert outcomes == {None, b"", BIG[:SECTOR], BIG[:2 * SECTOR], BIG}


@pytest.mark.parametrize("sector", [512, 1024, 3000])
def test_server_crash_tears_at_the_profiles_sector_size(sector):
    prof = POSIX_LOCAL.replace(torn_sector=sector)
    outcomes = {state_of(s, "f") for _, s in all_crash_states(build_unsynced_write(prof))}
    lengths = {len(o) for o in outcomes if o is not None}
    assert lengths == set(range(0, len(BIG), sector)) | {len(BIG)}
    for got in outcomes:
        assert_torn_prefix(got, BIG, sector)


def test_server_crash_small_or_untearable_writes_are_never_torn():
    small = {state_of(s, "f") for _, s in all_crash_states(build_unsynced_write(data=b"x" * SECTOR))}
    assert small == {None, b"", b"x" * SECTOR}
    whole = POSIX_LOCAL.replace(torn_sector=0)
    untorn = {state_of(s, "f") for _, s in all_crash_states(build_unsynced_write(whole))}
    assert untorn == {None, b"", BIG}


def test_server_crash_states_with_data_fsync_but_no_directory_fsync():
    def build() -> Server:
        server = build_unsynced_write()()
        server.commit(server.lookup(ROOT, "f"))
        return server

    assert {state_of(s, "f") for _, s in all_crash_states(build)} == {None, BIG}


def test_server_crash_states_after_file_and_directory_fsync():
    def build() -> Server:
        server = build_unsynced_write()()
        server.commit(server.lookup(ROOT, "f"))
        server.sync_dir(ROOT)
        server.write(server.lookup(ROOT, "f"), len(BIG), b"tail")  # unsynced append afterwards
        return server

    outcomes = {state_of(s, "f") for _, s in all_crash_states(build)}
    assert outcomes == {BIG, BIG + b"tail"}


@pytest.mark.parametrize("order", ["prefix", "omit_one"])
def test_server_crash_order_prefix_versus_omit_one(order):
    """Creates of a, b, c unsynced: 'prefix' persists a prefix of them; 'omit_one' may skip
    one operation of the persisted prefix."""
    prof = POSIX_LOCAL.replace(crash_order=order)

    def build() -> Server:
        server = new_server(prof)
        for name in "abc":
            server.create(ROOT, name, 0o644, False)
        return server

    states = set()
    for _draws, server in all_crash_states(build):
        states.add("".join(n for n in "abc" if server.lookup(ROOT, n) is not None))
    prefixes = {"", "a", "ab", "abc"}
    if order == "prefix":
        assert states == prefixes
    else:
        assert states == prefixes | {"b", "ac", "bc"}


def test_server_crash_rename_persists_as_one_unit():
    def build() -> Server:
        server = new_server()
        ino, _, _ = server.create(ROOT, "tmp", 0o644, False)
        server.write(ino, 0, b"data")
        server.commit(ino)
        server.sync_dir(ROOT)
        server.create(ROOT, "other", 0o644, False)
        server.rename(ROOT, "tmp", ROOT, "final")
        server.create(ROOT, "last", 0o644, False)
        return server

    seen = set()
    for _, server in all_crash_states(build):
        names = {n for n, _ in server.readdir(ROOT)}
        assert ("tmp" in names) != ("final" in names), names
        assert state_of(server, "tmp" if "tmp" in names else "final") == b"data"
        seen.add("final" in names)
    assert seen == {True, False}


@pytest.mark.parametrize("replace_existing", [False, True])
def test_server_crash_rename_made_durable_by_directory_fsync(replace_existing):
    """write + fsync tmp, fsync dir, rename tmp -> final, fsync dir: nothing is pending, so
    every crash state has final with the new data and no tmp."""
    def build() -> Server:
        server = new_server()
        if replace_existing:
            old, _, _ = server.create(ROOT, "final", 0o644, False)
            server.write(old, 0, b"old")
            server.commit(old)
        ino, _, _ = server.create(ROOT, "tmp", 0o644, False)
        server.write(ino, 0, b"new")
        server.commit(ino)
        server.sync_dir(ROOT)
        server.rename(ROOT, "tmp", ROOT, "final")
        server.sync_dir(ROOT)
        assert server.pending_count() == 0
        return server

    for _, server in all_crash_states(build):
        assert state_of(server, "tmp") is None
        assert state_of(server, "final") == b"new"


def test_server_crash_replay_of_the_same_draws_gives_the_same_state():
    build = build_unsynced_write()
    for draws, server in all_crash_states(build):
        again = build()
        again.crash(simfs.ReplayChoices(draws))
        assert state_of(again, "f") == state_of(server, "f")


def test_server_crash_restores_the_volatile_layer_from_the_durable_one():
    server = build_unsynced_write()()
    summary = server.crash(simfs.ReplayChoices([]))  # simplest state: nothing unsynced persists
    assert "0 of 2" in summary
    assert server.lookup(ROOT, "f") is None
    assert server.pending_count() == 0
    assert server.readdir(ROOT) == []


# -- node-local disks ------------------------------------------------------------------------------------
def test_node_crash_on_local_disk_keeps_synced_and_may_lose_unsynced_files():
    volatile: Counter = Counter()
    for seed in range(30):
        cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=seed,
                                faults=[simfs.CrashNode(node=0, at_time=5.0)])
        result = cluster.run(local_disk_writes)
        assert set(result.crashed) == {0} and result.returns == {1: None}
        after = cluster.run(read_paths, ["/tmp/durable", "/tmp/volatile"], faults=[])
        assert after.ok, after.summary()
        node0, node1 = after.returns[0], after.returns[1]
        assert node0["/tmp/durable"] == BIG
        assert_torn_prefix(node0["/tmp/volatile"], BIG)
        volatile[classify(node0["/tmp/volatile"], BIG)] += 1
        # node 1's disk did not crash: its unsynced file is intact
        assert node1 == {"/tmp/durable": BIG, "/tmp/volatile": BIG}
    assert volatile["missing"] > 0, volatile


def test_local_disks_are_private_to_their_node():
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0)
    cluster.run(lambda: write_file("/tmp/mine", str(dist.get_rank()).encode()))
    assert cluster.run(read_paths, ["/tmp/mine"]).returns == {0: {"/tmp/mine": b"0"}, 1: {"/tmp/mine": b"1"}}


# -- ENOSPC / EDQUOT ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ENOSPC", "EDQUOT"])
def test_nfs_space_errors_surface_at_close_and_the_data_never_reaches_the_server(name):
    cluster = simfs.Cluster(**MODEL, nodes=2, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno(name, path="/shared/x*")])
    result = cluster.run(errno_at_close_os, name)
    assert result.ok, result.summary()
    assert result.returns == {0: (7, name), 1: (7, name)}
    assert any(e.op == "close" and e.outcome.startswith(name) for e in result.trace)
    after = cluster.run(read_paths, ["/shared/x1"], faults=[])
    assert after.returns == {0: {"/shared/x1": b""}, 1: {"/shared/x1": b""}}


def test_nfs_enospc_through_python_file_objects_is_raised_by_close():
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno("ENOSPC", path="/shared/x*")])
    assert cluster.run(errno_at_close_python).returns == {0: "ENOSPC"}
    assert restart_read(cluster, ["/shared/x2"]) == {"/shared/x2": b""}


def test_nfs_enospc_surfaces_at_fsync():
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="nfs", seed=0,
                            faults=[simfs.InjectErrno("ENOSPC", path="/shared/x*")])
    assert cluster.run(errno_at_fsync).returns == {0: (7, "ENOSPC")}


@pytest.mark.parametrize("name", ["ENOSPC", "EDQUOT"])
def test_write_through_mount_raises_space_errors_at_write(name):
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile="local", seed=0,
                            faults=[simfs.InjectErrno(name, path="/shared/x*")])
    assert cluster.run(errno_at_write).returns == {0: f"write:{name}"}
    assert restart_read(cluster, ["/shared/x4"]) == {"/shared/x4": b""}


@pytest.mark.parametrize("profile", ["nfs", "local", "lustre", "objectstore"])
def test_space_errors_only_hit_matching_paths(profile):
    cluster = simfs.Cluster(**MODEL, nodes=1, ranks_per_node=1, profile=profile, seed=0,
                            faults=[simfs.InjectErrno("ENOSPC", path="/shared/x*")])
    assert cluster.run(unmatched_path_write).returns == {0: "ok"}
    assert restart_read(cluster, ["/shared/y"]) == {"/shared/y": b"fine"}
