"""Advisory lock tables (flock and lockf) of one mount: one shared by the cluster, or one
per node, as the profile's ``flock`` setting says."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from ..tasks.waitqueue import WaitQueue


class _Held:
    __slots__ = ("exclusive", "shared")

    def __init__(self) -> None:
        self.shared: dict[Hashable, int] = {}
        self.exclusive: Hashable | None = None


class LockTable:
    """Whole-file shared/exclusive locks keyed by inode; owners are opaque keys."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._held: dict[int, _Held] = {}
        self._queues: dict[int, WaitQueue] = {}

    def queue(self, ino: int) -> WaitQueue:
        q = self._queues.get(ino)
        if q is None:
            q = self._queues[ino] = WaitQueue(f"lock({self.name}, inode {ino})")
        return q

    def try_acquire(self, ino: int, owner: Hashable, exclusive: bool) -> bool:
        held = self._held.setdefault(ino, _Held())
        if held.exclusive is not None and held.exclusive != owner:
            return False
        others = [o for o in held.shared if o != owner]
        if exclusive:
            if others:
                return False
            held.shared.pop(owner, None)
            held.exclusive = owner
        else:
            if held.exclusive == owner:
                held.exclusive = None
            held.shared[owner] = 1
        return True

    def release(self, ino: int, owner: Hashable) -> bool:
        """Drop ``owner``'s lock on ``ino``; True if it held one."""
        held = self._held.get(ino)
        if held is None:
            return False
        found = held.exclusive == owner or owner in held.shared
        if held.exclusive == owner:
            held.exclusive = None
        held.shared.pop(owner, None)
        if held.exclusive is None and not held.shared:
            del self._held[ino]
        return found

    def release_where(self, predicate: Callable[[Hashable], bool]) -> list[int]:
        """Drop every lock whose owner matches; returns the inodes that changed."""
        changed = []
        for ino, held in list(self._held.items()):
            owners = ([held.exclusive] if held.exclusive is not None else []) + list(held.shared)
            hit = [o for o in owners if predicate(o)]
            for owner in hit:
                self.release(ino, owner)
            if hit:
                changed.append(ino)
        return changed

    def holders(self, ino: int) -> list[Hashable]:
        held = self._held.get(ino)
        if held is None:
            return []
        return ([held.exclusive] if held.exclusive is not None else []) + list(held.shared)
