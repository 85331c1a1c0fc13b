"""A queue of simulated tasks waiting for something (a collective, a lock, a thread to end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class WaitQueue:
    """Tasks waiting for one thing; ``peers`` says whom they wait for, when known."""

    __slots__ = ("key", "peers", "waiters", "what")

    def __init__(self, what: str, peers: Callable[[], list[int]] | None = None) -> None:
        self.waiters: list[Any] = []
        self.what = what
        self.peers = peers
        self.key: int | None = None  # its number in a rank process's requests (runtime/carrier)
