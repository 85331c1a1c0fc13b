"""The kernel's open file description: what a simulated descriptor names, shared by its dups."""

from __future__ import annotations

from ...fs.client import Client
from ...fs.mount import Mount


class OpenFile:
    """An open file description (shared by dup'ed descriptors)."""

    __slots__ = (
        "append",
        "client",
        "epoch",
        "flags",
        "ino",
        "kind",
        "mount",
        "node",
        "path",
        "pos",
        "readable",
        "refs",
        "sync",
        "writable",
    )

    def __init__(self, mount: Mount, client: Client, ino: int, path: str, kind: str, flags: int,
                 readable: bool, writable: bool, append: bool, sync: bool) -> None:
        self.mount = mount
        self.client = client
        self.ino = ino
        self.path = path
        self.kind = kind
        self.flags = flags
        self.readable = readable
        self.writable = writable
        self.append = append
        self.sync = sync
        self.pos = 0
        self.refs = 1
        self.epoch = client.epoch
        self.node = client.node


class NullFile:
    """An open /dev/null (Linux's drivers/char/mem.c): reads are at their end, writes vanish
    whole, and every seek lands at 0. No filesystem holds it, so no operation on it is traced,
    delayed, failed by a fault or lost to a crash."""

    __slots__ = ("flags", "readable", "refs", "writable")

    kind = "c"  # a character device
    path = "/dev/null"

    def __init__(self, flags: int, readable: bool, writable: bool) -> None:
        self.flags = flags
        self.readable = readable
        self.writable = writable
        self.refs = 1
