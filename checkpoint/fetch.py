"""Reading tiles: each tile to read is verified against its xxh3-64 before its bytes are used.
A large tile whose bytes form a contiguous region of a CPU target is read straight into the
target's memory and checked there (so a corrupt tile leaves that region overwritten); the others
are read in runs of adjacent tiles into a small staging buffer per thread (pinned when a target is
on a GPU), checked, and copied into their targets. Files are read by several threads."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import xxhash

from .boxes import Box, Shape, describe
from .errors import CorruptCheckpoint
from .files import open_data, read_into
from .manifest import Manifest

RUN_BYTES = 2 << 20  # the most bytes of adjacent tiles staged by one read
DIRECT_BYTES = 64 << 10  # tiles at least this large are read straight into their target when they can be
_ALIGN = 16  # staging keeps file offsets modulo this, so every tile's elements are aligned


@dataclass(frozen=True, slots=True)
class Copy:
    """The part of a staged tile that goes to ``dest``: elements of ``shape``/``strides`` from
    element ``offset`` of the tile, whose elements are ``dtype``."""

    dest: torch.Tensor
    dtype: torch.dtype
    shape: Shape
    strides: Shape
    offset: int


@dataclass(frozen=True, slots=True)
class TileRead:
    """A tile of tensor ``key`` (the box ``box`` of it) to read: ``nbytes`` from byte ``start``
    of its file, which must hash to ``checksum``; its bytes go ``direct`` into a target's memory,
    or through staging into ``copies`` (none when only verifying)."""

    start: int
    nbytes: int
    checksum: int
    key: str
    box: Box
    direct: memoryview | None = None
    copies: tuple[Copy, ...] = ()


def fetch(directory: str, manifest: Manifest, reads: dict[str, list[TileRead]], threads: int) -> int:
    """Read, verify and deliver every tile of ``reads`` (by file name); returns the bytes read.
    CorruptCheckpoint names the file and tile on any mismatch or short file."""
    tasks = [(name, part) for name, tiles in reads.items() for part in _split(_runs(tiles), threads, len(reads))]
    if not tasks:
        return 0
    staged = max((sum(t.nbytes for t in run if t.direct is None) for _, part in tasks for run in part), default=0)
    pinned = torch.cuda.is_available() and any(c.dest.is_cuda for tiles in reads.values() for t in tiles
                                                 for c in t.copies)
    buffers: queue.SimpleQueue[torch.Tensor] = queue.SimpleQueue()

    def work(name: str, runs: list[list[TileRead]]) -> int:
        try:
            buffer = buffers.get_nowait()
        except queue.Empty:
            buffer = torch.empty(staged + _ALIGN, dtype=torch.uint8, pin_memory=pinned)
        try:
            return _read_runs(directory, manifest, name, runs, buffer)
        finally:
            buffers.put(buffer)

    with ThreadPoolExecutor(max(1, min(threads, len(tasks))), thread_name_prefix="checkpoint-reader") as pool:
        futures = [pool.submit(work, name, runs) for name, runs in tasks]
        return sum(future.result() for future in futures)


def _runs(tiles: list[TileRead]) -> list[list[TileRead]]:
    """Tiles in file order, grouped: a direct tile alone, staged tiles with their adjacent
    staged neighbours up to RUN_BYTES."""
    runs: list[list[TileRead]] = []
    tiles.sort(key=lambda t: t.start)
    size = 0
    for tile in tiles:
        last = runs[-1] if runs else None
        if (tile.direct is None and last is not None and last[-1].direct is None
                and last[-1].start + last[-1].nbytes == tile.start and size + tile.nbytes <= RUN_BYTES):
            last.append(tile)
            size += tile.nbytes
        else:
            runs.append([tile])
            size = tile.nbytes
    return runs


def _split(runs: list[list[TileRead]], threads: int, files: int) -> Iterator[list[list[TileRead]]]:
    """A file's runs cut into consecutive parts balanced by bytes, enough for ``threads``
    threads over ``files`` files."""
    parts = max(1, min(len(runs), -(-threads // files)))
    total = sum(t.nbytes for run in runs for t in run)
    part: list[list[TileRead]] = []
    done, cut = 0, 1
    for run in runs:
        part.append(run)
        done += sum(t.nbytes for t in run)
        if cut < parts and done * parts >= total * cut:
            yield part
            part, cut = [], cut + 1
    if part or cut == 1:  # a file with nothing to read is still opened: its size is checked
        yield part


def _read_runs(directory: str, manifest: Manifest, name: str, runs: list[list[TileRead]],
               buffer: torch.Tensor) -> int:
    total = 0
    raw = buffer.numpy().data
    typed: dict[torch.dtype, torch.Tensor] = {}
    with open_data(directory, name, manifest.files[name]) as f, torch.no_grad():  # grad mode is per thread
        for run in runs:
            first = run[0]
            if first.direct is not None:
                read_into(f, first.start, first.direct)
                _check(directory, name, first, first.direct)
                total += first.nbytes
                continue
            base = first.start % _ALIGN - first.start  # buffer index of a file offset: offset + base
            end = run[-1].start + run[-1].nbytes
            read_into(f, first.start, raw[first.start + base:end + base])
            total += end - first.start
            for tile in run:
                at = tile.start + base
                _check(directory, name, tile, raw[at:at + tile.nbytes])
                for c in tile.copies:
                    if c.dtype not in typed:
                        typed[c.dtype] = buffer[:len(buffer) // c.dtype.itemsize * c.dtype.itemsize].view(c.dtype)
                    src = typed[c.dtype].as_strided(c.shape, c.strides, at // c.dtype.itemsize + c.offset)
                    c.dest.copy_(src)
    return total


def _check(directory: str, name: str, tile: TileRead, data: memoryview) -> None:
    if xxhash.xxh3_64_intdigest(data) != tile.checksum:
        raise CorruptCheckpoint(f"{directory}: data file {name} is corrupt: the tile {describe(tile.box)} of "
                                f"{tile.key!r} (bytes {tile.start}-{tile.start + tile.nbytes}) fails its checksum")
