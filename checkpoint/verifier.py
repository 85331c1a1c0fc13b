"""checkpoint.verify: a full checksum pass over a checkpoint, without loading it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .files import check_blocks, open_data, read_into, read_manifest

_READ_BLOCKS = 16  # blocks per read


@dataclass(frozen=True)
class VerifyReport:
    """A checkpoint that passed: what was checked."""

    path: str
    save_id: str
    files: int
    bytes: int
    blocks: int
    tensors: int
    values: int


def verify(path: str | os.PathLike[str]) -> VerifyReport:
    """Check the manifest and every block of every data file against its checksum; raises
    CheckpointNotFound, ManifestError or CorruptCheckpoint (naming the file) on any problem."""
    directory = os.path.abspath(os.fspath(path))
    manifest = read_manifest(directory)
    bs = manifest.block_size
    buffer = memoryview(bytearray(bs * _READ_BLOCKS))
    total = blocks = 0
    for name, entry in sorted(manifest.files.items()):
        with open_data(directory, name, entry) as f:
            for first in range(0, len(entry.checksums), _READ_BLOCKS):
                start = first * bs
                view = buffer[:min(entry.size - start, len(buffer))]
                read_into(f, start, view)
                check_blocks(directory, name, entry, bs, first, view)
        total += entry.size
        blocks += len(entry.checksums)
    return VerifyReport(directory, manifest.save_id, len(manifest.files), total, blocks, len(manifest.tensors),
                        len(manifest.values))
