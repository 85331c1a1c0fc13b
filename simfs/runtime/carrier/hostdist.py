"""The host's side of runtime/carrier/remotedist.py: a rank process's torch.distributed calls on the
run's DistWorld, where the collectives of every rank meet in virtual time. Groups cross by name;
payloads stay the plain data remotedist made of them (the host never loads a rank's objects)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import SimfsError
from ..dist import DistWorld, SimGroup
from ..kvstore import Stores


class DistRequests:
    """Requests of rank processes on one run's DistWorld and its stores, each served for a global
    rank (``node_of`` names its node)."""

    def __init__(self, world: DistWorld, stores: Stores, node_of: Callable[[int], int]) -> None:
        self.world = world
        self.stores = stores
        self._node_of = node_of
        self._groups: dict[str, SimGroup] = {}

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {"dist_init": self.init, "dist_destroy": self.destroy, "dist_new_group": self.new_group,
                "dist_collective": self.collective, "dist_group": self.group, "store_shared": self.store_shared,
                "store_listen": self.store_listen, "store_connect": self.store_connect,
                "store_clients": self.store_clients, "store": self.store}

    def group(self, rank: int, name: str, ranks: list[int], timeout: float) -> None:
        """A process group c10d made in a rank process (every member makes it, under one name)."""
        members = [int(r) for r in ranks]
        if name == self.world.world.name and members == self.world.world.ranks:  # the default group
            self.world.initialized[rank] = True
            self.world.world.timeout = float(timeout)
            return
        bad = [r for r in members if r not in self.world.world.ranks]
        if bad or rank not in members:
            raise SimfsError(f"simfs: rank {rank} made process group {name!r} of ranks {members}, "
                             f"which are not a group it belongs to in a world of {len(self.world.world.ranks)}")
        known = self._groups.get(str(name))
        if known is None:
            self._groups[str(name)] = SimGroup(self.world, members, str(name), float(timeout))
        elif known.ranks != members:
            raise SimfsError(f"simfs: process group {name!r} was made with ranks {known.ranks} and with {members}")

    def store_shared(self, rank: int, name: str) -> None:
        self.stores.shared(str(name))

    def store_listen(self, rank: int, port: int) -> str | None:
        return self.stores.listen(self._node_of(rank), int(port))

    def store_connect(self, rank: int, address: str, timeout: float | None) -> bool:
        return self.stores.connect(str(address), None if timeout is None else float(timeout))

    def store_clients(self, rank: int, address: str, count: int, timeout: float | None) -> bool:
        return self.stores.wait_for_clients(str(address), int(count), None if timeout is None else float(timeout))

    def store(self, rank: int, name: str, op: str, args: list[Any]) -> Any:
        return self.stores.call(str(name), str(op), list(args))

    def init(self, rank: int, timeout: float | None) -> None:
        self.world.init(rank, None if timeout is None else float(timeout))

    def destroy(self, rank: int) -> None:
        self.world.destroy(rank)

    def new_group(self, rank: int, ranks: list[int] | None,
                  timeout: float | None) -> tuple[str, list[int], float] | None:
        members = None if ranks is None else [int(r) for r in ranks]
        created = self.world.new_group(rank, members, None if timeout is None else float(timeout))
        if not isinstance(created, SimGroup):
            return None  # not a member: the rank's GroupMember.NON_GROUP_MEMBER
        self._groups[created.name] = created
        return created.name, list(created.ranks), created.timeout

    def collective(self, rank: int, name: str, kind: str, payload: Any, timeout: float | None, nbytes: int) -> Any:
        group = None if name == self.world.world.name else self._groups.get(str(name))
        if group is None and name != self.world.world.name:
            raise SimfsError(f"simfs: rank {rank} used process group {name!r}, which no new_group made")
        return self.world.collective(rank, group, str(kind), payload,
                                     timeout=None if timeout is None else float(timeout), nbytes=int(nbytes))
