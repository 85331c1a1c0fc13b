"""simfs's simulated torch.distributed as a rank process sees it: the process groups' collectives
meet in the host's DistWorld (requests to the host, like every other call); group handles,
membership and the rank's own initialised state stay in the process. Payloads cross as plain
data: a tensor as its dtype, shape and bytes; any other object as a pickle that only other rank
processes load (as torch's object collectives pickle them), never the host."""

from __future__ import annotations

import pickle
import sys
from typing import Any

from ..dist import DistWorld, SimGroup, named_group
from .remote import Ask

_TENSOR, _TENSORS, _PICKLED = "tensor", "tensors", "pickled"


class _Initialized:
    """``world.initialized[rank]`` for the one rank of this process."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __getitem__(self, rank: int) -> bool:
        return self.value


class RemoteWorld:
    """The DistWorld calls of simfs's torch.distributed interception (_intercept/torchdist.py)."""

    def __init__(self, ask: Ask, local: DistWorld, rank: int) -> None:
        self._ask = ask
        self.native = local.native
        self.initialized = _Initialized(local.initialized[rank])
        self.world = SimGroup(local, list(local.world.ranks), local.world.name, local.world.timeout)

    def group(self, group: Any, rank: int) -> SimGroup:
        return named_group(self.world, group, rank, self.initialized.value)

    def init(self, rank: int, timeout: Any) -> None:
        self._ask("dist_init", _seconds(timeout))
        self.initialized.value = True

    def destroy(self, rank: int) -> None:
        self._ask("dist_destroy")
        self.initialized.value = False

    def new_group(self, rank: int, ranks: list[int] | None, timeout: Any) -> Any:
        created: tuple[str, list[int], float] | None = self._ask("dist_new_group", ranks, _seconds(timeout))
        if created is None:
            from torch.distributed import GroupMember

            return GroupMember.NON_GROUP_MEMBER
        name, members, limit = created
        return SimGroup(self.world.world, members, name, limit)

    def collective(self, rank: int, group: Any, kind: str, payload: Any, *, timeout: float | None = None,
                   nbytes: int = 0) -> Any:
        return self.collective_named(self.group(group, rank).name, kind, payload, timeout=timeout, nbytes=nbytes)

    def collective_named(self, name: str, kind: str, payload: Any, *, timeout: float | None = None,
                         nbytes: int = 0) -> list[Any]:
        """The next collective of the group the host knows as ``name``: every rank's payload."""
        everyone: list[Any] = self._ask("dist_collective", name, kind, _encode(payload), timeout, nbytes)
        return [_decode(item) for item in everyone]

    def ask(self, op: str, *args: Any) -> Any:
        """Any other request to the host (simfs/c10d's groups and stores)."""
        return self._ask(op, *args)


def _seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    return float(timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _encode(payload: Any) -> Any:
    if payload is None:
        return None
    if _is_tensor(payload):
        return (_TENSOR, *tensor_parts(payload))
    if isinstance(payload, list) and payload and all(_is_tensor(t) for t in payload):
        return (_TENSORS, [tensor_parts(t) for t in payload])
    return (_PICKLED, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


def tensor_parts(tensor: Any) -> tuple[str, list[int], bytes]:
    """A tensor as plain data: its dtype's name, its shape and its bytes (tensor_from_parts undoes it)."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return str(tensor.dtype).removeprefix("torch."), list(tensor.shape), data


def tensor_from_parts(dtype: str, shape: list[int], data: bytes) -> Any:
    import torch

    kind = getattr(torch, dtype)
    if not data:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(kind).reshape(shape)


def _decode(item: Any) -> Any:
    if item is None:
        return None
    tag = item[0]
    if tag == _TENSOR:
        return tensor_from_parts(*item[1:])
    if tag == _TENSORS:
        return [tensor_from_parts(*parts) for parts in item[1]]
    return pickle.loads(item[1])
