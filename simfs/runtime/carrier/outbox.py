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
fixed size, CAPACITY bytes of a sparse file (less under a smaller RLIMIT_FSIZE, which truncate(2)
obeys): only what is written takes memory, and only what its owner maps of it counts against the
owner's RLIMIT_AS; the owner's writable mapping grows as its slots do (rank/growable.py: mremap(2)
of a mapping it has, which the seals leave writable). How a rank uses its own: rank/outbox.py."""

from __future__ import annotations

import fcntl
import os
import resource
from dataclasses import dataclass, field

from ... import _real
from ...rank.intercept.registry import host_calls
from ...rank.limits import cannot_start
from ...rank.outbox import CAPACITY, Outbox

# include/uapi/linux/fcntl.h (Python's fcntl module names all but the first)
F_SEAL_FUTURE_WRITE = 0x0010
_SEALS = F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


@dataclass
class Outboxes:
    """The host's memfds for one run: ``writable[r]``, rank r's outbox's descriptor (until it is
    sealed), ``readable[r]`` a read-only descriptor of the same file (open(2) of /proc/self/fd,
    O_RDONLY), which every rank gets; ``views``: the outboxes view() mapped here."""

    writable: list[int]
    readable: tuple[int, ...]
    views: dict[int, Outbox] = field(default_factory=dict)
    sealed: bool = False

    @classmethod
    def create(cls, world_size: int) -> Outboxes:
        """An outbox for each of ``world_size`` ranks; RankCannotStart names the limit that stops one."""
        most, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        size = CAPACITY if most == resource.RLIM_INFINITY else min(CAPACITY, most)
        made: list[int] = []
        try:
            for rank in range(world_size):
                writable = _real.memfd_create(f"simfs-rank{rank}-outbox", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                made.append(writable)
                _real.ftruncate(writable, size)
                made.append(_real.open(f"/proc/self/fd/{writable}", os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            error = cannot_start(len(made) // 2, f"the host could not make its outbox ({exc})", exc)
            for fd in made:
                _real.close(fd)
            raise error from exc
        return cls(made[::2], tuple(made[1::2]))

    def view(self, rank: int) -> Outbox:
        """Rank ``rank``'s side, mapped in this process (the host's own tests of it)."""
        if rank not in self.views:
            self.views[rank] = rank_outbox(rank, self.writable[rank], self.readable)
            self.views[rank].map_own()
        return self.views[rank]

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
        for view in self.views.values():
            view.close()
        self.views.clear()
        self.writable.clear()
        return why

    def close(self) -> None:
        self.seal()
        for fd in self.readable:
            _real.close(fd)


def rank_outbox(rank: int, own: int, readable: tuple[int, ...]) -> Outbox:
    """Rank ``rank``'s side: its own outbox (``own``, writable until sealed), which its process
    maps to write before it tells the host it started (Outbox.map_own), every outbox
    (``readable``) to read."""
    return Outbox(rank, own, dict(enumerate(readable)))
