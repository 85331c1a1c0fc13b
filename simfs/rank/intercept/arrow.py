"""pyarrow inside a rank. Its C++ opens paths itself, so each of its Python entry points that
takes a local path is routed: streams and files (``input_stream``, ``output_stream``, ``OSFile``)
over simulated Python files, a read-only ``memory_map`` over the simulated file's bytes (the content
as of the call: a real map would also see later writes), and every path pyarrow's filesystem layer
resolves to its local filesystem (``pyarrow.parquet``, ``pyarrow.dataset``, datasets' cache files)
on simfs's filesystem view (``pyarrow.fs.PyFileSystem`` over ``simfs.rank.fsspec_view``). Mapping a
file for writing is refused. Another filesystem (s3://, hdfs://) is pyarrow's own."""

from __future__ import annotations

import os
from typing import Any

from ...errors import BypassError
from ...tasks.task import Task
from .registry import patch_function

_READ_MODES = ("r", "rb")
# pyarrow/io.pxi, _detect_compression: what input_stream/output_stream take from a path's extension
_COMPRESSION_BY_EXTENSION = {".bz2": "bz2", ".gz": "gzip", ".lz4": "lz4", ".zst": "zstd"}


def _is_local_path(source: Any) -> bool:
    if isinstance(source, os.PathLike):
        return True
    return isinstance(source, str) and ("://" not in source or source.startswith("file://"))


def _local(source: Any) -> str:
    path = os.fspath(source)
    return path.removeprefix("file://") if isinstance(path, str) else os.fsdecode(path)


def _compression(path: str, compression: Any) -> Any:
    if compression != "detect":
        return compression
    return _COMPRESSION_BY_EXTENSION.get(os.path.splitext(path)[1])


def install_io() -> None:
    import pyarrow as pa

    real_input, real_output = pa.input_stream, pa.output_stream

    def input_stream(task: Task, source: Any, compression: Any = "detect", buffer_size: Any = None) -> Any:
        if not _is_local_path(source):
            return real_input(source, compression=compression, buffer_size=buffer_size)
        path = _local(source)
        return real_input(open(path, "rb"), compression=_compression(path, compression),
                          buffer_size=buffer_size)

    def output_stream(task: Task, source: Any, compression: Any = "detect", buffer_size: Any = None) -> Any:
        if not _is_local_path(source):
            return real_output(source, compression=compression, buffer_size=buffer_size)
        path = _local(source)
        return real_output(open(path, "wb"), compression=_compression(path, compression),
                           buffer_size=buffer_size)

    def os_file(task: Task, path: Any, mode: str = "r", memory_pool: Any = None) -> Any:
        if mode not in ("r", "w", "a"):
            raise ValueError(f"Invalid file mode: {mode}")
        return pa.PythonFile(open(_local(path), mode + "b"), mode="r" if mode == "r" else "w")

    def memory_map(task: Task, path: Any, mode: str = "r") -> Any:
        if mode not in _READ_MODES:
            raise BypassError(f"pyarrow.memory_map(mode={mode!r})", "it maps the real file for writing in C++",
                              "write with pyarrow.output_stream(path)")
        with open(_local(path), "rb") as f:
            return pa.BufferReader(f.read())

    patch_function(pa, "input_stream", input_stream)
    patch_function(pa, "output_stream", output_stream)
    patch_function(pa, "OSFile", os_file)
    patch_function(pa, "memory_map", memory_map)
    patch_function(pa, "create_memory_map", lambda task, path, size: memory_map(task, path, "w"))


def install_filesystems() -> None:
    import pyarrow.fs as pafs

    real_resolve, real_ensure = pafs._resolve_filesystem_and_path, pafs._ensure_filesystem

    def simulated() -> Any:
        from ..fsspec_view import SimFileSystem

        return pafs.PyFileSystem(pafs.FSSpecHandler(SimFileSystem()))

    def local(filesystem: Any) -> bool:
        return filesystem is None or isinstance(filesystem, pafs.LocalFileSystem)

    def resolve(task: Task, path: Any, filesystem: Any = None, **kwargs: Any) -> Any:
        if local(filesystem) and _is_local_path(path):
            return simulated(), os.path.abspath(_local(path))
        return real_resolve(path, filesystem, **kwargs)

    def ensure(task: Task, filesystem: Any, **kwargs: Any) -> Any:
        if isinstance(filesystem, pafs.LocalFileSystem):
            return simulated()
        return real_ensure(filesystem, **kwargs)

    patch_function(pafs, "_resolve_filesystem_and_path", resolve)
    patch_function(pafs, "_ensure_filesystem", ensure)
