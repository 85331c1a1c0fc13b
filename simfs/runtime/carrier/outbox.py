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
fixed size, CAPACITY bytes of a sparse file: only what is written takes memory.

A rank keeps two slots per process group and uses them by turns (the parity of the group's call
count). Reusing a slot is safe: a rank writes collective k's tensors over collective k-2's only
after collective k-1 of the same group completed, that is after every member arrived there, and
a member arrives there only after it read collective k-2's tensors (it reads them as soon as the
host answers it, before its next request). A collective that fails (a timeout, an abort) may
leave a member that never read: that group's slots are then given up, never written again."""

from __future__ import annotations

import fcntl
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

from ... import _real
from ..._intercept.registry import host_calls

_MIN_SLOT = 1 << 16  # bytes: small tensors share one page run per slot instead of growing it often
CAPACITY = 1 << 34  # bytes of one outbox (16 GiB, sparse): a rank's slots of every group it uses
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

    def of_rank(self, rank: int) -> Outbox:
        """In rank ``rank``'s new process, before it tells the host it started: its own outbox
        mapped to write, every outbox to read."""
        return Outbox(rank, _writable_map(self.writable[rank]), dict(enumerate(self.readable)))

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


def _writable_map(fd: int) -> mmap.mmap:
    return mmap.mmap(fd, CAPACITY, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


# where a tensor lies: (dtype name, shape, the rank whose outbox holds it, offset, bytes)
Place = tuple[str, list[int], int, int, int]


class Outbox:
    """One rank process's side: it posts its tensors and reads anyone's."""

    def __init__(self, rank: int, own: mmap.mmap, readable: dict[int, int]) -> None:
        self.rank = rank
        self.descriptors = tuple(readable.values())  # kept open in the rank process
        self._own = own
        self._readable = readable
        self._calls: dict[str, int] = {}  # group -> collectives posted so far
        self._slots: dict[tuple[str, int], tuple[int, int]] = {}  # (group, parity) -> (offset, capacity)
        self._end = 0  # the outbox's size

    def post(self, group: str, tensors: list[Any]) -> list[Place]:
        """Write ``tensors`` (this rank's part of the group's next collective) into the outbox."""
        import torch

        calls = self._calls.get(group, 0)
        self._calls[group] = calls + 1
        flats = [t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in tensors]
        offset = self._slot((group, calls % 2), sum(f.numel() for f in flats))
        places: list[Place] = []
        for tensor, flat in zip(tensors, flats):
            size = flat.numel()
            if size:
                self._own[offset:offset + size] = flat.numpy().data
            places.append((str(tensor.dtype).removeprefix("torch."), list(tensor.shape), self.rank, offset, size))
            offset += size
        return places

    def give_up(self, group: str) -> None:
        """A collective of ``group`` failed: its slots may still be read by a member that never got
        to, so they are never written again (new ones are taken)."""
        for parity in (0, 1):
            self._slots.pop((group, parity), None)

    def read(self, places: list[Place]) -> list[Any]:
        """Copies of the tensors at ``places`` (copies: a slot is written again two calls later).
        Tensors of one dtype and shape (every rank's part of a collective) are read as the rows of
        one buffer, which reduce.stacked then takes without another copy."""
        import torch

        if not places:
            return []
        dtype, shape = places[0][0], places[0][1]
        if any(p[0] != dtype or p[1] != shape for p in places):
            return [self.read([place])[0] for place in places]
        size = places[0][4]
        if not size:
            return [torch.empty(shape, dtype=getattr(torch, dtype)) for _ in places]
        buffer = torch.empty((len(places), size), dtype=torch.uint8)
        view = buffer.numpy().data.cast("B")
        for row, (_, _, rank, offset, _) in enumerate(places):
            self._read_into(view[row * size:(row + 1) * size], rank, offset)
        rows = buffer.view(getattr(torch, dtype)).reshape(len(places), *shape)
        return list(rows.unbind(0))

    def _read_into(self, view: memoryview, rank: int, offset: int) -> None:
        got = 0
        while got < len(view):
            done = _real.preadv(self._readable[rank], [view[got:]], offset + got)
            if done <= 0:
                raise OSError(f"simfs: rank {rank}'s outbox ended at {offset + got} (wanted {offset + len(view)})")
            got += done

    def _slot(self, key: tuple[str, int], size: int) -> int:
        """The offset of slot ``key``, grown (moved to the end of the outbox) to hold ``size`` bytes."""
        offset, capacity = self._slots.get(key, (0, 0))
        if size > capacity:
            capacity = max(size, 2 * capacity, _MIN_SLOT)
            if self._end + capacity > CAPACITY:
                raise OSError(f"simfs: rank {self.rank}'s collectives need more than its outbox's {CAPACITY >> 30} "
                              f"GiB ({self._end + capacity} bytes); collectives this large are not simulated")
            offset, self._end = self._end, self._end + capacity
            self._slots[key] = (offset, capacity)
        return offset
