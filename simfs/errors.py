"""Errors simfs raises. Every one derives from SimfsError; messages read
``<where>: <what is wrong>[, got <value>][; <what to do instead>]``."""

from __future__ import annotations


class SimfsError(Exception):
    """Base class of simfs errors."""


class ConfigError(SimfsError, ValueError, TypeError):
    """A bad argument, profile, fault or replay string (caught as ValueError or TypeError too)."""


class BypassError(SimfsError):
    """Rank code called something that would reach the real machine instead of the simulation."""

    def __init__(self, call: str, why: str, instead: str = "") -> None:
        message = f"{call} bypasses simfs: {why}"
        if instead:
            message += f"; {instead}"
        super().__init__(message)
        self.call = call

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        why, _, instead = str(self).partition(" bypasses simfs: ")[2].partition("; ")
        return type(self), (self.call, why, instead)


class RankKilled(SimfsError):
    """A rank's process was killed by a signal (default action), so it ran no more code."""

    def __init__(self, rank: int, signum: int, sender: str) -> None:
        import signal

        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
        super().__init__(f"rank {rank} was killed by {name} ({sender})")
        self.rank, self.signum = rank, signum

    def __reduce__(self) -> tuple[type, tuple[int, int, str]]:
        return type(self), (self.rank, self.signum, str(self).rpartition("(")[2].rstrip(")"))


class RankDied(SimfsError):
    """A rank's process died of a signal of its own making (a segfault, an abort in C code); its
    ``stacks`` are what faulthandler wrote: the native fault and every thread's Python stack."""

    def __init__(self, rank: int, signum: int, stacks: str) -> None:
        import signal

        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
        super().__init__(f"rank {rank}'s process died of {name}; its stacks:\n{stacks}")
        self.rank, self.signum, self.stacks = rank, signum, stacks

    def __reduce__(self) -> tuple[type, tuple[int, int, str]]:
        return type(self), (self.rank, self.signum, self.stacks)


class RankOutOfMemory(SimfsError, MemoryError):
    """A rank process ran out of the private memory its cluster allows each rank
    (``Cluster(rank_memory=...)``, the kernel's RLIMIT_DATA): the rank ended there, as a rank of a
    real job whose node ran out of memory does."""

    def __init__(self, rank: int, limit: int, message: str) -> None:
        super().__init__(f"rank {rank} ran out of its {limit / 2**30:g} GiB of memory (Cluster(rank_memory=...)): "
                         f"{message}")
        self.rank, self.limit, self.detail = rank, limit, message

    def __reduce__(self) -> tuple[type, tuple[int, int, str]]:
        return type(self), (self.rank, self.limit, self.detail)


class RankCannotStart(SimfsError):
    """A rank's process could not start, before any of the job ran: what failed and, where a
    resource limit stopped it, the limit's name (``limit``, "" if none did), its value (-1 if
    none) and what to change."""

    def __init__(self, rank: int, failure: str, limit: str = "", value: int = -1, change: str = "") -> None:
        text = f"rank {rank}'s process could not start: {failure}"
        super().__init__(f"{text}; {change}" if change else text)
        self.rank, self.failure, self.limit, self.value, self.change = rank, failure, limit, value, change

    def __reduce__(self) -> tuple[type, tuple[int, str, str, int, str]]:
        return type(self), (self.rank, self.failure, self.limit, self.value, self.change)


class RankError(SimfsError):
    """An exception a rank process raised whose class the host does not load (a class of the job's
    own: rank code never runs in the host): its type's name and its message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name, self.message = type_name, message

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.type_name, self.message)


class StoreGone(SimfsError):
    """A c10d store's server is gone (its node crashed): what a client's socket reports (simfs's
    stores raise torch's DistNetworkError for it in the rank)."""


class CollectiveMismatch(SimfsError, RuntimeError):
    """Ranks of one group called different collectives at the same position."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run: every rank was stopped; ``result`` is what the run had done."""

    def __init__(self, result: object) -> None:
        super().__init__("the simulated run was interrupted (Ctrl-C); its partial result is in .result")
        self.result = result

    def __reduce__(self) -> tuple[type, tuple[object]]:
        return type(self), (self.result,)


class OutsideSimulation(BaseException):
    """Raised into a rank that blocked outside the simulation for longer than the watchdog
    (a BaseException, so that ``except Exception`` in rank code does not swallow it)."""


class TaskKilled(BaseException):
    """Unwinds a rank whose node crashed or that can never run again (a derived BaseException so
    that ``except Exception`` in rank code does not swallow it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def invalid(where: str, name: str, expected: str, got: object) -> ConfigError:
    """The error for an argument outside its domain, naming the argument and the domain."""
    return ConfigError(f"{where}: {name} must be {expected}, got {got!r}")
