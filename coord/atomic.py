"""Replace a file atomically: write a temporary file next to it, fsync, rename over the
target, fsync the directory. Readers see the old content or the new, never a mix."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from collections.abc import Iterator
from typing import IO, Any

_WRITE_MODES = ("w", "wb", "wt")
log = logging.getLogger("coord")


def unique_suffix() -> str:
    """Unique per process and call: host, pid and OS randomness (never the ``random`` module,
    which ranks seeded alike share)."""
    return f"{socket.gethostname()}.{os.getpid()}.{os.urandom(6).hex()}"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (new, renamed, removed names) durable. Filesystems that cannot
    fsync a directory (EINVAL, ENOTSUP) are taken to persist entries on their own."""
    fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb", *, encoding: str | None = None,
                 newline: str | None = None, durable: bool = True) -> Iterator[IO[Any]]:
    """``with atomic_write(path) as f: f.write(...)``: the new content replaces ``path`` only if
    the block finishes; on any error the temporary file is removed and the old content stays.
    ``durable`` fsyncs the file before the rename and the directory after it: the new content
    survives a crash once this returns, provided the directory's own entry is durable (it existed
    durably, or coord.makedirs_once made it)."""
    if mode not in _WRITE_MODES:
        raise ValueError(f"atomic_write: mode must be one of {_WRITE_MODES}, got {mode!r}")
    target = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.tmp.{unique_suffix()}")
    try:
        keep_mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        keep_mode = None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        f = os.fdopen(fd, mode, encoding=encoding if "b" not in mode else None,
                      newline=newline if "b" not in mode else None)
    except BaseException:  # e.g. an unknown encoding: the temporary file must not stay
        with contextlib.suppress(OSError):
            os.close(fd)  # fdopen may have closed it already
        os.unlink(tmp)
        raise
    try:
        yield f
        f.flush()
        if durable:
            os.fsync(f.fileno())
        f.close()
        if keep_mode is not None:
            os.chmod(tmp, keep_mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            f.close()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)
    log.debug("atomic_write: replaced %s", target)
