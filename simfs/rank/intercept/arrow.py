"""pyarrow inside a rank. Its C++ opens paths itself, so each of its Python entry points that
takes a local path is routed: streams and files (``input_stream``, ``output_stream``, ``OSFile``)
over simulated Python files, a read-only ``memory_map`` over the simulated file's bytes (the content
as of the call: a real map would also see later writes), and every path pyarrow's filesystem layer
resolves to its local filesystem (``pyarrow.parquet``, ``pyarrow.dataset``, datasets' cache files),
as every operation of a ``LocalFileSystem`` the job makes itself, on simfs's filesystem view
(``pyarrow.fs.PyFileSystem`` over ``simfs.rank.fsspec_view``; a file it opens for reading is read
whole at the open, since pyarrow's scanners read on threads of their own, which are no simulated
task). Mapping a file for writing is refused. Another filesystem (s3://, hdfs://) is pyarrow's own."""

from __future__ import annotations

import functools
import os
from typing import Any

from ...errors import BypassError
from ...tasks.task import Task
from .registry import bind_as, dispatcher, patch, patch_function

_READ_MODES = ("r", "rb")
# pyarrow.fs.FileSystem's operations on paths (pyarrow/_fs.pyx), which a LocalFileSystem runs in C++
_OPERATIONS = ("copy_file", "create_dir", "delete_dir", "delete_dir_contents", "delete_file", "get_file_info", "move",
               "open_append_stream", "open_input_file", "open_input_stream", "open_output_stream")
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


def _routed_stream(real: Any, mode: str) -> Any:
    """``input_stream``/``output_stream`` with a local path opened as a simulated file (the
    compression a path's extension names is detected as pyarrow detects it)."""
    bind = bind_as(real)

    def stream(task: Task, *args: Any, **kwargs: Any) -> Any:
        bound = bind(*args, **kwargs)
        source = bound.arguments["source"]
        if _is_local_path(source):
            path = _local(source)
            bound.arguments["compression"] = _compression(path, bound.arguments["compression"])
            bound.arguments["source"] = open(path, mode)  # noqa: SIM115 - the stream owns it
        return real(*bound.args, **bound.kwargs)
    return stream


def install_io() -> None:
    import pyarrow as pa

    bind_map = bind_as(pa.memory_map)

    def os_file(task: Task, path: Any, mode: str = "r", memory_pool: Any = None) -> Any:
        if mode not in ("r", "w", "a"):
            raise ValueError(f"Invalid file mode: {mode}")
        return pa.PythonFile(open(_local(path), mode + "b"), mode="r" if mode == "r" else "w")

    def memory_map(task: Task, *args: Any, **kwargs: Any) -> Any:
        bound = bind_map(*args, **kwargs)
        mode = bound.arguments["mode"]
        if mode not in _READ_MODES:
            raise BypassError(f"pyarrow.memory_map(mode={mode!r})", "it maps the real file for writing in C++",
                              "write with pyarrow.output_stream(path)")
        with open(_local(bound.arguments["path"]), "rb") as f:
            return pa.BufferReader(f.read())

    patch_function(pa, "input_stream", _routed_stream(pa.input_stream, "rb"))
    patch_function(pa, "output_stream", _routed_stream(pa.output_stream, "wb"))
    patch_function(pa, "OSFile", os_file)  # a C type without a signature: pyarrow's documented one
    patch_function(pa, "memory_map", memory_map)
    patch_function(pa, "create_memory_map", lambda task, path, size: memory_map(task, path, "w"))


def install_filesystems() -> None:
    import pyarrow as pa
    import pyarrow.fs as pafs

    real_resolve, real_ensure = pafs._resolve_filesystem_and_path, pafs._ensure_filesystem

    class Handler(pafs.FSSpecHandler):  # type: ignore[misc]  # pyarrow has no type information
        """Files opened for reading are read whole when opened, on the rank's thread: pyarrow's
        readers (a Parquet scan) read from threads of their own, which are no simulated task."""

        def open_input_file(self, path: str) -> Any:
            with self.fs.open(path, "rb") as f:
                return pa.BufferReader(f.read())

        def open_input_stream(self, path: str) -> Any:
            return self.open_input_file(path)

    @functools.cache  # one for the process: the view keeps no state of its own (each call asks the rank's)
    def simulated() -> Any:
        from ..fsspec_view import SimFileSystem

        return pafs.PyFileSystem(Handler(SimFileSystem()))

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
    for name in _OPERATIONS:  # a LocalFileSystem the job made itself and calls
        real = pafs.FileSystem.__dict__[name]
        patch(pafs.FileSystem, name, dispatcher(real, _on_simulated(name, real, simulated)), scan=False)


def _on_simulated(name: str, real: Any, simulated: Any) -> Any:
    """``FileSystem.name`` in a rank: on a LocalFileSystem, the simulated filesystem's."""
    import pyarrow.fs as pafs

    def operation(task: Task, filesystem: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(filesystem, pafs.LocalFileSystem):
            return getattr(simulated(), name)(*args, **kwargs)
        return real(filesystem, *args, **kwargs)
    return operation
