"""The write phase: a rank's pieces into its own new data files, raw bytes in large sequential
writes, an xxh3-64 checksum per block computed on the way, each file fsynced, then the directory.
Several files are written by helper threads; an error in any of them is raised here."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import xxhash

from coord import fsync_dir

from .errors import CheckpointError, describe
from .files import data_name
from .manifest import ALIGN, FileEntry
from .plan import Piece

FILE_BYTES = 64 << 20  # a rank uses more files (and threads) only when each gets at least this much
_WRITE_BLOCKS = 8  # blocks handed to one write() call when a piece is large


@dataclass(frozen=True)
class Written:
    """Where this rank's pieces went: its files, (file, offset) of each piece in order, and the
    xxh3-64 hash of each local chunk it was asked to hash."""

    files: dict[str, FileEntry]
    locations: list[tuple[str, int]]
    hashes: dict[int, int]


class _BlockWriter:
    """Appends to a file, keeping the checksum of every ``block_size`` block of it."""

    def __init__(self, f: BinaryIO, block_size: int) -> None:
        self.f, self.block_size = f, block_size
        self.buffer = bytearray(block_size)
        self.fill = 0
        self.size = 0
        self.checksums: list[int] = []

    def align(self) -> int:
        """Pad with zeros to the next ALIGN boundary; the offset there."""
        pad = -self.size % ALIGN
        if pad:
            self.write(memoryview(bytes(pad)))
        return self.size

    def write(self, data: memoryview) -> None:
        pos, n = 0, len(data)
        self.size += n
        if self.fill:
            pos = min(self.block_size - self.fill, n)
            self.buffer[self.fill:self.fill + pos] = data[:pos]
            self.fill += pos
            if self.fill == self.block_size:
                self._emit(memoryview(self.buffer), 1)
                self.fill = 0
        whole = (n - pos) // self.block_size
        while whole:
            count = min(whole, _WRITE_BLOCKS)
            self._emit(data[pos:pos + count * self.block_size], count)
            pos += count * self.block_size
            whole -= count
        rest = n - pos
        if rest:
            self.buffer[:rest] = data[pos:]
            self.fill = rest

    def close(self) -> FileEntry:
        if self.fill:
            self._emit(memoryview(self.buffer)[:self.fill], 1)
        self.f.flush()
        os.fsync(self.f.fileno())
        return FileEntry(self.size, self.checksums)

    def _emit(self, data: memoryview, blocks: int) -> None:
        bs = self.block_size
        for i in range(blocks):
            self.checksums.append(xxhash.xxh3_64_intdigest(data[i * bs:(i + 1) * bs]))
        done = 0
        while done < len(data):
            done += self.f.write(data[done:]) or 0


def write_pieces(directory: str, save_id: str, rank: int, pieces: list[Piece], data: list[np.ndarray],
                 hash_chunks: list[int], block_size: int, threads: int) -> Written:
    """Write ``pieces`` (bytes of the local chunks in ``data``) into new files named after
    ``save_id`` and ``rank``; fsync them and the directory. Meanwhile hash the chunks listed in
    ``hash_chunks`` (replicas compared at commit)."""
    groups = _partition(pieces, threads)
    locations: list[tuple[str, int]] = [("", 0)] * len(pieces)
    files: dict[str, FileEntry] = {}

    def write_file(index: int) -> None:
        name = data_name(save_id, rank, index)
        try:
            with open(os.path.join(directory, name), "xb", buffering=0) as f:
                writer = _BlockWriter(f, block_size)
                for i in groups[index]:
                    piece = pieces[i]
                    locations[i] = (name, writer.align())
                    writer.write(data[piece.chunk][piece.start:piece.start + piece.nbytes].data)
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
    return Written(files, locations, hashes)


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
