"""Staging: a state dict as this rank's local plan (which chunks it holds) and the CPU bytes of
each chunk. What follows (planning, writing, committing) only needs this, so an asynchronous save
can stage with ``copy=True`` and write later while training mutates the tensors."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import dtypes
from .errors import StateDictError
from .flatten import Leaf, flatten
from .layout import dtensor_part
from .manifest import Value, encode_value
from .plan import LocalChunk


@dataclass(frozen=True)
class Staged:
    """This rank's chunks and, for each, its bytes (a uint8 array) or its JSON value."""

    chunks: list[LocalChunk]
    data: list[np.ndarray | Value]


def stage(state_dict: Mapping[Any, Any], *, allow_pickle: bool = False, copy: bool = False,
          pin_memory: bool = False) -> Staged:
    """The chunks of ``state_dict`` this rank holds, with their bytes on the CPU. Tensors already
    on the CPU are not copied unless ``copy``; CUDA ones are copied (into pinned memory with
    ``pin_memory``). Objects that are not tensors, arrays or JSON values are pickled only with
    ``allow_pickle``, else StateDictError names the key."""
    chunks: list[LocalChunk] = []
    data: list[np.ndarray | Value] = []
    for leaf in flatten(state_dict):
        staged = _stage_leaf(leaf, allow_pickle, copy, pin_memory)
        if staged is not None:
            chunks.append(staged[0])
            data.append(staged[1])
    return Staged(chunks, data)


def _stage_leaf(leaf: Leaf, allow_pickle: bool, copy: bool, pin: bool) -> tuple[LocalChunk, np.ndarray | Value] | None:
    key, value = leaf.key, leaf.value
    if leaf.kind == "value":
        return LocalChunk(key, "value", "", (), (), ()), encode_value(value)
    if leaf.kind == "dtensor":
        part = dtensor_part(value, key)
        if part is None:
            return None
        local, global_shape, (offsets, shape) = part
    elif leaf.kind == "sharded":
        local, global_shape, (offsets, shape) = value.local, value.global_shape, value.box
    elif leaf.kind in ("tensor", "array"):
        local, global_shape = value, tuple(value.shape)
        offsets, shape = (0,) * len(global_shape), global_shape
    else:
        return _stage_object(key, value, allow_pickle)
    if isinstance(local, np.ndarray):
        name = dtypes.of_numpy(local.dtype)
        if name is None:
            return _stage_object(key, local, allow_pickle)
        raw = array_bytes(local, copy)
    elif isinstance(local, torch.Tensor):
        name = dtypes.of_torch(local.dtype)
        if name is None or local.layout != torch.strided:
            raise StateDictError(f"{key!r}: a {local.layout} tensor of dtype {local.dtype} cannot be saved")
        raw = tensor_bytes(local, copy, pin)
    else:
        raise StateDictError(f"{key!r}: Sharded.local must be a torch tensor or numpy array, "
                             f"got {type(local).__name__}")
    return LocalChunk(key, "tensor", name, global_shape, offsets, shape), raw


def _stage_object(key: str, value: Any, allow_pickle: bool) -> tuple[LocalChunk, np.ndarray]:
    if not allow_pickle:
        raise StateDictError(f"{key!r}: a {type(value).__module__}.{type(value).__qualname__} is not a tensor, "
                             "array or JSON value; pass allow_pickle=True to save (and load) it with pickle")
    raw = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    return LocalChunk(key, "object", "uint8", (raw.size,), (0,), (raw.size,)), raw


def tensor_bytes(tensor: torch.Tensor, copy: bool = False, pin: bool = False) -> np.ndarray:
    """The bytes of a tensor, row-major, as a flat uint8 array on the CPU (a view when possible)."""
    t = tensor.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if not t.is_cpu:
        t = torch.empty(t.shape, dtype=t.dtype, pin_memory=pin).copy_(t)
    elif copy:
        t = t.clone(memory_format=torch.contiguous_format)
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype in _NUMPY_NATIVE:
        return t.numpy().reshape(-1).view(np.uint8)
    return t.reshape(-1).view(torch.uint8).numpy()


def array_bytes(array: np.ndarray, copy: bool = False) -> np.ndarray:
    """The bytes of a numpy array in native byte order, row-major, as a flat uint8 array."""
    native = array.dtype.newbyteorder("=") if array.dtype.byteorder not in ("=", "|") else array.dtype
    out = np.array(array, dtype=native, order="C", copy=copy or None)
    return out.reshape(-1).view(np.uint8)


_NUMPY_NATIVE = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                 torch.float32, torch.float64, torch.complex64, torch.complex128}
