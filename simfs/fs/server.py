"""The storage server of one mount: the namespace every client talks to (the volatile layer),
its journal of what is not durable yet (see journal.py), and the space its file data takes."""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Callable

from ..choices import ChoiceSource
from ..profiles import Profile
from . import persistence
from .flusher import Flusher
from .inode import DIR, FILE, LINK, ROOT, Attr, Change, Inode, fs_error
from .journal import CrashState, EntryUnit, Journal

# What a client may ask a server (simfs/fs/tape.py records these answers for a restarted job);
# besides them a client reads only ``kinds`` (an inode number's kind never changes), ``crashes``,
# ``profile`` and ``name``.
REQUESTS = frozenset({
    "getattr", "lookup", "entry", "holds", "readdir", "readlink", "content", "read", "create", "mkdir", "symlink",
    "link", "unlink", "rmdir", "rename", "exchange", "copy", "alloc", "publish", "write", "replace_content",
    "truncate", "setattr", "closed", "add_open_ref", "usage", "available", "room", "reserve", "unreserve",
    "commit", "sync_dir", "pending_count"})
# ...those of them that change nothing and read no clock (a replay asks them of the disk itself)
QUERIES = frozenset({"getattr", "lookup", "entry", "holds", "readdir", "readlink", "content", "read", "usage",
                     "available", "room", "pending_count"})
# A restarted server numbers new inodes from a range of its own boot: the numbers a restarted job
# gets do not depend on how many the crash lost (a server picks numbers as it likes: ext4 the first
# free bit of an inode bitmap, NFS fileids are opaque), and stay below 2**32 as ext4's do.
INODES_PER_BOOT = 1 << 20
_BOOT_RANGES = (1 << 32) // INODES_PER_BOOT - 1


class Server:
    """One storage server. Operations are RPCs: atomic, addressed by inode number."""

    def __init__(self, profile: Profile, clock: Callable[[], float], name: str) -> None:
        self.profile = profile
        self.name = name
        self._clock = clock
        self.inodes: dict[int, Inode] = {ROOT: Inode(ROOT, DIR, 0o755, clock())}
        self.journal = Journal(omit_one=profile.crash_order == "omit_one", torn_sector=profile.torn_sector,
                               entries_durable_at_op=profile.entry_durable == "op", live=self._live,
                               clock=clock, persistence=persistence.get(profile.persistence),
                               flusher=Flusher(expire=profile.dirty_expire, interval=profile.dirty_writeback,
                                               background=profile.dirty_background_bytes))
        self._next_ino = ROOT + 1
        self._group = 0
        self.open_refs: dict[int, int] = {}
        self.kinds: dict[int, str] = {ROOT: DIR}  # an inode number's kind never changes
        self.crashes = 0
        # bumped by every change of the live namespace (with the journal's version: whether a
        # crash copy made now would equal one made earlier)
        self.changes = 0
        # space: bytes of file data allocated per inode (holes that an extending truncate or a
        # write past the end leaves take none, as on ext4/XFS), their sum, and what clients hold
        # granted for cached writes not sent yet (Lustre grants)
        self.allocated: dict[int, int] = {}
        self.used = 0
        self.reserved = 0

    # -- helpers ---------------------------------------------------------------------------
    def _live(self, ino: int) -> Inode | None:
        """The inode as the server has it now (a crash replaces the namespace's dict)."""
        return self.inodes.get(ino)

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
        self.changes += 1
        node.change += 1
        if node.kind != DIR or self.profile.dir_mtime == "real":
            node.mtime = node.ctime = self._now()

    def attr(self, node: Inode) -> Attr:
        g = self.profile.mtime_granularity
        mtime, ctime = node.mtime, node.ctime
        if g > 0:
            mtime, ctime = mtime // g * g, ctime // g * g
        return Attr(node.ino, node.kind, node.mode, node.nlink, node.size(), mtime, ctime, node.change)

    def _new_inode(self, kind: str, mode: int, target: str = "") -> Inode:
        self.changes += 1
        node = Inode(self._next_ino, kind, mode, self._now(), target)
        self._next_ino += 1
        self.inodes[node.ino] = node
        self.kinds[node.ino] = kind
        return node

    def _set_entry(self, parent: Inode, name: str, ino: int | None, kind: str, group: int = 0) -> None:
        entries = parent.entries
        assert entries is not None  # parent is a directory
        if ino is None:
            del entries[name]
        else:
            entries[name] = ino
        self._touch(parent)
        self.journal.entry(EntryUnit(parent.ino, name, ino, kind, group))

    def _drop_link(self, node: Inode) -> None:
        self.changes += 1
        node.nlink -= 1 if node.kind == FILE or node.kind == LINK else 2
        node.ctime = self._now()
        node.change += 1
        if node.nlink <= 0 and not (self.profile.unlink_open == "posix" and self.open_refs.get(node.ino)):
            self._forget(node.ino)

    # -- persistence -----------------------------------------------------------------------
    @property
    def durable(self) -> dict[int, Inode]:
        return self.journal.durable

    def commit(self, ino: int) -> None:
        """Make a file's data durable (fsync, or an NFS COMMIT at close)."""
        self._inode(ino)
        self.journal.commit(ino)

    def sync_dir(self, ino: int) -> None:
        """Make a directory's entries durable (fsync of the directory)."""
        self._dir(ino)
        self.journal.sync_dir(ino)

    def pending_count(self) -> int:
        return self.journal.pending_count()

    def crash_states(self, limit: int = 1000) -> list[CrashState]:
        """The distinct states a crash now could leave, simplest first (at most ``limit``)."""
        return [state for state, _ in self.journal.distinct_states(limit)]

    def keyed_crash_states(self, limit: int = 1000) -> list[tuple[CrashState, bytes]]:
        """``crash_states`` with a digest of the disk each leaves (equal digests: equal disks)."""
        return self.journal.distinct_states(limit)

    def crash(self, choices: ChoiceSource) -> str:
        """Lose the volatile layer; unsynced operations persist as a drawn crash state allows."""
        return self.crash_into(self.journal.draw(choices))

    def digest(self) -> bytes:
        """What the server holds, hashed: every path with its kind, mode, target and bytes (times
        aside). Equal digests: equal disks."""
        digest = hashlib.blake2b(digest_size=16)
        stack = [("", ROOT)]
        while stack:
            path, ino = stack.pop()
            node = self.inodes[ino]
            digest.update(f"{path}\0{node.kind}\0{node.mode}\0{node.target}\0".encode())
            if node.entries is not None:
                stack.extend((f"{path}/{name}", child) for name, child in sorted(node.entries.items(), reverse=True))
            elif node.data is not None:
                digest.update(node.data.tobytes())
        return digest.digest()

    def adopt(self, other: Server) -> None:
        """Take over ``other``'s state (which must not be used afterwards), on this server's clock."""
        for key, value in vars(other).items():
            if key not in ("profile", "name", "_clock"):
                setattr(self, key, value)
        self.journal.rebind(live=self._live, clock=self._clock)

    def generation(self) -> tuple[int, int]:
        """Equal generations: nothing changed on this server in between (a new inode number
        comes with a new inode, which counts as a change; so does the flusher's writeback)."""
        self.journal.catch_up()
        return self.journal.version, self.changes

    def copy_key(self, state: CrashState) -> tuple[tuple[int, int], CrashState, float | None]:
        """Equal keys, equal ``crashed_copy(state)``: nothing changed on this server in between
        (and, where the state persists pending operations, whose inodes take the crash's time,
        no time passed)."""
        return self.generation(), state, self._clock() if state.kept or state.data_kept else None

    def crashed_copy(self, state: CrashState) -> tuple[Server, str]:
        """A copy of this server after a power loss of it and every client that keeps ``state``
        (this one is left as it is), and what the crash kept, in words: only the durable image
        the crash leaves is copied."""
        twin = Server(self.profile, self._clock, self.name)
        # no grant outlives the power loss of every client holding one (Client.reset gives them back)
        twin._next_ino, twin._group = self._next_ino, self._group
        twin.kinds = dict(self.kinds)
        summary = twin.journal.crashed_from(self.journal, state)
        twin._restore_from_durable(self.inodes)
        twin.crashes = self.crashes + 1
        twin._number_from_boot()
        return twin, summary

    def replica(self, clock: Callable[[], float]) -> Server:
        """An exact copy of this server, which holds nothing pending (as a crash leaves it), on
        ``clock``: what a replay of a restarted job's requests runs against."""
        twin = Server(self.profile, clock, self.name)
        twin.journal.settle_as(self.journal)  # ValueError if anything is pending
        twin.inodes = {ino: node.clone() for ino, node in self.inodes.items()}
        twin._next_ino, twin._group, twin.crashes = self._next_ino, self._group, self.crashes
        twin.open_refs, twin.kinds, twin.allocated = dict(self.open_refs), dict(self.kinds), dict(self.allocated)
        twin.used, twin.reserved = self.used, self.reserved
        return twin

    def crash_into(self, state: CrashState) -> str:
        """Lose the volatile layer, keeping what ``state`` persists; returns a summary."""
        summary = self.journal.apply(state)
        self._restore_from_durable(self.inodes)
        self.crashes += 1
        self._number_from_boot()
        return summary

    def _number_from_boot(self) -> None:
        """After a crash: new inode numbers come from this boot's range (INODES_PER_BOOT)."""
        self._next_ino = max(self._next_ino, min(self.crashes, _BOOT_RANGES) * INODES_PER_BOOT + 1)

    def _restore_from_durable(self, before: dict[int, Inode]) -> None:
        """The namespace after a crash: the durable image its root reaches (``before``: the
        namespace the crash lost, whose unchanged inodes keep their attributes)."""
        durable = self.journal.durable
        reachable: dict[int, Inode] = {}
        links: dict[int, int] = {}
        stack = [ROOT]
        while stack:
            ino = stack.pop()
            if ino in reachable or ino not in durable:
                continue
            node = durable[ino]
            reachable[ino] = node
            for child in (node.entries or {}).values():
                links[child] = links.get(child, 0) + 1
                stack.append(child)
        self.journal.keep_only(reachable)
        self.inodes = {}
        for ino, node in reachable.items():
            live = node.clone()
            if live.entries is not None:
                live.nlink = 2 + sum(1 for c in live.entries.values() if c in reachable and reachable[c].kind == DIR)
            else:
                live.nlink = links.get(ino, 1)
            self.inodes[ino] = live
        for ino, live in self.inodes.items():
            if live.entries is not None:
                for name in [n for n, c in live.entries.items() if c not in self.inodes]:
                    del live.entries[name]
            _carry_attributes(before.get(ino), live, self.crashes + 1)
        self.open_refs.clear()
        self._recount()  # holes of restored files count as allocated (the journal keeps no holes)

    # -- RPCs: reads -----------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        return self.attr(self._inode(ino))

    def lookup(self, dir_ino: int, name: str) -> int | None:
        entries = self._dir(dir_ino).entries
        assert entries is not None  # a directory's
        return entries.get(name)

    def entry(self, dir_ino: int, name: str) -> int | None:
        """What a directory names ``name`` now, None also when the directory is gone (for the
        trace: whether a client's cache answered what the server no longer holds)."""
        parent = self.inodes.get(dir_ino)
        return parent.entries.get(name) if parent is not None and parent.entries is not None else None

    def holds(self, ino: int) -> bool:
        """Whether the inode exists (a handle to it is not stale)."""
        return ino in self.inodes

    def readdir(self, dir_ino: int) -> list[tuple[str, int]]:
        entries = self._dir(dir_ino).entries
        assert entries is not None  # a directory's
        return list(entries.items())

    def readlink(self, ino: int) -> str:
        node = self._inode(ino)
        if node.kind != LINK:
            raise fs_error(errno.EINVAL)
        return node.target

    def content(self, ino: int) -> bytes:
        node = self._inode(ino)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        assert node.data is not None  # a file's (clients read files, not links)
        return node.data.tobytes()

    def read(self, ino: int, offset: int, size: int) -> bytes:
        node = self._inode(ino)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        assert node.data is not None  # a file's (clients read files, not links)
        return node.data.slice(offset, size)

    # -- RPCs: namespace -------------------------------------------------------------------
    def _check_new(self, parent: Inode, name: str) -> None:
        assert parent.entries is not None  # a directory's
        if name in parent.entries:
            raise fs_error(errno.EEXIST)

    def create(self, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool, Change]:
        """CREATE: a new empty file, or (not exclusive) the existing one."""
        parent = self._dir(dir_ino)
        pre = self.attr(parent)
        assert parent.entries is not None  # a directory's
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
        pre = self.attr(parent)
        node = self._new_inode(DIR, mode & 0o7777)
        parent.nlink += 1
        self._set_entry(parent, name, node.ino, DIR)
        return node.ino, Change(pre, self.attr(parent))

    def symlink(self, dir_ino: int, name: str, target: str) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        self._check_new(parent, name)
        pre = self.attr(parent)
        node = self._new_inode(LINK, 0o777, target)
        self._set_entry(parent, name, node.ino, LINK)
        return node.ino, Change(pre, self.attr(parent))

    def link(self, ino: int, dir_ino: int, name: str) -> Change:
        node = self._inode(ino)
        parent = self._dir(dir_ino)
        self._check_new(parent, name)  # Linux checks the new name first
        if node.kind == DIR:
            raise fs_error(errno.EPERM)
        pre = self.attr(parent)
        node.nlink += 1
        self._touch(node)
        self._set_entry(parent, name, ino, node.kind)
        return Change(pre, self.attr(parent))

    def _child(self, parent: Inode, name: str) -> Inode:
        assert parent.entries is not None  # a directory's
        ino = parent.entries.get(name)
        if ino is None:
            raise fs_error(errno.ENOENT)
        return self.inodes[ino]

    def unlink(self, dir_ino: int, name: str) -> tuple[int, Change]:
        parent = self._dir(dir_ino)
        node = self._child(parent, name)
        if node.kind == DIR:
            raise fs_error(errno.EISDIR)
        pre = self.attr(parent)
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
        pre = self.attr(parent)
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
                assert sub.entries is not None  # a directory's
                stack.extend(sub.entries.values())
        return False

    def rename(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> tuple[int, Change, Change]:
        """RENAME with POSIX rules, atomic on the server."""
        sparent, dparent = self._dir(src_dir), self._dir(dst_dir)
        node = self._child(sparent, src_name)
        ino = node.ino
        assert dparent.entries is not None  # a directory's
        target = dparent.entries.get(dst_name)
        if target == ino:
            return ino, Change(self.attr(sparent), self.attr(sparent)), Change(self.attr(dparent), self.attr(dparent))
        if node.kind == DIR and self._is_ancestor(ino, dst_dir):
            raise fs_error(errno.EINVAL)
        if target is not None and self._is_ancestor(target, src_dir):
            # fs/namei.c do_renameat2: "target should not be an ancestor of source" (ENOTEMPTY),
            # checked before the kinds of the two names are compared
            raise fs_error(errno.ENOTEMPTY)
        if target is not None:
            tnode = self.inodes[target]
            if node.kind == DIR and tnode.kind != DIR:
                raise fs_error(errno.ENOTDIR)
            if node.kind != DIR and tnode.kind == DIR:
                raise fs_error(errno.EISDIR)
            if tnode.kind == DIR and tnode.entries:
                raise fs_error(errno.ENOTEMPTY)
        spre, dpre = self.attr(sparent), self.attr(dparent)
        if target is not None and node.kind == FILE:
            self.journal.replacing(ino)
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

    def exchange(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> tuple[Change, Change]:
        """RENAME_EXCHANGE (renameat2): two existing names swap their inodes, atomically."""
        sparent, dparent = self._dir(src_dir), self._dir(dst_dir)
        first, second = self._child(sparent, src_name), self._child(dparent, dst_name)
        spre, dpre = self.attr(sparent), self.attr(dparent)
        if first.ino == second.ino:
            return Change(spre, spre), Change(dpre, dpre)
        if ((first.kind == DIR and self._is_ancestor(first.ino, dst_dir))
                or (second.kind == DIR and self._is_ancestor(second.ino, src_dir))):
            raise fs_error(errno.EINVAL)
        self._group += 1
        self._set_entry(sparent, src_name, second.ino, second.kind, self._group)
        self._set_entry(dparent, dst_name, first.ino, first.kind, self._group)
        if src_dir != dst_dir:
            moved = (first.kind == DIR) - (second.kind == DIR)  # directories that changed parent
            sparent.nlink -= moved
            dparent.nlink += moved
        first.ctime = second.ctime = self._now()
        return Change(spre, self.attr(sparent)), Change(dpre, self.attr(dparent))

    def copy(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> tuple[int, Change]:
        """Server-side copy of a file to a new object (first half of an object-store rename)."""
        src = self._child(self._dir(src_dir), src_name)
        if src.kind == DIR:
            raise fs_error(errno.EISDIR)
        if src.kind == FILE and len(src.data or ()) > self.profile.capacity - self.used:
            raise fs_error(errno.ENOSPC)
        node = self._new_inode(src.kind, src.mode, src.target)
        if src.kind == FILE:
            assert src.data is not None  # a file's
            data = node.data = src.data.copy()
            self._allocate(node.ino, len(data))
            self.journal.write(node.ino, 0, data.tobytes())
            if self.profile.entry_durable == "op":
                self.commit(node.ino)  # the copy is as durable as the name it gets
        return node.ino, self.publish(dst_dir, dst_name, node.ino)

    def alloc(self, mode: int) -> int:
        """A new file inode that no directory names yet (an object being written)."""
        return self._new_inode(FILE, mode & 0o7777).ino

    def publish(self, dir_ino: int, name: str, ino: int) -> Change:
        """Name ``ino`` in a directory, replacing what was there (an object upload completes)."""
        parent = self._dir(dir_ino)
        pre = self.attr(parent)
        assert parent.entries is not None  # a directory's
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
        assert node.data is not None  # a file's
        self._allocate(ino, self.growth(len(node.data), offset, len(data)))  # ENOSPC: nothing written
        node.data.write(offset, data)
        self._touch(node)
        self.journal.write(ino, offset, data)
        return self.attr(node)

    def replace_content(self, ino: int, data: bytes) -> Attr:
        """Whole-object upload: the file's bytes become exactly ``data`` (or, if they do not
        fit, ENOSPC and nothing changes)."""
        self._inode(ino)
        if len(data) > self.profile.capacity - self.used + self.allocated.get(ino, 0):
            raise fs_error(errno.ENOSPC)
        self.truncate(ino, 0)
        return self.write(ino, 0, data) if data else self.getattr(ino)

    def truncate(self, ino: int, size: int) -> Attr:
        node = self._inode(ino)
        if node.kind != FILE:
            raise fs_error(errno.EISDIR)
        assert node.data is not None  # a file's
        node.data.truncate(size)  # extending allocates nothing (a hole, as ext4_setattr leaves)
        self._shrink(ino, size)
        self._touch(node)
        self.journal.truncate(ino, size)
        return self.attr(node)

    def setattr(self, ino: int, *, mode: int | None = None, mtime: float | None = None) -> Attr:
        node = self._inode(ino)
        self.changes += 1
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

    def closed(self, ino: int) -> None:
        """A process closed ``ino`` (the persistence model may act on it: auto_da_alloc)."""
        self.journal.closed(ino)

    def add_open_ref(self, ino: int, delta: int) -> None:
        refs = self.open_refs.get(ino, 0) + delta
        if refs > 0:
            self.open_refs[ino] = refs
            return
        self.open_refs.pop(ino, None)
        node = self.inodes.get(ino)
        if node is not None and node.nlink <= 0:
            self._forget(ino)

    def _forget(self, ino: int) -> None:
        self.changes += 1
        del self.inodes[ino]
        self.used -= self.allocated.pop(ino, 0)
        self.journal.discard(ino)

    def usage(self) -> tuple[int, int, int]:
        """(bytes of file data allocated, bytes granted to clients, inodes) in the volatile layer."""
        return self.used, self.reserved, len(self.inodes)

    # -- space -------------------------------------------------------------------------------
    def available(self) -> float:
        """Bytes a write can still allocate (capacity less what is used and granted)."""
        return self.profile.capacity - self.used - self.reserved

    @staticmethod
    def growth(size: int, offset: int, n: int) -> int:
        """Bytes a write of ``n`` at ``offset`` allocates in a file of ``size`` bytes (a hole
        before ``offset`` takes none)."""
        return max(0, offset + n - max(size, offset))

    def room(self, ino: int, offset: int, n: int, size: int | None = None) -> int:
        """How many of ``n`` bytes written at ``offset`` fit (Linux writes the part that fits
        and returns a short count; the next write gets ENOSPC)."""
        if size is None:
            size = len(self._inode(ino).data or ())
        avail = self.available()
        if self.growth(size, offset, n) <= avail:
            return n
        return max(0, min(n, max(size, offset) - offset + int(avail)))

    def reserve(self, nbytes: int) -> None:
        """Grant space for cached writes not sent yet, or ENOSPC (Lustre grants)."""
        if nbytes > self.available():
            raise fs_error(errno.ENOSPC)
        self.reserved += nbytes

    def unreserve(self, nbytes: int) -> None:
        self.reserved = max(0, self.reserved - nbytes)

    def _allocate(self, ino: int, nbytes: int) -> None:
        if nbytes > 0:
            if nbytes > self.profile.capacity - self.used:
                raise fs_error(errno.ENOSPC)
            self.allocated[ino] = self.allocated.get(ino, 0) + nbytes
            self.used += nbytes

    def _shrink(self, ino: int, size: int) -> None:
        """The file is now ``size`` bytes long: allocation past it is freed."""
        held = self.allocated.get(ino, 0)
        if held > size:
            self.allocated[ino] = size
            self.used -= held - size

    def _recount(self) -> None:
        self.allocated = {ino: len(n.data) for ino, n in self.inodes.items() if n.data is not None and len(n.data)}
        self.used = sum(self.allocated.values())


def _carry_attributes(was: Inode | None, restored: Inode, boot: int) -> None:
    """An inode the crash left as it was keeps its change attribute and times (a restart does
    not change unchanged files: NFSv4 change attributes and object generations persist); one
    the crash took back to an older state, or brought back, gets a change attribute no earlier
    incarnation of the server handed out."""
    if was is not None and restored.same_state(was):
        restored.change, restored.mtime, restored.ctime = was.change, was.mtime, was.ctime
    else:
        restored.change = max(restored.change, was.change if was is not None else 0, boot << 40) + 1

