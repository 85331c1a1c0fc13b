"""A file's first bytes mapped shared and writable, grown in place or moved by mremap(2) when more
are needed, also after the file was sealed against new writable mappings: F_SEAL_FUTURE_WRITE
refuses "future" mmap(2) and write(2) calls only, so a writable mapping the process already has
stays writable whatever size it grows to (memfd_create(2)); mremap(2) maps no new file range into
another process, and mmap.mmap.resize would ftruncate(2) the file, which F_SEAL_GROW refuses.

Why grow at all: every byte mapped counts against RLIMIT_AS (getrlimit(2): "the maximum size of
the process's virtual memory"), also where nothing is written, so a process under an address-space
limit maps only what it uses."""

from __future__ import annotations

import ctypes
import mmap

from ..confinement import kernel
from .intercept.registry import host_calls


class GrowableMapping:
    """The first ``size`` bytes of the file open on ``fd`` (read-write), mapped MAP_SHARED; the
    descriptor is not needed after (its process may close it)."""

    def __init__(self, fd: int, size: int) -> None:
        with host_calls():  # simfs's own foreign call, also where rank code may make none
            self._address = kernel.syscall("mmap", 0, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
            self.size = size
            self._view = _view(self._address, size)

    def write(self, offset: int, data: memoryview) -> None:
        """Copy ``data`` (bytes) to ``offset``, which with ``data`` lies within the mapping."""
        if offset < 0 or offset + len(data) > self.size:
            raise IndexError(f"simfs: {len(data):,} bytes at {offset:,} do not lie within a mapping of "
                             f"{self.size:,}")
        self._view[offset:offset + len(data)] = data

    def grow(self, size: int) -> None:
        """Map ``size`` bytes (more than now) of the file; the mapping may move. Raises OSError, the
        mapping left as it was, where the kernel refuses (ENOMEM: RLIMIT_AS, or no address range)."""
        with host_calls():
            self._address = kernel.syscall("mremap", self._address, self.size, size, kernel.MREMAP_MAYMOVE)
            self._view.release()
            self.size = size
            self._view = _view(self._address, size)

    def close(self) -> None:
        """Unmap it (what was written stays in the file)."""
        if self.size:
            self._view.release()
            with host_calls():
                kernel.syscall("munmap", self._address, self.size)
            self.size = 0


def _view(address: int, size: int) -> memoryview:
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")

