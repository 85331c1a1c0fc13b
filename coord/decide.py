"""One rank decides, everyone follows: ranks never diverge on their own view of the
filesystem (each asking ``exists()`` on a lagging mount is behind several real hangs)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .comm import Comm, get_comm
from .errors import CoordError

T = TypeVar("T")
log = logging.getLogger("coord")


def rank0_decides(fn: Callable[[], T], *, comm: Comm | Any = None, src: int = 0) -> T:
    """Evaluate ``fn`` on rank ``src`` only and return its result on every rank. If it raises,
    every rank raises CoordError carrying the original error."""
    comm = get_comm(comm)
    outcome: tuple[bool, Any] | None = None
    error: Exception | None = None
    if comm.rank == src:
        try:
            outcome = (True, fn())
        except Exception as exc:  # noqa: BLE001 - reported to every rank, re-raised on src
            outcome = (False, f"{type(exc).__name__}: {exc}")
            error = exc
    ok, value = comm.broadcast_object(outcome, src)
    log.debug("rank0_decides: rank %d decided %r for rank %d", src, value, comm.rank)
    if ok:
        return cast(T, value)
    if error is not None:
        raise error
    raise CoordError(f"rank {src} failed while deciding for everyone: {value}")
