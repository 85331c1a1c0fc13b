"""What every measurement family gets: the communicator, this rank's probe directory, the shared
timeline, the settings, who watches rank 0's changes, and the progress display."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from coord import Comm

from .clock import Clock
from .session import Session
from .settings import Settings


class Progress(Protocol):
    """A bar per phase (rich on rank 0; nothing elsewhere)."""

    def phase(self, name: str, total: int) -> None: ...

    def advance(self, steps: int = 1) -> None: ...


class Silent:
    """Progress that shows nothing (ranks other than 0, library use)."""

    def phase(self, name: str, total: int) -> None:
        return None

    def advance(self, steps: int = 1) -> None:
        return None


@dataclass
class Context:
    comm: Comm
    session: Session
    clock: Clock
    settings: Settings
    observers: list[int]  # ranks on other clients than rank 0's: they watch its changes
    progress: Progress

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def actor(self) -> bool:
        """Rank 0 makes the changes others watch."""
        return self.comm.rank == 0

    @property
    def observer(self) -> bool:
        return self.comm.rank in self.observers

    @property
    def cross_node(self) -> bool:
        """Some rank sees the filesystem through another client than rank 0's."""
        return bool(self.observers)
