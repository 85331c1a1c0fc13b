"""Inodes and what a server says about them: kinds, attributes, and the errno of a failed RPC."""

from __future__ import annotations

import os
import stat as stat_mod
from typing import NamedTuple

from .rope import Rope

FILE, DIR, LINK = "f", "d", "l"
ROOT = 1
KIND_BITS = {FILE: stat_mod.S_IFREG, DIR: stat_mod.S_IFDIR, LINK: stat_mod.S_IFLNK}
DIR_SIZE = 4096


def fs_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Attr(NamedTuple):
    """A snapshot of an inode's attributes, as a GETATTR reply carries them."""

    ino: int
    kind: str
    mode: int  # permission bits only
    nlink: int
    size: int
    mtime: float
    ctime: float
    change: int

    @property
    def st_mode(self) -> int:
        return KIND_BITS[self.kind] | self.mode


class Change(NamedTuple):
    """What a namespace operation did to a directory: its attributes before and after (NFS
    weak cache consistency: the pre-op attributes tell a client whether someone else changed
    the directory since it cached it)."""

    pre: Attr
    post: Attr


class Inode:
    """A file, directory or symbolic link of one server (volatile or durable layer)."""

    __slots__ = ("change", "ctime", "data", "entries", "ino", "kind", "mode", "mtime", "nlink", "target")

    def __init__(self, ino: int, kind: str, mode: int, now: float, target: str = "") -> None:
        self.ino = ino
        self.kind = kind
        self.mode = mode
        self.nlink = 2 if kind == DIR else 1
        self.data: Rope | None = Rope() if kind == FILE else None
        self.entries: dict[str, int] | None = {} if kind == DIR else None
        self.target = target
        self.mtime = self.ctime = now
        self.change = 1

    def clone(self) -> Inode:
        twin = Inode.__new__(Inode)
        twin.ino, twin.kind, twin.mode, twin.nlink = self.ino, self.kind, self.mode, self.nlink
        twin.target, twin.mtime, twin.ctime, twin.change = self.target, self.mtime, self.ctime, self.change
        twin.data = self.data.copy() if self.data is not None else None
        twin.entries = dict(self.entries) if self.entries is not None else None
        return twin

    def same_state(self, other: Inode) -> bool:
        """The same kind, permissions, links, entries, target and bytes (times and change
        attribute aside)."""
        if (self.kind, self.mode, self.nlink, self.target, self.entries) != (
                other.kind, other.mode, other.nlink, other.target, other.entries):
            return False
        if self.data is None or other.data is None:
            return self.data is other.data
        return self.data.same(other.data)

    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        if self.kind == LINK:
            return len(self.target)
        return DIR_SIZE
