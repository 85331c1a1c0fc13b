"""A mount: one storage server and the client every node uses to reach it."""

from __future__ import annotations

from collections.abc import Callable

from ..profiles import Profile
from .client import Client, Draws, Meter
from .locks import LockTable
from .server import Server


class Mount:
    """A filesystem mounted at ``path`` on ``nodes`` (a node-local disk has one node)."""

    def __init__(self, path: str, profile: Profile, nodes: list[int], clock: Callable[[], float],
                 choices: Draws, meter: Meter, interleave: Callable[[], None], host: int | None = None) -> None:
        self.path = path
        self.host = host  # the node this filesystem is a disk of (None: a network server)
        self.profile = profile
        self.server = Server(profile, clock, path)
        self.clients = {n: Client(self.server, self, n, clock, choices, meter) for n in nodes}
        self._cluster_locks = LockTable(path)
        self._node_locks = {n: LockTable(f"{path}@node{n}") for n in nodes}
        self._dirty: dict[int, list[Client]] = {}
        self._interleave = interleave

    def lock_table(self, node: int) -> LockTable | None:
        """Where flock/lockf locks live for a node: shared, per node, or nowhere."""
        mode = self.profile.flock
        if mode == "cluster":
            return self._cluster_locks
        if mode == "node":
            return self._node_locks[node]
        return None

    def lock_tables(self) -> list[LockTable]:
        return [self._cluster_locks, *self._node_locks.values()]

    def interleave(self) -> None:
        """Let other ranks run in the middle of a multi-request operation."""
        self._interleave()

    def dirty_holders(self, ino: int) -> list[Client]:
        return list(self._dirty.get(ino, ()))

    def mark_dirty(self, ino: int, client: Client) -> None:
        holders = self._dirty.setdefault(ino, [])
        if client not in holders:
            holders.append(client)

    def clear_dirty(self, ino: int, client: Client) -> None:
        holders = self._dirty.get(ino)
        if holders and client in holders:
            holders.remove(client)
            if not holders:
                del self._dirty[ino]

    def pending_creates(self, dir_ino: int) -> list[tuple[Client, int]]:
        """Files some node is creating in a directory and has not published yet."""
        return [(client, ino) for client in self.clients.values()
                for ino, (parent, _) in list(client.pending_create.items()) if parent == dir_ino]

    def node_crashed(self, node: int) -> None:
        """A node lost power: its client forgets everything, its dirty data is gone."""
        client = self.clients[node]
        for ino in list(client.dirty):
            self.clear_dirty(ino, client)
        client.reset()
        self._node_locks[node] = LockTable(f"{self.path}@node{node}")
