"""The storage server of one mount: the namespace every client talks to, with a volatile
layer (what clients see) and a durable layer (what survives a crash of the server)."""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from dataclasses import dataclass
from typing import Callable, NamedTuple

from .choices import ChoiceSource
from .profiles import Profile
from .rope import Rope

FILE, DIR, LINK = "f", "d", "l"
ROOT = 1
_KIND_BITS = {FILE: stat_mod.S_IFREG, DIR: stat_mod.S_IFDIR, LINK: stat_mod.S_IFLNK}


def fs_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Attr(NamedTuple):
    """A snapshot of an inode's attributes, as a GETATTR reply carries them."""

    ino: int
    kind: str
    mode: int  # permission bits only
    nlink: int
    size: int
    mtime: float
    ctime: float
    change: int

    @property
    def st_mode(self) -> int:
        return _KIND_BITS[self.kind] | self.mode


class Inode:
    __slots__ = ("ino", "kind", "mode", "nlink", "data", "entries", "target", "mtime", "ctime", "change")

    def __init__(self, ino: int, kind: str, mode: int, now: float, target: str = "") -> None:
        self.ino = ino
        self.kind = kind
        self.mode = mode
        self.nlink = 2 if kind == DIR else 1
        self.data: Rope | None = Rope() if kind == FILE else None
        self.entries: dict[str, int] | None = {} if kind == DIR else None
        self.target = target
        self.mtime = self.ctime = now
        self.change = 1

    def clone(self) -> Inode:
        twin = Inode.__new__(Inode)
        for slot in Inode.__slots__:
            setattr(twin, slot, getattr(self, slot))
        twin.data = self.data.copy() if self.data is not None else None
        twin.entries = dict(self.entries) if self.entries is not None else None
        return twin

    def size(self) -> int:
        if self.kind == FILE:
            return len(self.data)
        if self.kind == LINK:
            return len(self.target)
        return 4096


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
    """Bytes written at an offset, or a truncation (data is None), not yet durable."""

    ino: int
    offset: int
    data: bytes | None
    size: int = 0


class Change(NamedTuple):
    """What a namespace operation did to a directory: its change counter before, attrs after."""

    pre: int
    post: Attr


class Server:
    """One storage server. Operations are RPCs: atomic, addressed by inode number."""

    def __init__(self, profile: Profile, clock: Callable[[], float], name: str) -> None:
        self.profile = profile
        self.name = name
        self._clock = clock
        self.inodes: dict[int, Inode] = {ROOT: Inode(ROOT, DIR, 0o755, clock())}
        self.durable: dict[int, Inode] = {ROOT: self.inodes[ROOT].clone()}
        self._next_ino = ROOT + 1
        self._pending: dict[int, EntryUnit | DataUnit] = {}
        self._pending_by_dir: dict[int, list[int]] = {}
        self._pending_by_ino: dict[int, list[int]] = {}
        self._seq = 0
        self._group = 0
        self.open_refs: dict[int, int] = {}
        self.kinds: dict[int, str] = {ROOT: DIR}  # an inode number's kind never changes
        self.crashes = 0

    # -- helpers ---------------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock()

    def _inode(self, ino: int) -> Inode:
        node = self.inodes.get(ino)
        if node is None:
            raise fs_error(errno.ESTALE)
        return node

    def _dir(self, ino: int) -> Inode:
        node = self._inode(ino)
        if node.kind != DIR:
            raise fs_error(errno.ENOTDIR)
        return node

    def _touch(self, node: Inode) -> None:
        node.change += 1
        node.mtime = node.ctime = self._now()

    def attr(self, node: Inode) -> Attr:
        g = self.profile.mtime_granularity
        mtime, ctime = node.mtime, node.ctime
        if g > 0:
            mtime, ctime = mtime // g * g, ctime // g * g
        return Attr(node.ino, node.kind, node.mode, node.nlink, node.size(), mtime, ctime, node.change)

    def _new_inode(self, kind: str, mode: int, target: str = "") -> Inode:
        node = Inode(self._next_ino, kind, mode, self._now(), target)
        self._next_ino += 1
        self.inodes[node.ino] = node
        self.kinds[node.ino] = kind
        return node

    def _set_entry(self, parent: Inode, name: str, ino: int | None, kind: str, group: int = 0) -> None:
        if ino is None:
            del parent.entries[name]
        else:
            parent.entries[name] = ino
        self._touch(parent)
        self._record(EntryUnit(parent.ino, name, ino, kind, group))

    def _drop_link(self, node: Inode) -> None:
        node.nlink -= 1 if node.kind == FILE or node.kind == LINK else 2
        node.ctime = self._now()
        node.change += 1
        if node.nlink <= 0 and not (self.profile.unlink_open == "posix" and self.open_refs.get(node.ino)):
            del self.inodes[node.ino]

    # -- persistence -----------------------------------------------------------------------
    def _record(self, unit: EntryUnit | DataUnit) -> None:
        if isinstance(unit, EntryUnit) and self.profile.entry_durable == "op":
            self._persist(unit)
            return
        self._seq += 1
        self._pending[self._seq] = unit
        index = self._pending_by_dir if isinstance(unit, EntryUnit) else self._pending_by_ino
        index.setdefault(unit.dir if isinstance(unit, EntryUnit) else unit.ino, []).append(self._seq)

    def _durable_inode(self, ino: int, kind: str) -> Inode:
        node = self.durable.get(ino)
        if node is None:
            live = self.inodes.get(ino)
            mode = live.mode if live else (0o755 if kind == DIR else 0o644)
            node = Inode(ino, kind, mode, self._now(), live.target if live else "")
            self.durable[ino] = node
        return node

    def _persist(self, unit: EntryUnit | DataUnit, torn_bytes: int | None = None) -> None:
        if isinstance(unit, EntryUnit):
            parent = self._durable_inode(unit.dir, DIR)
            if unit.ino is None:
                parent.entries.pop(unit.name, None)
            else:
                self._durable_inode(unit.ino, unit.kind)
                parent.entries[unit.name] = unit.ino
            return
        node = self._durable_inode(unit.ino, FILE)
        if unit.data is None:
            node.data.truncate(unit.size)
        else:
            node.data.write(unit.offset, unit.data if torn_bytes is None else unit.data[:torn_bytes])

    def _persist_seqs(self, seqs: list[int]) -> None:
        for seq in seqs:
            unit = self._pending.pop(seq, None)
            if unit is None:
                continue
            self._persist(unit)
            if isinstance(unit, EntryUnit) and unit.group:
                self._persist_group(unit.group)

    def _persist_group(self, group: int) -> None:
        """The other halves of a rename become durable with the half that was synced."""
        members = [s for s, u in self._pending.items() if isinstance(u, EntryUnit) and u.group == group]
        for seq in members:
            self._persist(self._pending.pop(seq))

    def commit(self, ino: int) -> None:
        """Make a file's data durable (fsync, or an NFS COMMIT at close)."""
        self._inode(ino)
        self._persist_seqs(self._pending_by_ino.pop(ino, []))
        live = self.inodes[ino]
        durable = self.durable.get(ino)
        if durable is not None and live.kind == FILE:
            durable.mode = live.mode

    def sync_dir(self, ino: int) -> None:
        """Make a directory's entries durable (fsync of the directory)."""
        self._dir(ino)
        self._persist_seqs(self._pending_by_dir.pop(ino, []))

    def pending_count(self) -> int:
        return len(self._pending)

    def crash(self, choices: ChoiceSource) -> str:
        """Lose the volatile layer. Unsynced units persist as the profile allows: a prefix
        of them (drawn), with at most one omitted (``omit_one``), the last write possibly torn."""
        units = list(self._pending.values())
        kept = choices.choose(len(units) + 1) if units else 0
        omitted = -1
        if self.profile.crash_order == "omit_one" and kept > 1:
            omitted = choices.choose(kept + 1)  # == kept: nothing omitted
        torn: int | None = None
        last = units[kept - 1] if kept else None
        sector = self.profile.torn_sector
        if isinstance(last, DataUnit) and last.data is not None and sector and len(last.data) > sector:
            sectors = (len(last.data) + sector - 1) // sector
            cut = choices.choose(sectors + 1)
            torn = None if cut == sectors else cut * sector
        applied_groups: set[int] = set()
        for i, unit in enumerate(units[:kept]):
            if i == omitted:
                continue
            if isinstance(unit, EntryUnit) and unit.group:
                if unit.group in applied_groups:
                    continue
                applied_groups.add(unit.group)
                for other in units:
                    if isinstance(other, EntryUnit) and other.group == unit.group:
                        self._persist(other)
                continue
            self._persist(unit, torn if i == kept - 1 else None)
        self._pending.clear()
        self._pending_by_dir.clear()
        self._pending_by_ino.clear()
        self._restore_from_durable()
        self.crashes += 1
        summary = f"{kept - (1 if 0 <= omitted < kept else 0)} of {len(units)} unsynced operations persisted"
        if 0 <= omitted < kept:
            summary += f" (operation {omitted + 1} omitted)"
        if torn is not None:
            summary += f", last write torn at {torn} bytes"
        return summary

    def _restore_from_durable(self) -> None:
        reachable: dict[int, Inode] = {}
        links: dict[int, int] = {}
        stack = [ROOT]
        while stack:
            ino = stack.pop()
            if ino in reachable or ino not in self.durable:
                continue
            node = self.durable[ino]
            reachable[ino] = node
            for child in (node.entries or {}).values():
                links[child] = links.get(child, 0) + 1
                stack.append(child)
        self.durable = reachable
        self.inodes = {}
        for ino, node in reachable.items():
            live = node.clone()
            if live.kind == DIR:
                live.nlink = 2 + sum(1 for c in live.entries.values() if reachable.get(c) and reachable[c].kind == DIR)
            else:
                live.nlink = links.get(ino, 1)
            live.change += 1
            self.inodes[ino] = live
        for entries in (n.entries for n in self.inodes.values() if n.entries is not None):
            for name in [n for n, c in entries.items() if c not in self.inodes]:
                del entries[name]
        self.open_refs.clear()

    # -- RPCs: reads -----------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        return self.attr(self._inode(ino))

    def lookup(self, dir_ino: int, name: str) -> int | None:
        return self._dir(dir_ino).entries.get(name)

    def readdir(self, dir_ino: int) -> list[tuple[str, int]]:
        return list(self._dir(dir_ino).entries.items())

    def readlink(self, ino: int) -> str:
        node = self._inode(ino)
        if node.kind != LINK:
            raise fs_error(errno.EINVAL)
        return node.target

    def content(self, ino: int) -> bytes:
        node = self._inode(ino)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        return node.data.tobytes()

    def read(self, ino: int, offset: int, size: int) -> bytes:
        node = self._inode(ino)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        return node.data.slice(offset, size)

    # -- RPCs: namespace -------------------------------------------------------------------
    def _check_new(self, parent: Inode, name: str) -> None:
        if name in parent.entries:
            raise fs_error(errno.EEXIST)

    def create(self, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool, Change]:
        """CREATE: a new empty file, or (not exclusive) the existing one."""
        parent = self._dir(dir_ino)
        pre = parent.change
        existing = parent.entries.get(name)
        if existing is not None:
            if exclusive:
                raise fs_error(errno.EEXIST)
            if self.inodes[existing].kind == DIR:
                raise fs_error(errno.EISDIR)
            return existing, False, Change(pre, self.attr(parent))
        node = self._new_inode(FILE, mode & 0o7777)
        self._set_entry(parent, name, node.ino, FILE)
        return node.ino, True, Change(pre, self.attr(parent))

    def mkdir(self, dir_ino: int, name: str, mode: int) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        self._check_new(parent, name)
        pre = parent.change
        node = self._new_inode(DIR, mode & 0o7777)
        parent.nlink += 1
        self._set_entry(parent, name, node.ino, DIR)
        return node.ino, Change(pre, self.attr(parent))

    def symlink(self, dir_ino: int, name: str, target: str) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        self._check_new(parent, name)
        pre = parent.change
        node = self._new_inode(LINK, 0o777, target)
        self._set_entry(parent, name, node.ino, LINK)
        return node.ino, Change(pre, self.attr(parent))

    def link(self, ino: int, dir_ino: int, name: str) -> Change:
        node = self._inode(ino)
        parent = self._dir(dir_ino)
        self._check_new(parent, name)  # Linux checks the new name first
        if node.kind == DIR:
            raise fs_error(errno.EPERM)
        pre = parent.change
        node.nlink += 1
        self._touch(node)
        self._set_entry(parent, name, ino, node.kind)
        return Change(pre, self.attr(parent))

    def _child(self, parent: Inode, name: str) -> Inode:
        ino = parent.entries.get(name)
        if ino is None:
            raise fs_error(errno.ENOENT)
        return self.inodes[ino]

    def unlink(self, dir_ino: int, name: str) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        node = self._child(parent, name)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        pre = parent.change
        self._set_entry(parent, name, None, node.kind)
        self._drop_link(node)
        return node.ino, Change(pre, self.attr(parent))

    def rmdir(self, dir_ino: int, name: str, *, orphan_children: bool = False) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        node = self._child(parent, name)
        ino = node.ino
        if node.kind != DIR:
            raise fs_error(errno.ENOTDIR)
        if node.entries and not orphan_children:
            raise fs_error(errno.ENOTEMPTY)
        pre = parent.change
        parent.nlink -= 1
        self._set_entry(parent, name, None, DIR)
        self._drop_link(node)
        return ino, Change(pre, self.attr(parent))

    def _is_ancestor(self, maybe_ancestor: int, ino: int) -> bool:
        """True if ``ino`` lies inside directory ``maybe_ancestor`` (or is it)."""
        if ino == maybe_ancestor:
            return True
        node = self.inodes.get(maybe_ancestor)
        stack = [c for c in (node.entries or {}).values()] if node else []
        while stack:
            child = stack.pop()
            if child == ino:
                return True
            sub = self.inodes.get(child)
            if sub is not None and sub.kind == DIR:
                stack.extend(sub.entries.values())
        return False

    def rename(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> tuple[int, Change, Change]:
        """RENAME with POSIX rules, atomic on the server."""
        sparent, dparent = self._dir(src_dir), self._dir(dst_dir)
        node = self._child(sparent, src_name)
        ino = node.ino
        target = dparent.entries.get(dst_name)
        if target == ino:
            return ino, Change(sparent.change, self.attr(sparent)), Change(dparent.change, self.attr(dparent))
        if node.kind == DIR and self._is_ancestor(ino, dst_dir):
            raise fs_error(errno.EINVAL)
        if target is not None:
            tnode = self.inodes[target]
            if node.kind == DIR and tnode.kind != DIR:
                raise fs_error(errno.ENOTDIR)
            if node.kind != DIR and tnode.kind == DIR:
                raise fs_error(errno.EISDIR)
            if tnode.kind == DIR and tnode.entries:
                raise fs_error(errno.ENOTEMPTY)
        spre, dpre = sparent.change, dparent.change
        self._group += 1
        if target is not None:
            tnode = self.inodes[target]
            if tnode.kind == DIR:
                dparent.nlink -= 1
            self._drop_link(tnode)
        self._set_entry(dparent, dst_name, ino, node.kind, self._group)
        self._set_entry(sparent, src_name, None, node.kind, self._group)
        if node.kind == DIR and src_dir != dst_dir:
            sparent.nlink -= 1
            dparent.nlink += 1
        node.ctime = self._now()
        return ino, Change(spre, self.attr(sparent)), Change(dpre, self.attr(dparent))

    def copy(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> tuple[int, Change]:
        """Server-side copy of a file to a new object (first half of an object-store rename)."""
        src = self._child(self._dir(src_dir), src_name)
        if src.kind == DIR:
            raise fs_error(errno.EISDIR)
        node = self._new_inode(src.kind, src.mode, src.target)
        if src.kind == FILE:
            node.data = src.data.copy()
            self._record(DataUnit(node.ino, 0, node.data.tobytes()))
            if self.profile.entry_durable == "op":
                self.commit(node.ino)  # the copy is as durable as the name it gets
        return node.ino, self.publish(dst_dir, dst_name, node.ino)

    def alloc(self, mode: int) -> int:
        """A new file inode that no directory names yet (an object being written)."""
        return self._new_inode(FILE, mode & 0o7777).ino

    def publish(self, dir_ino: int, name: str, ino: int) -> Change:
        """Name ``ino`` in a directory, replacing what was there (an object upload completes)."""
        parent = self._dir(dir_ino)
        pre = parent.change
        old = parent.entries.get(name)
        if old == ino:
            return Change(pre, self.attr(parent))
        if old is not None:
            if self.inodes[old].kind == DIR:
                raise fs_error(errno.EISDIR)
            self._drop_link(self.inodes[old])
        node = self._inode(ino)
        self._set_entry(parent, name, ino, node.kind)
        return Change(pre, self.attr(parent))

    # -- RPCs: data ------------------------------------------------------------------------
    def write(self, ino: int, offset: int, data: bytes) -> Attr:
        """WRITE: ``data`` must not change afterwards (bytes are kept, not copied)."""
        node = self._inode(ino)
        if node.kind != FILE:
            raise fs_error(errno.EISDIR)
        if not isinstance(data, bytes):
            data = bytes(data)
        node.data.write(offset, data)
        self._touch(node)
        self._record(DataUnit(ino, offset, data))
        return self.attr(node)

    def replace_content(self, ino: int, data: bytes) -> Attr:
        """Whole-object upload: the file's bytes become exactly ``data``."""
        self.truncate(ino, 0)
        return self.write(ino, 0, data) if data else self.getattr(ino)

    def truncate(self, ino: int, size: int) -> Attr:
        node = self._inode(ino)
        if node.kind != FILE:
            raise fs_error(errno.EISDIR)
        node.data.truncate(size)
        self._touch(node)
        self._record(DataUnit(ino, 0, None, size))
        return self.attr(node)

    def setattr(self, ino: int, *, mode: int | None = None, mtime: float | None = None) -> Attr:
        node = self._inode(ino)
        if mode is not None:
            node.mode = mode & 0o7777
        node.change += 1
        node.ctime = self._now()
        if mtime is not None:
            node.mtime = mtime
        durable = self.durable.get(ino)
        if durable is not None and mode is not None and self.profile.entry_durable == "op":
            durable.mode = node.mode
        return self.attr(node)

    def add_open_ref(self, ino: int, delta: int) -> None:
        refs = self.open_refs.get(ino, 0) + delta
        if refs > 0:
            self.open_refs[ino] = refs
            return
        self.open_refs.pop(ino, None)
        node = self.inodes.get(ino)
        if node is not None and node.nlink <= 0:
            del self.inodes[ino]

    def usage(self) -> tuple[int, int]:
        """(bytes stored, inodes) in the volatile layer."""
        return sum(len(n.data) for n in self.inodes.values() if n.data is not None), len(self.inodes)
