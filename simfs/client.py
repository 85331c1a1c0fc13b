"""The filesystem client of one node for one mount, shared by the node's ranks as processes
share a kernel NFS client: attribute cache with Linux backoff, lookup cache with negative
entries, data cache, dirty data held until close or fsync, silly rename, eviction."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Callable

from .choices import ChoiceSource
from .server import DIR, FILE, Attr, Change, Server, fs_error

if TYPE_CHECKING:
    from .mount import Mount


class Meter:
    """Virtual cost of the operation in progress (only one rank runs at a time)."""

    __slots__ = ("cost",)

    def __init__(self) -> None:
        self.cost = 0.0

    def take(self) -> float:
        cost, self.cost = self.cost, 0.0
        return cost


class _Cached:
    __slots__ = ("attr", "fetched", "ttl")

    def __init__(self, attr: Attr, fetched: float, ttl: float) -> None:
        self.attr, self.fetched, self.ttl = attr, fetched, ttl


class _Extent:
    """Contiguous dirty bytes, kept as the chunks written (joined once, when needed)."""

    __slots__ = ("offset", "chunks", "length")

    def __init__(self, offset: int, data: bytes) -> None:
        self.offset, self.chunks, self.length = offset, [data], len(data)

    def data(self) -> bytes:
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0]

    def pieces(self, small: int = 1 << 16) -> list[tuple[int, bytes]]:
        """(offset, bytes) to send: big chunks as they are, runs of small ones joined."""
        out: list[tuple[int, bytes]] = []
        run: list[bytes] = []
        offset = start = self.offset
        for chunk in self.chunks:
            if len(chunk) >= small:
                if run:
                    out.append((start, b"".join(run)))
                    run = []
                out.append((offset, chunk))
            else:
                if not run:
                    start = offset
                run.append(chunk)
            offset += len(chunk)
        if run:
            out.append((start, b"".join(run)))
        return out


class DirtyFile:
    """Writes a node holds for one file that the server has not seen yet."""

    __slots__ = ("extents", "size", "base")

    def __init__(self, size: int, base: bytes | None = None) -> None:
        self.extents: list[_Extent] = []  # in write order: later ones win where they overlap
        self.size = size
        self.base = base  # whole-object uploads: the content the writes apply to

    def write(self, offset: int, data: bytes) -> None:
        """Keep ``data`` (immutable bytes: never copied here)."""
        last = self.extents[-1] if self.extents else None
        if last is not None and last.offset + last.length == offset:
            last.chunks.append(data)
            last.length += len(data)
        else:
            self.extents.append(_Extent(offset, data))
        self.size = max(self.size, offset + len(data))

    def overlay(self, base: bytes, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if end <= offset:
            return b""
        out = bytearray(base[offset:end])
        out.extend(bytes(end - offset - len(out)))
        for extent in self.extents:
            start = extent.offset
            lo, hi = max(start, offset), min(start + extent.length, end)
            if lo < hi:
                out[lo - offset:hi - offset] = extent.data()[lo - start:hi - start]
        return bytes(out)

    def nbytes(self) -> int:
        return sum(e.length for e in self.extents)


class Client:
    """One node's view of one mount."""

    def __init__(self, mount: Mount, node: int, clock: Callable[[], float], choices: ChoiceSource, meter: Meter) -> None:
        self.mount = mount
        self.server: Server = mount.server
        self.profile = mount.profile
        self.node = node
        self._clock = clock
        self._choices = choices
        self.meter = meter
        self.epoch = 0  # bumped by eviction: handles from an older epoch get EIO
        self.reset()

    def reset(self) -> None:
        """Forget everything (the node crashed or was evicted)."""
        self.attrs: dict[int, _Cached] = {}
        self.dentries: dict[int, dict[str, tuple[int | None, float]]] = {}
        self.data: dict[int, tuple[bytes, int]] = {}
        self.dirty: dict[int, DirtyFile] = {}
        self.pending_create: dict[int, tuple[int, str]] = {}
        self.opens: dict[int, int] = {}
        self.silly: dict[int, list[tuple[int, str]]] = {}
        self._silly_seq = 0
        # writes the server acknowledged but has not committed: [server boot count, requests]
        self.unstable: dict[int, list] = {}

    # -- costs -----------------------------------------------------------------------------
    def _rpc(self, nbytes: int = 0) -> None:
        """One request to the server: its latency (jittered by a draw) plus transfer time."""
        profile = self.profile
        latency = profile.rpc_latency
        if profile.jitter:
            latency *= 1 + profile.jitter * (2 * self._choices.fraction() - 1)
        self.meter.cost += latency + nbytes / profile.bandwidth

    def _local(self) -> None:
        self.meter.cost += self.profile.local_latency

    # -- attributes ------------------------------------------------------------------------
    def _ttl_bounds(self, kind: str) -> tuple[float, float]:
        p = self.profile
        return (p.acdirmin, p.acdirmax) if kind == DIR else (p.acregmin, p.acregmax)

    def _store(self, attr: Attr, *, changed_by_us: bool = False) -> Attr:
        lo, hi = self._ttl_bounds(attr.kind)
        old = self.attrs.get(attr.ino)
        if hi == 0:
            if old is not None and old.attr.change != attr.change and not changed_by_us:
                self._invalidate(attr.ino)
            self.attrs[attr.ino] = _Cached(attr, self._clock(), 0.0)
            return attr
        if old is None:
            ttl = lo + (hi - lo) * self._choices.fraction() if hi > lo else lo
        elif old.attr.change == attr.change:
            ttl = min(max(old.ttl * 2, lo), hi)
        else:
            ttl = lo
            if not changed_by_us:
                self._invalidate(attr.ino)
        self.attrs[attr.ino] = _Cached(attr, self._clock(), ttl)
        return attr

    def _invalidate(self, ino: int) -> None:
        self.dentries.pop(ino, None)
        self.data.pop(ino, None)

    def _fetch_attr(self, ino: int) -> Attr:
        self._recall(ino)
        self._rpc()
        try:
            attr = self.server.getattr(ino)
        except OSError:
            self.forget_inode(ino)
            raise
        return self._store(attr)

    def getattr(self, ino: int, *, force: bool = False) -> Attr:
        """Attributes from the cache while valid, else from the server; own dirty size shows."""
        cached = self.attrs.get(ino)
        if cached is not None and not force and self._clock() < cached.fetched + cached.ttl:
            self._local()
            attr = cached.attr
        elif ino in self.pending_create:
            self._local()
            attr = Attr(ino, FILE, 0o644, 1, 0, self._clock(), self._clock(), 0)
        else:
            attr = self._fetch_attr(ino)
        dirty = self.dirty.get(ino)
        if dirty is not None and dirty.size != attr.size:
            attr = attr._replace(size=dirty.size)
        return attr

    def open_revalidate(self, ino: int) -> Attr:
        """Close-to-open: an open asks the server whether the file changed."""
        return self.getattr(ino, force=self.profile.cto)

    def forget_inode(self, ino: int) -> None:
        self.attrs.pop(ino, None)
        self._invalidate(ino)
        for entries in self.dentries.values():
            for name in [n for n, (i, _) in entries.items() if i == ino]:
                del entries[name]

    def forget_entry(self, dir_ino: int, name: str) -> None:
        entries = self.dentries.get(dir_ino)
        if entries is not None:
            entries.pop(name, None)

    def _after_change(self, change: Change) -> None:
        """Weak cache consistency: our own change to a directory does not make its cached
        entries stale, but a change by someone else since we cached it does."""
        cached = self.attrs.get(change.post.ino)
        if cached is not None and cached.attr.change != change.pre:
            self._invalidate(change.post.ino)
        self._store(change.post, changed_by_us=True)

    def _cache_entry(self, dir_ino: int, name: str, ino: int | None) -> None:
        p = self.profile
        if p.lookupcache == "none" or (ino is None and p.lookupcache != "all"):
            self.forget_entry(dir_ino, name)
            return
        self.dentries.setdefault(dir_ino, {})[name] = (ino, self._clock())

    # -- namespace -------------------------------------------------------------------------
    def lookup(self, dir_ino: int, name: str) -> int:
        """The inode a name refers to; ENOENT may come from a stale negative entry."""
        p = self.profile
        if p.lookupcache != "none":
            if p.lookup_tied_to_parent:
                self.getattr(dir_ino)  # an expired parent is revalidated; a change drops its entries
            entry = self.dentries.get(dir_ino, {}).get(name)
            if entry is not None:
                ino, at = entry
                if self._clock() - at < (p.positive_ttl if ino is not None else p.negative_ttl):
                    self._local()
                    if ino is None:
                        raise fs_error(errno.ENOENT)
                    return ino
        self._recall_dir(dir_ino)
        self._rpc()
        ino = self.server.lookup(dir_ino, name)
        self._cache_entry(dir_ino, name, ino)
        if ino is None:
            raise fs_error(errno.ENOENT)
        return ino

    def listdir(self, dir_ino: int) -> list[tuple[str, int]]:
        """Opening a directory revalidates it (dropping stale entries if it changed); the
        listing comes from the server, plus files this node is still creating."""
        self.getattr(dir_ino, force=True)
        self._recall_dir(dir_ino)
        self._rpc()
        entries = self.server.readdir(dir_ino)
        self._rpc(64 * len(entries))
        if self.profile.lookupcache != "none":
            cache = self.dentries.setdefault(dir_ino, {})
            now = self._clock()
            for name, ino in entries:
                cache[name] = (ino, now)
        listed = {name for name, _ in entries}
        for ino, (parent, name) in self.pending_create.items():
            if parent == dir_ino and name not in listed:
                entries.append((name, ino))
        return entries

    def create(self, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool]:
        """Create (or, not exclusive, open) a file; returns (ino, created)."""
        if self.profile.create_visible == "close":
            return self._create_pending(dir_ino, name, mode, exclusive)
        if exclusive and self.profile.exclusive_create == "racy":
            exclusive = self._check_absent(dir_ino, name)
        self._rpc()
        try:
            ino, created, change = self.server.create(dir_ino, name, mode, exclusive)
        except OSError as exc:
            self._failed_create(dir_ino, name, exc)
            raise
        self._after_change(change)
        self._cache_entry(dir_ino, name, ino)
        return ino, created

    def _check_absent(self, dir_ino: int, name: str) -> bool:
        """Exclusive create without server support: look, then create in a second request
        (another node can create the same name in between). Returns False: create unchecked."""
        try:
            self.lookup(dir_ino, name)
        except FileNotFoundError:
            self.mount.interleave()
            return False
        raise fs_error(errno.EEXIST)

    def _create_pending(self, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool]:
        """Object stores: a new object exists only on this node until it is closed."""
        try:
            existing = self.lookup(dir_ino, name)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if exclusive:
                raise fs_error(errno.EEXIST)
            return existing, False
        self._local()
        ino = self.server.alloc(mode)
        self.pending_create[ino] = (dir_ino, name)
        self.dirty[ino] = DirtyFile(0, b"")
        self.dentries.setdefault(dir_ino, {})[name] = (ino, self._clock())
        return ino, True

    def _failed_create(self, dir_ino: int, name: str, exc: OSError) -> None:
        """Linux drops the dentry of a failed create; with ``eexist_drops_entry`` off, a stale
        negative entry survives EEXIST (the makedirs trap: EEXIST, then isdir() says False)."""
        if exc.errno == errno.EEXIST and self.profile.eexist_drops_entry:
            self.forget_entry(dir_ino, name)

    def _make(self, dir_ino: int, name: str, request: Callable[[], tuple[int, Change]]) -> int:
        """A request that makes a new name (MKDIR, SYMLINK), and what the cache learns from it."""
        self._rpc()
        try:
            ino, change = request()
        except OSError as exc:
            self._failed_create(dir_ino, name, exc)
            raise
        self._after_change(change)
        self._cache_entry(dir_ino, name, ino)
        return ino

    def mkdir(self, dir_ino: int, name: str, mode: int) -> int:
        return self._make(dir_ino, name, lambda: self.server.mkdir(dir_ino, name, mode))

    def symlink(self, dir_ino: int, name: str, target: str) -> int:
        return self._make(dir_ino, name, lambda: self.server.symlink(dir_ino, name, target))

    def link(self, ino: int, dir_ino: int, name: str) -> None:
        self.flush(ino)
        self._rpc()
        change = self.server.link(ino, dir_ino, name)
        self._after_change(change)
        self._cache_entry(dir_ino, name, ino)
        self.attrs.pop(ino, None)

    def readlink(self, ino: int) -> str:
        self._rpc()
        return self.server.readlink(ino)

    def unlink(self, dir_ino: int, name: str) -> None:
        ino = self.lookup(dir_ino, name)
        if ino in self.pending_create:
            self._drop_pending(ino)
            return
        if self.profile.silly_rename and self.opens.get(ino):
            self._silly_rename(dir_ino, name, ino)
            return
        self._rpc()
        _, change = self.server.unlink(dir_ino, name)
        self._after_change(change)
        self._cache_entry(dir_ino, name, None)
        self.attrs.pop(ino, None)
        self.dirty.pop(ino, None)

    def _drop_pending(self, ino: int) -> None:
        dir_ino, name = self.pending_create.pop(ino)
        self.dirty.pop(ino, None)
        self._cache_entry(dir_ino, name, None)

    def _silly_rename(self, dir_ino: int, name: str, ino: int) -> None:
        """NFS keeps a file this node has open alive under a hidden name until the last close."""
        self._silly_seq += 1
        hidden = f".nfs{ino:016x}{self.node:04x}{self._silly_seq:04x}"
        self._rpc()
        _, schange, dchange = self.server.rename(dir_ino, name, dir_ino, hidden)
        self._after_change(dchange)
        self._cache_entry(dir_ino, name, None)
        self.silly.setdefault(ino, []).append((dir_ino, hidden))

    def rmdir(self, dir_ino: int, name: str) -> None:
        ino = self.lookup(dir_ino, name)
        if self.profile.rename == "copy_delete":
            # object stores: list, then delete the marker; a child made in between is orphaned
            self._rpc()
            if self.server.readdir(ino):
                raise fs_error(errno.ENOTEMPTY)
            self.mount.interleave()
            self._rpc()
            _, change = self.server.rmdir(dir_ino, name, orphan_children=True)
        else:
            self._rpc()
            _, change = self.server.rmdir(dir_ino, name)
        self._after_change(change)
        self._cache_entry(dir_ino, name, None)
        self.forget_inode(ino)

    def rename(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str) -> None:
        ino = self.lookup(src_dir, src_name)
        self.flush(ino)
        if self.profile.rename == "copy_delete":
            self._rename_by_copy(src_dir, src_name, dst_dir, dst_name, ino)
            return
        if self.profile.silly_rename:
            try:
                target = self.lookup(dst_dir, dst_name)
            except FileNotFoundError:
                target = None
            if target is not None and target != ino and self.opens.get(target):
                self._silly_rename(dst_dir, dst_name, target)  # a busy target survives, hidden
        self._rpc()
        _, schange, dchange = self.server.rename(src_dir, src_name, dst_dir, dst_name)
        self._after_change(schange)
        self._after_change(dchange)
        self._cache_entry(src_dir, src_name, None)
        self._cache_entry(dst_dir, dst_name, ino)
        self.attrs.pop(ino, None)

    def _rename_by_copy(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str, ino: int) -> None:
        if self.getattr(ino).kind == DIR:
            if not self.profile.dir_rename:
                raise OSError(errno.EOPNOTSUPP, f"{self.profile.name}: renaming a directory is not supported")
        self._rpc(self.getattr(ino).size)
        new_ino, change = self.server.copy(src_dir, src_name, dst_dir, dst_name)
        self._after_change(change)
        self._cache_entry(dst_dir, dst_name, new_ino)
        self.mount.interleave()  # copy and delete are separate requests: others (and crashes) fit between
        self._rpc()
        _, change = self.server.unlink(src_dir, src_name)
        self._after_change(change)
        self._cache_entry(src_dir, src_name, None)

    # -- data ------------------------------------------------------------------------------
    def _recall(self, ino: int) -> None:
        """Lock-manager coherence (Lustre): another node's dirty data for this file is
        flushed before we look at it."""
        if self.profile.write_back == "locked":
            for other in self.mount.dirty_holders(ino):
                if other is not self:
                    other.flush(ino)

    def _recall_dir(self, dir_ino: int) -> None:
        if self.profile.write_back == "locked":
            for other in self.mount.clients.values():
                if other is not self:
                    for ino in list(other.pending_create):
                        if other.pending_create[ino][0] == dir_ino:
                            other.flush(ino)

    def read(self, ino: int, offset: int, size: int) -> bytes:
        dirty = self.dirty.get(ino)
        if dirty is not None and dirty.base is not None:
            self._local()
            return dirty.overlay(dirty.base, offset, size)
        self._recall(ino)
        if self.profile.coherent:
            self._rpc(size)
            base = self.server.read(ino, 0 if dirty else offset, (offset + size) if dirty else size)
            if dirty is None:
                return base
        else:
            attr = self.getattr(ino)
            cached = self.data.get(ino)
            if cached is None or cached[1] != attr.change:
                content = self.server.content(ino)
                self._rpc(len(content))
                cached = (content, attr.change)
                self.data[ino] = cached
            else:
                self._local()
            base = cached[0]
            if dirty is None:
                return base[offset:offset + size]
        return dirty.overlay(base, offset, size)

    def _sent(self, ino: int, request: tuple) -> None:
        """Remember an uncommitted request: if the server restarts before the commit, the
        commit sends it again (an NFS client resends writes when the write verifier changes)."""
        held = self.unstable.get(ino)
        if held is None:
            held = self.unstable[ino] = [self.server.crashes, []]
        held[1].append(request)

    def write(self, ino: int, offset: int, data: bytes) -> None:
        """Write-through mounts send the bytes now; write-back ones keep them dirty."""
        if self.profile.write_back == "through":
            self._rpc(len(data))
            self._store(self.server.write(ino, offset, data), changed_by_us=True)
            self._sent(ino, ("write", offset, data))
            return
        dirty = self.dirty.get(ino)
        if dirty is None:
            attr = self.getattr(ino)
            base = None
            if self.profile.upload == "whole":
                base = self.server.content(ino)
                self._rpc(len(base))
            dirty = self.dirty[ino] = DirtyFile(attr.size, base)
            self.mount.mark_dirty(ino, self)
        dirty.write(offset, data)

    def has_dirty(self, ino: int) -> bool:
        return ino in self.dirty

    def flush(self, ino: int) -> None:
        """Send this node's dirty data for a file to the server."""
        dirty = self.dirty.pop(ino, None)
        if dirty is None:
            return
        self.mount.clear_dirty(ino, self)
        pending = self.pending_create.pop(ino, None)
        if self.profile.upload == "whole":
            content = dirty.overlay(dirty.base or b"", 0, dirty.size)
            self._rpc(len(content))
            attr = self.server.replace_content(ino, content)
            self._sent(ino, ("whole", 0, content))
        else:
            self._rpc(dirty.nbytes())
            attr = None
            for extent in dirty.extents:
                for offset, data in extent.pieces():
                    attr = self.server.write(ino, offset, data)
                    self._sent(ino, ("write", offset, data))
            if dirty.size > (attr.size if attr else self.server.getattr(ino).size):
                attr = self.server.truncate(ino, dirty.size)
                self._sent(ino, ("truncate", dirty.size, b""))
        if pending is not None:
            self._after_change(self.server.publish(pending[0], pending[1], ino))
        self.data.pop(ino, None)
        if attr is not None:
            self._store(attr, changed_by_us=True)

    def commit(self, ino: int) -> None:
        """Flush, then COMMIT; writes a restarted server lost are sent again first."""
        self.flush(ino)
        held = self.unstable.pop(ino, None)
        if held is not None and held[0] != self.server.crashes:
            for kind, offset, data in held[1]:
                self._rpc(len(data))
                if kind == "write":
                    self.server.write(ino, offset, data)
                elif kind == "whole":
                    self.server.replace_content(ino, data)
                else:
                    self.server.truncate(ino, offset)
        self._rpc()
        self.server.commit(ino)

    def closed_without_commit(self, ino: int) -> None:
        """A close that does not commit forgets the uncommitted requests (not durable)."""
        self.unstable.pop(ino, None)

    def sync_dir(self, ino: int) -> None:
        self._rpc()
        self.server.sync_dir(ino)

    def truncate(self, ino: int, size: int) -> None:
        if self.profile.upload == "whole":
            self._truncate_copy(ino, size)
            return
        self.flush(ino)
        self._rpc()
        self._store(self.server.truncate(ino, size), changed_by_us=True)

    def _truncate_copy(self, ino: int, size: int) -> None:
        """Object stores: truncation changes this node's copy; close uploads the result."""
        dirty = self.dirty.get(ino)
        if dirty is not None:
            content = dirty.overlay(dirty.base or b"", 0, dirty.size)
        elif size == 0:
            content = b""
        else:
            content = self.server.content(ino)
            self._rpc(len(content))
        self.dirty[ino] = DirtyFile(size, content[:size] + bytes(max(0, size - len(content))))
        self.mount.mark_dirty(ino, self)

    def discard(self, ino: int) -> None:
        """Drop this node's unsent writes to a file (their upload failed)."""
        self.dirty.pop(ino, None)
        self.mount.clear_dirty(ino, self)
        pending = self.pending_create.pop(ino, None)
        if pending is not None:
            self.forget_entry(*pending)

    def setattr(self, ino: int, *, mode: int | None = None, mtime: float | None = None) -> None:
        self._rpc()
        self._store(self.server.setattr(ino, mode=mode, mtime=mtime), changed_by_us=True)

    # -- open handles ------------------------------------------------------------------------
    def opened(self, ino: int) -> None:
        self.opens[ino] = self.opens.get(ino, 0) + 1
        if self.profile.unlink_open == "posix":
            self.server.add_open_ref(ino, 1)

    def closed(self, ino: int) -> None:
        """Last close on this node removes a silly-renamed file."""
        left = self.opens.get(ino, 0) - 1
        if left > 0:
            self.opens[ino] = left
        else:
            self.opens.pop(ino, None)
            for dir_ino, hidden in self.silly.pop(ino, []):
                self._rpc()
                try:
                    _, change = self.server.unlink(dir_ino, hidden)
                    self._after_change(change)
                except OSError:
                    pass  # already removed by someone else: nothing left to clean up
        if self.profile.unlink_open == "posix":
            self.server.add_open_ref(ino, -1)

    def evict(self) -> None:
        """The server dropped this client: dirty data is lost, open handles get EIO."""
        for ino in list(self.dirty):
            self.mount.clear_dirty(ino, self)
        self.epoch += 1
        opens = self.opens
        self.reset()
        self.opens = opens
