"""The host's side of runtime/carrier/remotedist.py: a rank process's torch.distributed calls on the
run's DistWorld, where the collectives of every rank meet in virtual time. Groups cross by name;
payloads stay the plain data remotedist made of them (the host never loads a rank's objects)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import SimfsError
from ..dist import DistWorld, SimGroup


class DistRequests:
    """Requests of rank processes on one run's DistWorld, each served for a global rank."""

    def __init__(self, world: DistWorld) -> None:
        self.world = world
        self._groups: dict[str, SimGroup] = {}

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {"dist_init": self.init, "dist_destroy": self.destroy, "dist_new_group": self.new_group,
                "dist_collective": self.collective}

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
