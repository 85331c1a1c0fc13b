"""What a node holds for a file that the server has not (durably) got: dirty bytes waiting for
close or fsync, and acknowledged-but-uncommitted writes to send again if the server restarts.
Both keep only the newest version of each byte, as a page cache does."""

from __future__ import annotations

_SMALL = 1 << 16


class Extent:
    """Contiguous bytes at an offset, kept as the chunks written (joined once, when needed)."""

    __slots__ = ("chunks", "length", "offset")

    def __init__(self, offset: int, data: bytes) -> None:
        self.offset, self.chunks, self.length = offset, [data], len(data)

    @property
    def end(self) -> int:
        return self.offset + self.length

    def data(self) -> bytes:
        if len(self.chunks) > 1:
            self.chunks = [b"".join(self.chunks)]
        return self.chunks[0]

    def cut(self, start: int, stop: int) -> Extent:
        """The part of this extent in [start, stop) as a new extent."""
        piece = self.data()[start - self.offset:stop - self.offset]
        return Extent(start, piece)

    def pieces(self) -> list[tuple[int, bytes]]:
        """(offset, bytes) to send: big chunks as they are, runs of small ones joined."""
        out: list[tuple[int, bytes]] = []
        run: list[bytes] = []
        offset = start = self.offset
        for chunk in self.chunks:
            if len(chunk) >= _SMALL:
                if run:
                    out.append((start, b"".join(run)))
                    run = []
                out.append((offset, chunk))
            else:
                if not run:
                    start = offset
                run.append(chunk)
            offset += len(chunk)
        if run:
            out.append((start, b"".join(run)))
        return out


class Extents:
    """Non-overlapping extents of one file; a write replaces what it overlaps."""

    __slots__ = ("_hi", "items")

    def __init__(self) -> None:
        self.items: list[Extent] = []
        self._hi = 0  # no extent ends past this

    def write(self, offset: int, data: bytes) -> None:
        """Keep ``data`` (immutable bytes: never copied here)."""
        if not data:
            return
        end = offset + len(data)
        last = self.items[-1] if self.items else None
        if offset >= self._hi:  # nothing to replace (appends, the common case)
            if last is not None and last.end == offset:
                last.chunks.append(data)
                last.length += len(data)
            else:
                self.items.append(Extent(offset, data))
        else:
            self._cut(offset, end)
            self.items.append(Extent(offset, data))
        self._hi = max(self._hi, end)

    def truncate(self, size: int) -> None:
        if size < self._hi:
            self._cut(size, self._hi)
            self._hi = size

    def _cut(self, start: int, stop: int) -> None:
        kept: list[Extent] = []
        for ext in self.items:
            if ext.end <= start or ext.offset >= stop:
                kept.append(ext)
                continue
            if ext.offset < start:
                kept.append(ext.cut(ext.offset, start))
            if ext.end > stop:
                kept.append(ext.cut(stop, ext.end))
        self.items = kept

    def nbytes(self) -> int:
        return sum(e.length for e in self.items)

    def overlay(self, out: bytearray, offset: int) -> None:
        """Write these extents over ``out``, which holds the file from ``offset``."""
        end = offset + len(out)
        for ext in self.items:
            lo, hi = max(ext.offset, offset), min(ext.end, end)
            if lo < hi:
                out[lo - offset:hi - offset] = ext.data()[lo - ext.offset:hi - ext.offset]


class DirtyFile:
    """Writes a node holds for one file that the server has not seen yet."""

    __slots__ = ("base", "extents", "generation", "reserved", "size")

    def __init__(self, size: int, base: bytes | None = None, generation: int | None = None) -> None:
        self.extents = Extents()
        self.size = size
        self.base = base  # whole-object uploads: the content the writes apply to
        # whole-object uploads: the object's change counter when this node opened it (None: a new
        # object, which must still be absent); an upload of a changed object fails with ESTALE
        self.generation = generation
        self.reserved = 0  # bytes granted by the server for these writes (Lustre grants)

    def write(self, offset: int, data: bytes) -> None:
        self.extents.write(offset, data)
        self.size = max(self.size, offset + len(data))

    def overlay(self, base: bytes, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if end <= offset:
            return b""
        out = bytearray(base[offset:end])
        out.extend(bytes(end - offset - len(out)))
        self.extents.overlay(out, offset)
        return bytes(out)

    def content(self) -> bytes:
        return self.overlay(self.base or b"", 0, self.size)

    def nbytes(self) -> int:
        return self.extents.nbytes()


class Unstable:
    """Writes to one file the server acknowledged but has not committed, as of one server
    incarnation: if the server restarts before the commit, they are sent again (an NFS client
    resends when the write verifier changes)."""

    __slots__ = ("boot", "extents", "floor", "size")

    def __init__(self, boot: int) -> None:
        self.boot = boot
        self.extents = Extents()
        self.floor: int | None = None  # the smallest size a truncation left
        self.size: int | None = None  # the size after the last request, once a truncation set it

    def write(self, offset: int, data: bytes) -> None:
        self.extents.write(offset, data)
        if self.size is not None:
            self.size = max(self.size, offset + len(data))

    def truncate(self, size: int) -> None:
        self.extents.truncate(size)
        self.floor = size if self.floor is None else min(self.floor, size)
        self.size = size

    def requests(self) -> list[tuple[str, int, bytes]]:
        """What to send again, in an order that rebuilds the same content."""
        out: list[tuple[str, int, bytes]] = []
        if self.floor is not None:
            out.append(("truncate", self.floor, b""))
        for ext in self.extents.items:
            out.extend(("write", offset, data) for offset, data in ext.pieces())
        if self.size is not None and self.size != self.floor:
            out.append(("truncate", self.size, b""))
        return out
