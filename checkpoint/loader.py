"""checkpoint.load: a collective in-place load at any world size and layout. The coordinator
reads the manifest once and broadcasts it (every rank then sees the same checkpoint, however
stale its filesystem cache); each rank matches its state dict against it, reads what its targets
need, and every rank learns whether every other one succeeded."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from coord import Comm, get_comm

from . import dtypes
from ._gc import paused
from .dcp_compat import DcpMetadata, load_dcp, read_dcp_metadata
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    LayoutError,
    LoadError,
    ManifestError,
    StateDictError,
    describe,
)
from .files import DEFAULT_THREADS, MANIFEST_NAME, read_manifest_bytes
from .flatten import Leaf, flatten
from .layout import dtensor_part
from .manifest import Manifest, decode, decode_value
from .read import ReadStats, Target, read

_SAME_EVERYWHERE = (CheckpointNotFound, ManifestError, CorruptCheckpoint, StateDictError, LayoutError)


def load(state_dict: Mapping[Any, Any], path: str | os.PathLike[str], *, comm: Comm | Any = None,
         allow_pickle: bool = False, threads: int = DEFAULT_THREADS) -> ReadStats:
    """Load the checkpoint at ``path`` into ``state_dict`` in place: tensors, arrays, DTensors and
    Sharded parts are filled (resharding from whatever layout was saved), JSON values and
    pickled objects (with ``allow_pickle``) replace their entries. Every key of the state dict
    must be in the checkpoint with the same dtype and global shape. A collective over ``comm``;
    a failure on any rank raises on every rank (the failure's class when every failed rank
    failed alike, else LoadError). Every tile read is verified against its checksum, some of
    them in the targets' own memory, so a failed load may leave the targets partly overwritten."""
    with paused():
        return _load(state_dict, os.path.abspath(os.fspath(path)), get_comm(comm), allow_pickle, threads)


def _load(state_dict: Mapping[Any, Any], directory: str, comm: Comm, allow_pickle: bool, threads: int) -> ReadStats:
    shared: bytes | DcpMetadata | Exception | None = None
    if comm.rank == 0:
        try:
            shared = read_manifest_bytes(directory)
        except CheckpointNotFound as exc:
            shared = read_dcp_metadata(directory, exc)  # a torch.distributed.checkpoint checkpoint?
        except Exception as exc:  # noqa: BLE001 - every rank raises it
            shared = exc
    shared = comm.broadcast_object(shared)
    stats, error = ReadStats(0, 0, 0), None
    try:
        if isinstance(shared, Exception):
            raise shared
        if isinstance(shared, DcpMetadata):
            stats = load_dcp(state_dict, shared, directory, _match, allow_pickle, threads)
        else:
            assert isinstance(shared, bytes)
            manifest = decode(shared, os.path.join(directory, MANIFEST_NAME))
            targets, finish = _match(flatten(state_dict), manifest, directory, allow_pickle)
            stats = read(directory, manifest, targets, threads)
            for step in finish:
                step()
    except Exception as exc:  # noqa: BLE001 - reported to every rank below
        error = exc
    outcomes = comm.all_gather_object(None if error is None else (type(error).__name__, describe(error)))
    failures = {rank: outcome for rank, outcome in enumerate(outcomes) if outcome is not None}
    if failures:
        if comm.world_size == 1 and error is not None:
            raise error
        raise _combined(directory, failures) from error
    return stats


def _combined(directory: str, failures: dict[int, tuple[str, str]]) -> CheckpointError:
    """The same exception for every rank: the failures' common class if they share one."""
    names = {name for name, _ in failures.values()}
    cls = next((c for c in _SAME_EVERYWHERE if {c.__name__} == names), None)
    if cls is None:
        return LoadError(directory, {rank: cause for rank, (_, cause) in failures.items()})
    detail = "; ".join(f"rank {rank}: {cause}" for rank, (_, cause) in sorted(failures.items()))
    return cls(f"load of {directory} failed on rank(s) {sorted(failures)}: {detail}")


def _match(leaves: list[Leaf], manifest: Manifest, directory: str,
           allow_pickle: bool) -> tuple[list[Target], list[Callable[[], None]]]:
    """Targets to read and the assignments to make after reading; StateDictError for any key
    the checkpoint lacks or holds with another kind, dtype or shape (before anything is read)."""
    targets: list[Target] = []
    finish: list[Callable[[], None]] = []
    for leaf in leaves:
        key = leaf.key
        where = f"{directory}: {key!r}"
        if key in manifest.values:
            if leaf.kind not in ("value", "object"):
                raise StateDictError(f"{where} was saved as a JSON value, the state dict holds a {leaf.kind}")
            finish.append(_assign(leaf, decode_value(manifest.values[key])))
        elif key in manifest.tensors:
            entry = manifest.tensors[key]
            if entry.kind == "object":
                if not allow_pickle:
                    raise StateDictError(f"{where} was saved with pickle; pass allow_pickle=True to load it")
                raw = torch.empty(entry.shape, dtype=torch.uint8)
                targets.append(Target(key, ((0,), entry.shape), raw))
                finish.append(_unpickle(leaf, raw))
                continue
            target = _tensor_target(leaf, where)
            if target is None:
                continue
            name, global_shape, box, dest = target
            if name != entry.dtype:
                raise StateDictError(f"{where}: the checkpoint holds {entry.dtype}, the state dict {name}")
            if global_shape != entry.shape:
                raise StateDictError(f"{where}: the checkpoint holds shape {list(entry.shape)}, the state dict "
                                     f"{list(global_shape)}")
            targets.append(Target(key, box, dest))
        else:
            raise StateDictError(f"{where} is not in the checkpoint")
    return targets, finish


def _tensor_target(leaf: Leaf, where: str) -> tuple[str | None, tuple[int, ...], Any, torch.Tensor] | None:
    """(dtype name, global shape, box, destination tensor) of a tensor-like leaf; None for a
    DTensor whose mesh does not include this rank."""
    value = leaf.value
    if leaf.kind == "dtensor":
        part = dtensor_part(value, leaf.key)
        if part is None:
            return None
        local, global_shape, box = part
    elif leaf.kind == "sharded":
        local, global_shape, box = value.local, value.global_shape, value.box
    elif leaf.kind in ("tensor", "array"):
        local, global_shape = value, tuple(int(s) for s in value.shape)
        box = ((0,) * len(global_shape), global_shape)
    else:
        raise StateDictError(f"{where} was saved as a tensor, the state dict holds a {type(value).__name__}")
    if isinstance(local, np.ndarray):
        if not local.flags.writeable:
            raise StateDictError(f"{where}: the numpy array is read-only; load needs a writable one")
        try:
            dest = torch.from_numpy(local)
        except (TypeError, ValueError) as exc:
            raise StateDictError(f"{where}: cannot load into this numpy array in place: {exc}") from None
        return dtypes.of_numpy(local.dtype), global_shape, box, dest
    return dtypes.of_torch(local.dtype), global_shape, box, local


def _assign(leaf: Leaf, value: Any) -> Callable[[], None]:
    def assign() -> None:
        leaf.parent[leaf.slot] = value
    return assign


def _unpickle(leaf: Leaf, raw: torch.Tensor) -> Callable[[], None]:
    def assign() -> None:
        leaf.parent[leaf.slot] = pickle.loads(raw.numpy().tobytes())
    return assign
