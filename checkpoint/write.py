"""The write phase: a rank's pieces into its own new data files, each piece as checksummed tiles
(tiles.py) stored back to back, in large sequential writes, each file fsynced, then the
directory. Several files are written by helper threads; an error in any of them is raised here."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, cast

import msgspec
import numpy as np
import xxhash

from coord import fsync_dir

from . import tiles
from .boxes import Shape, volume
from .errors import CheckpointError, describe
from .files import data_name
from .manifest import FileEntry
from .plan import Piece

FILE_BYTES = 64 << 20  # a rank uses more files (and threads) only when each gets at least this much
_BATCH_BYTES = 2 << 20  # small or scattered tiles gathered for one write() call
_DIRECT_BYTES = 64 << 10  # contiguous tiles at least this large are written from their own memory


class StoredPiece(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Where a piece went: from byte ``offset`` of ``file``, as tiles of shape ``tile`` with
    these checksums (storage order)."""

    file: str
    offset: int
    tile: Shape
    checksums: list[int]


@dataclass(frozen=True)
class Written:
    """Where this rank's pieces went: its files, where each piece is stored (in plan order), and
    the xxh3-64 hash of each local chunk it was asked to hash."""

    files: dict[str, FileEntry]
    stored: list[StoredPiece]
    hashes: dict[int, int]


class _TileWriter:
    """Appends pieces to a file as checksummed tiles: large contiguous tiles written from their
    own memory, the others gathered into a batch buffer first."""

    def __init__(self, f: BinaryIO, name: str, tile_bytes: int) -> None:
        self.f, self.name, self.tile_bytes = f, name, tile_bytes
        self.batch = np.empty(max(_BATCH_BYTES, tile_bytes), dtype=np.uint8)
        self.fill = 0
        self.size = 0

    def piece(self, data: np.ndarray, shape: Shape) -> StoredPiece:
        """Append ``data`` (flat uint8, row-major) holding a box of ``shape``."""
        offset = self.size
        itemsize = len(data) // volume(shape)
        tile = tiles.tile_shape(shape, itemsize, self.tile_bytes)
        if tile == shape:
            return StoredPiece(self.name, offset, tile, [self._tile(data)])
        cells = data.reshape(*shape, itemsize)
        whole = ((0,) * len(shape), shape)
        checksums = [self._tile(cells[tuple(slice(o, o + s) for o, s in zip(*box))])
                     for _, box, _ in tiles.overlapping(shape, tile, whole)]
        return StoredPiece(self.name, offset, tile, checksums)

    def _tile(self, part: np.ndarray) -> int:
        """Append one tile (uint8, any strides); its checksum."""
        n = part.nbytes
        self.size += n
        if n >= _DIRECT_BYTES and part.flags.c_contiguous:
            self._flush()
            data = part.reshape(-1).data
            self._write(data)
            return xxhash.xxh3_64_intdigest(data)
        if self.fill + n > len(self.batch):
            self._flush()
        view = self.batch[self.fill:self.fill + n]
        np.copyto(view.reshape(part.shape), part)
        self.fill += n
        return xxhash.xxh3_64_intdigest(view.data)

    def _flush(self) -> None:
        if self.fill:
            self._write(self.batch[:self.fill].data)
            self.fill = 0

    def _write(self, data: memoryview) -> None:
        done = 0
        while done < len(data):
            done += self.f.write(data[done:]) or 0

    def close(self) -> FileEntry:
        self._flush()
        self.f.flush()
        os.fsync(self.f.fileno())
        return FileEntry(self.size)


def write_pieces(directory: str, save_id: str, rank: int, pieces: list[Piece], data: list[np.ndarray],
                 hash_chunks: list[int], tile_bytes: int, threads: int) -> Written:
    """Write ``pieces`` (bytes of the local chunks in ``data``) into new files named after
    ``save_id`` and ``rank``, tiles of at most ``tile_bytes``; fsync them and the directory.
    Meanwhile hash the chunks listed in ``hash_chunks`` (replicas compared at commit)."""
    groups = _partition(pieces, threads)
    stored: list[StoredPiece | None] = [None] * len(pieces)
    files: dict[str, FileEntry] = {}

    def write_file(index: int) -> None:
        name = data_name(save_id, rank, index)
        try:
            with open(os.path.join(directory, name), "xb", buffering=0) as f:
                writer = _TileWriter(f, name, tile_bytes)
                # widest elements first: every chunk then starts at a multiple of its element size
                for i in sorted(groups[index], key=lambda i: -_itemsize(pieces[i])):
                    piece = pieces[i]
                    stored[i] = writer.piece(data[piece.chunk][piece.start:piece.start + piece.nbytes], piece.shape)
                files[name] = writer.close()
        except Exception as exc:
            raise CheckpointError(f"writer thread for {name}: {describe(exc)}") from exc

    with ThreadPoolExecutor(max(1, len(groups)), thread_name_prefix=f"checkpoint-writer-r{rank}") as pool:
        futures = [pool.submit(write_file, i) for i in range(len(groups))]
        hashes = {i: xxhash.xxh3_64_intdigest(data[i].data) for i in hash_chunks}
        for future in futures:
            future.result()
    if groups:
        fsync_dir(directory)
    return Written(files, cast(list[StoredPiece], stored), hashes)  # every piece was stored


def _itemsize(piece: Piece) -> int:
    return piece.nbytes // volume(piece.shape)


def _partition(pieces: list[Piece], threads: int) -> list[list[int]]:
    """Piece indices split into files balanced by bytes (largest first to the lightest file),
    each file in plan order."""
    if not pieces:
        return []
    total = sum(p.nbytes for p in pieces)
    count = max(1, min(threads, total // FILE_BYTES, len(pieces)))
    groups: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for i in sorted(range(len(pieces)), key=lambda i: -pieces[i].nbytes):
        lightest = loads.index(min(loads))
        groups[lightest].append(i)
        loads[lightest] += pieces[i].nbytes
    return [sorted(g) for g in groups]
