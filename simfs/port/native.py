"""The calls a rank makes on the real machine itself (the port's Native answer): reads of the
Python installation and of what the import system opens, which every node of a real cluster has
on its own disk. Greenlet ranks' system calls (simfs/runtime/syscalls) make them in the host; a
rank process makes them in itself, under its confinement (rank/nativecalls.py). Every
write to the real machine is refused as a read-only filesystem would refuse it."""

from __future__ import annotations

import errno
import os
import posixpath
from typing import Any

from .. import _real

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def normalize(path: str) -> str:
    """Lexical normalization of an absolute path ('..' is resolved textually)."""
    path = posixpath.normpath(path)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    return path


def absolute(path: Any, base: str | None) -> tuple[str, bool]:
    """``path`` (str, bytes or os.PathLike) as an absolute normalized str, resolved against
    ``base`` when relative (None: the base is not known yet, and a relative path is returned
    as it is), and whether it was given as bytes; os's errors for what no call takes."""
    raw = os.fspath(path)
    is_bytes = isinstance(raw, bytes)
    text = os.fsdecode(raw) if is_bytes else raw
    if not isinstance(text, str):
        raise TypeError(f"expected str, bytes or os.PathLike object, not {type(path).__name__}")
    if "\0" in text:
        raise ValueError("embedded null byte")
    if not text:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), raw)
    if text.startswith("/"):
        return normalize(text), is_bytes
    if base is None:
        return text, is_bytes
    return normalize(posixpath.join(base, text)), is_bytes


def refused(shown: Any) -> OSError:
    """What a write to the real machine raises."""
    return OSError(errno.EROFS, "simfs: the real Python installation is read-only inside a simulated rank", shown)


def open_file(p: str, flags: int, mode: int, shown: Any) -> int:
    if flags & WRITE_FLAGS:
        raise refused(shown)
    return _real.open(p, flags, mode)


def stat(p: str, follow_symlinks: bool) -> os.stat_result:
    return (_real.stat if follow_symlinks else _real.lstat)(p)


def access(p: str, mode: int) -> bool:
    return False if mode & os.W_OK else _real.access(p, mode)


def listdir(p: str, is_bytes: bool) -> list[Any]:
    return _real.listdir(os.fsencode(p) if is_bytes else p)


def scandir(p: str, is_bytes: bool) -> os._ScandirIterator[Any]:
    return _real.scandir(os.fsencode(p) if is_bytes else p)


def readlink(p: str, is_bytes: bool) -> Any:
    return _real.readlink(os.fsencode(p)) if is_bytes else _real.readlink(p)


def statvfs(p: str) -> os.statvfs_result:
    return _real.statvfs(p)
