"""Loading checkpoints written by torch.distributed.checkpoint's FileSystemWriter (a ``.metadata``
pickle and ``__N_M.distcp`` files), so that users can migrate: ``checkpoint.load`` comes here
when a directory has ``.metadata`` and no manifest, and warns that nothing is checksummed.

Trust: DCP's metadata is a pickle. It is unpickled through an allowlist (see dcp_metadata), so a
crafted ``.metadata`` cannot run code and no opt-in flag is needed. Each chunk is a torch.save archive,
read with ``torch.load(weights_only=True)``; non-tensor items (DCP's bytes items) too, so scalars,
strings and containers of them load as they are, and anything else needs ``allow_pickle=True``.
Chunks are read whole (they are archives, not raw bytes) and resharded into the targets."""

from __future__ import annotations

import io
import os
import pickle
import warnings
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

from .boxes import intersect, volume
from .dcp_metadata import Item, convert, parse
from .errors import CorruptCheckpoint, StateDictError
from .flatten import Leaf, flatten
from .manifest import ChunkEntry, Manifest
from .read import ReadStats, Target

METADATA_NAME = ".metadata"
Match = Callable[[list[Leaf], Manifest, str, bool], tuple[list[Target], list[Callable[[], None]]]]


class DcpCheckpointWarning(UserWarning):
    """A torch.distributed.checkpoint checkpoint was loaded: it has no checksums, so a corrupt
    byte would have loaded silently as a wrong value."""


@dataclass(frozen=True)
class DcpMetadata:
    """The raw ``.metadata`` of a DCP checkpoint, as the coordinator read it for every rank."""

    data: bytes


def read_dcp_metadata(directory: str, missing: Exception) -> DcpMetadata | Exception:
    """The DCP metadata at ``directory``, or ``missing`` (our 'no manifest' error) if there is
    none, or the error reading it."""
    try:
        with open(os.path.join(directory, METADATA_NAME), "rb") as f:
            return DcpMetadata(f.read())
    except FileNotFoundError:
        return missing
    except OSError as exc:
        return CorruptCheckpoint(f"{directory}: cannot read {METADATA_NAME}: {exc}")


def load_dcp(state_dict: Mapping[Any, Any], meta: DcpMetadata, directory: str, match: Match,
             allow_pickle: bool, threads: int) -> ReadStats:
    """Load the DCP checkpoint in ``directory`` into ``state_dict`` in place (see the module
    docstring); ``match`` is the loader's matching of leaves against a manifest."""
    where = os.path.join(directory, METADATA_NAME)
    metadata = parse(meta.data, where)
    manifest, items, objects = convert(metadata, where)
    warnings.warn(DcpCheckpointWarning(
        f"{directory} was written by torch.distributed.checkpoint: it carries no checksums, so corruption "
        "cannot be detected; save it again with checkpoint.save to migrate"), stacklevel=4)
    leaves: list[Leaf] = []
    assigns: dict[str, tuple[str | int, ...]] = {}
    for leaf in flatten(state_dict):
        key = _object_key(leaf.key, objects)
        if key is None:
            leaves.append(leaf)
        elif key not in assigns:
            assigns[key] = _path(metadata, key, leaf)
    targets, finish = match(leaves, manifest, directory, allow_pickle)
    stats = _read(directory, manifest, items, targets, threads)
    values = [(path, _load_object(directory, objects[key], key, allow_pickle)) for key, path in assigns.items()]
    for step in finish:
        step()
    for path, value in values:
        _set(state_dict, path, value)
    return stats


def _object_key(key: str, objects: dict[str, Item]) -> str | None:
    """The bytes item holding leaf ``key``: itself, or (DCP keeps a list of non-tensors as one
    item) the item of an enclosing list."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in objects:
            return prefix
    return None


def _path(metadata: Any, key: str, leaf: Leaf) -> tuple[str | int, ...]:
    """Where item ``key`` goes in the state dict: DCP's recorded path (keys and list indexes),
    or the leaf's own place when DCP did not record one."""
    planner = getattr(metadata, "planner_data", None)
    path = planner.get(key) if isinstance(planner, dict) else None
    if isinstance(path, tuple) and all(isinstance(p, (str, int)) for p in path):
        return path
    if leaf.key != key:
        raise StateDictError(f"{key!r}: the DCP checkpoint records no place for this item")
    return tuple(_slot(part) for part in key.split("."))


def _slot(part: str) -> str | int:
    return int(part) if part.isdigit() else part


def _set(root: Any, path: tuple[str | int, ...], value: Any) -> None:
    container = root
    for part in path[:-1]:
        container = container[part]
    container[path[-1]] = value


def _open(directory: str, name: str) -> BinaryIO:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.fdopen(os.open(os.path.join(directory, name), flags), "rb")
    except OSError as exc:
        raise CorruptCheckpoint(f"{directory}: cannot open DCP data file {name}: {exc}") from None


def _torch_load(f: BinaryIO, directory: str, item: Item, key: str, weights_only: bool) -> Any:
    """Unpickle the torch.save archive at ``item`` (of the open file ``f``)."""
    f.seek(item.offset)
    data = f.read(item.length)
    if len(data) != item.length:
        raise CorruptCheckpoint(f"{directory}: DCP data file {item.file} ends before bytes "
                                f"{item.offset}-{item.offset + item.length} of {key!r}")
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=weights_only)


def _load_object(directory: str, item: Item, key: str, allow_pickle: bool) -> Any:
    with _open(directory, item.file) as f:
        try:
            return _torch_load(f, directory, item, key, weights_only=True)
        except pickle.UnpicklingError:
            if not allow_pickle:
                raise StateDictError(f"{directory}: {key!r} is a pickled object beyond plain values; pass "
                                     "allow_pickle=True to load it (only from a trusted checkpoint)") from None
        except CorruptCheckpoint:
            raise
        except Exception as exc:  # noqa: BLE001 - an unreadable archive is a corrupt checkpoint
            raise _unreadable(directory, item, key, exc) from None
        return _torch_load(f, directory, item, key, weights_only=False)


def _unreadable(directory: str, item: Item, key: str, exc: Exception) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{directory}: DCP data file {item.file}: {key!r} at bytes {item.offset}+{item.length} "
                             f"is unreadable: {type(exc).__name__}: {exc}")


def _read(directory: str, manifest: Manifest, items: dict[tuple[str, int], Item], targets: list[Target],
          threads: int) -> ReadStats:
    """Fill the targets from the chunks that overlap them, each chunk read once."""
    plan: dict[str, dict[int, list[tuple[str, ChunkEntry, Target]]]] = defaultdict(lambda: defaultdict(list))
    needed = 0
    for target in targets:
        entry = manifest.tensors[target.key]
        for chunk in entry.chunks:
            region = intersect((chunk.offsets, chunk.shape), target.box)
            if region is not None:
                plan[chunk.file][chunk.offset].append((target.key, chunk, target))
                needed += volume(region[1]) * target.dest.element_size()
    with ThreadPoolExecutor(max(1, min(threads, len(plan))), thread_name_prefix="checkpoint-dcp-reader") as pool:
        futures = [pool.submit(_read_file, directory, name, items, chunks) for name, chunks in plan.items()]
        total = sum(future.result() for future in futures)
    return ReadStats(total, needed, len(plan))


def _read_file(directory: str, name: str, items: dict[tuple[str, int], Item],
               chunks: dict[int, list[tuple[str, ChunkEntry, Target]]]) -> int:
    total = 0
    with _open(directory, name) as f, torch.no_grad():  # grad mode is per thread
        for offset in sorted(chunks):
            item = items[(name, offset)]
            key, chunk, _ = chunks[offset][0]
            try:
                saved = _torch_load(f, directory, item, key, weights_only=True)
            except CorruptCheckpoint:
                raise
            except Exception as exc:  # noqa: BLE001 - an unreadable archive is a corrupt checkpoint
                raise _unreadable(directory, item, key, exc) from None
            total += item.length
            for key, chunk, target in chunks[offset]:
                _copy(saved, chunk, target, f"{directory}: DCP data file {name}: {key!r}")
    return total


def _copy(saved: Any, chunk: ChunkEntry, target: Target, where: str) -> None:
    if not isinstance(saved, torch.Tensor) or tuple(saved.shape) != chunk.shape:
        held = list(saved.shape) if isinstance(saved, torch.Tensor) else type(saved).__name__
        raise CorruptCheckpoint(f"{where}: the chunk holds {held}, the metadata says {list(chunk.shape)}")
    if saved.dtype != target.dest.dtype:
        raise CorruptCheckpoint(f"{where}: the chunk holds {saved.dtype}, the target is {target.dest.dtype}")
    region = intersect((chunk.offsets, chunk.shape), target.box)
    assert region is not None  # planned only where they overlap
    offsets, shape = region
    src = saved[tuple(slice(o - c, o - c + s) for o, c, s in zip(offsets, chunk.offsets, shape))]
    dest = target.dest[tuple(slice(o - t, o - t + s) for o, t, s in zip(offsets, target.box[0], shape))]
    dest.copy_(src)
