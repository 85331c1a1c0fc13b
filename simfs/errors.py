"""Exceptions raised by the simulation."""

from __future__ import annotations


class SimfsError(Exception):
    """Base class of simfs errors."""


class BypassError(SimfsError):
    """Rank code called something that would reach the real machine instead of the simulation."""

    def __init__(self, call: str, why: str, instead: str = "") -> None:
        message = f"{call} bypasses simfs: {why}"
        if instead:
            message += f"; {instead}"
        super().__init__(message)
        self.call = call


class CollectiveMismatch(RuntimeError):
    """Ranks of one group called different collectives at the same position."""


class OutsideSimulation(BaseException):
    """Raised into a rank that blocked outside the simulation for longer than the watchdog."""


class TaskKilled(BaseException):
    """Unwinds a rank whose node crashed or that can never run again (a derived BaseException so
    that ``except Exception`` in rank code does not swallow it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
