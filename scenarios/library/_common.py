"""What the library's rank programs share: who leads a node, self-describing file contents,
plain file I/O (with or without fsync, as the code each scenario imitates does), and the
`latest` tracker that names the newest complete checkpoint."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import coord
from simfs import carriers

from .. import registry

ALL_PROFILES = ("local", "nfs", "beegfs", "lustre", "objectstore")
# Where the crash families run:
# not BeeGFS, whose metadata durability has no documented default: with simfs's (a name is durable
# once its directory is fsynced), a storage-server restart silently drops files created just before
# it, and correct code fails for a reason BeeGFS may not have. local-posix: the local disk under
# strict POSIX persistence, where each verdict is derived again (correct code holds there too)
CRASH_PROFILES = ("local", "local-posix", "nfs", "lustre", "objectstore")


def scenario(name: str | None = None, **options: Any) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """The library's ``@scenario``: its jobs are simfs's, coord's and checkpoint's own code (and
    torch DCP on simfs's simulated process group), which keep no state of their own per process,
    so their ranks are greenlets of the search's confined child unless a scenario says
    ``carrier="process"`` (one that runs a third-party library keeping per-process state)."""
    options.setdefault("carrier", carriers.GREENLET)
    return registry.scenario(name, **options)


class BrokenCheckpoint(RuntimeError):
    """The restarted job found what a crash left: a torn tracker, or a checkpoint it names that
    is missing, incomplete or mixed."""


def node_leader() -> bool:
    """Is this rank its node's local rank 0 (torchrun's LOCAL_RANK)?"""
    return os.environ["LOCAL_RANK"] == "0"


def content(tag: str, size: int) -> bytes:
    """``size`` bytes that repeat ``tag``: a torn, stale or foreign copy never passes for it."""
    unit = f"{tag};".encode()
    return (unit * (size // len(unit) + 1))[:size]


def write_file(path: str, data: bytes, *, durable: bool = False) -> None:
    """open, write, close; ``durable`` also fsyncs before the close."""
    with open(path, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def commit(directory: str, files: tuple[str, ...] = ()) -> None:
    """Make a finished checkpoint directory durable: fsync the named ``files`` in it, then the
    directory (its entries) and its parent (the directory's own entry)."""
    for name in files:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    coord.fsync_dir(directory)
    coord.fsync_dir(os.path.dirname(directory))


def publish_step(tracker: str, step: int) -> None:
    """Point the tracker at ``step``: atomically and durably (coord.atomic_write)."""
    with coord.atomic_write(tracker, "w") as f:
        f.write(str(step))


def read_step(tracker: str) -> int | None:
    """The step the tracker names; None if there is no tracker (nothing was committed)."""
    try:
        text = read_file(tracker).decode(errors="replace")
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise BrokenCheckpoint(f"the tracker {tracker} holds {text!r}, not a step: the crash tore it")
    return int(text)
