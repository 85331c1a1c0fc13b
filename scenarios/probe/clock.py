"""One timeline for every rank: "A did X at t, B saw it at t + lag" needs the ranks' clocks
compared. gloo only coordinates: barriers, then each rank's wall clock gathered."""

from __future__ import annotations

import statistics
import time

from coord import Comm

ROUNDS = 15
"""Barrier-then-read rounds behind each offset: the median discards rounds where one rank left the
barrier late (it was descheduled)."""


class Clock:
    """Wall time shifted onto rank 0's clock. ``uncertainty`` bounds the error of an offset (half
    the spread of the middle rounds): lags shorter than that are noise."""

    def __init__(self, offset: float = 0.0, uncertainty: float = 0.0) -> None:
        self.offset = offset
        self.uncertainty = uncertainty

    def now(self) -> float:
        return time.time() - self.offset

    @classmethod
    def synchronize(cls, comm: Comm) -> Clock:
        """Every rank's offset to rank 0 (a collective)."""
        samples: list[list[float]] = []
        for _ in range(ROUNDS):
            comm.barrier()
            samples.append(comm.all_gather_object(time.time()))
        diffs = sorted(row[comm.rank] - row[0] for row in samples)
        middle = diffs[len(diffs) // 4: len(diffs) - len(diffs) // 4]
        uncertainties = comm.all_gather_object((middle[-1] - middle[0]) / 2)
        return cls(statistics.median(diffs), max(uncertainties))
