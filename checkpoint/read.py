"""Resharding reads: for each target box, the tiles of the saved chunks that overlap it (only
those are read, see fetch.py), each verified, and the overlap of each copied into the target in
place (CUDA targets through pinned staging buffers)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import dtypes, tiles
from .boxes import Box, intersect, strides, volume
from .fetch import DIRECT_BYTES, Copy, TileRead, fetch
from .manifest import ChunkEntry, Manifest


@dataclass(frozen=True)
class Target:
    """Where tensor ``key`` goes on this rank: ``dest`` receives the box ``box`` of it."""

    key: str
    box: Box
    dest: torch.Tensor


@dataclass(frozen=True)
class ReadStats:
    """What a load read: bytes read from files (whole tiles) and bytes its targets needed."""

    bytes_read: int
    bytes_needed: int
    files: int


def read(directory: str, manifest: Manifest, targets: list[Target], threads: int) -> ReadStats:
    """Fill every target from the checkpoint; CorruptCheckpoint names the file on any mismatch
    (the targets may then be partly overwritten)."""
    needed = 0
    with torch.no_grad():
        reads: dict[str, list[TileRead]] = defaultdict(list)
        for target in targets:
            entry = manifest.tensors[target.key]
            dtype = dtypes.TORCH[entry.dtype]
            for chunk in entry.chunks:
                box = (chunk.offsets, chunk.shape)
                region = target.box if box == target.box else intersect(box, target.box)
                if region is not None:
                    needed += volume(region[1]) * dtype.itemsize
                    reads[chunk.file].extend(_tile_reads(chunk, target, region, dtype))
        total = fetch(directory, manifest, reads, threads)
    return ReadStats(total, needed, len(reads))


def _tile_reads(chunk: ChunkEntry, target: Target, region: Box, dtype: torch.dtype) -> Iterator[TileRead]:
    """The tiles of ``chunk`` that overlap ``target`` (``region`` is their common box)."""
    itemsize = dtype.itemsize
    if chunk.tile == chunk.shape and region == target.box == (chunk.offsets, chunk.shape):  # the common case
        yield _tile_read(target.key, target.dest, target.box, chunk.offset, chunk.checksums[0], dtype)
        return
    rel = (tuple(r - c for r, c in zip(region[0], chunk.offsets)), region[1])
    for number, (offsets, shape), start in tiles.overlapping(chunk.shape, chunk.tile, rel):
        box = (tuple(c + o for c, o in zip(chunk.offsets, offsets)), shape)
        overlap = intersect(box, target.box)
        assert overlap is not None  # the tile overlaps the region, which lies inside the target
        dest = target.dest if overlap == target.box else target.dest[
            tuple(slice(o - t, o - t + s) for o, t, s in zip(overlap[0], target.box[0], overlap[1]))]
        position = chunk.offset + start * itemsize
        if overlap == box:
            yield _tile_read(target.key, dest, box, position, chunk.checksums[number], dtype)
            continue
        tile_strides = strides(shape)
        first = sum((o - b) * s for o, b, s in zip(overlap[0], box[0], tile_strides))
        copy = Copy(dest, dtype, overlap[1], tile_strides, first)
        yield TileRead(position, volume(shape) * itemsize, chunk.checksums[number], target.key, box, None, (copy,))


def _tile_read(key: str, dest: torch.Tensor, box: Box, start: int, checksum: int, dtype: torch.dtype) -> TileRead:
    """A tile that fills ``dest`` (its box) whole: read straight into it when it is a large
    contiguous CPU region, else staged and copied."""
    nbytes = volume(box[1]) * dtype.itemsize
    if nbytes >= DIRECT_BYTES and dest.device.type == "cpu" and dest.is_contiguous():
        return TileRead(start, nbytes, checksum, key, box, _bytes_of(dest))
    return TileRead(start, nbytes, checksum, key, box, None, (Copy(dest, dtype, box[1], strides(box[1]), 0),))


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The memory of a contiguous CPU tensor as writable bytes."""
    return tensor.detach().reshape(-1).view(torch.uint8).numpy().data
