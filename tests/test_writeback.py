"""The kernel's flusher on every disk: unsynced data is written back dirty_expire (30 s) after it
was dirtied, at the flusher's next wakeup, and at once while a disk's dirty bytes are past
dirty_background_bytes; written back, no crash state loses it, and what a crash can lose (the
memory it takes) stays under the dirty limit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs import profiles
from simfs.clock import VirtualClock
from simfs.fs.inode import ROOT
from simfs.fs.server import Server

MODELS = ["local", "local-posix"]  # ext4 (data=ordered) and strict POSIX persistence
DATA = b"checkpoint" * 1000


def disk(profile: str, clock: VirtualClock, **params: object) -> Server:
    return Server(profiles.get(profile).replace(**params), clock, "/shared")


def created(server: Server, name: str) -> int:
    """A file whose name is durable (its directory synced), holding no data yet."""
    ino, _, _ = server.create(ROOT, name, 0o644, exclusive=True)
    server.sync_dir(ROOT)
    return ino


def contents_after_crashes(server: Server, name: str) -> set[bytes | None]:
    """What ``name`` holds in each state a crash now could leave (None: no such name)."""
    out: set[bytes | None] = set()
    for state in server.crash_states():
        crashed, _ = server.crashed_copy(state)
        ino = crashed.lookup(ROOT, name)
        out.add(None if ino is None else crashed.content(ino))
    return out


@pytest.mark.parametrize("profile", MODELS)
@pytest.mark.parametrize("written_at, durable_at", [(0.0, 30.0), (1.0, 35.0), (4.9, 35.0)])
def test_a_write_is_durable_at_the_first_wakeup_dirty_expire_after_it(profile, written_at, durable_at) -> None:
    """The flusher wakes every 5 s (dirty_writeback_centisecs) and writes back what was dirtied
    30 s (dirty_expire_centisecs) before: until then a crash may lose the write, from then on none
    does."""
    clock = VirtualClock(written_at)
    server = disk(profile, clock)
    ino = created(server, "f")
    server.write(ino, 0, DATA)
    clock.now = durable_at - 0.01
    assert b"" in contents_after_crashes(server, "f")
    clock.now = durable_at
    assert contents_after_crashes(server, "f") == {DATA}
    assert server.journal.pending_bytes() == 0


@pytest.mark.parametrize("profile", MODELS)
def test_dirty_bytes_past_the_background_limit_are_written_back_at_once_oldest_first(profile) -> None:
    limit = 3 * len(DATA)
    clock = VirtualClock()
    server = disk(profile, clock, dirty_background_bytes=limit)
    inos = [created(server, name) for name in "abcd"]
    for ino in inos:
        server.write(ino, 0, DATA)
        assert server.journal.pending_bytes() <= limit
    assert contents_after_crashes(server, "a") == {DATA}  # the oldest, written back when d passed the limit
    for name in "bcd":  # the others may still be lost
        assert b"" in contents_after_crashes(server, name)


def test_a_rewritten_file_takes_memory_up_to_the_dirty_limit_not_with_every_version() -> None:
    """ext4's auto_da_alloc keeps each version of a file truncated, rewritten and closed as a
    possible crash state until it is written back: the limit bounds them."""
    limit = 4 * len(DATA)
    server = disk("local", VirtualClock(), dirty_background_bytes=limit)
    ino = created(server, "f")
    for i in range(50):
        server.truncate(ino, 0)
        server.write(ino, 0, bytes([i]) * len(DATA))
        server.closed(ino)
        assert server.journal.pending_bytes() <= limit
    assert contents_after_crashes(server, "f") <= {bytes([i]) * len(DATA) for i in range(45, 50)}


def test_on_a_cluster_an_unsynced_write_survives_a_power_loss_30_virtual_seconds_later() -> None:
    def job() -> None:
        with open("/tmp/ckpt", "wb") as f:  # on the node's ext4 disk, never fsynced
            f.write(DATA)
    outcomes = {}
    for wait in (1.0, 35.0):
        cluster = simfs.Cluster(profile="nfs", carrier="greenlet", isolate=False)
        assert cluster.run(job).ok
        cluster.idle(wait)
        outcomes[wait] = contents_after_crashes_at(cluster)
    assert DATA in outcomes[1.0] and len(outcomes[1.0]) > 1
    assert outcomes[35.0] == {DATA}


def contents_after_crashes_at(cluster: simfs.Cluster) -> set[bytes | None]:
    server = cluster.fs.local[0].server
    tmp = server.lookup(ROOT, "tmp")
    assert tmp is not None
    out: set[bytes | None] = set()
    for state in server.crash_states():
        crashed, _ = server.crashed_copy(state)
        ino = crashed.lookup(tmp, "ckpt")
        out.add(None if ino is None else crashed.content(ino))
    return out


operations = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from("abc"), st.integers(0, 8192), st.integers(1, 6000),
              st.integers(0, 255)),
    st.tuples(st.just("fsync"), st.sampled_from("abc")),
    st.tuples(st.just("wait"), st.floats(0, 40)),
), max_size=12)


@settings(max_examples=60, deadline=None)
@given(ops=operations, profile=st.sampled_from(MODELS), limit=st.sampled_from([8192, 20000, 2**30]))
def test_no_crash_state_loses_data_the_flusher_wrote_back(ops, profile, limit) -> None:
    """For any writes, fsyncs and waits: the dirty bytes never stay past the limit, and once the
    flusher has had dirty_expire plus one wakeup since the last write, every crash state keeps
    every file exactly as it is."""
    clock = VirtualClock()
    server = disk(profile, clock, dirty_background_bytes=limit)
    inos = {name: created(server, name) for name in "abc"}
    for op in ops:
        if op[0] == "write":
            _, name, offset, size, byte = op
            server.write(inos[name], offset, bytes([byte]) * size)
        elif op[0] == "fsync":
            server.commit(inos[op[1]])
        else:
            clock.now += op[1]
        assert server.journal.pending_bytes() <= limit
    clock.now += 35.0
    for name, ino in inos.items():
        assert contents_after_crashes(server, name) == {server.content(ino)}
