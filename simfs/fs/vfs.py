"""One node's view of the namespace: which mount a path lies on, and the walk from the
mount's root to an inode through the node's client (following symbolic links)."""

from __future__ import annotations

import errno
import posixpath
from typing import NamedTuple

from ..port.native import normalize
from .client import Client
from .inode import DIR, LINK, ROOT, fs_error
from .mount import Mount

MAX_SYMLINKS = 40


class Resolved(NamedTuple):
    mount: Mount
    client: Client
    ino: int
    path: str


class ResolvedParent(NamedTuple):
    mount: Mount
    client: Client
    dir_ino: int
    name: str
    path: str


class NodeVfs:
    """The mount table of one node; the last entry is the node's local disk at '/'."""

    def __init__(self, node: int, shared: list[Mount], local: Mount) -> None:
        self.node = node
        self.local = local
        self._table = sorted(shared, key=lambda m: len(m.path), reverse=True)
        self.mounts = [*self._table, local]

    def mount_for(self, path: str) -> tuple[Mount, list[str]]:
        for mount in self._table:
            mp = mount.path
            if path == mp or path.startswith(mp + "/"):
                rest = path[len(mp):]
                return mount, [c for c in rest.split("/") if c]
        return self.local, [c for c in path.split("/") if c]

    def _walk(self, path: str, skip_last: bool, follow_last: bool,
              reval: bool) -> tuple[Mount, Client, int, list[str], str]:
        """Walk ``path`` (normalized, absolute) to its inode, or to its parent's when
        ``skip_last``. Returns the path actually walked (after symbolic links) and its parts."""
        hops = 0
        while True:
            mount, parts = self.mount_for(path)
            client = mount.clients[self.node]
            server = mount.server
            ino = ROOT
            stop = len(parts) - 1 if skip_last else len(parts)
            restarted = False
            for i in range(stop):
                if server.kinds.get(ino) != DIR:
                    raise fs_error(errno.ENOTDIR)
                name = parts[i]
                if reval:
                    client.forget_entry(ino, name)
                child = client.lookup(ino, name)
                last = i == len(parts) - 1
                if server.kinds.get(child) == LINK and (not last or follow_last):
                    hops += 1
                    if hops > MAX_SYMLINKS:
                        raise fs_error(errno.ELOOP)
                    target = client.readlink(child)
                    base = posixpath.join(mount.path, *parts[:i])
                    path = normalize(posixpath.join(base, target, *parts[i + 1:]))
                    restarted = True
                    break
                ino = child
            if not restarted:
                return mount, client, ino, parts, path

    def resolve(self, path: str, *, follow: bool = True, reval: bool = False) -> Resolved:
        mount, client, ino, _, path = self._walk(path, False, follow, reval)
        return Resolved(mount, client, ino, path)

    def resolve_parent(self, path: str, *, reval: bool = False) -> ResolvedParent:
        """The directory that holds the last component of ``path``, and that name."""
        mount, client, ino, parts, path = self._walk(path, True, False, reval)
        if mount.path == "/proc":
            raise fs_error(errno.EACCES)  # nothing in /proc is made, removed or renamed by a process
        if not parts:
            raise fs_error(errno.EBUSY)  # a mount point (or '/') cannot be created or removed
        if mount.server.kinds.get(ino) != DIR:
            raise fs_error(errno.ENOTDIR)
        return ResolvedParent(mount, client, ino, parts[-1], path)
