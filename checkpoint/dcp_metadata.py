"""The metadata of a torch.distributed.checkpoint checkpoint (its ``.metadata``, a pickle),
unpickled through an allowlist of DCP's metadata classes and the torch values they hold (any other
global is refused, so a crafted file cannot run code), and turned into a Manifest whose chunks
point at DCP's items."""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from typing import Any

import torch

from . import dtypes
from .errors import ManifestError
from .manifest import ChunkEntry, Manifest, TensorEntry

_MODULES = {
    "torch.distributed.checkpoint.metadata": {"Metadata", "TensorStorageMetadata", "TensorProperties",
                                              "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
                                              "StorageMeta", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"},
}


@dataclass(frozen=True)
class Item:
    """Where DCP stored one chunk or bytes item: ``length`` bytes at ``offset`` of ``file``."""

    file: str
    offset: int
    length: int


class _Unpickler(pickle.Unpickler):
    """Builds only DCP's metadata classes and the torch values they hold."""

    def __init__(self, data: bytes, where: str) -> None:
        super().__init__(io.BytesIO(data))
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if name in _MODULES.get(module, ()) or (module == "torch" and name == "Size"):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout)):
            return getattr(torch, name)
        raise ManifestError(f"{self.where}: refusing to unpickle {module}.{name} (not a DCP metadata class)")


def parse(data: bytes, where: str) -> Any:
    """DCP's Metadata from the bytes of ``.metadata`` (at ``where``); ManifestError if refused."""
    try:
        metadata = _Unpickler(data, where).load()
    except ManifestError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means an unreadable file
        raise ManifestError(f"{where}: unreadable DCP metadata: {type(exc).__name__}: {exc}") from None
    if type(metadata).__name__ != "Metadata" or not isinstance(getattr(metadata, "storage_data", None), dict):
        raise ManifestError(f"{where}: not DCP metadata with storage data")
    return metadata


def convert(metadata: Any, where: str) -> tuple[Manifest, dict[tuple[str, int], Item], dict[str, Item]]:
    """(a manifest of DCP's tensors whose chunks point at their items, every item by (file,
    offset), the bytes items by key)."""
    stored: dict[tuple[str, tuple[int, ...] | None], Item] = {}
    for index, info in metadata.storage_data.items():
        if getattr(info, "transform_descriptors", None):
            raise ManifestError(f"{where}: {index.fqn!r} was saved with storage transforms "
                                f"{info.transform_descriptors}, which this loader does not read")
        name = str(info.relative_path)
        if os.path.basename(name) != name or name in ("", ".", "..") or int(info.offset) < 0 or int(info.length) < 0:
            raise ManifestError(f"{where}: {index.fqn!r} is stored at {name!r} bytes {info.offset}+{info.length}, "
                                "not a plain file name inside the checkpoint directory")
        offsets = None if index.offset is None else tuple(int(o) for o in index.offset)
        stored[(index.fqn, offsets)] = Item(name, int(info.offset), int(info.length))
    tensors: dict[str, TensorEntry] = {}
    objects: dict[str, Item] = {}
    for key, entry in metadata.state_dict_metadata.items():
        if not hasattr(entry, "chunks"):
            objects[key] = _stored(stored, key, None, where)
            continue
        chunks = []
        for chunk in entry.chunks:
            offsets = tuple(int(o) for o in chunk.offsets)
            item = _stored(stored, key, offsets, where)
            sizes = tuple(int(s) for s in chunk.sizes)
            chunks.append(ChunkEntry(offsets, sizes, item.file, item.offset, sizes, []))  # DCP has no checksums
        dtype = entry.properties.dtype
        tensors[key] = TensorEntry(dtypes.of_torch(dtype) or str(dtype), tuple(int(s) for s in entry.size), chunks)
    items = {(item.file, item.offset): item for item in stored.values()}
    return Manifest("dcp", 0, {}, tensors, {}), items, objects


def _stored(stored: dict[tuple[str, tuple[int, ...] | None], Item], key: str, offsets: tuple[int, ...] | None,
            where: str) -> Item:
    item = stored.get((key, offsets))
    if item is None:
        raise ManifestError(f"{where}: {key!r} (chunk at {offsets}) has no storage entry")
    return item
