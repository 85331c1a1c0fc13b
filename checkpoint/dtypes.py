"""The element types a checkpoint stores as raw bytes, by name (torch's names), with their torch
and numpy equivalents."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2")
TORCH: dict[str, torch.dtype] = {name: getattr(torch, name) for name in _NAMES if hasattr(torch, name)}
ITEMSIZE: dict[str, int] = {name: dtype.itemsize for name, dtype in TORCH.items()}
_BY_TORCH = {dtype: name for name, dtype in TORCH.items()}
_BY_NUMPY = {np.dtype(name if name != "bool" else np.bool_): name for name in TORCH
             if name not in ("bfloat16", "float8_e4m3fn", "float8_e5m2")}


def of_torch(dtype: torch.dtype) -> str | None:
    """The name of a torch dtype, or None if checkpoints cannot store it raw."""
    return _BY_TORCH.get(dtype)


def of_numpy(dtype: Any) -> str | None:
    """The name of a numpy dtype (either byte order), or None if checkpoints cannot store it raw."""
    dtype = np.dtype(dtype)
    if dtype.byteorder not in ("=", "|"):
        dtype = dtype.newbyteorder("=")
    return _BY_NUMPY.get(dtype)
