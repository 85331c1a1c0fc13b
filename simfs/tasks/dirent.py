"""What ``os.scandir`` yields inside a simulated rank."""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Iterator
from typing import Any, Protocol

# an inode's kind as it crosses the port (fs/inode.py names them; tests/test_port_schema.py holds them equal)
FILE, DIR, LINK = "f", "d", "l"


class Stats(Protocol):
    def stat(self, path: Any) -> os.stat_result: ...
    def lstat(self, path: Any) -> os.stat_result: ...


class DirEntry:
    """What ``os.scandir`` yields inside a simulated rank."""

    __slots__ = ("_ino", "_kind", "_lstat", "_stat", "_sys", "name", "path")

    def __init__(self, sys: Stats, name: Any, path: Any, ino: int, kind: str) -> None:
        self.name, self.path, self._ino, self._kind, self._sys = name, path, ino, kind, sys
        self._stat: os.stat_result | None = None
        self._lstat: os.stat_result | None = None

    def inode(self) -> int:
        return self._ino

    def is_symlink(self) -> bool:
        return self._kind == LINK

    def _resolved_mode(self, follow_symlinks: bool) -> int | None:
        if self._kind != LINK or not follow_symlinks:
            return {DIR: stat_mod.S_IFDIR, FILE: stat_mod.S_IFREG, LINK: stat_mod.S_IFLNK}[self._kind]
        try:
            return stat_mod.S_IFMT(self.stat().st_mode)
        except OSError:
            return None

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._resolved_mode(follow_symlinks) == stat_mod.S_IFDIR

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._resolved_mode(follow_symlinks) == stat_mod.S_IFREG

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks:
            if self._stat is None:
                self._stat = self._sys.stat(self.path)
            return self._stat
        if self._lstat is None:
            self._lstat = self._sys.lstat(self.path)
        return self._lstat

    def __fspath__(self) -> Any:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"


class ScandirIterator:
    """The iterator ``os.scandir`` returns (also a context manager)."""

    def __init__(self, sys: Stats, shown: Any, is_bytes: bool, entries: list[tuple[str, int]],
                 kinds: dict[int, str], fd_mode: bool = False) -> None:
        def make(name: str, ino: int) -> DirEntry:
            out_name = os.fsencode(name) if is_bytes else name
            path = out_name if fd_mode else (os.path.join(shown, out_name))
            return DirEntry(sys, out_name, path, ino, kinds.get(ino, FILE))

        self._it: Iterator[DirEntry] = (make(n, i) for n, i in entries)

    def __iter__(self) -> ScandirIterator:
        return self

    def __next__(self) -> DirEntry:
        return next(self._it)

    def __enter__(self) -> ScandirIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._it = iter(())
