"""File contents as a rope of immutable chunks: appending and whole-file overwrites share the
writer's bytes (no copy), which is what sequential checkpoint writes do. The first write into
the middle turns the rope into one flat buffer, edited in place from then on."""

from __future__ import annotations

from bisect import bisect_right


class Rope:
    """A byte string built from shared immutable chunks, or one private bytearray."""

    __slots__ = ("_chunks", "_ends", "_flat")

    def __init__(self, data: bytes = b"") -> None:
        self._chunks: list[bytes] = [data] if data else []
        self._ends: list[int] = [len(data)] if data else []
        self._flat: bytearray | None = None

    def __len__(self) -> int:
        if self._flat is not None:
            return len(self._flat)
        return self._ends[-1] if self._ends else 0

    def copy(self) -> Rope:
        """An independent rope (chunks are shared: they never change)."""
        twin = Rope.__new__(Rope)
        if self._flat is not None:
            twin._chunks, twin._ends, twin._flat = [bytes(self._flat)], [len(self._flat)], None
        else:
            twin._chunks, twin._ends, twin._flat = list(self._chunks), list(self._ends), None
        return twin

    def same(self, other: Rope) -> bool:
        """The same bytes (chunks shared with a copy compare without reading them)."""
        if len(self) != len(other):
            return False
        if self._flat is None and other._flat is None and len(self._chunks) == len(other._chunks) and all(
                a is b for a, b in zip(self._chunks, other._chunks)):
            return True
        return self.tobytes() == other.tobytes()

    def tobytes(self) -> bytes:
        if self._flat is not None:
            return bytes(self._flat)
        if len(self._chunks) > 1:
            joined = b"".join(self._chunks)
            self._chunks, self._ends = [joined], [len(joined)]
        return self._chunks[0] if self._chunks else b""

    def slice(self, offset: int, size: int) -> bytes:
        end = min(offset + size, len(self))
        if end <= offset:
            return b""
        if self._flat is not None:
            return bytes(self._flat[offset:end])
        i = bisect_right(self._ends, offset)
        out = []
        while offset < end:
            start = self._ends[i] - len(self._chunks[i])
            chunk = self._chunks[i]
            piece = chunk[offset - start:min(end, self._ends[i]) - start]
            out.append(piece)
            offset += len(piece)
            i += 1
        return out[0] if len(out) == 1 else b"".join(out)

    def _flatten(self) -> bytearray:
        if self._flat is None:
            self._flat = bytearray(b"".join(self._chunks))
            self._chunks, self._ends = [], []
        return self._flat

    def write(self, offset: int, data: bytes) -> None:
        """Write immutable ``data`` at ``offset`` (zero-filling any gap)."""
        size = len(self)
        if self._flat is None:
            if offset == 0 and len(data) >= size:
                self._chunks, self._ends = ([data], [len(data)]) if data else ([], [])
                return
            if offset >= size:
                if offset > size:
                    self._append(bytes(offset - size))
                self._append(data)
                return
        flat = self._flatten()
        if offset > len(flat):
            flat.extend(bytes(offset - len(flat)))
        flat[offset:offset + len(data)] = data

    def _append(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._ends.append(len(self) + len(data))

    def truncate(self, size: int) -> None:
        current = len(self)
        if size >= current:
            self.write(current, bytes(size - current))
        elif size == 0:
            self._chunks, self._ends, self._flat = [], [], None
        else:
            head = self.slice(0, size)
            self._chunks, self._ends, self._flat = [head], [size], None
