"""safetensors inside a rank. Its Rust core opens and maps paths itself, so simfs takes the two
calls below every entry point (safetensors.torch's save_file/load_file/save_model/load_model,
transformers', accelerate's): ``serialize_file`` writes ``serialize``'s bytes through a simulated
file, and ``safe_open`` reads the simulated file and serves the same methods. Both accept exactly
what the installed release accepts (its own signature decides), so a new keyword of a later release
(0.8's ``backend``) passes, and a wrong one fails as it would outside simfs."""

from __future__ import annotations

import importlib
import json
import os
import struct
from typing import Any

from ...tasks.task import Task
from .registry import bind_as, patch_function

_HEADER_SIZE = struct.Struct("<Q")  # the file opens with its JSON header's length (safetensors' format)


class SimulatedSafeOpen:
    """What ``safe_open(filename, framework, device=...)`` returns, over the simulated file's bytes
    read at open (the real one maps the file: a rank sees the content as of its open)."""

    def __init__(self, data: bytes, framework: str, device: Any) -> None:
        (size,) = _HEADER_SIZE.unpack_from(data)
        header = json.loads(data[_HEADER_SIZE.size:_HEADER_SIZE.size + size])
        self._metadata: dict[str, str] | None = header.pop("__metadata__", None)
        self._names = sorted(header, key=lambda name: header[name]["data_offsets"][0])
        self._tensors = _load(data, framework)
        self._device = device

    def __enter__(self) -> SimulatedSafeOpen:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def keys(self) -> list[str]:
        return sorted(self._names)

    def offset_keys(self) -> list[str]:
        return list(self._names)

    def metadata(self) -> dict[str, str] | None:
        return self._metadata

    def get_tensor(self, name: str) -> Any:
        tensor = self._tensors[name]
        return tensor if self._device in (None, "cpu") or not hasattr(tensor, "to") else tensor.to(self._device)

    def get_tensors(self) -> dict[str, Any]:
        return {name: self.get_tensor(name) for name in self._names}

    def get_slice(self, name: str) -> SimulatedSlice:
        return SimulatedSlice(self.get_tensor(name))


class SimulatedSlice:
    """``get_slice``'s view: shape, dtype and indexing of one tensor."""

    def __init__(self, tensor: Any) -> None:
        self._tensor = tensor

    def get_shape(self) -> list[int]:
        return list(self._tensor.shape)

    def get_dtype(self) -> str:
        from safetensors.torch import _TYPES  # dtype names of the format

        names = {dtype: name for name, dtype in _TYPES.items()}
        return names.get(self._tensor.dtype, str(self._tensor.dtype))

    def __getitem__(self, index: Any) -> Any:
        return self._tensor[index]


_LOADERS = {"pt": "torch", "torch": "torch", "pytorch": "torch", "np": "numpy", "numpy": "numpy"}


def _load(data: bytes, framework: str) -> dict[str, Any]:
    if framework not in _LOADERS:
        raise ValueError(f"safetensors.safe_open in a simfs rank: framework {framework!r} is not simulated "
                         "(pt and numpy are)")
    tensors: dict[str, Any] = importlib.import_module(f"safetensors.{_LOADERS[framework]}").load(data)
    return tensors


def install() -> None:
    import safetensors

    bind_open, bind_serialize_file = bind_as(safetensors.safe_open), bind_as(safetensors.serialize_file)

    def safe_open(task: Task, *args: Any, **kwargs: Any) -> SimulatedSafeOpen:
        arguments = bind_open(*args, **kwargs).arguments
        with open(os.fspath(arguments["filename"]), "rb") as f:
            data = f.read()
        device = arguments["device"]
        return SimulatedSafeOpen(data, arguments["framework"], "cpu" if device is Ellipsis else device)

    def serialize_file(task: Task, *args: Any, **kwargs: Any) -> None:
        arguments = dict(bind_serialize_file(*args, **kwargs).arguments)
        filename = arguments.pop("filename")
        data = safetensors.serialize(**arguments)
        with open(os.fspath(filename), "wb") as f:
            f.write(data)

    patch_function(safetensors, "safe_open", safe_open)
    patch_function(safetensors, "serialize_file", serialize_file)
