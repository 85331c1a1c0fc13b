"""Resharding reads: for each target box, the parts of the saved chunks that overlap it, read as
whole checksummed blocks (only the blocks those parts touch), verified, then copied in place into
the target (CUDA targets through pinned staging buffers)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import torch

from . import dtypes
from .boxes import Box, Shape, intersect, strides, volume
from .files import check_blocks, open_data, read_into
from .manifest import ChunkEntry, Manifest

SPAN_BYTES = 64 << 20  # the most file bytes one buffer covers


@dataclass(frozen=True)
class Target:
    """Where tensor ``key`` goes on this rank: ``dest`` receives the box ``box`` of it."""

    key: str
    box: Box
    dest: torch.Tensor


@dataclass(frozen=True)
class _Copy:
    """A part of a saved chunk: elements of ``shape``/``strides`` (in elements) from byte
    ``start`` of the file, touching the blocks ``blocks`` ([lo, hi) ranges), into ``dest``."""

    start: int
    end: int
    blocks: list[tuple[int, int]]
    shape: Shape
    strides: Shape
    dtype: torch.dtype
    dest: torch.Tensor


@dataclass(frozen=True)
class ReadStats:
    """What a load read: bytes read from files (whole blocks) and bytes its targets needed."""

    bytes_read: int
    bytes_needed: int
    files: int


def read(directory: str, manifest: Manifest, targets: list[Target], threads: int) -> ReadStats:
    """Fill every target from the checkpoint; CorruptCheckpoint names the file on any mismatch."""
    plan: dict[str, list[_Copy]] = defaultdict(list)
    needed = 0
    with torch.no_grad():
        for target in targets:
            entry = manifest.tensors[target.key]
            dtype = dtypes.TORCH[entry.dtype]
            for chunk in entry.chunks:
                for copy in _copies(chunk, target, dtype, manifest.block_size):
                    plan[chunk.file].append(copy)
                    needed += volume(copy.shape) * dtype.itemsize
        with ThreadPoolExecutor(max(1, min(threads, len(plan))), thread_name_prefix="checkpoint-reader") as pool:
            futures = [pool.submit(_read_file, directory, manifest, name, copies) for name, copies in plan.items()]
            total = sum(future.result() for future in futures)
    return ReadStats(total, needed, len(plan))


def _copies(chunk: ChunkEntry, target: Target, dtype: torch.dtype, block_size: int) -> Iterator[_Copy]:
    """The overlap of a saved chunk and a target, in parts of at most SPAN_BYTES of file."""
    region = intersect((chunk.offsets, chunk.shape), target.box)
    if region is None:
        return
    itemsize = dtype.itemsize
    chunk_strides = strides(chunk.shape)
    for offsets, shape in _parts(region, chunk_strides, itemsize):
        first = sum((o - c) * s for o, c, s in zip(offsets, chunk.offsets, chunk_strides))
        start = chunk.offset + first * itemsize
        end = start + _extent(shape, chunk_strides, itemsize)
        dest = target.dest if (offsets, shape) == target.box else \
            target.dest[tuple(slice(o - t, o - t + s) for o, t, s in zip(offsets, target.box[0], shape))]
        blocks = _touched(start, shape, chunk_strides, itemsize, block_size)
        yield _Copy(start, end, blocks, shape, chunk_strides, dtype, dest)


def _extent(shape: Shape, strides_: Shape, itemsize: int) -> int:
    """Bytes from the first element of a strided box to the end of its last."""
    return (sum((n - 1) * s for n, s in zip(shape, strides_)) + 1) * itemsize


def _parts(box: Box, strides_: Shape, itemsize: int) -> Iterator[Box]:
    """``box`` cut along its outer dimensions until each part spans at most SPAN_BYTES of file."""
    offsets, shape = box
    if _extent(shape, strides_, itemsize) <= SPAN_BYTES:
        yield box
        return
    d = next(d for d, n in enumerate(shape) if n > 1)
    one = shape[:d] + (1,) + shape[d + 1:]
    row = _extent(one, strides_, itemsize)
    step = 1 if row > SPAN_BYTES else (SPAN_BYTES - row) // (strides_[d] * itemsize) + 1
    for lo in range(0, shape[d], step):
        n = min(step, shape[d] - lo)
        part = (offsets[:d] + (offsets[d] + lo,) + offsets[d + 1:], shape[:d] + (n,) + shape[d + 1:])
        yield from (_parts(part, strides_, itemsize) if n == 1 and row > SPAN_BYTES else [part])


def _touched(start: int, shape: Shape, strides_: Shape, itemsize: int, block_size: int) -> list[tuple[int, int]]:
    """The blocks a strided box starting at byte ``start`` touches, as merged [lo, hi) ranges.
    Levels whose gaps are all smaller than a block are taken whole, so the work is bounded by
    the number of blocks touched."""
    dims = [(n, s * itemsize) for n, s in zip(shape, strides_) if n > 1]
    run = itemsize
    while dims and dims[-1][1] == run:  # trailing contiguous dimensions: one run
        run *= dims.pop()[0]
    extents = [run]
    for n, step in reversed(dims):
        extents.append((n - 1) * step + extents[-1])
    extents.reverse()  # extents[i]: bytes spanned by dims[i:]
    dense = [True] * (len(dims) + 1)
    for i in range(len(dims) - 1, -1, -1):
        dense[i] = dense[i + 1] and dims[i][1] - extents[i + 1] < block_size
    spans: list[tuple[int, int]] = []

    def walk(level: int, base: int) -> None:
        if dense[level]:
            lo, hi = base // block_size, (base + extents[level] - 1) // block_size + 1
            if spans and spans[-1][1] >= lo:
                spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
            else:
                spans.append((lo, hi))
            return
        n, step = dims[level]
        for i in range(n):
            walk(level + 1, base + i * step)

    walk(0, start)
    return spans


def _read_file(directory: str, manifest: Manifest, name: str, copies: list[_Copy]) -> int:
    """Do the copies from one file in batches of at most SPAN_BYTES, through one reused
    buffer (pinned if any target is on a GPU); returns the bytes read."""
    bs = manifest.block_size
    copies.sort(key=lambda c: c.start)
    batches: list[list[_Copy]] = []
    for copy in copies:
        if batches and copy.end - batches[-1][0].start // bs * bs <= SPAN_BYTES:
            batches[-1].append(copy)
        else:
            batches.append([copy])
    spans = [(b[0].start // bs, max((c.end - 1) // bs for c in b) + 1) for b in batches]
    pinned = torch.cuda.is_available() and any(c.dest.is_cuda for c in copies)
    buffer = torch.empty(max(hi - lo for lo, hi in spans) * bs, dtype=torch.uint8, pin_memory=pinned)
    total = 0
    with open_data(directory, name, manifest.files[name]) as f, torch.no_grad():  # grad mode is per thread
        for batch, (first, last) in zip(batches, spans):
            total += _read_batch(f, directory, name, manifest, batch, buffer[:(last - first) * bs], first)
    return total


def _read_batch(f: BinaryIO, directory: str, name: str, manifest: Manifest, batch: list[_Copy],
                buffer: torch.Tensor, first: int) -> int:
    """Read the blocks ``batch`` touches into ``buffer`` (which starts at block ``first``),
    verify them, and copy each part into its target."""
    entry, bs = manifest.files[name], manifest.block_size
    view = buffer.numpy().data
    total = 0
    for lo, hi in _merge(block for c in batch for block in c.blocks):
        a, b = (lo - first) * bs, min(hi * bs, entry.size) - first * bs
        read_into(f, lo * bs, view[a:b])
        check_blocks(directory, name, entry, bs, lo, view[a:b])
        total += b - a
    typed: dict[torch.dtype, torch.Tensor] = {}
    for c in batch:
        if c.dtype not in typed:
            typed[c.dtype] = buffer.view(c.dtype)
        src = typed[c.dtype].as_strided(c.shape, c.strides, (c.start - first * bs) // c.dtype.itemsize)
        c.dest.copy_(src)
    return total


def _merge(ranges: Iterator[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
