"""Tiles: how a stored chunk is cut into checksummed sub-boxes of about a byte budget, so that a
resharded load reads (and verifies) only the tiles its target overlaps.

A chunk of ``shape`` with tile shape ``tile`` is a row-major grid of tiles (the last ones along
each dimension clipped to the chunk), stored one after another in grid order, each tile's
elements row-major. ``tile_shape`` chooses square-ish tiles with power-of-two extents in the
dimensions it cuts: 512 x 512 float32 for a wide 2-D chunk, contiguous ranges of a 1-D chunk,
the whole chunk when it fits the budget."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from .boxes import Box, Shape, volume

TILE_BYTES = 1 << 20  # the default budget: a tile holds at most this many bytes
MIN_TILE_BYTES = 64  # the smallest budget a save accepts (at least the widest element)


def tile_shape(shape: Shape, itemsize: int, budget: int) -> Shape:
    """The tile shape for a chunk: the whole chunk if it fits ``budget`` bytes, else the chunk
    halved repeatedly along its longest tile extent (the leading one among equals), each cut
    extent a power of two, until a tile fits."""
    tile = list(shape)
    while volume(tuple(tile)) * itemsize > budget and max(tile, default=1) > 1:
        longest = max(tile)
        d = tile.index(longest)
        tile[d] = longest // 2 if longest & (longest - 1) == 0 else 1 << (longest.bit_length() - 1)
    return tuple(tile)


def grid(shape: Shape, tile: Shape) -> Shape:
    """Tiles along each dimension."""
    return tuple(-(-n // max(t, 1)) for n, t in zip(shape, tile))


def count(shape: Shape, tile: Shape) -> int:
    """Tiles in a chunk of ``shape``."""
    return math.prod(grid(shape, tile))


def overlapping(shape: Shape, tile: Shape, region: Box) -> Iterator[tuple[int, Box, int]]:
    """(row-major tile number, tile box, first element's offset in the stored chunk) of every
    tile of a chunk of ``shape`` (boxes relative to the chunk) that overlaps ``region``, in
    storage order."""
    tiles = grid(shape, tile)
    ranges = [range(o // t, -(-(o + s) // t)) if s else range(0) for (o, s, t) in zip(region[0], region[1], tile)]
    # elements of the chunk stored before any tile whose index along dimension d is i, given
    # the earlier dimensions' tile extents: sum_d (prod_{e<d} extent_e) * i*tile_d * prod_{e>d} shape_e
    after = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    numbers = [math.prod(tiles[d + 1:]) for d in range(len(shape))]
    for index in itertools.product(*ranges):
        offsets = tuple(i * t for i, t in zip(index, tile))
        extents = tuple(min(t, n - o) for t, n, o in zip(tile, shape, offsets))
        start, outer = 0, 1
        for d, i in enumerate(index):
            start += outer * i * tile[d] * after[d]
            outer *= extents[d]
        yield sum(i * n for i, n in zip(index, numbers)), (offsets, extents), start
