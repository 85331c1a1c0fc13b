"""What a server acknowledged but has not made durable, and the durable image it applies to.

A persistence model (persistence.py) decides what a crash keeps. Under ``posix`` (ALICE's,
OSDI'14) unsynced operations form one stream: a crash keeps any prefix of it (``prefix``),
possibly with one operation of that prefix omitted (``omit_one``), and the last write of the
prefix may be torn at the profile's sector size. Under an ordered model (``ext4``, ``xfs``)
metadata operations form one stream that persists as a prefix and that any fsync commits whole,
and file data another, which persists on its own (a prefix, one omitted, the last write torn);
data that ``auto_da_alloc`` pushes out joins the metadata stream where it was pushed. Data lives
in a page cache until written back, so a write that overwrites bytes an earlier unsynced write put
there replaces them: the earlier version can no longer reach the disk, and memory grows with live
data plus what a crash can still lose, not with bytes ever written. The kernel's flusher
(flusher.py) writes data back after ``dirty_expire`` seconds, or at once when the disk's dirty
bytes pass ``dirty_background_bytes``: written back, it is durable as an fsync would leave it, so
what a crash can lose stays bounded by the dirty limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol, cast

from .flusher import Flusher
from .inode import DIR, FILE, ROOT, Inode
from .persistence import MODELS, Persistence


class Draws(Protocol):
    def choose(self, n: int) -> int: ...


class Image(Protocol):
    """A durable image units are persisted to: the durable layer (a dict) or a _CopyOnWrite view."""

    def get(self, ino: int, /) -> Inode | None: ...
    def __setitem__(self, ino: int, node: Inode, /) -> None: ...


@dataclass(slots=True)
class EntryUnit:
    """A directory entry set (ino) or removed (None), not yet durable."""

    dir: int
    name: str
    ino: int | None
    kind: str
    group: int = 0  # units of one rename persist together


@dataclass(slots=True)
class DataUnit:
    """Bytes written at an offset, or a truncation to ``size`` (data is None), not yet durable."""

    ino: int
    offset: int
    data: bytes | None
    size: int = 0
    forced: bool = False  # auto_da_alloc pushed it ahead of later metadata (an ordered model)

    def end(self) -> int:
        return self.offset + len(self.data) if self.data is not None else self.size


Unit = EntryUnit | DataUnit


class CrashState(NamedTuple):
    """Which unsynced operations a crash keeps. ``posix``: the first ``kept`` of them in order,
    except ``omitted`` (an index into them), the last one cut to ``torn`` bytes if it is a write.
    An ordered model: the first ``kept`` metadata operations, and the first ``data_kept`` unsynced
    writes except ``omitted`` (an index into them), the last cut to ``torn`` bytes."""

    kept: int
    omitted: int | None = None
    torn: int | None = None
    data_kept: int | None = None

    def kinds(self, states: list[CrashState]) -> list[str]:
        """What kind of state this is among the distinct ``states`` a disk could be left in: what
        it kept of the unsynced operations, and whether one was omitted or a write torn."""
        if len(states) == 1:
            return ["nothing unsynced to lose"]
        most = max(states, key=lambda s: (s.kept, s.data_kept or 0))
        if self.kept == 0 and not self.data_kept:
            out = ["nothing unsynced kept"]
        elif (self.kept, self.data_kept) == (most.kept, most.data_kept) and self.omitted is None and self.torn is None:
            out = ["everything kept"]
        else:
            out = ["a prefix kept"]
        if self.omitted is not None:
            out.append("an operation omitted")
        if self.torn is not None:
            out.append("a torn write")
        return out

    def describe(self, total: int, writes: int = 0) -> str:
        """In words, of ``total`` unsynced operations (an ordered model: metadata operations, and
        ``writes`` unsynced writes)."""
        if self.data_kept is None:
            persisted = self.kept - (1 if self.omitted is not None else 0)
            text = f"{persisted} of {total} unsynced operations persisted"
        else:
            persisted = self.data_kept - (1 if self.omitted is not None else 0)
            text = f"{self.kept} of {total} metadata operations and {persisted} of {writes} unsynced writes persisted"
        if self.omitted is not None:
            text += f" ({'write' if self.data_kept is not None else 'operation'} {self.omitted + 1} omitted)"
        if self.torn is not None:
            text += f", last write torn at {self.torn} bytes"
        return text


class Journal:
    """Unsynced operations of one server, in order, and the durable layer."""

    def __init__(self, *, omit_one: bool, torn_sector: int, entries_durable_at_op: bool,
                 live: Callable[[int], Inode | None], clock: Callable[[], float],
                 flusher: Flusher, persistence: Persistence = MODELS["posix"]) -> None:
        self.model = persistence
        self.flusher = flusher
        self.omit_one = omit_one
        self.torn_sector = torn_sector
        self.entries_durable_at_op = entries_durable_at_op
        self._live = live
        self._clock = clock
        self.durable: dict[int, Inode] = {ROOT: Inode(ROOT, DIR, 0o755, clock())}
        self._pending: dict[int, Unit] = {}
        self._by_dir: dict[int, list[int]] = {}
        self._by_ino: dict[int, list[int]] = {}
        self._span: dict[int, tuple[int, int]] = {}  # ino -> bytes its pending writes may cover
        self._links: dict[int, int] = {}  # durable directory entries naming each durable inode
        self._seq = 0
        self._truncated_to_zero: set[int] = set()  # auto_da_alloc's replace-by-truncate, until the close
        self.version = 0  # bumped by every change to what a crash can leave (distinct_states' memo)
        self._distinct: tuple[int, int, list[tuple[CrashState, bytes]]] | None = None

    def rebind(self, *, live: Callable[[int], Inode | None], clock: Callable[[], float]) -> None:
        """Serve another server (Server.adopt): its live inodes and its clock."""
        self._live = live
        self._clock = clock

    def settle_as(self, other: Journal) -> None:
        """Become a copy of ``other``, which holds nothing pending (as a crash leaves it)."""
        if other._pending or other._truncated_to_zero:
            raise ValueError("Journal.settle_as: the journal copied has operations pending")
        self.durable = {ino: node.clone() for ino, node in other.durable.items()}
        self._links, self._seq, self.version = dict(other._links), other._seq, other.version + 1

    # -- recording -------------------------------------------------------------------------
    def entry(self, unit: EntryUnit) -> None:
        self.catch_up()
        self.version += 1
        if self.entries_durable_at_op:
            if self.model.ordered_metadata:  # the server commits the journal: earlier metadata with it
                self._persist_seqs(self._metadata_seqs())
            self._persist(unit)
        else:
            self._append(unit, self._by_dir, unit.dir)

    def write(self, ino: int, offset: int, data: bytes) -> None:
        if data:
            self.catch_up()
            self.version += 1
            self._supersede(ino, offset, offset + len(data))
            self._append(DataUnit(ino, offset, data), self._by_ino, ino)
            lo, hi = self._span.get(ino, (offset, offset))
            self._span[ino] = (min(lo, offset), max(hi, offset + len(data)))
            self.flusher.dirty(ino, len(data), self._clock())
            for dirty in self.flusher.over():  # past dirty_background_bytes: written back at once
                self._commit(dirty)

    def truncate(self, ino: int, size: int) -> None:
        self.catch_up()
        self.version += 1
        self._supersede(ino, size, None)
        self._append(DataUnit(ino, 0, None, size), self._by_ino, ino)
        if size == 0 and self.model.auto_da_alloc:
            self._truncated_to_zero.add(ino)  # fs/ext4/inode.c ext4_truncate: EXT4_STATE_DA_ALLOC_CLOSE

    def replacing(self, ino: int) -> None:
        """``ino`` is renamed over an existing file: with auto_da_alloc its pending data persists
        before the rename (fs/ext4/namei.c ext4_rename -> ext4_alloc_da_blocks)."""
        self.catch_up()
        if self.model.auto_da_alloc:
            self._force(ino)

    def closed(self, ino: int) -> None:
        """A close of ``ino``: with auto_da_alloc, a file truncated to zero since its last close
        has its pending data pushed ahead of later metadata (fs/ext4/file.c ext4_release_file)."""
        self.catch_up()
        if ino in self._truncated_to_zero:
            self._truncated_to_zero.discard(ino)
            self._force(ino)

    def _force(self, ino: int) -> None:
        """Move ``ino``'s pending writes into the metadata stream, here (after every metadata
        operation so far, before every later one)."""
        seqs = self._by_ino.get(ino, [])
        moved = [seq for seq in seqs if self._is_write(self._pending.get(seq))]
        if not moved:
            return
        self.version += 1
        kept = [seq for seq in seqs if seq not in set(moved)]
        for seq in moved:
            unit = cast(DataUnit, self._pending.pop(seq))
            unit.forced = True
            self._seq += 1
            self._pending[self._seq] = unit
            kept.append(self._seq)
        self._by_ino[ino] = kept

    @staticmethod
    def _is_write(unit: Unit | None) -> bool:
        return isinstance(unit, DataUnit) and unit.data is not None and not unit.forced

    def _is_metadata(self, unit: Unit) -> bool:
        """In the metadata stream of an ordered model: names, truncations, pushed data."""
        return not isinstance(unit, DataUnit) or unit.data is None or unit.forced

    def _metadata_seqs(self) -> list[int]:
        return [seq for seq, unit in self._pending.items() if self._is_metadata(unit)]

    def _append(self, unit: Unit, index: dict[int, list[int]], key: int) -> None:
        self._seq += 1
        self._pending[self._seq] = unit
        index.setdefault(key, []).append(self._seq)

    def _supersede(self, ino: int, start: int, end: int | None) -> None:
        """Drop or trim earlier unsynced writes of ``ino`` to bytes in [start, end) (end None:
        to the end of the file): the page cache holds only the newest version of a byte. Writes
        auto_da_alloc pushed out stay: they reach the disk before the metadata that follows them,
        whatever happens to the pages later (a deleted file's included)."""
        span = self._span.get(ino)
        if span is None or start >= span[1] or (end is not None and end <= span[0]):
            return
        seqs = self._by_ino[ino]
        kept = []
        for seq in seqs:
            unit = self._pending.get(seq)
            if unit is None:
                continue  # persisted by a journal commit (an ordered model)
            if self._is_write(unit):
                write = cast(DataUnit, unit)
                assert write.data is not None  # a write's
                was = len(write.data)
                if not self._trim(write, start, end):
                    del self._pending[seq]
                    self.flusher.clean(ino, was)
                    continue
                self.flusher.clean(ino, was - len(write.data))
            kept.append(seq)
        self._by_ino[ino] = kept

    @staticmethod
    def _trim(unit: DataUnit, start: int, end: int | None) -> bool:
        """Cut [start, end) out of a write; False if nothing is left. A range strictly inside
        the write stays (both versions are then possible crash states: a harmless superset)."""
        assert unit.data is not None
        lo, hi = unit.offset, unit.end()
        stop = hi if end is None else end
        if stop <= lo or start >= hi:
            return True
        if start <= lo and stop >= hi:
            return False
        if start <= lo:
            unit.data, unit.offset = unit.data[stop - lo:], stop
        elif stop >= hi:
            unit.data = unit.data[:start - lo]
        return True

    # -- making durable ----------------------------------------------------------------------
    def commit(self, ino: int) -> None:
        """fsync of a file (or an NFS COMMIT): its data is durable (an ordered model: with every
        metadata operation so far, as the journal commits). The flusher's writeback of a file
        leaves the same: its data written, and under an ordered model the journal committed."""
        self.catch_up()
        self._commit(ino)

    def _commit(self, ino: int) -> None:
        self.version += 1
        self._span.pop(ino, None)
        seqs = self._by_ino.pop(ino, [])
        if self.model.ordered_metadata:
            seqs = sorted({*seqs, *self._metadata_seqs()})
        self._persist_seqs(seqs)
        live, durable = self._live(ino), self.durable.get(ino)
        if live is not None and durable is not None and live.kind == FILE:
            durable.mode = live.mode

    def sync_dir(self, ino: int) -> None:
        """fsync of a directory: its entries are durable (an ordered model: every metadata
        operation so far, as the journal commits)."""
        self.catch_up()
        self.version += 1
        seqs = self._by_dir.pop(ino, [])
        if self.model.ordered_metadata:
            seqs = self._metadata_seqs()
        self._persist_seqs(seqs)

    def pending_count(self) -> int:
        self.catch_up()
        return len(self._pending)

    def pending_bytes(self) -> int:
        """Bytes of unsynced writes: what the page cache holds dirty (and, under an ordered model,
        written out but not yet committed by the journal)."""
        self.catch_up()
        return self.flusher.total

    def catch_up(self) -> None:
        """Write back what the flusher's wakeups up to now wrote back (nothing else changes the
        journal between two of its calls, so doing it now leaves what doing it then did)."""
        for ino in self.flusher.expired(self._clock()):
            self._commit(ino)

    def _persist_seqs(self, seqs: list[int]) -> None:
        for seq in seqs:
            unit = self._pending.pop(seq, None)
            if unit is None:
                continue
            if isinstance(unit, DataUnit) and unit.data is not None:
                self.flusher.clean(unit.ino, len(unit.data))
            if isinstance(unit, EntryUnit) and unit.group:
                together = [s for s, u in self._pending.items() if isinstance(u, EntryUnit) and u.group == unit.group]
                self._persist_entries([unit, *(cast(EntryUnit, self._pending.pop(s)) for s in together)],
                                      self.durable)
            else:
                self._persist(unit)

    def _link(self, ino: int, image: object, delta: int) -> None:
        """Durable link counts of the durable layer itself: an inode no durable directory names
        any more is dropped from it (with its data), so deleted files cost no memory."""
        if image is not self.durable:
            return
        links = self._links.get(ino, 0) + delta
        if links > 0:
            self._links[ino] = links
            return
        self._links.pop(ino, None)
        node = self.durable.pop(ino, None)
        for child in (node.entries or {}).values() if node is not None else ():
            self._link(child, image, -1)

    def discard(self, ino: int) -> None:
        """The inode is gone from the volatile layer: its unsynced data can never reach the disk
        (the page cache drops the pages of a deleted file)."""
        self.catch_up()
        self.version += 1
        if ino in self._span:
            self._supersede(ino, 0, None)
            del self._span[ino]
        if ino in self.durable and ino not in self._links and not any(
                isinstance(u, EntryUnit) and u.ino == ino for u in self._pending.values()):
            del self.durable[ino]  # no durable name, and none can become durable: unreachable

    def _durable_inode(self, ino: int, kind: str, image: Image) -> Inode:
        node = image.get(ino)
        if node is None:
            live = self._live(ino)
            mode = live.mode if live else (0o755 if kind == DIR else 0o644)
            node = Inode(ino, kind, mode, self._clock(), live.target if live else "")
            image[ino] = node
        return node

    def _persist(self, unit: Unit, torn: int | None = None, image: Image | None = None) -> None:
        image = self.durable if image is None else image
        if isinstance(unit, EntryUnit):
            self._persist_entries([unit], image)
            return
        node = self._durable_inode(unit.ino, FILE, image)
        if node.data is None:
            return  # a write to an inode number that a durable directory now holds: nothing to do

        if unit.data is None:
            node.data.truncate(unit.size)
        else:
            node.data.write(unit.offset, unit.data if torn is None else unit.data[:torn])

    def _persist_entries(self, units: list[EntryUnit], image: Image) -> None:
        """Entry units that persist together (a rename, an exchange): every new link is made
        before any old one is dropped, so an inode moving between their names is never collected
        in between."""
        dropped = []
        for unit in units:
            parent = self._durable_inode(unit.dir, DIR, image)
            assert parent.entries is not None
            old = parent.entries.pop(unit.name, None)
            if unit.ino is not None:
                self._durable_inode(unit.ino, unit.kind, image)
                parent.entries[unit.name] = unit.ino
                self._link(unit.ino, image, +1)
            if old is not None:
                dropped.append(old)
        for old in dropped:
            self._link(old, image, -1)

    # -- crashes ---------------------------------------------------------------------------------
    def _streams(self) -> tuple[list[int], list[int]]:
        """The pending operations' sequence numbers as the model orders them: posix, one stream
        (and no writes apart); an ordered model, metadata and writes."""
        if not self.model.ordered_metadata:
            return list(self._pending), []
        meta = self._metadata_seqs()
        return meta, [seq for seq, unit in self._pending.items() if not self._is_metadata(unit)]

    def draw(self, draws: Draws) -> CrashState:
        """One crash state, drawn: how many persisted, which one omitted, where the last tore."""
        self.catch_up()
        meta, writes = self._streams()
        kept = draws.choose(len(meta) + 1) if meta else 0
        if not self.model.ordered_metadata:
            omitted, torn = self._draw_losses(draws, meta, kept)
            return CrashState(kept, omitted, torn)
        data_kept = draws.choose(len(writes) + 1) if writes else 0
        omitted, torn = self._draw_losses(draws, writes, data_kept)
        return CrashState(kept, omitted, torn, data_kept)

    def _draw_losses(self, draws: Draws, stream: list[int], kept: int) -> tuple[int | None, int | None]:
        omitted = None
        if self.omit_one and kept > 1:
            pick = draws.choose(kept + 1)  # == kept: nothing omitted
            omitted = pick if pick < kept else None
        cuts = self._tear_points(self._pending[stream[kept - 1]] if kept else None)
        torn = None
        if cuts:
            cut = draws.choose(len(cuts) + 1)  # == len(cuts): the write persisted whole
            torn = cuts[cut] if cut < len(cuts) else None
        return omitted, torn

    def states(self) -> Iterator[CrashState]:
        """Every crash state the model allows (not deduplicated), simplest first."""
        self.catch_up()
        meta, writes = self._streams()
        if not self.model.ordered_metadata:
            for kept in range(len(meta) + 1):
                for omitted, torn in self._losses(meta, kept):
                    yield CrashState(kept, omitted, torn)
            return
        for kept in range(len(meta) + 1):
            for data_kept in range(len(writes) + 1):
                for omitted, torn in self._losses(writes, data_kept):
                    yield CrashState(kept, omitted, torn, data_kept)

    def _losses(self, stream: list[int], kept: int) -> Iterator[tuple[int | None, int | None]]:
        """(omitted, torn) for a crash that keeps the first ``kept`` of ``stream``."""
        omissions: list[int | None] = [None, *range(kept)] if self.omit_one and kept > 1 else [None]
        cuts: list[int | None] = [None, *self._tear_points(self._pending[stream[kept - 1]] if kept else None)]
        for omitted in omissions:
            for torn in cuts:
                yield omitted, torn

    def _tear_points(self, unit: Unit | None) -> list[int]:
        sector = self.torn_sector
        if not isinstance(unit, DataUnit) or unit.data is None or not sector or len(unit.data) <= sector:
            return []
        return list(range(0, len(unit.data), sector))

    def distinct_states(self, limit: int) -> list[tuple[CrashState, bytes]]:
        """Crash states that leave different durable images, simplest first, at most ``limit``,
        each with a digest of its image (equal digests: equal images). Asked again with nothing
        changed since (an exhaustive walk asks before every operation), the same list."""
        self.catch_up()
        if self._distinct is not None and self._distinct[:2] == (self.version, limit):
            return list(self._distinct[2])
        seen: set[bytes] = set()
        out: list[tuple[CrashState, bytes]] = []
        streams = self._streams()  # the same for every state: computed once
        base_hashes: dict[int, bytes] = {}
        for state in self.states():
            image = _CopyOnWrite(self.durable)
            self._apply(state, image, streams)
            key = image.digest(base_hashes)
            if key not in seen:
                seen.add(key)
                out.append((state, key))
                if len(out) >= limit:
                    break
        self._distinct = (self.version, limit, out)
        return list(out)

    def apply(self, state: CrashState) -> str:
        """Crash: persist what ``state`` keeps, drop the rest; returns a one-line summary."""
        self.catch_up()
        self.version += 1
        streams = meta, writes = self._streams()
        self._apply(state, self.durable, streams)
        self._pending.clear()
        self._by_dir.clear()
        self._by_ino.clear()
        self._span.clear()
        self._truncated_to_zero.clear()
        self.flusher.clear()
        return state.describe(len(meta), len(writes))

    def crashed_from(self, other: Journal, state: CrashState) -> str:
        """Become ``other`` after a crash that keeps ``state`` (``other`` is left as it is): its
        durable image with what ``state`` persists, in inodes of this journal's own, and nothing
        pending. Returns the crash's summary."""
        other.catch_up()
        self.version += 1
        streams = meta, writes = other._streams()
        image = _CopyOnWrite(other.durable)
        other._apply(state, image, streams)
        self.durable = image.owned()
        self._seq = other._seq
        return state.describe(len(meta), len(writes))

    def keep_only(self, reachable: dict[int, Inode]) -> None:
        """After a crash: the durable layer is what its root reaches."""
        self.version += 1
        self.durable.clear()
        self.durable.update(reachable)
        self._links = {}
        for node in reachable.values():
            for child in (node.entries or {}).values():
                self._links[child] = self._links.get(child, 0) + 1

    def _kept(self, state: CrashState, streams: tuple[list[int], list[int]]) -> tuple[list[int], int | None]:
        """The sequence numbers ``state`` keeps of ``streams`` (``_streams()``), in the order they
        happened, and the one torn."""
        meta, writes = streams
        if state.data_kept is None:
            stream, kept = meta, meta[:state.kept]
        else:
            stream, kept = writes, [*meta[:state.kept], *writes[:state.data_kept]]
            state = state._replace(kept=state.data_kept)
        if state.omitted is not None:
            kept.remove(stream[state.omitted])
        torn = stream[state.kept - 1] if state.torn is not None and state.kept else None
        return sorted(kept), torn

    def _apply(self, state: CrashState, image: Image, streams: tuple[list[int], list[int]]) -> None:
        seqs, torn = self._kept(state, streams)
        applied_groups: set[int] = set()
        for seq in seqs:
            unit = self._pending[seq]
            if isinstance(unit, EntryUnit) and unit.group:
                if unit.group not in applied_groups:
                    applied_groups.add(unit.group)
                    self._persist_entries([u for u in self._pending.values()
                                           if isinstance(u, EntryUnit) and u.group == unit.group], image)
                continue
            self._persist(unit, state.torn if seq == torn else None, image)


class _CopyOnWrite:
    """A durable image seen through a crash state: inodes are cloned when first touched."""

    def __init__(self, base: dict[int, Inode]) -> None:
        self._base = base
        self._own: dict[int, Inode] = {}

    def get(self, ino: int) -> Inode | None:
        node = self._own.get(ino)
        if node is None and ino in self._base:
            node = self._own[ino] = self._base[ino].clone()
        return node

    def __setitem__(self, ino: int, node: Inode) -> None:
        self._own[ino] = node

    def owned(self) -> dict[int, Inode]:
        """The image as its root reaches it, in inodes of its own (the base's untouched ones
        cloned; what no name reaches is left out, as a crash's recovery drops it)."""
        out: dict[int, Inode] = {}
        stack = [ROOT]
        while stack:
            ino = stack.pop()
            if ino in out:
                continue
            node = self._own.get(ino)
            if node is None:
                base = self._base.get(ino)
                if base is None:
                    continue
                node = base.clone()
            out[ino] = node
            if node.entries is not None:
                stack.extend(node.entries.values())
        return out

    def digest(self, base_hashes: dict[int, bytes]) -> bytes:
        """A digest of the image as its root reaches it, by names (equal digests: equal images;
        inode numbers, and inodes no durable name reaches, do not count). ``base_hashes`` keeps
        the content hashes of the base's inodes, for the next image over the same base."""
        digest = hashlib.blake2b(digest_size=16)
        for path, ino, node in self._reached():
            if node.entries is not None:
                content = b"d"
            elif ino in self._own:
                content = _content_hash(node)
            else:
                content = base_hashes.get(ino) or base_hashes.setdefault(ino, _content_hash(node))
            digest.update(b"%d:%s" % (len(path), path.encode()))
            digest.update(content)
        return digest.digest()

    def _reached(self) -> list[tuple[str, int, Inode]]:
        """Every path the root reaches, sorted, with its inode number and inode."""
        out: list[tuple[str, int, Inode]] = []
        stack, seen = [("", ROOT)], set()
        while stack:
            path, ino = stack.pop()
            node = self._own.get(ino) or self._base.get(ino)
            if node is None:
                continue
            if node.entries is not None:
                if ino in seen:
                    continue
                seen.add(ino)
                stack.extend((f"{path}/{name}", child) for name, child in node.entries.items())
            out.append((path, ino, node))
        out.sort(key=lambda reached: reached[0])
        return out


def _content_hash(node: Inode) -> bytes:
    """A file's bytes, or a link's target, hashed (tagged: the two never collide)."""
    if node.data is not None:
        return b"f" + hashlib.blake2b(node.data.tobytes(), digest_size=16).digest()
    return b"l" + hashlib.blake2b(node.target.encode(), digest_size=16).digest()
