"""What simfs's c10d (its process groups and stores) asks of the host: a rank process's
collectives and its other requests (rank/dist.WorldClient gives it)."""

from __future__ import annotations

from typing import Any, Protocol

from ...port import schema


class Asks(Protocol):
    """What a store asks of the host: a request, its answer."""

    def ask(self, request: schema.Request) -> Any: ...


class Host(Asks, Protocol):
    """What a group asks of the host: requests and collectives."""

    def collective_named(self, name: str, kind: str, payload: Any, *, timeout: float | None = None,
                         nbytes: int = 0, root: int = -1) -> list[Any]: ...
