"""The commit: from every rank's report to the manifest, written atomically (temporary file,
fsync, rename, fsync of the directory) by the coordinator once every rank has succeeded, then
removal of the files the new manifest no longer references."""

from __future__ import annotations

import logging
import os
from collections import defaultdict

import msgspec

from coord import atomic_write, fsync_dir

from .errors import LayoutError
from .files import MANIFEST_NAME, is_ours, remove_quietly
from .manifest import ChunkEntry, FileEntry, Manifest, TensorEntry, Value, encode
from .plan import GlobalPlan, describe_chunk
from .write import StoredPiece

log = logging.getLogger("checkpoint")


class RankReport(msgspec.Struct, frozen=True):
    """What a rank sends the coordinator after writing: its error (None on success), files,
    where each planned piece went, hashes of its replicated chunks, and its JSON values."""

    error: str | None
    files: dict[str, FileEntry] = {}
    stored: list[StoredPiece] = []
    hashes: dict[int, int] = {}
    values: dict[int, Value] = {}


def build_manifest(plan: GlobalPlan, reports: list[RankReport], save_id: str) -> Manifest:
    """The manifest of a save every rank reported success for; LayoutError if replicas of a
    chunk or a JSON value differ between ranks (naming the item and the ranks)."""
    _check_replicas(plan, reports)
    files: dict[str, FileEntry] = {}
    tensors: dict[str, TensorEntry] = {}
    chunks: dict[str, list[ChunkEntry]] = defaultdict(list)
    values: dict[str, Value] = {}
    for rank, (local, report) in enumerate(zip(plan.locals, reports)):
        files.update(report.files)
        for piece, at in zip(plan.ranks[rank].pieces, report.stored):
            chunks[local[piece.chunk].key].append(ChunkEntry(piece.offsets, piece.shape, at.file, at.offset, at.tile,
                                                             at.checksums))
        for index, chunk in enumerate(local):
            if chunk.kind == "value":
                values.setdefault(chunk.key, report.values[index])
            elif chunk.key not in tensors:
                tensors[chunk.key] = TensorEntry(chunk.dtype, chunk.global_shape, chunks[chunk.key],
                                                 "object" if chunk.kind == "object" else "tensor")
    return Manifest(save_id, len(reports), files, tensors, values)


def _check_replicas(plan: GlobalPlan, reports: list[RankReport]) -> None:
    """Every copy of a replicated chunk and of a JSON value must be identical."""
    seen: dict[str, dict[object, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rank, (local, report) in enumerate(zip(plan.locals, reports)):
        for index in plan.ranks[rank].replicated:
            seen[describe_chunk(local[index])][report.hashes[index]].append(rank)
        for index, value in report.values.items():
            seen[repr(local[index].key)][value].append(rank)
    for what, variants in seen.items():
        if len(variants) > 1:
            groups = "; ".join(f"ranks {ranks}" for ranks in variants.values())
            raise LayoutError(f"replicas of {what} differ between ranks ({groups} hold different data); "
                              "a per-rank value needs a per-rank key")


def commit(directory: str, manifest: Manifest) -> None:
    """Make the checkpoint exist: the manifest replaces any previous one atomically and durably
    (the data files and their directory entries were made durable by their writers)."""
    with atomic_write(os.path.join(directory, MANIFEST_NAME), "wb") as f:
        f.write(encode(manifest))
    parent = os.path.dirname(directory)
    if parent != directory:
        fsync_dir(parent)  # a directory this save created must survive with its manifest
    log.debug("checkpoint: committed %s (save %s, %d files)", directory, manifest.save_id, len(manifest.files))


def collect_garbage(directory: str, manifest: Manifest) -> list[str]:
    """Remove this library's files in ``directory`` that ``manifest`` does not reference: the
    previous checkpoint's data, and leftovers of failed or crashed saves. Returns their names."""
    stale = [name for name in os.listdir(directory) if is_ours(name) and name not in manifest.files]
    remove_quietly(directory, stale)
    return stale
