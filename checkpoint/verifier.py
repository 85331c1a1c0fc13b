"""checkpoint.verify: a full checksum pass over a checkpoint, without loading it. The manifest's
validation proves that the chunks in each data file fill it exactly, so checking every tile of
every chunk, and each file's size, checks every byte of every data file."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from . import dtypes, tiles
from .boxes import volume
from .fetch import TileRead, fetch
from .files import DEFAULT_THREADS, read_manifest


@dataclass(frozen=True)
class VerifyReport:
    """A checkpoint that passed: what was checked."""

    path: str
    save_id: str
    files: int
    bytes: int
    tiles: int
    tensors: int
    values: int


def verify(path: str | os.PathLike[str], *, threads: int = DEFAULT_THREADS) -> VerifyReport:
    """Check the manifest, every data file's size and every tile against its checksum; raises
    CheckpointNotFound, ManifestError or CorruptCheckpoint (naming the file) on any problem."""
    directory = os.path.abspath(os.fspath(path))
    manifest = read_manifest(directory)
    reads: dict[str, list[TileRead]] = defaultdict(list)
    for key, entry in manifest.tensors.items():
        itemsize = dtypes.ITEMSIZE[entry.dtype]
        for chunk in entry.chunks:
            whole = ((0,) * len(chunk.shape), chunk.shape)
            for number, (offsets, shape), start in tiles.overlapping(chunk.shape, chunk.tile, whole):
                box = (tuple(c + o for c, o in zip(chunk.offsets, offsets)), shape)
                reads[chunk.file].append(TileRead(chunk.offset + start * itemsize, volume(shape) * itemsize,
                                                  chunk.checksums[number], key, box))
    for name in manifest.files:
        reads.setdefault(name, [])  # opened, so its size is checked, even if it holds no tile
    total = fetch(directory, manifest, dict(reads), threads)
    return VerifyReport(directory, manifest.save_id, len(manifest.files), total, sum(map(len, reads.values())),
                        len(manifest.tensors), len(manifest.values))
