"""The filesystem client of one node for one mount, shared by the node's ranks as processes
share a kernel NFS client. It composes the node's caches (attributes, lookups, data), what it
has not written back, and the mount's strategy; every request to the server costs virtual time."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Protocol

from ..profiles import Profile
from .attrcache import AttrCache
from .dentries import MISS, DentryCache
from .inode import DIR, FILE, Attr, Change, fs_error
from .server import Server
from .strategy import Strategy
from .writeback import DirtyFile, Unstable


class Meter:
    """Virtual cost of the operation in progress (only one rank runs at a time)."""

    __slots__ = ("cost", "stale")

    def __init__(self) -> None:
        self.cost = 0.0
        self.stale = ""  # what a cache answered that the server no longer says (for the trace)

    def take(self) -> float:
        cost, self.cost = self.cost, 0.0
        return cost


class Draws(Protocol):
    def fraction(self) -> float: ...


class Peers(Protocol):
    """What a client needs from the mount it belongs to."""

    def interleave(self) -> None: ...
    def dirty_holders(self, ino: int) -> list[Client]: ...
    def mark_dirty(self, ino: int, client: Client) -> None: ...
    def clear_dirty(self, ino: int, client: Client) -> None: ...
    def pending_creates(self, dir_ino: int) -> list[tuple[Client, int]]: ...


class Client:
    """One node's view of one mount."""

    def __init__(self, server: Server, peers: Peers, node: int, clock: Callable[[], float], choices: Draws,
                 meter: Meter) -> None:
        self.server = server
        self.peers = peers
        self.profile: Profile = server.profile
        self.strategy = Strategy(self.profile)
        self.node = node
        self.clock = clock
        self._choices = choices
        self.meter = meter
        self.epoch = 0  # bumped by eviction: handles from an older epoch get EIO
        self.reset()

    def reset(self) -> None:
        """Forget everything (the node crashed or was evicted); space granted for its unsent
        writes goes back to the server."""
        for dirty in getattr(self, "dirty", {}).values():
            self.server.unreserve(dirty.reserved)
        self.attrs = AttrCache(self.profile, self.clock, self._choices.fraction, self._stale)
        self.dentries = DentryCache(self.profile, self.clock)
        self.data: dict[int, tuple[bytes, object]] = {}  # ino -> (content, version it had)
        self.dirty: dict[int, DirtyFile] = {}
        self.pending_create: dict[int, tuple[int, str]] = {}
        self.opens: dict[int, int] = {}
        self.silly: dict[int, list[tuple[int, str]]] = {}
        self._silly_seq = 0
        self.unstable: dict[int, Unstable] = {}
        self.errors: dict[int, tuple[int, str]] = {}  # ino -> a write-back error not reported yet

    def _stale(self, ino: int) -> None:
        """Someone else changed ``ino``: what we cached under it (entries, data) is stale."""
        self.dentries.forget_dir(ino)
        self.data.pop(ino, None)

    # -- costs -----------------------------------------------------------------------------
    def rpc(self, nbytes: int = 0) -> None:
        """One request to the server: its latency (jittered by a draw) plus transfer time."""
        profile = self.profile
        latency = profile.rpc_latency
        if profile.jitter:
            latency *= 1 + profile.jitter * (2 * self._choices.fraction() - 1)
        self.meter.cost += latency + nbytes / profile.bandwidth

    def local(self) -> None:
        self.meter.cost += self.profile.local_latency

    # -- attributes ------------------------------------------------------------------------
    def _fetch_attr(self, ino: int) -> Attr:
        self._recall(ino)
        self.rpc()
        try:
            attr = self.server.getattr(ino)
        except OSError:
            self.forget_inode(ino)
            raise
        return self.attrs.store(attr)

    def getattr(self, ino: int, *, force: bool = False) -> Attr:
        """Attributes from the cache while valid, else from the server; own dirty size shows."""
        attr = None if force else self.attrs.valid(ino)
        if attr is not None:
            self.local()
            if attr.kind != DIR and ino not in self.dirty:  # (a directory's only gate its entries: the lookup cache's)
                self._note_stale_file(ino, self.attrs.version(attr), "attribute", "attributes")
        elif ino in self.pending_create:
            self.local()
            attr = Attr(ino, FILE, 0o644, 1, 0, self.clock(), self.clock(), 0)
        else:
            attr = self._fetch_attr(ino)
        dirty = self.dirty.get(ino)
        if dirty is not None and dirty.size != attr.size:
            attr = attr._replace(size=dirty.size)
        return attr

    def open_revalidate(self, ino: int) -> Attr:
        """Close-to-open: an open asks the server whether the file changed."""
        return self.getattr(ino, force=self.profile.cto)

    def lock_acquired(self, ino: int) -> None:
        """A lock the server granted is a cache coherency point: dirty data goes out and the
        cached attributes and data are dropped (fs/nfs/file.c do_setlk: nfs_sync_mapping, then
        nfs_zap_caches, 'This makes locking act as a cache coherency point')."""
        self.flush(ino)
        self.attrs.forget(ino)
        self.data.pop(ino, None)

    def forget_inode(self, ino: int) -> None:
        self.attrs.forget(ino)
        self.data.pop(ino, None)
        self.dentries.forget_inode(ino)

    def forget_entry(self, dir_ino: int, name: str) -> None:
        self.dentries.forget(dir_ino, name)

    # -- namespace -------------------------------------------------------------------------
    def lookup(self, dir_ino: int, name: str) -> int:
        """The inode a name refers to; ENOENT may come from a stale negative entry."""
        p = self.profile
        if p.lookupcache != "none":
            if p.lookup_tied_to_parent:
                self.getattr(dir_ino)  # an expired parent is revalidated; a change drops its entries
            ino = self.dentries.get(dir_ino, name)
            if ino != MISS:
                self.local()
                self._note_stale_entry(dir_ino, name, ino)
                if ino is None:
                    raise fs_error(errno.ENOENT)
                return ino
        self._recall_dir(dir_ino)
        self.rpc()
        found = self.server.lookup(dir_ino, name)
        self.dentries.put(dir_ino, name, found)
        if found is None:
            raise fs_error(errno.ENOENT)
        return found

    def _note_stale_file(self, ino: int, version: object, cache: str, what: str) -> None:
        """Say in the trace when a file's ``what`` this node answered from its ``cache`` cache (of
        the file's ``version``) is not what the server holds now."""
        if self.server.holds(ino) and self.attrs.version(self.server.getattr(ino)) != version:
            self.meter.stale = f"node {self.node}'s {cache} cache answered a file's {what} since changed"

    def _note_stale_entry(self, dir_ino: int, name: str, cached: int | None) -> None:
        """Say in the trace when this node's cached entry is not what the server holds now."""
        truth = self.server.entry(dir_ino, name)
        if truth != cached:
            said = "'not found'" if cached is None else ("an entry since removed" if truth is None
                                                        else "an entry since replaced")
            self.meter.stale = f"node {self.node}'s lookup cache answered {said} for {name!r}"

    def listdir(self, dir_ino: int) -> list[tuple[str, int]]:
        """Opening a directory revalidates it (dropping stale entries if it changed); the
        listing comes from the server, plus files this node is still creating."""
        self.getattr(dir_ino, force=True)
        self._recall_dir(dir_ino)
        self.rpc()
        entries = self.server.readdir(dir_ino)
        self.rpc(64 * len(entries))
        self.dentries.fill(dir_ino, entries)
        listed = {name for name, _ in entries}
        for ino, (parent, name) in self.pending_create.items():
            if parent == dir_ino and name not in listed:
                entries.append((name, ino))
        return entries

    def create(self, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool]:
        """Create (or, not exclusive, open) a file; returns (ino, created)."""
        return self.strategy.creation.create(self, dir_ino, name, mode, exclusive)

    def failed_create(self, dir_ino: int, name: str, exc: OSError) -> None:
        """Linux drops the dentry of a failed create, whatever the error (d_drop in
        fs/nfs/dir.c nfs_create/nfs_mkdir/nfs_symlink), so the next stat asks the server; with
        ``eexist_drops_entry`` off, a stale negative entry survives EEXIST (the makedirs trap:
        EEXIST, then isdir() says False)."""
        if self.profile.eexist_drops_entry or exc.errno != errno.EEXIST:
            self.forget_entry(dir_ino, name)

    def _make(self, dir_ino: int, name: str, request: Callable[[], tuple[int, Change]]) -> int:
        """A request that makes a new name (MKDIR, SYMLINK), and what the cache learns from it."""
        self.rpc()
        try:
            ino, change = request()
        except OSError as exc:
            self.failed_create(dir_ino, name, exc)
            raise
        self.attrs.after_change(change)
        self.dentries.put(dir_ino, name, ino)
        return ino

    def mkdir(self, dir_ino: int, name: str, mode: int) -> int:
        return self._make(dir_ino, name, lambda: self.server.mkdir(dir_ino, name, mode))

    def symlink(self, dir_ino: int, name: str, target: str) -> int:
        return self._make(dir_ino, name, lambda: self.server.symlink(dir_ino, name, target))

    def link(self, ino: int, dir_ino: int, name: str) -> None:
        self.flush(ino)
        self.rpc()
        change = self.server.link(ino, dir_ino, name)
        self.attrs.after_change(change)
        self.dentries.put(dir_ino, name, ino)
        self.attrs.forget(ino)

    def readlink(self, ino: int) -> str:
        self.rpc()
        return self.server.readlink(ino)

    def unlink(self, dir_ino: int, name: str) -> None:
        ino = self.lookup(dir_ino, name)
        if ino in self.pending_create:
            self._drop_pending(ino)
            return
        if self.profile.silly_rename and self.opens.get(ino):
            self.silly_rename(dir_ino, name, ino)
            return
        self.rpc()
        _, change = self.server.unlink(dir_ino, name)
        self.attrs.after_change(change)
        self.dentries.put(dir_ino, name, None)
        self.attrs.forget(ino)
        self.discard(ino)

    def _drop_pending(self, ino: int) -> None:
        dir_ino, name = self.pending_create.pop(ino)
        self.discard(ino)
        self.dentries.put(dir_ino, name, None)

    def silly_rename(self, dir_ino: int, name: str, ino: int) -> None:
        """NFS keeps a file this node has open alive under a hidden name until the last close."""
        self._silly_seq += 1
        hidden = f".nfs{ino:016x}{self.node:04x}{self._silly_seq:04x}"
        self.rpc()
        _, _, dchange = self.server.rename(dir_ino, name, dir_ino, hidden)
        self.attrs.after_change(dchange)
        self.dentries.put(dir_ino, name, None)
        self.silly.setdefault(ino, []).append((dir_ino, hidden))

    def rmdir(self, dir_ino: int, name: str) -> None:
        ino = self.lookup(dir_ino, name)
        self.strategy.renaming.rmdir(self, dir_ino, name, ino)
        self.dentries.put(dir_ino, name, None)
        self.forget_inode(ino)

    def rename(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
        ino = self.lookup(src_dir, src_name)
        self.flush(ino)
        self.strategy.renaming.rename(self, src_dir, src_name, dst_dir, dst_name, ino)

    def exchange(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
        """RENAME_EXCHANGE: the two names swap what they name."""
        first, second = self.lookup(src_dir, src_name), self.lookup(dst_dir, dst_name)
        self.flush(first)
        self.flush(second)
        self.rpc()
        schange, dchange = self.server.exchange(src_dir, src_name, dst_dir, dst_name)
        self.attrs.after_change(schange)
        self.attrs.after_change(dchange)
        self.dentries.put(src_dir, src_name, second)
        self.dentries.put(dst_dir, dst_name, first)
        self.attrs.forget(first)
        self.attrs.forget(second)

    # -- data ------------------------------------------------------------------------------
    def _recall(self, ino: int) -> None:
        """Lock-manager coherence (Lustre): another node's dirty data for this file is
        flushed before we look at it."""
        if self.profile.write_back == "locked":
            for other in self.peers.dirty_holders(ino):
                if other is not self:
                    other.flush(ino)

    def _recall_dir(self, dir_ino: int) -> None:
        if self.profile.write_back == "locked":
            for other, ino in self.peers.pending_creates(dir_ino):
                if other is not self:
                    other.flush(ino)

    def read(self, ino: int, offset: int, size: int) -> bytes:
        dirty = self.dirty.get(ino)
        if dirty is not None and dirty.base is not None:
            self.local()
            return dirty.overlay(dirty.base, offset, size)
        self._recall(ino)
        if self.profile.coherent:
            self.rpc(size)
            base = self.server.read(ino, 0 if dirty else offset, (offset + size) if dirty else size)
            if dirty is None:
                return base
        else:
            attr = self.getattr(ino)
            version = self.attrs.version(attr)
            cached = self.data.get(ino)
            if cached is None or cached[1] != version:
                content = self.server.content(ino)
                self.rpc(len(content))
                cached = (content, version)
                self.data[ino] = cached
            else:
                self.local()
                self._note_stale_file(ino, version, "data", "content")
            base = cached[0]
            if dirty is None:
                return base[offset:offset + size]
        return dirty.overlay(base, offset, size)

    def sent(self, ino: int, kind: str, offset: int, data: bytes) -> None:
        """Remember an uncommitted request, to send again if the server restarts first."""
        held = self.unstable.get(ino)
        if held is None or held.boot != self.server.crashes:
            held = self.unstable[ino] = Unstable(self.server.crashes)
        if kind == "write":
            held.write(offset, data)
        else:
            held.truncate(offset)

    def write(self, ino: int, offset: int, data: bytes, failure: OSError | None = None) -> int:
        """Write-through mounts send the bytes now; 'locked' ones (Lustre) keep them dirty on
        space the server grants now; write-back ones keep them dirty and claim space only when
        they are sent (close, fsync). Where space is claimed at write(), a full server, or
        ``failure`` (an injected ENOSPC/EDQUOT), fails the write; the bytes that fit are written
        and counted (a short write), as Linux does. Returns the bytes accepted."""
        mode = self.profile.write_back
        if mode != "close" and failure is not None:
            raise failure
        if mode == "through":
            fit = self.server.room(ino, offset, len(data))
            if fit == 0:
                raise fs_error(errno.ENOSPC)
            data = data[:fit] if fit < len(data) else data
            self.rpc(len(data))
            self.attrs.store(self.server.write(ino, offset, data), changed_by_us=True)
            self.sent(ino, "write", offset, data)
            return len(data)
        dirty = self.dirty.get(ino)
        if dirty is None:
            attr = self.getattr(ino)
            base = self.strategy.upload.dirty_base(self, ino)
            dirty = DirtyFile(attr.size, base, attr.change if self.strategy.upload.whole else None)
            self.dirty[ino] = dirty
            self.peers.mark_dirty(ino, self)
        if mode == "locked":
            data = self._granted(dirty, offset, data)
        dirty.write(offset, data)
        return len(data)

    def _granted(self, dirty: DirtyFile, offset: int, data: bytes) -> bytes:
        """The part of a cached write the server grants space for (Lustre grants), or ENOSPC."""
        n = len(data)
        growth = Server.growth(dirty.size, offset, n)
        avail = self.server.available()
        if growth > avail:
            n = max(0, min(n, max(dirty.size, offset) - offset + int(avail)))
            if n == 0:
                raise fs_error(errno.ENOSPC)
            data, growth = data[:n], Server.growth(dirty.size, offset, n)
        self.server.reserve(growth)
        dirty.reserved += growth
        return data

    def has_dirty(self, ino: int) -> bool:
        return ino in self.dirty

    def flush(self, ino: int, failure: OSError | None = None) -> None:
        """Send this node's dirty data for a file to the server. A failure (the server's ENOSPC
        or ESTALE, or ``failure``: an error injected where the data reaches the server) loses
        the dirty data, as Linux drops pages whose write-back failed, and is kept for the next
        close() or fsync() of the file on this node (:meth:`take_error`), as the kernel keeps
        it in the file's errseq (fs/nfs/file.c nfs_file_flush: filemap_check_wb_err)."""
        dirty = self.dirty.pop(ino, None)
        if dirty is None:
            return
        self.peers.clear_dirty(ino, self)
        self.server.unreserve(dirty.reserved)
        pending = self.pending_create.pop(ino, None)
        try:
            if failure is not None:
                raise failure
            self.strategy.upload.send(self, ino, dirty, pending)
            if pending is not None:
                self.attrs.after_change(self.server.publish(pending[0], pending[1], ino))
        except OSError as exc:
            self.errors[ino] = (exc.errno or errno.EIO, exc.strerror or os.strerror(exc.errno or errno.EIO))
            if pending is not None:
                self.dentries.forget(*pending)  # the object was never created
        self.data.pop(ino, None)

    def take_error(self, ino: int) -> OSError | None:
        """The write-back error of a file not reported yet (reported once, then cleared)."""
        held = self.errors.pop(ino, None)
        return OSError(*held) if held is not None else None

    def commit(self, ino: int) -> None:
        """Flush, then COMMIT; writes a restarted server lost are sent again first."""
        self.flush(ino)
        held = self.unstable.pop(ino, None)
        if held is not None and held.boot != self.server.crashes:
            self._resend(ino, held)
        self.rpc()
        self.server.commit(ino)

    def replay_unstable(self) -> int:
        """The server restarted: send again what it acknowledged but had not committed (a
        Lustre client's recovery); it stays held until committed. A file the restarted server
        no longer has is not recreated. Returns the number of files resent."""
        resent = 0
        for ino, held in list(self.unstable.items()):
            if held.boot == self.server.crashes:
                continue
            if self.server.holds(ino):
                self._resend(ino, held)
                held.boot = self.server.crashes
                resent += 1
            else:
                del self.unstable[ino]
        return resent

    def _resend(self, ino: int, held: Unstable) -> None:
        for kind, offset, data in held.requests():
            self.rpc(len(data))
            if kind == "write":
                self.server.write(ino, offset, data)
            else:
                self.server.truncate(ino, offset)

    def closed_without_commit(self, ino: int) -> None:
        """A close that does not commit forgets the uncommitted requests (not durable)."""
        self.unstable.pop(ino, None)

    def sync_dir(self, ino: int) -> None:
        self.rpc()
        self.server.sync_dir(ino)

    def truncate(self, ino: int, size: int) -> None:
        self.strategy.upload.truncate(self, ino, size)

    def discard(self, ino: int) -> None:
        """Drop this node's unsent writes to a file (their upload failed)."""
        dirty = self.dirty.pop(ino, None)
        if dirty is not None:
            self.server.unreserve(dirty.reserved)
        self.peers.clear_dirty(ino, self)
        pending = self.pending_create.pop(ino, None)
        if pending is not None:
            self.forget_entry(*pending)

    def setattr(self, ino: int, *, mode: int | None = None, mtime: float | None = None) -> None:
        self.rpc()
        self.attrs.store(self.server.setattr(ino, mode=mode, mtime=mtime), changed_by_us=True)

    # -- open handles ------------------------------------------------------------------------
    def opened(self, ino: int) -> None:
        self.opens[ino] = self.opens.get(ino, 0) + 1
        if self.profile.unlink_open == "posix":
            self.server.add_open_ref(ino, 1)

    def closed(self, ino: int) -> None:
        """Last close on this node removes a silly-renamed file."""
        self.server.closed(ino)
        left = self.opens.get(ino, 0) - 1
        if left > 0:
            self.opens[ino] = left
        else:
            self.opens.pop(ino, None)
            for dir_ino, hidden in self.silly.pop(ino, []):
                self.rpc()
                try:
                    _, change = self.server.unlink(dir_ino, hidden)
                    self.attrs.after_change(change)
                except OSError:
                    pass  # already removed by someone else: nothing left to clean up
        if self.profile.unlink_open == "posix":
            self.server.add_open_ref(ino, -1)

    def evict(self) -> None:
        """The server dropped this client: dirty data is lost, open handles get EIO."""
        for ino in list(self.dirty):
            self.peers.clear_dirty(ino, self)
        self.epoch += 1
        opens = self.opens
        self.reset()
        self.opens = opens
