"""The simulation's decisions read from bytes Hypothesis drew, and uniform positions.

A run draws thousands of times (the next rank at every switch, a cache lifetime at every
fetch). Drawing each from Hypothesis through the run's thread hand-off costs ~35 µs a draw;
drawing the whole sequence as one byte string and reading it here runs 8-rank examples about
5x faster, and still shrinks: Hypothesis shortens the strings and lowers their bytes, and past
its end every decision is the simple one (the first ready rank, the shortest lifetime)."""

from __future__ import annotations

from hypothesis import strategies as st

POSITION_BYTES = 4

# Hypothesis's integers() and sampled_from() favour small values (measured over 3000 draws of
# 0..999: 18% in the first tenth, 4% in the last), and an all-zero byte string is one example in
# four; four bytes that are not all zero read as a fraction are uniform (each tenth 9-11%). A
# crash point drawn with it is not biased to "nothing happened yet".
uniform_position = st.binary(min_size=POSITION_BYTES, max_size=POSITION_BYTES).filter(any)


def position(raw: bytes, n: int) -> int:
    """A position in ``[0, n)`` from bytes drawn with ``uniform_position``."""
    return int.from_bytes(raw, "big") * n >> (8 * POSITION_BYTES)


class BufferChoices:
    """A simfs choice source reading scheduling decisions from one byte string, cache lifetimes
    (and latency jitter) from another, and its ``timing`` (when each rank's thread wakes) from a
    third; ``None`` keeps every such decision simple."""

    thread_bound = False

    def __init__(self, schedule: bytes | None, lifetimes: bytes | None, timing: bytes | None = None) -> None:
        self._schedule = schedule or b""
        self._lifetimes = Fractions(lifetimes)
        self._i = 0
        self.timing = Fractions(timing)

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        data, i = self._schedule, self._i
        width = 1 if n <= 256 else 2
        if i + width > len(data):
            self._i = len(data)
            return 0
        self._i = i + width
        return int.from_bytes(data[i:i + width], "big") % n

    def fraction(self) -> float:
        return self._lifetimes.fraction()


class Fractions:
    """A choice source of fractions only, read two bytes at a time from a byte string (past its
    end, or with ``None``, 0: the shortest lifetime, no delay); every discrete choice is the first."""

    thread_bound = False

    def __init__(self, data: bytes | None) -> None:
        self._data = data or b""
        self._j = 0

    def choose(self, n: int) -> int:
        return 0

    def fraction(self) -> float:
        data, j = self._data, self._j
        if j + 2 > len(data):
            self._j = len(data)
            return 0.0
        self._j = j + 2
        return int.from_bytes(data[j:j + 2], "big") / 65536
