"""``simfs://`` for fsspec: the filesystem as the calling simulated rank sees it, so fsspec-based
code (e.g. torch.distributed.checkpoint's FsspecWriter) runs against simfs."""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from typing import Any

try:
    from fsspec.spec import AbstractFileSystem
except ImportError as exc:  # an optional feature: say which extra brings its library
    raise ImportError("simfs.rank.fsspec_view needs fsspec: pip install 'simfs[fsspec]'") from exc

from ..errors import SimfsError
from ..tasks.kernel import SystemCalls
from ..tasks.task import current_task
from .fileobj import sim_open


def _sys() -> SystemCalls:
    task = current_task()
    if task is None:
        raise SimfsError("simfs:// paths can only be used inside a simulated rank (Cluster.run)")
    sys: SystemCalls = task.context.sys  # the rank's Process (opaque to the scheduler) and its calls
    return sys


class SimFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec has no type information
    """fsspec filesystem backed by the current rank's simulated view."""

    protocol = "simfs"
    root_marker = "/"
    cachable = False  # one view per rank: nothing to share between calls

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = os.fspath(path) if not isinstance(path, str) else path
        if path.startswith("simfs://"):
            path = path[len("simfs://"):]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    def _info_of(self, path: str, st: os.stat_result) -> dict[str, Any]:
        if stat_mod.S_ISDIR(st.st_mode):
            kind = "directory"
        elif stat_mod.S_ISLNK(st.st_mode):
            kind = "link"
        else:
            kind = "file"
        return {"name": path, "size": st.st_size, "type": kind, "mtime": st.st_mtime, "ino": st.st_ino,
                "mode": st.st_mode, "nlink": st.st_nlink}

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        return self._info_of(path, _sys().stat(path))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[dict[str, Any]] | list[str]:
        path = self._strip_protocol(path)
        sys = _sys()
        st = sys.stat(path)
        if not stat_mod.S_ISDIR(st.st_mode):
            entries = [self._info_of(path, st)]
        else:
            entries = []
            for entry in sys.scandir(path):
                child = entry.path if path != "/" else "/" + entry.name
                entries.append(self._info_of(child, entry.stat(follow_symlinks=False)))
        return entries if detail else [e["name"] for e in entries]

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "b" not in mode:
            mode += "b"
        return sim_open(_sys(), path, mode)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if create_parents:
            self.makedirs(path, exist_ok=True)
        else:
            _sys().mkdir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        sys = _sys()
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            current = "/" + "/".join(parts[:i])
            try:
                sys.mkdir(current)
            except FileExistsError:
                if i == len(parts) and not exist_ok:
                    raise
                if not stat_mod.S_ISDIR(sys.stat(current).st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), current) from None

    def rmdir(self, path: str) -> None:
        _sys().rmdir(self._strip_protocol(path))

    def rm_file(self, path: str) -> None:
        _sys().unlink(self._strip_protocol(path))

    def _rm(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self.isdir(path):
            self.rmdir(path)
        else:
            self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Remove files, and with ``recursive`` whole trees (deepest first)."""
        for p in reversed(self.expand_path(path, recursive=recursive, maxdepth=maxdepth)):
            self._rm(p)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: Any = None, **kwargs: Any) -> None:
        _sys().rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        with self.open(path1, "rb") as src, self.open(path2, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)

    def created(self, path: str) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    modified = created

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if truncate or not self.exists(path):
            with self.open(path, "wb"):
                pass
        else:
            _sys().utime(path)


def register() -> None:
    """Make simfs:// known to fsspec (once; the package's entry point does it for fresh
    processes)."""
    import fsspec

    if fsspec.registry.get("simfs") is not SimFileSystem:
        fsspec.register_implementation("simfs", SimFileSystem, clobber=True)
