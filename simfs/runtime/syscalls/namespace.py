"""Calls that change names and attributes: mkdir, rmdir, unlink, rename, link, symlink,
chmod/chown/utime and truncate by path."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...fs.inode import fs_error
from ...fs.vfs import ResolvedParent
from .base import SyscallsBase


class NamespaceCalls(SyscallsBase):
    if TYPE_CHECKING:  # in FileCalls, next to it in Syscalls
        def ftruncate(self, fd: int, length: int) -> None: ...

    # -- namespace ---------------------------------------------------------------------------
    def _in_parent(self, name: str, path: Any, dir_fd: int | None,
                   action: Callable[[ResolvedParent], object]) -> None:
        """An operation on a name in its directory (mkdir, rmdir, unlink)."""
        p, _ = self._abs(path, dir_fd)
        if self.machine.is_real(p):
            raise self._real_write_refused(path)

        def work() -> None:
            if name == "mkdir" and not self.vfs.mount_for(p)[1]:
                raise fs_error(errno.EEXIST)  # a mount point or '/'
            action(self.vfs.resolve_parent(p, reval=self._reval))

        self._op(name, p, path, work)

    def mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        self._in_parent("mkdir", path, dir_fd,
                        lambda par: par.client.mkdir(par.dir_ino, par.name, mode & ~self.proc.umask))

    def rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._in_parent("rmdir", path, dir_fd, lambda par: par.client.rmdir(par.dir_ino, par.name))

    def unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._in_parent("unlink", path, dir_fd, lambda par: par.client.unlink(par.dir_ino, par.name))

    remove = unlink

    def _two_names(self, op: str, src: Any, dst: Any, src_dir_fd: int | None, dst_dir_fd: int | None,
                   action: Callable[[ResolvedParent, ResolvedParent], None]) -> None:
        """An operation on two names of one filesystem (rename, exchange)."""
        s, _ = self._abs(src, src_dir_fd)
        d, _ = self._abs(dst, dst_dir_fd)
        if self.machine.is_real(s) or self.machine.is_real(d):
            raise self._real_write_refused(src)

        def work() -> None:
            sp = self.vfs.resolve_parent(s, reval=self._reval)
            dp = self.vfs.resolve_parent(d, reval=self._reval)
            if sp.mount is not dp.mount:
                raise fs_error(errno.EXDEV)
            action(sp, dp)

        self._op(op, s, src, work, dst)

    def rename(self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        self._two_names("rename", src, dst, src_dir_fd, dst_dir_fd,
                        lambda sp, dp: sp.client.rename(sp.dir_ino, sp.name, dp.dir_ino, dp.name))

    replace = rename

    def exchange(self, src: Any, dst: Any) -> None:
        """renameat2(RENAME_EXCHANGE): a local disk (ext4, XFS) swaps the two names atomically;
        network and FUSE filesystems refuse the flag with EINVAL (fs/nfs/dir.c nfs_rename)."""
        def swap(sp: ResolvedParent, dp: ResolvedParent) -> None:
            if not sp.mount.profile.on_node:
                raise fs_error(errno.EINVAL)
            sp.client.exchange(sp.dir_ino, sp.name, dp.dir_ino, dp.name)

        self._two_names("rename", src, dst, None, None, swap)

    def link(self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None,
             follow_symlinks: bool = True) -> None:
        s, _ = self._abs(src, src_dir_fd)
        d, _ = self._abs(dst, dst_dir_fd)
        if self.machine.is_real(s) or self.machine.is_real(d):
            raise self._real_write_refused(src)

        # CPython calls link(2) unless dir fds are given, and Linux's link(2) does not follow
        follow = follow_symlinks and (src_dir_fd is not None or dst_dir_fd is not None)

        def work() -> None:
            r = self.vfs.resolve(s, follow=follow, reval=self._reval)
            dp = self.vfs.resolve_parent(d, reval=self._reval)
            if r.mount is not dp.mount:
                raise fs_error(errno.EXDEV)
            dp.client.link(r.ino, dp.dir_ino, dp.name)

        self._op("link", s, src, work, dst)

    def symlink(self, src: Any, dst: Any, target_is_directory: bool = False, *, dir_fd: int | None = None) -> None:
        d, _ = self._abs(dst, dir_fd)
        if self.machine.is_real(d):
            raise self._real_write_refused(dst)
        target = os.fsdecode(os.fspath(src))

        def work() -> None:
            dp = self.vfs.resolve_parent(d, reval=self._reval)
            dp.client.symlink(dp.dir_ino, dp.name, target)

        self._op("symlink", d, src, work, dst)

    def _setattr(self, name: str, path: Any, dir_fd: int | None, follow: bool, **attrs: Any) -> None:
        if isinstance(path, int):
            of = self._fd(path)
            self._op(name, of.path, None, lambda: of.client.setattr(of.ino, **attrs))
            return
        p, _ = self._abs(path, dir_fd)
        if self.machine.is_real(p):
            raise self._real_write_refused(path)

        def work() -> None:
            r = self.vfs.resolve(p, follow=follow, reval=self._reval)
            if attrs:
                r.client.setattr(r.ino, **attrs)

        self._op(name, p, path, work)

    def chmod(self, path: Any, mode: int, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        self._setattr("chmod", path, dir_fd, follow_symlinks, mode=mode)

    def fchmod(self, fd: int, mode: int) -> None:
        self._setattr("chmod", fd, None, True, mode=mode)

    def chown(self, path: Any, uid: int, gid: int, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        self._setattr("chown", path, dir_fd, follow_symlinks)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        self._setattr("chown", fd, None, True)

    def utime(self, path: Any, times: tuple[float, float] | None = None, *, ns: tuple[int, int] | None = None,
              dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        if times is not None and ns is not None:
            raise ValueError("utime: you may specify either 'times' or 'ns' but not both")
        mtime = times[1] if times is not None else ns[1] / 1e9 if ns is not None else self.machine.wall_time()
        self._setattr("utime", path, dir_fd, follow_symlinks, mtime=mtime - self.machine.epoch)

    def truncate(self, path: Any, length: int) -> None:
        if isinstance(path, int):
            return self.ftruncate(path, length)
        if length < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        p, _ = self._abs(path)
        if self.machine.is_real(p):
            raise self._real_write_refused(path)

        def work() -> None:
            r = self.vfs.resolve(p, reval=self._reval)
            self.machine.flush_fault(self.proc, "truncate", p)
            r.client.truncate(r.ino, length)

        self._op("truncate", p, path, work)
        return None
