"""simfs's simulated torch.distributed as a rank sees it (rank/intercept/torchdist.py calls it, c10d's
groups in a rank process too): every init, new group and collective is a request of the port to
the kernel's one handler table (runtime/carrier/hostdist.py), where the collectives of every rank
meet in the run's DistWorld; group handles, membership and the rank's own initialised state stay
with the rank. A rank process sends its payloads as plain data: tensors as where they lie in its
outbox (outbox.py: the bytes go through shared memory, never through the host), any other object as
a pickle that only other rank processes load (as torch's object collectives pickle them), never the
host. Greenlet ranks hand theirs over as they are (one interpreter; the calls copy what they send)."""

from __future__ import annotations

import pickle
import sys
from typing import Any, Protocol

from ..port import schema
from ..tasks.groups import SimGroup, named_group
from .client import Ask
from .outbox import Outbox

_TENSOR, _TENSORS, _PICKLED = "tensor", "tensors", "pickled"


class Payloads(Protocol):
    """How a collective's payloads travel between the ranks."""

    def encode(self, group: str, payload: Any) -> Any: ...

    def decode(self, everyone: list[Any]) -> list[Any]: ...

    def give_up(self, group: str) -> None:
        """A collective of ``group`` failed: what its members may still read is left alone."""


class Shared:
    """Greenlet ranks: payloads handed over as they are (the callers send copies)."""

    def encode(self, group: str, payload: Any) -> Any:
        return payload

    def decode(self, everyone: list[Any]) -> list[Any]:
        return everyone

    def give_up(self, group: str) -> None:
        """Nothing is kept between collectives."""


class _Initialized:
    """``world.initialized[rank]`` for the one rank of this process."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __getitem__(self, rank: int) -> bool:
        return self.value


class WorldClient:
    """One rank's torch.distributed world: ``world`` its default group (ranks, name, timeout),
    ``initialized`` whether the job starts with it initialized (torchrun's environment), ``native``
    whether a rank process runs torch's own c10d on it (simfs/rank/c10d)."""

    def __init__(self, ask: Ask, world: SimGroup, initialized: bool, payloads: Payloads,
                 native: bool = False) -> None:
        self._ask = ask
        self._payloads = payloads
        self.native = native
        self.initialized = _Initialized(initialized)
        self.world = world

    @classmethod
    def of_process(cls, ask: Ask, start: schema.RankSpec, outbox: Outbox) -> WorldClient:
        """A rank process's, from what the host sent it."""
        world = SimGroup(list(start.world_ranks), start.world_name, start.world_timeout)
        return cls(ask, world, start.dist_initialized, Outboxed(outbox), start.dist_native)

    def group(self, group: Any, rank: int) -> SimGroup:
        return named_group(self.world, group, rank, self.initialized.value)

    def init(self, rank: int, timeout: Any) -> None:
        self._ask(schema.DistInit(_seconds(timeout)))
        self.initialized.value = True

    def destroy(self, rank: int) -> None:
        self._ask(schema.DistDestroy())
        self.initialized.value = False

    def new_group(self, rank: int, ranks: list[int] | None, timeout: Any) -> Any:
        created: tuple[str, list[int], float] | None = self._ask(schema.DistNewGroup(ranks, _seconds(timeout)))
        if created is None:
            from torch.distributed import GroupMember

            return GroupMember.NON_GROUP_MEMBER
        name, members, limit = created
        return SimGroup(members, name, limit)

    def collective(self, rank: int, group: Any, kind: str, payload: Any, *, timeout: float | None = None,
                   nbytes: int = 0, root: int = -1) -> Any:
        return self.collective_named(self.group(group, rank).name, kind, payload, timeout=timeout, nbytes=nbytes,
                                     root=root)

    def collective_named(self, name: str, kind: str, payload: Any, *, timeout: float | None = None,
                         nbytes: int = 0, root: int = -1) -> list[Any]:
        """The next collective of the group the host knows as ``name``: every rank's payload that
        reached this one (gloo's algorithms: a broadcast's receivers get the root's; None for
        the others)."""
        try:
            everyone: list[Any] = self._ask(schema.Collective(name, kind, self._payloads.encode(name, payload),
                                                              timeout, nbytes, root))
        except Exception:
            self._payloads.give_up(name)
            raise
        return self._payloads.decode(everyone)

    def ask(self, request: schema.Request) -> Any:
        """Any other request to the host (simfs/rank/c10d's groups and stores)."""
        return self._ask(request)


class Outboxed:
    """A rank process's payloads: tensors through its outbox, other objects pickled."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    def give_up(self, group: str) -> None:
        self._outbox.give_up(group)

    def encode(self, group: str, payload: Any) -> Any:
        if payload is None:
            return None
        if _is_tensor(payload):
            return (_TENSOR, self._outbox.post(group, [payload]))
        if isinstance(payload, list) and payload and all(_is_tensor(t) for t in payload):
            return (_TENSORS, self._outbox.post(group, payload))
        return (_PICKLED, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))

    def decode(self, everyone: list[Any]) -> list[Any]:
        """Every rank's payload; the i-th tensors of all ranks are read together (Outbox.read)."""
        places = {r: item[1] for r, item in enumerate(everyone) if item is not None and item[0] != _PICKLED}
        tensors: dict[int, list[Any]] = {r: [] for r in places}
        for i in range(max(map(len, places.values()), default=0)):
            holders = [r for r, theirs in places.items() if i < len(theirs)]
            for r, tensor in zip(holders, self._outbox.read([places[r][i] for r in holders])):
                tensors[r].append(tensor)
        decoded: list[Any] = []
        for r, item in enumerate(everyone):
            if item is None:
                decoded.append(None)
            elif item[0] == _PICKLED:
                decoded.append(pickle.loads(item[1]))
            else:
                decoded.append(tensors[r][0] if item[0] == _TENSOR else tensors[r])
        return decoded


def _seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    return float(timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
