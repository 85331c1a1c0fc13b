"""The communicator coordination primitives use: torch.distributed when it is initialized,
a single process otherwise. Group ranks throughout; node layout from torchrun's environment
or, failing that, from the ranks' hostnames."""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Protocol, cast, runtime_checkable


@runtime_checkable
class Comm(Protocol):
    """What coord needs from a process group."""

    rank: int
    world_size: int

    @property
    def local_rank(self) -> int: ...

    @property
    def local_world_size(self) -> int: ...

    @property
    def node(self) -> int: ...

    @property
    def num_nodes(self) -> int: ...

    def barrier(self, timeout: float | None = None) -> None: ...

    def broadcast_object(self, obj: Any, src: int = 0) -> Any: ...

    def all_gather_object(self, obj: Any) -> list[Any]: ...

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None: ...

    def scatter_object(self, objs: list[Any] | None, src: int = 0) -> Any: ...

    def broadcast_bytes(self, data: bytes | None, src: int = 0) -> bytes: ...

    def subgroup(self, ranks: list[int]) -> Comm | None: ...


class LocalComm:
    """One process, no torch.distributed: every collective is the identity."""

    rank = 0
    world_size = 1
    local_rank = 0
    local_world_size = 1
    node = 0
    num_nodes = 1

    def barrier(self, timeout: float | None = None) -> None:
        return None

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        return [obj]

    def scatter_object(self, objs: list[Any] | None, src: int = 0) -> Any:
        if not objs:
            raise ValueError("scatter_object: the source must pass one object per rank")
        return objs[0]

    def broadcast_bytes(self, data: bytes | None, src: int = 0) -> bytes:
        if data is None:
            raise ValueError("broadcast_bytes: the source must pass the bytes")
        return bytes(data)

    def subgroup(self, ranks: list[int]) -> Comm | None:
        return self if 0 in ranks else None

    def __repr__(self) -> str:
        return "<coord.LocalComm rank 0 of 1>"


def _layout_from_env(world_size: int) -> tuple[int, int, int] | None:
    """(local_rank, local_world_size, node) as torchrun exports them, if complete."""
    try:
        local_rank = int(os.environ["LOCAL_RANK"])
        local_world = int(os.environ["LOCAL_WORLD_SIZE"])
        node = int(os.environ["GROUP_RANK"])
    except (KeyError, ValueError):
        return None
    if not (0 <= local_rank < local_world <= world_size):
        return None
    return local_rank, local_world, node


class TorchComm:
    """A torch.distributed process group (the default one when ``group`` is None)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._layout: tuple[int, int, int, int] | None = None
        backend = dist.get_backend(group)
        self.backend = str(backend).lower()
        self.device = None
        if self.backend == "nccl":
            import torch

            self.device = torch.device("cuda", torch.cuda.current_device())

    # -- node layout ------------------------------------------------------------------------
    def _node_layout(self) -> tuple[int, int, int, int]:
        """(local_rank, local_world_size, node, num_nodes); a collective when it must ask."""
        if self._layout is None:
            from_env = _layout_from_env(self.world_size) if self.group is None else None
            if from_env is not None:
                local_rank, local_world, node = from_env
                self._layout = (local_rank, local_world, node, -(-self.world_size // local_world))
            else:
                hosts = self.all_gather_object(socket.gethostname())
                order = list(dict.fromkeys(hosts))
                me = hosts[self.rank]
                self._layout = (hosts[:self.rank].count(me), hosts.count(me), order.index(me), len(order))
        return self._layout

    @property
    def local_rank(self) -> int:
        return self._node_layout()[0]

    @property
    def local_world_size(self) -> int:
        return self._node_layout()[1]

    @property
    def node(self) -> int:
        return self._node_layout()[2]

    @property
    def num_nodes(self) -> int:
        return self._node_layout()[3]

    # -- collectives ------------------------------------------------------------------------
    def _global(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return self._dist.get_global_rank(self.group, group_rank)

    def barrier(self, timeout: float | None = None) -> None:
        """A barrier; with ``timeout`` (seconds) on gloo, one that names the missing ranks."""
        if timeout is not None and self.backend == "gloo":
            self._dist.monitored_barrier(self.group, timeout=datetime.timedelta(seconds=timeout))
        elif self.device is not None:
            self._dist.barrier(self.group, device_ids=[self.device.index])
        else:
            self._dist.barrier(self.group)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj if self.rank == src else None]
        self._dist.broadcast_object_list(box, src=self._global(src), group=self.group, device=self.device)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj, group=self.group)
        return out

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        out: list[Any] | None = [None] * self.world_size if self.rank == dst else None
        self._dist.gather_object(obj, out, dst=self._global(dst), group=self.group)
        return out

    def scatter_object(self, objs: list[Any] | None, src: int = 0) -> Any:
        if self.rank == src and (objs is None or len(objs) != self.world_size):
            raise ValueError(f"scatter_object: the source must pass {self.world_size} objects")
        out: list[Any] = [None]
        self._dist.scatter_object_list(out, objs if self.rank == src else None, src=self._global(src), group=self.group)
        return out[0]

    def broadcast_bytes(self, data: bytes | None, src: int = 0) -> bytes:
        """Raw bytes from ``src`` to every rank, as a uint8 tensor (no pickling)."""
        import torch

        size = self.broadcast_object(len(cast(bytes, data)) if self.rank == src else None, src)
        if size == 0:
            return b""
        device = self.device or torch.device("cpu")
        if self.rank == src:
            tensor = torch.frombuffer(bytearray(cast(bytes, data)), dtype=torch.uint8).to(device)
        else:
            tensor = torch.empty(size, dtype=torch.uint8, device=device)
        self._dist.broadcast(tensor, src=self._global(src), group=self.group)
        return tensor.cpu().numpy().tobytes()

    def subgroup(self, ranks: list[int]) -> Comm | None:
        """A communicator over some of this group's ranks (collective: every rank calls it)."""
        members = sorted({self._global(r) for r in ranks})
        group = self._dist.new_group(members)
        if self._global(self.rank) not in members:
            return None
        return TorchComm(group)

    def __repr__(self) -> str:
        return f"<coord.TorchComm rank {self.rank} of {self.world_size} ({self.backend})>"


def get_comm(process_group: Any = None) -> Comm:
    """The communicator in use: ``process_group`` (default: the world) when torch.distributed
    is initialized, else a single-process stand-in. Pass a Comm through unchanged."""
    if isinstance(process_group, (LocalComm, TorchComm)):
        return process_group
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None  # type: ignore[assignment]
    if dist is not None and dist.is_available() and dist.is_initialized():
        return TorchComm(process_group)
    if process_group is not None:
        raise ValueError("a process group was given but torch.distributed is not initialized")
    return LocalComm()
