"""Exceptions of the coordination primitives."""

from __future__ import annotations


class CoordError(RuntimeError):
    """A coordination primitive could not do what it promised; the message says why."""


class WaitTimeout(TimeoutError):
    """A wait gave up: what was awaited, for how long, how many tries, and the usual cause."""

    def __init__(self, what: str, waited: float, tries: int, hint: str = "") -> None:
        self.what, self.waited, self.tries = what, waited, tries
        message = f"timed out after {waited:.1f}s and {tries} tries waiting for {what}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class LockTimeout(TimeoutError):
    """A FileLock could not be acquired in time."""


class LockLost(CoordError):
    """A FileLock's lease expired and another process took the lock over."""
