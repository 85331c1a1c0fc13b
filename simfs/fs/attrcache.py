"""A node's attribute cache for one mount, as the Linux NFS client keeps it: a first fetch gets
a lifetime in [acXXmin, acXXmax], an unchanged revalidation doubles it up to acXXmax, a change
resets it to acXXmin (nfs(5); nfsi->attrtimeo in fs/nfs/inode.c)."""

from __future__ import annotations

from collections.abc import Callable

from ..profiles import Profile
from .inode import DIR, Attr, Change


class _Cached:
    __slots__ = ("attr", "fetched", "ttl")

    def __init__(self, attr: Attr, fetched: float, ttl: float) -> None:
        self.attr, self.fetched, self.ttl = attr, fetched, ttl


class AttrCache:
    """Cached attributes by inode; ``on_stale(ino)`` runs when another node changed one."""

    def __init__(self, profile: Profile, clock: Callable[[], float], fraction: Callable[[], float],
                 on_stale: Callable[[int], None]) -> None:
        self.profile = profile
        self._clock = clock
        self._fraction = fraction
        self._on_stale = on_stale
        self.entries: dict[int, _Cached] = {}

    def version(self, attr: Attr) -> object:
        """What the client compares to tell that a file or directory changed, for every cache it
        keeps (attributes, data, lookups), as the profile's ``change_detection`` says: the change
        attribute (NFSv4: fs/nfs/inode.c nfs_update_inode compares change_attr), or mtime, ctime
        and size (NFSv3 has no change attribute: fs/nfs/nfs3xdr.c decode_fattr3 builds it from
        ctime), which miss a same-size change within one tick of the server's timestamps."""
        if self.profile.change_detection == "change_attr":
            return attr.change
        return attr.mtime, attr.ctime, attr.size

    def valid(self, ino: int) -> Attr | None:
        """The cached attributes if they have not expired."""
        cached = self.entries.get(ino)
        if cached is not None and self._clock() < cached.fetched + cached.ttl:
            return cached.attr
        return None

    def _bounds(self, kind: str) -> tuple[float, float]:
        p = self.profile
        return (p.acdirmin, p.acdirmax) if kind == DIR else (p.acregmin, p.acregmax)

    def store(self, attr: Attr, *, changed_by_us: bool = False) -> Attr:
        lo, hi = self._bounds(attr.kind)
        old = self.entries.get(attr.ino)
        changed = old is not None and self.version(old.attr) != self.version(attr)
        if changed and not changed_by_us:
            self._on_stale(attr.ino)
        if hi == 0:
            ttl = 0.0
        elif old is None:
            ttl = lo + (hi - lo) * self._fraction() if hi > lo else lo
        elif changed:
            ttl = lo
        else:
            ttl = min(max(old.ttl * 2, lo), hi)
        self.entries[attr.ino] = _Cached(attr, self._clock(), ttl)
        return attr

    def after_change(self, change: Change) -> None:
        """Weak cache consistency: our own change to a directory does not make its cached
        entries stale, but a change by someone else since we cached it does (compared the way
        ``change_detection`` says, so NFSv3 misses one made within the same timestamp tick)."""
        cached = self.entries.get(change.post.ino)
        if cached is not None and self.version(cached.attr) != self.version(change.pre):
            self._on_stale(change.post.ino)
        self.store(change.post, changed_by_us=True)

    def forget(self, ino: int) -> None:
        self.entries.pop(ino, None)
