"""Tensors of a collective through shared memory, not through the host: each rank writes its
tensors into its own outbox (a memfd the host made before forking the ranks) and the host hands
the other ranks only where they lie; each rank reads its peers' straight from their outboxes.
A 1 MiB all-reduce of 4 ranks then moves 5 MiB of copies instead of 16 MiB of pickles through
sockets, and the host never holds a byte of a rank's data.

Only its owner writes an outbox: each rank process maps its own writable before it tells the host
it started, and the host seals every outbox once all have, before any rank runs
(F_SEAL_FUTURE_WRITE, Linux 5.1+: no write(2) and no new writable mapping through any descriptor,
so a peer that reopens its read-only descriptor through /proc/self/fd for writing gets nothing it
can write with; F_SEAL_GROW and F_SEAL_SHRINK: no truncation under the owner). So an outbox has a
fixed size, CAPACITY bytes of a sparse file: only what is written takes memory. How a rank uses
its own: rank/outbox.py."""

from __future__ import annotations

import fcntl
import mmap
import os
from dataclasses import dataclass, field

from ... import _real
from ...rank.intercept.registry import host_calls
from ...rank.outbox import CAPACITY, Outbox

# include/uapi/linux/fcntl.h (Python's fcntl module names all but the first)
F_SEAL_FUTURE_WRITE = 0x0010
_SEALS = F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


@dataclass
class Outboxes:
    """The host's memfds for one run: ``writable[r]``, rank r's outbox's descriptor (until it is
    sealed), ``readable[r]`` a read-only descriptor of the same file (open(2) of /proc/self/fd,
    O_RDONLY), which every rank gets; ``maps``: the outboxes view() mapped here."""

    writable: list[int]
    readable: tuple[int, ...]
    maps: dict[int, mmap.mmap] = field(default_factory=dict)
    sealed: bool = False

    @classmethod
    def create(cls, world_size: int) -> Outboxes:
        writable = [_real.memfd_create(f"simfs-rank{r}-outbox", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                    for r in range(world_size)]
        for fd in writable:
            _real.ftruncate(fd, CAPACITY)
        readable = tuple(_real.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC) for fd in writable)
        return cls(writable, readable)

    def view(self, rank: int) -> Outbox:
        """Rank ``rank``'s side, mapped in this process (the host's own tests of it)."""
        if rank not in self.maps:
            self.maps[rank] = _writable_map(self.writable[rank])
        return Outbox(rank, self.maps[rank], dict(enumerate(self.readable)))

    def seal(self) -> str:
        """Once every rank process mapped its own, before any runs: the outboxes only their owners'
        mappings write. Returns why not, or "" once sealed (a kernel before 5.1 has no F_SEAL_FUTURE_WRITE)."""
        if self.sealed:
            return ""
        self.sealed = True
        why = ""
        for fd in self.writable:
            try:
                with host_calls():  # Python audits it as fcntl.fcntl, which rank code may not call on a real file
                    _real.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            except OSError as exc:
                why = f"outboxes not sealed ({os.strerror(exc.errno or 0)}): a rank may write its peers'"
            _real.close(fd)
        for mapped in self.maps.values():
            mapped.close()
        self.maps.clear()
        self.writable.clear()
        return why

    def close(self) -> None:
        self.seal()
        for fd in self.readable:
            _real.close(fd)


def rank_outbox(rank: int, own: int, readable: tuple[int, ...]) -> Outbox:
    """In rank ``rank``'s new process, before it tells the host it started: its own outbox
    (``own``, writable until sealed) mapped to write, every outbox (``readable``) to read."""
    return Outbox(rank, _writable_map(own), dict(enumerate(readable)))


def _writable_map(fd: int) -> mmap.mmap:
    return mmap.mmap(fd, CAPACITY, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
