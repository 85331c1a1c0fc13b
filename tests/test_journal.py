"""The server's journal: crash_states() enumerates every crash state the persistence model allows,
deduplicated and bounded, and memory grows with live data plus what a crash can still lose, not
with bytes ever written."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs import profiles
from simfs.fs.inode import ROOT
from simfs.fs.server import Server

SECTOR = 4096


def new_server(**params: object) -> Server:
    return Server(profiles.get("local").replace(**params), lambda: 0.0, "/shared")


def image_of(server: Server) -> dict[str, bytes | None]:
    """What the root directory holds after a crash: name -> content (None: a directory)."""
    out: dict[str, bytes | None] = {}
    for name, ino in server.readdir(ROOT):
        out[name] = None if server.kinds.get(ino) == "d" else server.content(ino)
    return out


def key(image: dict[str, bytes | None]) -> tuple:
    return tuple(sorted(image.items()))


class _Walk:
    """ReplayChoices that records each draw's range, to walk every drawn crash state."""

    def __init__(self, draws: list[int]) -> None:
        self.inner, self.arities = simfs.ReplayChoices(draws), []

    def choose(self, n: int) -> int:
        if n > 1:
            self.arities.append(n)
        return self.inner.choose(n)

    def fraction(self) -> float:
        raise AssertionError("crash states are discrete")


def drawn_images(build) -> set[tuple]:
    """Every image Server.crash can leave, found by walking all its draws."""
    seen, draws = set(), []
    while True:
        server = build()
        walk = _Walk(draws)
        server.crash(walk)
        seen.add(key(image_of(server)))
        full = draws + [0] * (len(walk.arities) - len(draws))
        i = len(full) - 1
        while i >= 0 and full[i] + 1 >= walk.arities[i]:
            i -= 1
        if i < 0:
            return seen
        draws = full[:i] + [full[i] + 1]


operations = st.lists(st.one_of(
    st.tuples(st.just("create"), st.sampled_from("abc")),
    st.tuples(st.just("write"), st.sampled_from("abc"), st.integers(0, 3 * SECTOR), st.integers(1, 2 * SECTOR)),
    st.tuples(st.just("truncate"), st.sampled_from("abc"), st.integers(0, 2 * SECTOR)),
    st.tuples(st.just("unlink"), st.sampled_from("abc")),
    st.tuples(st.just("fsync"), st.sampled_from("abc")),
    st.tuples(st.just("dirsync")),
), max_size=8)


def apply(server: Server, ops: list[tuple]) -> None:
    for n, op in enumerate(ops):
        kind, name = op[0], (op[1] if len(op) > 1 else None)
        ino = server.lookup(ROOT, name) if name else None
        if kind == "create" and ino is None:
            server.create(ROOT, name, 0o644, False)
        elif kind == "write" and ino is not None:
            server.write(ino, op[2], bytes([n + 1]) * op[3])
        elif kind == "truncate" and ino is not None:
            server.truncate(ino, op[2])
        elif kind == "unlink" and ino is not None:
            server.unlink(ROOT, name)
        elif kind == "fsync" and ino is not None:
            server.commit(ino)
        elif kind == "dirsync":
            server.sync_dir(ROOT)


@given(ops=operations, order=st.sampled_from(["prefix", "omit_one"]))
@settings(max_examples=60, deadline=None)
def test_crash_states_are_exactly_the_states_a_crash_can_leave(ops, order) -> None:
    """Each enumerated state, applied, gives one of the images a drawn crash gives, they are all
    different, and together they cover every drawn image."""
    def build() -> Server:
        server = new_server(crash_order=order)
        apply(server, ops)
        return server

    states = build().crash_states()
    images = []
    for state in states:
        server = build()
        server.crash_into(state)
        images.append(key(image_of(server)))
    assert len(set(images)) == len(images), "crash_states() repeats a state"
    assert set(images) == drawn_images(build)


def test_crash_states_are_bounded() -> None:
    server = new_server()
    for i in range(40):
        server.create(ROOT, f"f{i}", 0o644, False)
    assert len(server.crash_states(limit=10)) == 10
    assert len(server.crash_states()) > 40  # prefixes, and prefixes with one omitted


def test_overwrites_before_a_sync_keep_only_the_newest_bytes() -> None:
    """A 1 MiB file rewritten 200 times without fsync: the journal holds one version, not 200."""
    server = new_server()
    ino, _, _ = server.create(ROOT, "f", 0o644, False)
    for round_ in range(200):
        server.truncate(ino, 0)
        server.write(ino, 0, bytes([round_ % 256]) * (1 << 20))
    assert server.journal.pending_bytes() <= 1 << 20


def test_overlapping_writes_are_trimmed() -> None:
    server = new_server()
    ino, _, _ = server.create(ROOT, "f", 0o644, False)
    for _ in range(100):
        server.write(ino, 0, b"a" * 8192)
        server.write(ino, 4096, b"b" * 8192)
    assert server.journal.pending_bytes() <= 3 * 8192


def test_a_deleted_files_unsynced_data_and_durable_copy_are_dropped() -> None:
    server = new_server()
    for _ in range(50):
        ino, _, _ = server.create(ROOT, "tmp", 0o644, False)
        server.write(ino, 0, b"x" * 100_000)
        server.commit(ino)
        server.sync_dir(ROOT)
        server.unlink(ROOT, "tmp")
        server.sync_dir(ROOT)
    assert server.journal.pending_bytes() == 0
    assert sum(len(n.data) for n in server.journal.durable.values() if n.data is not None) == 0


@given(ops=operations)
@settings(max_examples=60, deadline=None)
def test_syncing_everything_makes_the_durable_image_the_live_one(ops) -> None:
    """Coalescing never changes what becomes durable once everything is synced."""
    server = new_server()
    apply(server, ops)
    live = image_of(server)
    for _name, ino in server.readdir(ROOT):
        server.commit(ino)
    server.sync_dir(ROOT)
    server.crash(simfs.ReplayChoices([]))
    assert image_of(server) == live


def _exchanged() -> Server:
    """a and b synced, then swapped by RENAME_EXCHANGE, then an unsynced create."""
    server = new_server()
    for name, data in (("a", b"A"), ("b", b"B")):
        ino, _, _ = server.create(ROOT, name, 0o644, False)
        server.write(ino, 0, data)
        server.commit(ino)
    server.sync_dir(ROOT)
    server.exchange(ROOT, "a", ROOT, "b")
    server.create(ROOT, "later", 0o644, False)
    return server


def test_an_exchange_persists_whole_in_every_crash_state() -> None:
    """RENAME_EXCHANGE swaps two names in one step: no crash state shows one swapped and not the
    other (both names always name different files, one of the two pairings)."""
    outcomes = set()
    for state in _exchanged().crash_states():
        copy = _exchanged()
        copy.crash_into(state)
        image = image_of(copy)
        outcomes.add((image["a"], image["b"]))
    assert outcomes == {(b"A", b"B"), (b"B", b"A")}


more_operations = st.lists(st.one_of(
    operations.map(lambda ops: ops[0] if ops else ("dirsync",)),
    st.tuples(st.just("rename"), st.sampled_from("abc"), st.sampled_from("abc")),
    st.tuples(st.just("close"), st.sampled_from("abc")),
), max_size=10)


@given(ops=more_operations, model=st.sampled_from(["posix", "ext4", "xfs"]),
       order=st.sampled_from(["prefix", "omit_one"]))
@settings(max_examples=80, deadline=None)
def test_enumeration_between_changes_and_crashed_copies_are_what_a_crash_leaves(ops, model, order) -> None:
    """After every operation: the crash states a server remembers from the last enumeration are
    those a fresh enumeration finds (the journal's memo goes stale with nothing it records), and
    each state's crashed copy holds what a crash of the server itself leaves, the server unchanged."""
    def build(count: int) -> Server:
        server = new_server(crash_order=order, persistence=model)
        apply_more(server, ops[:count])
        return server

    server = new_server(crash_order=order, persistence=model)
    for count in range(len(ops) + 1):
        if count:
            apply_more(server, ops[count - 1:count], count - 1)
        remembered = server.keyed_crash_states()
        server.journal._distinct = None  # what a first enumeration finds
        assert server.keyed_crash_states() == remembered, f"stale crash states after {ops[:count]}"
        before = server.digest()
        for state, _ in remembered:
            twin, said = server.crashed_copy(state)
            crashed = build(count)
            assert said == crashed.crash_into(state)
            assert twin.digest() == crashed.digest(), f"{state} after {ops[:count]}"
        assert server.digest() == before, "a crashed copy changed the server it copies"


def apply_more(server: Server, ops: list[tuple], first: int = 0) -> None:
    """``ops`` as apply() makes them, and renames and closes; operation ``first + i`` writes
    byte ``first + i + 1``."""
    for index, op in enumerate(ops, first):
        ino = server.lookup(ROOT, op[1]) if len(op) > 1 else None
        if op[0] == "rename" and ino is not None and op[1] != op[2]:
            server.rename(ROOT, op[1], ROOT, op[2])
        elif op[0] == "close" and ino is not None:
            server.closed(ino)
        elif op[0] == "write" and ino is not None:
            server.write(ino, op[2], bytes([index % 255 + 1]) * op[3])
        elif op[0] not in ("rename", "close", "write"):
            apply(server, [op])
