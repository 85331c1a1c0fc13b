"""Global planning: from every rank's local plan (the chunks it holds) to who writes what. Each
distinct chunk is written once; replicated chunks go to the least-loaded holder, large ones split
across their holders by rows; shards must cover their tensor exactly and agree on dtype/shape.
Pure data in, data out: the collectives that carry the plans live in save.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import msgspec

from . import dtypes
from .boxes import Box, Shape, cover_problem, describe, volume
from .errors import LayoutError

SPLIT_BYTES = 8 << 20  # replicated chunks at least twice this size are split across their holders


class LocalChunk(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A chunk a rank holds: the box ``offsets``/``shape`` of tensor ``key``. Kind "tensor",
    "object" (pickled bytes, 1-D uint8) or "value" (a JSON value: no dtype, no box)."""

    key: str
    kind: str
    dtype: str
    global_shape: Shape
    offsets: Shape
    shape: Shape


class Piece(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What a rank writes: bytes ``start``..``start+nbytes`` of its local chunk number ``chunk``,
    which hold the box ``offsets``/``shape`` of the tensor."""

    chunk: int
    offsets: Shape
    shape: Shape
    start: int
    nbytes: int


class RankPlan(msgspec.Struct, frozen=True):
    """One rank's part of the global plan: the pieces it writes, and its local chunks that have
    replicas (their hashes are compared at commit)."""

    pieces: list[Piece]
    replicated: list[int]


@dataclass(frozen=True)
class GlobalPlan:
    """The coordinator's view: every rank's local plan and its part of the global plan."""

    locals: list[list[LocalChunk]]
    ranks: list[RankPlan]


def build(local_plans: list[list[LocalChunk]]) -> GlobalPlan:
    """The global plan; raises LayoutError naming the key and ranks when ranks disagree on a
    tensor's kind, dtype or shape, or its shards overlap or leave gaps."""
    holders: dict[str, dict[Box, list[tuple[int, int]]]] = defaultdict(dict)
    first: dict[str, tuple[int, LocalChunk]] = {}
    for rank, chunks in enumerate(local_plans):
        for index, chunk in enumerate(chunks):
            if chunk.key not in first:
                first[chunk.key] = (rank, chunk)
            else:
                _check_agree(first[chunk.key], rank, chunk)
            holders[chunk.key].setdefault((chunk.offsets, chunk.shape), []).append((rank, index))
    pieces: list[list[Piece]] = [[] for _ in local_plans]
    replicated: list[list[int]] = [[] for _ in local_plans]
    load = [0] * len(local_plans)
    shared: list[tuple[int, str, Box, list[tuple[int, int]]]] = []
    for key, boxes in holders.items():
        chunk = first[key][1]
        if chunk.kind == "value":
            continue
        problem = cover_problem(chunk.global_shape, list(boxes))
        if problem:
            raise LayoutError(f"{key!r} of shape {list(chunk.global_shape)}: {problem} (held by ranks "
                              f"{sorted({r for owners in boxes.values() for r, _ in owners})})")
        itemsize = dtypes.ITEMSIZE[chunk.dtype]
        for box, owners in boxes.items():
            nbytes = volume(box[1]) * itemsize
            if len(owners) > 1:
                for rank, index in owners:
                    replicated[rank].append(index)
            if nbytes == 0:
                continue
            if len(owners) == 1:
                rank, index = owners[0]
                pieces[rank].append(Piece(index, box[0], box[1], 0, nbytes))
                load[rank] += nbytes
            else:
                shared.append((nbytes, key, box, owners))
    shared.sort(key=lambda item: (-item[0], item[1], item[2]))
    for nbytes, _, box, owners in shared:
        parts = _split(box, nbytes, min(len(owners), nbytes // SPLIT_BYTES) or 1)
        by_load = sorted(owners, key=lambda owner: (load[owner[0]], owner[0]))
        for (rank, index), (sub, start, size) in zip(by_load, parts):
            pieces[rank].append(Piece(index, sub[0], sub[1], start, size))
            load[rank] += size
    return GlobalPlan(local_plans, [RankPlan(p, sorted(r)) for p, r in zip(pieces, replicated)])


def _check_agree(first: tuple[int, LocalChunk], rank: int, chunk: LocalChunk) -> None:
    rank0, chunk0 = first
    for what in ("kind", "dtype", "global_shape"):
        a, b = getattr(chunk0, what), getattr(chunk, what)
        if a != b:
            if chunk.kind == "object" and what == "global_shape":
                raise LayoutError(f"replicas of {chunk.key!r} differ: rank {rank0} pickles it to {a[0]} bytes, "
                                  f"rank {rank} to {b[0]} (give per-rank objects per-rank keys)")
            raise LayoutError(f"ranks disagree on the {what.replace('_', ' ')} of {chunk.key!r}: rank {rank0} "
                              f"has {_show(a)}, rank {rank} has {_show(b)}")


def _show(value: object) -> str:
    return str(list(value)) if isinstance(value, tuple) else repr(value)


def _split(box: Box, nbytes: int, parts: int) -> list[tuple[Box, int, int]]:
    """``box`` cut into at most ``parts`` row ranges along its outermost dimension of size > 1 (so
    each is a contiguous byte range of the chunk): (sub-box, byte start, byte count)."""
    offsets, shape = box
    dim = next((d for d, s in enumerate(shape) if s > 1), None)
    if dim is None or parts < 2:
        return [(box, 0, nbytes)]
    rows = shape[dim]
    row_bytes = nbytes // rows
    parts = min(parts, rows)
    out = []
    for i in range(parts):
        lo, hi = rows * i // parts, rows * (i + 1) // parts
        sub_offsets = offsets[:dim] + (offsets[dim] + lo,) + offsets[dim + 1:]
        sub_shape = shape[:dim] + (hi - lo,) + shape[dim + 1:]
        out.append(((sub_offsets, sub_shape), lo * row_bytes, (hi - lo) * row_bytes))
    return out


def describe_chunk(chunk: LocalChunk) -> str:
    """``'w' [0:2, 0:4]`` (or just ``'w'`` for a whole or non-tensor item)."""
    if chunk.kind != "tensor" or chunk.shape == chunk.global_shape:
        return repr(chunk.key)
    return f"{chunk.key!r} {describe((chunk.offsets, chunk.shape))}"
