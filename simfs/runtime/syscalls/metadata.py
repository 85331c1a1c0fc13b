"""Metadata calls of a simulated process: stat, access, listings, links, statvfs, the cwd."""

from __future__ import annotations

import errno
import math
import os
import stat
from typing import Any

from ... import _real
from ...fs.client import Client
from ...fs.inode import DIR, LINK, fs_error
from ...fs.mount import Mount
from ...port import native
from ...tasks.dirent import ScandirIterator
from ...tasks.process import FD_BASE
from .base import SyscallsBase
from .openfile import NullFile

_BLOCK = 4096  # f_bsize and f_frsize
_DEVTMPFS = 1 << 20  # st_dev of /dev (devtmpfs) on a simulated node: the mounts count theirs from 1


class MetadataCalls(SyscallsBase):
    # -- metadata ----------------------------------------------------------------------------
    def stat(self, path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return self.fstat(path)
        p, _ = self._abs(path, dir_fd)
        if p == NullFile.path:
            return self._null_stat()
        if self.machine.is_real(p):
            return native.stat(p, follow_symlinks)

        def work() -> os.stat_result:
            r = self.vfs.resolve(p, follow=follow_symlinks, reval=self._reval)
            return self._stat_result(r.mount, r.client.getattr(r.ino))

        return self._op("stat" if follow_symlinks else "lstat", p, path, work)

    def _null_stat(self) -> os.stat_result:
        """/dev/null's stat: a character device (1, 3), crw-rw-rw-, owned by root, of size 0,
        made when the node booted, on the node's devtmpfs."""
        boot = self.machine.epoch
        fields = [stat.S_IFCHR | 0o666, 4, _DEVTMPFS, 1, 0, 0, 0, int(boot), int(boot), int(boot), boot, boot, boot,
                  int(boot * 1e9), int(boot * 1e9), int(boot * 1e9), 4096, 0, os.makedev(1, 3)]
        return os.stat_result(fields[:os.stat_result.n_fields])

    def lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        return self.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        if fd < FD_BASE:
            return _real.fstat(self._real_fd(fd))
        if self._null(fd) is not None:
            return self._null_stat()
        of = self._fd(fd)
        return self._op("fstat", of.path, None, lambda: self._stat_result(of.mount, of.client.getattr(of.ino)))

    def access(self, path: Any, mode: int, *, dir_fd: int | None = None, effective_ids: bool = False,
               follow_symlinks: bool = True) -> bool:
        p, _ = self._abs(path, dir_fd)
        if p == NullFile.path:
            return not mode & os.X_OK  # crw-rw-rw-
        if self.machine.is_real(p):
            return native.access(p, mode)
        try:
            self._op("access", p, path, lambda: self.vfs.resolve(p, follow=follow_symlinks, reval=self._reval))
        except OSError:
            return False
        return True

    def listdir(self, path: Any = ".") -> list[Any]:  # of str or of bytes, as path is
        if isinstance(path, int):
            of = self._fd(path)
            return self._op("listdir", of.path, None, lambda: [n for n, _ in self._list(of.client, of.ino)])
        p, is_bytes = self._abs(path)
        if self.machine.is_real(p):
            return native.listdir(p, is_bytes)

        def work() -> list[Any]:
            r = self.vfs.resolve(p, reval=self._reval)
            return [os.fsencode(n) if is_bytes else n for n, _ in self._list(r.client, r.ino)]

        return self._op("listdir", p, path, work)

    def _list(self, client: Client, ino: int) -> list[tuple[str, int]]:
        if client.server.kinds.get(ino) != DIR:
            raise fs_error(errno.ENOTDIR)
        return client.listdir(ino)

    def scandir(self, path: Any = ".") -> ScandirIterator | os._ScandirIterator[Any]:  # of str or bytes, as path
        if isinstance(path, int):
            of = self._fd(path)
            entries = self._op("listdir", of.path, None, lambda: self._list(of.client, of.ino))
            return ScandirIterator(self, of.path, False, entries, of.client.server.kinds, fd_mode=True)
        p, is_bytes = self._abs(path)
        if self.machine.is_real(p):
            return native.scandir(p, is_bytes)
        shown = os.fspath(path)

        def work() -> tuple[list[tuple[str, int]], dict[int, str]]:
            r = self.vfs.resolve(p, reval=self._reval)
            return self._list(r.client, r.ino), r.client.server.kinds

        entries, kinds = self._op("listdir", p, path, work)
        return ScandirIterator(self, shown, is_bytes, entries, kinds)

    def readlink(self, path: Any, *, dir_fd: int | None = None) -> Any:
        if _names_proc_self(path, dir_fd):  # the magic link: the calling process's pid (proc(5))
            pid = str(self.proc.pid)
            return os.fsencode(pid) if isinstance(os.fspath(path), bytes) else pid
        p, is_bytes = self._abs(path, dir_fd)
        if self.machine.is_real(p):
            return native.readlink(p, is_bytes)

        def work() -> Any:
            r = self.vfs.resolve(p, follow=False, reval=self._reval)
            if r.client.server.kinds.get(r.ino) != LINK:
                raise fs_error(errno.EINVAL)
            target = r.client.readlink(r.ino)
            return os.fsencode(target) if is_bytes else target

        return self._op("readlink", p, path, work)

    def statvfs(self, path: Any) -> os.statvfs_result:
        if isinstance(path, int):
            return self.fstatvfs(path)
        p, _ = self._abs(path)
        if self.machine.is_real(p):
            return native.statvfs(p)
        return self._op("statvfs", p, path, lambda: self._statvfs(self.vfs.resolve(p, reval=self._reval).mount))

    def fstatvfs(self, fd: int) -> os.statvfs_result:
        of = self._fd(fd)
        return self._op("statvfs", of.path, None, lambda: self._statvfs(of.mount))

    def _statvfs(self, mount: Mount) -> os.statvfs_result:
        """Sizes from the mount's capacity (unlimited: 2**60 bytes, a large number as object-store
        mounts report) and the space its server has allocated and granted."""
        used, granted, inodes = mount.server.usage()
        capacity = mount.profile.capacity
        blocks = (1 << 60) // _BLOCK if math.isinf(capacity) else int(capacity) // _BLOCK
        free = max(0, blocks - (used + granted + _BLOCK - 1) // _BLOCK)
        files = 1 << 32
        return os.statvfs_result((_BLOCK, _BLOCK, blocks, free, free, files, files - inodes, files - inodes, 0, 255))

    def getcwd(self) -> str:
        """The rank's working directory (the host's to the import system, which resolves a
        sys.path entry of '' against it as the host does)."""
        return _real.getcwd() if self.machine.imports_here() else self.proc.cwd

    def getcwdb(self) -> bytes:
        return os.fsencode(self.getcwd())

    def chdir(self, path: Any) -> None:
        p, _ = self._abs(path)

        def work() -> None:
            r = self.vfs.resolve(p, reval=self._reval)
            if r.client.server.kinds.get(r.ino) != DIR:
                raise fs_error(errno.ENOTDIR)
            self.proc.cwd = r.path

        self._op("chdir", p, path, work)


def _names_proc_self(path: Any, dir_fd: int | None) -> bool:
    if dir_fd is not None or not isinstance(path, (str, bytes, os.PathLike)):
        return False
    text = os.fsdecode(os.fspath(path))
    return text.startswith("/") and os.path.normpath(text) == "/proc/self"
