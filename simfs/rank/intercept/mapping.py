"""Memory maps of simulated files inside a rank: numpy's ``load(mmap_mode=...)`` and ``memmap``,
torch's ``load(mmap=True)`` and ``from_file``, a library's own ``mmap.mmap(f.fileno(), ...)``. A
map that writes nothing back (read-only or private: ACCESS_READ, ACCESS_COPY, MAP_PRIVATE) is the
file's content copied into anonymous memory when it is made, which is what such a map shows a
process that does not watch later writes (a rank sees the content as of the map). A shared writable
map, whose stores the kernel writes back to the file, is refused by name. Anything else (an
anonymous map, a real descriptor) is the real mmap."""

from __future__ import annotations

import mmap
import os
from typing import Any

from ...errors import BypassError
from ...tasks.process import FD_BASE
from ...tasks.task import Task
from .registry import current, patch, patch_function

_SHARED_WRITE = BypassError("mmap.mmap(shared, writable)", "the kernel would write the map's stores back to the "
                            "real file", "map it with access=mmap.ACCESS_COPY, or write through the file")
_READ_ONLY = "mmap can't modify a readonly memory map."  # Modules/mmapmodule.c


def _copies(flags: int, prot: int, access: int) -> bool:
    """Whether the map writes nothing back to the file (what mmap(2) calls a private or
    read-only mapping)."""
    if access in (mmap.ACCESS_READ, mmap.ACCESS_COPY):
        return True
    if access == mmap.ACCESS_WRITE:
        return False
    return bool(flags & mmap.MAP_PRIVATE) or not prot & mmap.PROT_WRITE


def _private(flags: int, prot: int, access: int) -> tuple[int, int, int]:
    """An anonymous map's (flags, prot, access) in a rank, made private: a rank starts no process
    to share it with, so it reads and writes alike, and private memory is what rank_memory bounds
    (a rank process's filter refuses shared anonymous memory, which RLIMIT_DATA does not count)."""
    if access == mmap.ACCESS_DEFAULT:
        return (flags & ~mmap.MAP_SHARED) | mmap.MAP_PRIVATE, prot, access
    if access == mmap.ACCESS_READ:
        return mmap.MAP_PRIVATE, mmap.PROT_READ, mmap.ACCESS_DEFAULT
    return mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.ACCESS_DEFAULT  # ACCESS_WRITE, ACCESS_COPY


class SimulatedMap(mmap.mmap):
    """``mmap.mmap``: over a simulated descriptor inside a rank, the file's content in anonymous
    memory (Python-level writes to a read-only one raise as the real one's do)."""

    _read_only = False

    def __new__(cls, fileno: int, length: int, flags: int = mmap.MAP_SHARED,
                prot: int = mmap.PROT_READ | mmap.PROT_WRITE, access: int = mmap.ACCESS_DEFAULT,
                offset: int = 0, **later: Any) -> SimulatedMap:  # later: keywords of later Pythons (trackfd)
        if current() is not None and fileno == -1:
            return super().__new__(cls, -1, length, *_private(flags, prot, access), offset, **later)
        if current() is None or fileno < FD_BASE:
            return super().__new__(cls, fileno, length, flags, prot, access, offset, **later)
        if not _copies(flags, prot, access):
            raise _SHARED_WRITE
        size = os.fstat(fileno).st_size
        if offset < 0 or offset > size or (length == 0 and offset == size):
            raise ValueError("mmap offset is greater than file size")
        length = length or size - offset
        if offset + length > size:
            raise ValueError("mmap length is greater than file size")
        mapped = super().__new__(cls, -1, length, mmap.MAP_PRIVATE)
        mapped[:] = os.pread(fileno, length, offset)
        mapped._read_only = access == mmap.ACCESS_READ or (access == mmap.ACCESS_DEFAULT
                                                           and not prot & mmap.PROT_WRITE)
        mapped.seek(0)
        return mapped

    def _writable(self) -> None:
        if self._read_only:
            raise TypeError(_READ_ONLY)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._writable()
        super().__setitem__(index, value)

    def write(self, data: Any) -> int:
        self._writable()
        return super().write(data)

    def write_byte(self, byte: int) -> None:
        self._writable()
        super().write_byte(byte)

    def move(self, dest: int, src: int, count: int) -> None:
        self._writable()
        super().move(dest, src, count)


def _sendfile(task: Task, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
    """os.sendfile between two simulated files: a copy by read and write, as sendfile(2) does in
    the kernel (from ``offset`` without moving in_fd's position, else from its position)."""
    if out_fd < FD_BASE or in_fd < FD_BASE:
        raise BypassError("os.sendfile", "it copies between real descriptors (sockets)")
    data = os.read(in_fd, count) if offset is None else os.pread(in_fd, count, offset)
    return os.write(out_fd, data) if data else 0


def _private_copy(call: str, filename: Any, shared: Any, nbytes: int) -> bytes:
    if shared:
        raise BypassError(f"{call}(shared=True)", "the kernel would write the map's stores back to the real file",
                          "load with shared=False (torch.load(..., mmap=True) does by default)")
    with open(filename, "rb") as f:
        data = f.read(nbytes) if nbytes else f.read()
    if nbytes and len(data) < nbytes:
        raise RuntimeError(f"{call}: {os.fspath(filename)!r} holds {len(data)} bytes, fewer than the {nbytes} "
                           "to map")
    return data


def storage_from_file(filename: Any, shared: bool = False, nbytes: int = 0) -> Any:
    """``torch.UntypedStorage.from_file`` (what ``torch.load(..., mmap=True)`` maps) in a rank: a
    private map, the file's bytes in a storage of its own."""
    import torch

    data = _private_copy("torch.UntypedStorage.from_file", filename, shared, nbytes)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return raw.untyped_storage()


def tensor_from_file(filename: Any, shared: bool | None = None, size: int = 0, *, dtype: Any = None,
                     layout: Any = None, device: Any = None, pin_memory: bool = False) -> Any:
    """``torch.from_file`` in a rank: ``size`` elements of ``dtype`` from a private map of the file."""
    import torch

    dtype = dtype or torch.get_default_dtype()
    nbytes = size * torch.empty((), dtype=dtype).element_size()
    data = _private_copy("torch.from_file", filename, shared, nbytes)
    tensor = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return tensor.to(device) if device is not None else tensor


def install() -> None:
    patch(mmap, "mmap", SimulatedMap)
    patch_function(os, "sendfile", _sendfile)
