"""Virtual time: one clock per cluster, read by the filesystems and advanced by the scheduler."""

from __future__ import annotations


class VirtualClock:
    """Seconds of virtual time since the cluster was made; ``clock()`` reads it."""

    __slots__ = ("now",)

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
