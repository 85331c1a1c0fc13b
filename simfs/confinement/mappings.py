"""What a confined process keeps of the shared memory it inherited: fork(2) keeps the parent's
MAP_SHARED mappings shared ("the child inherits copies of the parent's set of open memory
mappings ... MAP_SHARED: updates to the mapping are visible to other processes mapping the same
region", fork(2), mmap(2)), so code below Python in a rank (ctypes, a C library) could write the
caller's memory, or a real file the caller mapped, past every other confinement. Each such mapping
is made the process's own: a private anonymous copy of the bytes it held, moved onto the same
addresses with the same protection (mremap(2) MREMAP_FIXED), so the caller's objects that name
it still read what they read, and nothing written there reaches the caller or the file."""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Collection
from dataclasses import dataclass

from . import kernel

MAPS = "/proc/self/maps"  # proc(5): "address perms offset dev inode pathname", one mapping a line
MEM = "/proc/self/mem"  # proc(5): read at an address; a page that cannot be read is EIO, not SIGBUS
_PART = 1 << 20  # bytes copied by one read
_PROTECTION = {"r": mmap.PROT_READ, "w": mmap.PROT_WRITE, "x": mmap.PROT_EXEC}


@dataclass(frozen=True)
class Mapping:
    """One line of /proc/self/maps: its addresses, protection and what it maps."""

    start: int
    end: int
    protection: int
    shared: bool
    name: str

    @classmethod
    def parse(cls, line: str) -> Mapping:
        fields = line.split(maxsplit=5)
        start, end = (int(address, 16) for address in fields[0].split("-"))
        flags = fields[1]
        protection = 0
        for flag, bit in _PROTECTION.items():
            if flag in flags:
                protection |= bit
        return cls(start, end, protection, flags[3] == "s", fields[5].strip() if len(fields) > 5 else "")


def mappings() -> list[Mapping]:
    """This process's mappings, as the kernel lists them now."""
    with open(MAPS) as listing:
        return [Mapping.parse(line) for line in listing if line.strip()]


def own_shared(keep: Collection[int] = ()) -> list[Mapping]:
    """Make every shared mapping of this process but those starting at an address in ``keep``
    (a supervisor's heartbeat) a private copy at the same place: the mappings it replaced. Before
    confinement: it reads /proc/self/mem, which a confined process may not."""
    replaced = [found for found in mappings() if found.shared and found.start not in keep]
    if not replaced:
        return []
    memory = os.open(MEM, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for found in replaced:
            _replace(found, memory)
    finally:
        os.close(memory)
    return replaced


def _replace(found: Mapping, memory: int) -> None:
    size = found.end - found.start
    copy = kernel.syscall("mmap", 0, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          -1, 0)
    if found.protection & mmap.PROT_READ:
        _copy(found.start, copy, size, memory)
    kernel.syscall("mprotect", copy, size, found.protection)
    kernel.syscall("mremap", copy, size, size, kernel.MREMAP_MAYMOVE | kernel.MREMAP_FIXED, found.start)


def _copy(source: int, target: int, size: int, memory: int) -> None:
    """The bytes at ``source`` into ``target``; a page that cannot be read (a mapped file shorter
    than its mapping, a device's memory) stays zero, where a read of it would have ended the process."""
    offset = 0
    while offset < size:
        part = min(_PART, size - offset)
        try:
            got = os.preadv(memory, [(ctypes.c_char * part).from_address(target + offset)], source + offset)
        except OSError:  # the first page of the part cannot be read
            got = 0
        offset += got or mmap.PAGESIZE
