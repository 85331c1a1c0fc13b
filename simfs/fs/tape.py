"""A run's tape: every request the clients sent a server during the run, in order, with the
virtual time it was sent and the answer it got. Everything above the servers (rank code, client
caches, the scheduler) is deterministic, so two runs of the same job that start alike and get
the same answers are the same run: a restarted job's tape, replayed against another crash
state's disks (``Step.ask``), tells without running the job whether it would run the same
(scenarios/restarts.py).

While a tape records, each disk's server is seen through a ``TappedServer``, which refuses
what lies outside a server's requests (``server.REQUESTS``): a client that read a server's
state directly would make a replay blind to it. ``/proc`` is made by the run itself (pids, boot
ids), so a run that looks at it is ``opaque``: no replay stands for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .mount import Mount
from .server import REQUESTS, Server

# what a client reads of a server besides its requests: none of it differs between two crash
# states whose requests were answered alike (an inode number's kind never changes, and a number
# is learnt only from an answer; a run's servers crashed as often as each other)
_PLAIN = frozenset({"kinds", "crashes", "profile", "name"})
_MUTABLE = frozenset({bytearray, memoryview})


class Step(NamedTuple):
    """One request: the disk it went to (index in ``Filesystems.disks()``), the request and its
    arguments, the virtual time it was sent, and what it answered (``answer_key``)."""

    disk: int
    request: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    at: float
    answer: Any

    def same_request(self, other: Step) -> bool:
        return self[:5] == other[:5]  # all but the answer

    def ask(self, server: Server, clock: list[float]) -> Any:
        """The answer ``server`` gives this request, as ``answer_key`` (a request that changes
        something is asked of a replica on ``clock``)."""
        clock[0] = self.at
        try:
            return answer_key(getattr(server, self.request)(*self.args, **dict(self.kwargs)))
        except OSError as exc:
            return error_key(exc)
        except Exception as exc:  # noqa: BLE001 - no run got it (taping stops there): the job runs and shows it
            return ("raised", type(exc).__name__, str(exc))


@dataclass
class Tape:
    """The requests of one run. ``opaque``: the run then looked at something a replay cannot
    answer (its steps end there)."""

    clock: Callable[[], float]
    steps: list[Step] = field(default_factory=list)
    opaque: bool = False

    def call(self, disk: int, request: str, method: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        if self.opaque:  # what follows is not replayed
            return method(*args, **kwargs)
        if not _MUTABLE.isdisjoint(map(type, args)):  # kept as they are now
            args = tuple(bytes(a) if type(a) in _MUTABLE else a for a in args)
        at = self.clock()
        try:
            result = method(*args, **kwargs)
        except OSError as exc:
            self.steps.append(Step(disk, request, args, tuple(kwargs.items()), at, error_key(exc)))
            raise
        except BaseException:
            self.opaque = True  # a defect or an interruption: nothing to replay
            raise
        self.steps.append(Step(disk, request, args, tuple(kwargs.items()), at, answer_key(result)))
        return result


def answer_key(result: Any) -> Any:
    """An answer as a value that compares and hashes (a listing is a list)."""
    return tuple(result) if isinstance(result, list) else result


def error_key(exc: OSError) -> tuple[str, int | None, str]:
    return ("error", exc.errno, str(exc))


class TappedServer:
    """A server as the clients of a taped run see it: its requests recorded on the tape (each
    request's recorder is made at its first use, then found as an attribute)."""

    def __init__(self, server: Server, tape: Tape, disk: int) -> None:
        self._server, self._tape, self._disk = server, tape, disk

    def __getattr__(self, name: str) -> Any:
        server = self._server
        if name in REQUESTS:
            method = getattr(server, name)
            tape, disk = self._tape, self._disk

            def request(*args: Any, **kwargs: Any) -> Any:
                return tape.call(disk, name, method, args, kwargs)
            setattr(self, name, request)
            return request
        if name in _PLAIN:
            return getattr(server, name)
        raise AttributeError(f"simfs defect: {server.name}'s {name!r} was read outside its requests while a run "
                             "was taped (a replay of the tape would not see it; add a request to Server)")


class OpaqueServer:
    """A server whose answers no replay can give (/proc): using it makes the tape opaque."""

    __slots__ = ("_server", "_tape")

    def __init__(self, server: Server, tape: Tape) -> None:
        self._server, self._tape = server, tape

    def __getattr__(self, name: str) -> Any:
        self._tape.opaque = True
        return getattr(self._server, name)


@contextmanager
def taping(disks: list[Mount], others: list[Mount], tape: Tape) -> Iterator[None]:
    """While the block runs, the clients of ``disks`` reach their servers through ``tape`` and
    those of ``others`` make it opaque."""
    mounts = [*disks, *others]
    real = [m.server for m in mounts]
    seen: list[Any] = [TappedServer(s, tape, i) for i, s in enumerate(real[:len(disks)])]
    seen += [OpaqueServer(s, tape) for s in real[len(disks):]]
    _attach(mounts, seen)
    try:
        yield
    finally:
        _attach(mounts, real)


def _attach(mounts: list[Mount], servers: list[Any]) -> None:
    for mount, server in zip(mounts, servers):
        mount.server = server
        for client in mount.clients.values():
            client.server = server
