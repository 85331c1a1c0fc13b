"""Hypothesis's example database across the confined child a search runs in.

A search runs where it cannot write a file (simfs.isolated's child), so the process that starts
it is the database's host: it reads what the database holds for the search's key (``entries``),
the child searches with a ``Recorded`` copy of them (replaying remembered failures first, as
Hypothesis's reuse phase does), and the host applies the child's saves, moves and deletes to the
real database afterwards (``apply``). The key names what fixes the search's space -- the job, its
recovery and check, the topology, the profile, the fault kinds, crashes and the carrier -- and not
the seed or the budget, so a failure found once is tried first by every later search of the same
thing."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

import simfs

from .target import Target

# (operation, key, value, destination key): what a Recorded database was asked to change
Op = tuple[Literal["save", "delete", "move"], bytes, bytes, bytes]
Entries = dict[bytes, list[bytes]]
DatabaseSpec = ExampleDatabase | str | os.PathLike[str] | None

DEFAULT = "default"  # explore's database: the one the current Hypothesis settings name
_SUBKEYS = (b"", b".secondary", b".pareto")  # the keys Hypothesis's engine keeps under one search's
# what one search may change in the database: an example is a choice sequence of at most
# Hypothesis's 8 KiB buffer (its encoding a few times that), a search saves a few hundred
MAX_VALUE, MAX_CHANGES, MAX_BYTES = 1 << 20, 10_000, 64 << 20


def resolve(database: DatabaseSpec, where: str = "explore") -> ExampleDatabase | None:
    """An ExampleDatabase, or None: "default" is the current Hypothesis settings' database (the
    project's profile under pytest; Hypothesis's `.hypothesis/examples` otherwise; none in CI
    unless asked), a path a directory database, "" or None no database."""
    if database is None or isinstance(database, ExampleDatabase):
        return database
    if database == DEFAULT:
        current = settings.default
        return current.database if current is not None else None
    if isinstance(database, (str, os.PathLike)):
        path = os.fspath(database)
        return DirectoryBasedExampleDatabase(path) if path else None
    raise ValueError(f"{where}: database must be a hypothesis ExampleDatabase, a directory, '' or None, "
                     f"got {database!r}")


def name_of(fn: Callable[..., Any] | None) -> str:
    """How a job, recovery or check is named in a key: 'module:qualified name' (None: '')."""
    if fn is None:
        return ""
    return f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', repr(fn))}"


def key(job: str, recover: str, check: str, nodes: int, ranks_per_node: int, profile: simfs.Profile,
        kinds: Iterable[str], crashes: object, carrier: str) -> bytes:
    """The database key of a search: a digest of everything that fixes the space it draws from."""
    fields = ("simfs-explore-1", job, recover, check, nodes, ranks_per_node, repr(profile), tuple(sorted(kinds)),
              repr(crashes), carrier)
    return hashlib.sha256(repr(fields).encode()).hexdigest()[:32].encode()


def entries(database: ExampleDatabase, search_key: bytes) -> Entries:
    """What ``database`` holds under a search's key and the keys Hypothesis keeps beside it."""
    return {search_key + sub: list(database.fetch(search_key + sub)) for sub in _SUBKEYS}


def apply(database: ExampleDatabase, ops: Iterable[Op], search_key: bytes) -> int:
    """Make on ``database`` the changes a Recorded copy was asked for, in order, as far as they
    are a search's: under ``search_key``'s keys only, each value at most MAX_VALUE bytes, at most
    MAX_CHANGES of them and MAX_BYTES in all (what the child sends is not trusted: rank code may
    run there). How many it did not make."""
    keys = {search_key + sub for sub in _SUBKEYS}
    made = written = refused = 0
    for op, at, value, dest in ops:
        if (at not in keys or (op == "move" and dest not in keys) or len(value) > MAX_VALUE
                or made >= MAX_CHANGES or written + len(value) > MAX_BYTES):
            refused += 1
            continue
        made, written = made + 1, written + len(value)
        if op == "save":
            database.save(at, value)
        elif op == "delete":
            database.delete(at, value)
        else:
            database.move(at, dest, value)
    return refused


class Recorded(ExampleDatabase):
    """An in-memory copy of a database's entries that records every change asked of it."""

    def __init__(self, held: Entries) -> None:
        super().__init__()
        self.held = {k: list(dict.fromkeys(v)) for k, v in held.items()}
        self.ops: list[Op] = []

    def __repr__(self) -> str:
        return f"Recorded({len(self.held)} keys, {len(self.ops)} changes)"

    def fetch(self, key: bytes) -> Iterable[bytes]:
        yield from list(self.held.get(key, ()))

    def save(self, key: bytes, value: bytes) -> None:
        values = self.held.setdefault(key, [])
        if value not in values:
            values.append(value)
        self.ops.append(("save", key, value, b""))

    def delete(self, key: bytes, value: bytes) -> None:
        values = self.held.get(key, [])
        if value in values:
            values.remove(value)
        self.ops.append(("delete", key, value, b""))

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if src == dest:
            self.save(src, value)
            return
        values = self.held.get(src, [])
        if value in values:
            values.remove(value)
        moved = self.held.setdefault(dest, [])
        if value not in moved:
            moved.append(value)
        self.ops.append(("move", src, value, dest))

    def _start_listening(self) -> None:
        pass  # a copy for one search: no one listens to it

    def _stop_listening(self) -> None:
        pass


def key_of(target: Target, kinds: Iterable[str], crashes: object) -> bytes:
    """The key of a search of ``target`` (explore's default)."""
    return key(name_of(target.job), name_of(target.recover), name_of(target.check), target.nodes,
               target.ranks_per_node, target.profile, kinds, crashes, target.carrier)


def checked_key(database_key: object) -> bytes | None:
    """A key given by the caller: non-empty bytes, or None (the default)."""
    if database_key is None:
        return None
    if not isinstance(database_key, bytes) or not database_key:
        raise ValueError(f"explore: database_key must be non-empty bytes, got {database_key!r}")
    return database_key
