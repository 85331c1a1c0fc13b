"""A process group as both sides of the port name it: the ranks of a torch.distributed group, in
group-rank order (the kernel's DistWorld keeps each group's collectives in flight on it), what an
``async_op=True`` call returns, and the copy an object collective hands each rank."""

from __future__ import annotations

import pickle
from typing import Any

from .task import current_task


class Work:
    """What ``async_op=True`` returns: the operation already finished in virtual time."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> Any:
        import torch.futures

        fut: torch.futures.Future[None] = torch.futures.Future()
        fut.set_result(None)
        return fut


class SimGroup:
    """A simulated process group (ranks are global ranks, in group-rank order)."""

    def __init__(self, ranks: list[int], name: str, timeout: float) -> None:
        self.ranks = ranks
        self._index = {r: i for i, r in enumerate(ranks)}
        self.name = name
        self.timeout = timeout  # a member's until it gives its own
        self.timeouts: dict[int, float] = {}  # each member's own: torch keeps a group's timeout per process
        self.next_seq: dict[int, int] = {r: 0 for r in ranks}
        self.calls: dict[int, Any] = {}  # seq -> the kernel's collective in flight (runtime/dist.py)
        self.aborted: str | None = None

    def timeout_of(self, rank: int) -> float:
        """The seconds ``rank``'s collectives on this group wait (its own, else the group's)."""
        return self.timeouts.get(rank, self.timeout)

    def rank(self) -> int:
        task = current_task()
        return self._index.get(task.rank, -1) if task else -1

    def size(self) -> int:
        return len(self.ranks)

    def group_rank(self, global_rank: int) -> int:
        """This group's rank of a global rank (-1 if not a member)."""
        return self._index.get(global_rank, -1)

    def __repr__(self) -> str:
        return f"<simfs ProcessGroup {self.name} ranks={self.ranks}>"


def named_group(world: SimGroup, group: Any, rank: int, initialized: bool) -> SimGroup:
    """The group a torch.distributed call of ``rank`` names (None, or anything but a SimGroup:
    the world), as torch checks it."""
    if not initialized:
        raise ValueError("Default process group has not been initialized, "
                         "please make sure to call init_process_group.")
    if group is None or not isinstance(group, SimGroup):
        return world
    if rank not in group.ranks:
        raise ValueError(f"rank {rank} is not a member of {group!r}")
    return group



def copy_object(obj: Any) -> tuple[Any, int]:
    """What crosses process boundaries: a pickled copy (and its size)."""
    data = pickle.dumps(obj)
    return pickle.loads(data), len(data)
