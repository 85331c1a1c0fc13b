"""How a tensor is split over ranks: hand-made shards (``Sharded``), SBP-style placements over a
device mesh (``Split(dim)``, ``Broadcast``), and DTensor's Shard/Replicate turned into boxes."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .boxes import Box, Shape, describe, inside
from .errors import LayoutError


@dataclass(frozen=True)
class Split:
    """The tensor is cut along ``dim`` over a mesh dimension (torch.chunk sizes: the last parts
    may be smaller or empty). DTensor's ``Shard(dim)``."""

    dim: int


@dataclass(frozen=True)
class Broadcast:
    """Every rank along a mesh dimension holds the same data. DTensor's ``Replicate()``."""


Placement = Split | Broadcast


@dataclass(frozen=True)
class Sharded:
    """One rank's part of a larger tensor: ``local`` (a torch tensor or numpy array) holds the
    box at ``offsets`` of a tensor of ``global_shape``. Ranks holding the same box are replicas."""

    local: Any
    global_shape: Shape
    offsets: Shape

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_shape", tuple(int(g) for g in self.global_shape))
        object.__setattr__(self, "offsets", tuple(int(o) for o in self.offsets))
        if not inside(self.box, self.global_shape):
            raise LayoutError(f"Sharded: a local part of shape {list(self.local.shape)} at offsets "
                              f"{list(self.offsets)} does not fit in the global shape {list(self.global_shape)}")

    @property
    def box(self) -> Box:
        return self.offsets, tuple(int(s) for s in self.local.shape)

    @classmethod
    def of(cls, full: Any, placements: Sequence[Placement], mesh_shape: Sequence[int],
           coords: Sequence[int]) -> Sharded:
        """The part of ``full`` the rank at ``coords`` of a mesh of ``mesh_shape`` holds under
        ``placements`` (one per mesh dimension), as a view of ``full``."""
        global_shape = tuple(int(s) for s in full.shape)
        offsets, shape = local_box(global_shape, placements, mesh_shape, coords)
        view = full[tuple(slice(o, o + s) for o, s in zip(offsets, shape))]
        return cls(view, global_shape, offsets)


def local_box(global_shape: Shape, placements: Sequence[Placement], mesh_shape: Sequence[int],
              coords: Sequence[int]) -> Box:
    """The box the mesh coordinate ``coords`` holds: each Split cuts the current extent of its
    dimension into ``mesh_shape[i]`` torch.chunk parts, in mesh-dimension order."""
    if not len(placements) == len(mesh_shape) == len(coords):
        raise LayoutError(f"{len(placements)} placements for a mesh of shape {list(mesh_shape)} at {list(coords)}")
    offsets, shape = [0] * len(global_shape), list(global_shape)
    for placement, size, coord in zip(placements, mesh_shape, coords):
        if isinstance(placement, Broadcast):
            continue
        if not isinstance(placement, Split) or not 0 <= placement.dim < len(global_shape):
            raise LayoutError(f"placement {placement!r} does not fit a tensor of shape {list(global_shape)}")
        d = placement.dim
        part = -(-shape[d] // size) if shape[d] else 0
        start = min(coord * part, shape[d])
        offsets[d] += start
        shape[d] = max(0, min(part, shape[d] - start))
    return tuple(offsets), tuple(shape)


def dtensor_module() -> Any:
    """torch.distributed.tensor if something imported it (a DTensor exists only then), else None."""
    return sys.modules.get("torch.distributed.tensor")


def dtensor_part(value: Any, key: str) -> tuple[Any, Shape, Box] | None:
    """(local tensor, global shape, box) of a DTensor, or None if this rank is not in its mesh.
    Shard and Replicate map to Split and Broadcast; Partial and strided shards are refused."""
    mod = dtensor_module()
    assert mod is not None
    coords = value.device_mesh.get_coordinate()
    if coords is None:
        return None
    placements: list[Placement] = []
    for p in value.placements:
        if type(p) is mod.Shard:
            placements.append(Split(p.dim))
        elif type(p) is mod.Replicate:
            placements.append(Broadcast())
        elif isinstance(p, mod.Partial):
            raise LayoutError(f"{key!r}: a DTensor with a Partial placement holds unreduced values; reduce it "
                              "first (dtensor.redistribute(placements=[Replicate()...]))")
        else:
            raise LayoutError(f"{key!r}: DTensor placement {p!r} is not supported (Shard and Replicate are)")
    global_shape = tuple(int(s) for s in value.shape)
    box = local_box(global_shape, placements, tuple(value.device_mesh.shape), tuple(coords))
    local = value.to_local()
    if tuple(local.shape) != box[1]:
        raise LayoutError(f"{key!r}: the DTensor's local shape {list(local.shape)} is not the {describe(box)} "
                          "its placements give (uneven custom sharding is not supported)")
    return local, global_shape, box
