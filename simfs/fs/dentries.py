"""A node's lookup cache for one mount: names to inodes, and "not found" (negative) entries,
kept as the profile's ``lookupcache`` says (nfs(5): all, positive, none)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..profiles import Profile

MISS = -1  # no usable cached entry (a real inode number is never negative)


class DentryCache:
    """Entries by directory inode: name -> (inode or None for a negative entry, cached at)."""

    def __init__(self, profile: Profile, clock: Callable[[], float]) -> None:
        self.profile = profile
        self._clock = clock
        self.entries: dict[int, dict[str, tuple[int | None, float]]] = {}

    def get(self, dir_ino: int, name: str) -> int | None:
        """The cached inode, None for a live negative entry, or MISS."""
        entry = self.entries.get(dir_ino, {}).get(name)
        if entry is None:
            return MISS
        ino, at = entry
        p = self.profile
        if self._clock() - at < (p.positive_ttl if ino is not None else p.negative_ttl):
            return ino
        return MISS

    def put(self, dir_ino: int, name: str, ino: int | None) -> None:
        """What a lookup or our own namespace change taught us (as lookupcache allows)."""
        mode = self.profile.lookupcache
        if mode == "none" or (ino is None and mode != "all"):
            self.forget(dir_ino, name)
            return
        self.entries.setdefault(dir_ino, {})[name] = (ino, self._clock())

    def fill(self, dir_ino: int, listing: Iterable[tuple[str, int]]) -> None:
        """A directory listing refreshes the positive entries it names."""
        if self.profile.lookupcache == "none":
            return
        cache = self.entries.setdefault(dir_ino, {})
        now = self._clock()
        for name, ino in listing:
            cache[name] = (ino, now)

    def forget(self, dir_ino: int, name: str) -> None:
        entries = self.entries.get(dir_ino)
        if entries is not None:
            entries.pop(name, None)

    def forget_dir(self, dir_ino: int) -> None:
        """The directory changed: every entry under it, negative ones included, is dropped."""
        self.entries.pop(dir_ino, None)

    def forget_inode(self, ino: int) -> None:
        self.entries.pop(ino, None)
        for entries in self.entries.values():
            for name in [n for n, (i, _) in entries.items() if i == ino]:
                del entries[name]
