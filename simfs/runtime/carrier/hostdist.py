"""The kernel's handlers of a rank's torch.distributed and store requests (port/schema.py) on the
run's DistWorld, where the collectives of every rank meet in virtual time, and its Stores. Rank
processes (rank/dist.py, simfs/rank/c10d) and greenlet ranks' stores ask the same.
Groups cross by name; payloads stay the plain data the rank made of them (the host never loads a
rank's objects)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import SimfsError
from ...port import schema
from ...tasks.groups import SimGroup
from ..dist import DistWorld, seconds
from ..kvstore import Stores


class DistRequests:
    """Requests of rank processes on one run's DistWorld and its stores, each served for a global
    rank (``node_of`` names its node)."""

    def __init__(self, world: DistWorld, stores: Stores, node_of: Callable[[int], int]) -> None:
        self.world = world
        self.stores = stores
        self._node_of = node_of
        self._groups: dict[str, SimGroup] = {}

    def handlers(self) -> dict[type[schema.Request], Callable[[int, Any], Any]]:
        return {schema.DistInit: self.init, schema.DistDestroy: self.destroy, schema.DistNewGroup: self.new_group,
                schema.Collective: self.collective, schema.DistGroup: self.group,
                schema.StoreShared: self.store_shared, schema.StoreListen: self.store_listen,
                schema.StoreConnect: self.store_connect, schema.StoreClients: self.store_clients,
                schema.StoreOp: self.store}

    def group(self, rank: int, request: schema.DistGroup) -> None:
        """A process group c10d made in a rank process (every member makes it, under one name)."""
        name, members = request.name, request.ranks
        timeout = seconds(f"process group {name!r}", request.timeout)
        if name == self.world.world.name and members == self.world.world.ranks:  # the default group
            self.world.initialized[rank] = True
            self.world.world.timeouts[rank] = timeout  # this rank's own, as torch keeps it per process
            return
        bad = [r for r in members if r not in self.world.world.ranks]
        if bad or rank not in members:
            raise SimfsError(f"simfs: rank {rank} made process group {name!r} of ranks {members}, "
                             f"which are not a group it belongs to in a world of {len(self.world.world.ranks)}")
        known = self._groups.get(name)
        if known is None:
            known = self._groups[name] = SimGroup(members, name, timeout)
        elif known.ranks != members:
            raise SimfsError(f"simfs: process group {name!r} was made with ranks {known.ranks} and with {members}")
        known.timeouts[rank] = timeout

    def store_shared(self, rank: int, request: schema.StoreShared) -> None:
        self.stores.shared(request.name)

    def store_listen(self, rank: int, request: schema.StoreListen) -> str | None:
        return self.stores.listen(self._node_of(rank), request.port)

    def store_connect(self, rank: int, request: schema.StoreConnect) -> bool:
        return self.stores.connect(request.address, request.timeout)

    def store_clients(self, rank: int, request: schema.StoreClients) -> bool:
        return self.stores.wait_for_clients(request.address, request.count, request.timeout)

    def store(self, rank: int, request: schema.StoreOp) -> Any:
        return self.stores.call(request.store, request.op, list(request.args))

    def init(self, rank: int, request: schema.DistInit) -> None:
        self.world.init(rank, request.timeout)

    def destroy(self, rank: int, request: schema.DistDestroy) -> None:
        self.world.destroy(rank)

    def new_group(self, rank: int, request: schema.DistNewGroup) -> tuple[str, list[int], float] | None:
        created = self.world.new_group(rank, request.ranks, request.timeout)
        if created is None:
            return None  # not a member: the rank's GroupMember.NON_GROUP_MEMBER
        self._groups[created.name] = created
        return created.name, list(created.ranks), created.timeout_of(rank)

    def collective(self, rank: int, request: schema.Collective) -> Any:
        name = request.group
        group = None if name == self.world.world.name else self._groups.get(name)
        if group is None and name != self.world.world.name:
            raise SimfsError(f"simfs: rank {rank} used process group {name!r}, which no new_group made")
        return self.world.collective(rank, group, request.kind, request.payload, timeout=request.timeout,
                                     nbytes=request.nbytes, root=request.root)
