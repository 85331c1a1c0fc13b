"""A rank process's side of the outboxes (runtime/carrier/outbox.py says why they exist and how
the host makes and seals them): it posts its collectives' tensors into its own outbox and reads its
peers' from theirs.

A rank keeps two slots per process group and uses them by turns (the parity of the group's call
count). Reusing a slot is safe: a rank writes collective k's tensors over collective k-2's only
after collective k-1 of the same group completed, that is after every member arrived there, and
a member arrives there only after it read collective k-2's tensors (it reads them as soon as the
host answers it, before its next request). A collective that fails (a timeout, an abort) may
leave a member that never read: that group's slots are then given up, never written again.

A rank maps of its outbox only what its slots use (growable.py): FIRST_MAP bytes at its start,
twice as many whenever a slot would end past them. Its peers read through descriptors (preadv),
which see the whole file, so only the owner's mapping grows."""

from __future__ import annotations

from typing import Any

from .. import _real
from . import limits
from .growable import GrowableMapping

_MIN_SLOT = 1 << 16  # bytes: small tensors share one page run per slot instead of growing it often
FIRST_MAP = 1 << 20  # bytes of its outbox a rank maps at its start: 16 slots of the smallest size
CAPACITY = 1 << 34  # bytes of one outbox (16 GiB, sparse: only what is written takes memory)


# where a tensor lies: (dtype name, shape, the rank whose outbox holds it, offset, bytes)
Place = tuple[str, list[int], int, int, int]


class Outbox:
    """One rank process's side: it posts its tensors into its own outbox (``own``, a descriptor
    open to write until map_own) and reads anyone's (``readable``, by rank)."""

    def __init__(self, rank: int, own: int, readable: dict[int, int]) -> None:
        self.rank = rank
        self.descriptors = tuple(readable.values())  # kept open in the rank process
        self._own_fd = own
        self._own: GrowableMapping | None = None  # mapped by map_own
        self._capacity = 0  # the outbox's size: what the host made it
        self._readable = readable
        self._calls: dict[str, int] = {}  # group -> collectives posted so far
        self._slots: dict[tuple[str, int], tuple[int, int]] = {}  # (group, parity) -> (offset, capacity)
        self._end = 0  # where the slots end

    def map_own(self) -> None:
        """Map this rank's own outbox to write, before the host seals it (no writable mapping is
        made after); its descriptor is not used again."""
        self._capacity = _real.fstat(self._own_fd).st_size
        self._own = GrowableMapping(self._own_fd, min(FIRST_MAP, self._capacity))

    def close(self) -> None:
        """Unmap its own outbox (the host's view of one, once sealed)."""
        if self._own is not None:
            self._own.close()

    def post(self, group: str, tensors: list[Any]) -> list[Place]:
        """Write ``tensors`` (this rank's part of the group's next collective) into the outbox."""
        import torch

        calls = self._calls.get(group, 0)
        self._calls[group] = calls + 1
        flats = [t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in tensors]
        offset = self._slot((group, calls % 2), sum(f.numel() for f in flats))
        own = self._mapped()
        places: list[Place] = []
        for tensor, flat in zip(tensors, flats):
            size = flat.numel()
            if size:
                own.write(offset, flat.numpy().data)
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

    def _mapped(self) -> GrowableMapping:
        if self._own is None:
            raise RuntimeError(f"simfs defect: rank {self.rank} posted into its outbox before it mapped it")
        return self._own

    def _slot(self, key: tuple[str, int], size: int) -> int:
        """The offset of slot ``key``, grown (moved to the end of the outbox) to hold ``size`` bytes."""
        offset, capacity = self._slots.get(key, (0, 0))
        if size > capacity:
            capacity = max(size, 2 * capacity, _MIN_SLOT)
            end = self._end + capacity
            if end > self._capacity:
                bound = limits.of(limits.FSIZE) if self._capacity < CAPACITY else None
                raise OSError(f"simfs: rank {self.rank}'s collectives need more than its outbox's "
                              f"{self._capacity:,} bytes ({end:,}); "
                              + (bound.advice() if bound else "collectives this large are not simulated"))
            own = self._mapped()
            if end > own.size:
                self._grow(own, min(max(end, 2 * own.size), self._capacity))
            offset, self._end = self._end, end
            self._slots[key] = (offset, capacity)
        return offset

    def _grow(self, own: GrowableMapping, size: int) -> None:
        try:
            own.grow(size)
        except OSError as exc:
            limit = limits.reached(exc)
            raise OSError(exc.errno, f"simfs: rank {self.rank}'s outbox could not map {size:,} bytes for its "
                                     f"collectives ({exc.strerror})" + (f"; {limit.advice()}" if limit else "")) \
                from None
