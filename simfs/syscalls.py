"""os-level calls of one simulated process, with the signatures of the ``os`` module.
Every call is traced, may meet a fault, and costs virtual time."""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_mod
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import _real
from .errors import BypassError
from .process import FD_BASE, OpenFile, Process
from .server import DIR, FILE, LINK, Attr, fs_error
from .vfs import ResolvedParent, normalize

if TYPE_CHECKING:
    from .kernel import Kernel
    from .mount import Mount

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_SYNC_FLAGS = os.O_SYNC | getattr(os, "O_DSYNC", 0)


def _frozen(data: Any) -> bytes:
    """Bytes the caller cannot change any more: bytes objects (also seen through a memoryview
    that covers them, as buffered writers pass large writes) are kept without a copy."""
    if type(data) is bytes:
        return data
    if type(data) is memoryview and type(data.obj) is bytes and data.nbytes == len(data.obj) and data.contiguous:
        return data.obj
    return bytes(data)


def _shown(path: Any) -> Any:
    """How os names a path in its errors: str or bytes (a Path becomes its str)."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def _errname(code: int | None) -> str:
    return errno.errorcode.get(code or 0, str(code))


class Syscalls:
    """The os module as one simulated process sees it."""

    def __init__(self, kernel: Kernel, proc: Process) -> None:
        self.kernel = kernel
        self.proc = proc
        self.vfs = kernel.vfs[proc.node]
        self._reval = False

    # -- plumbing ----------------------------------------------------------------------------
    def _abs(self, path: Any, dir_fd: int | None = None) -> tuple[str, bool]:
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
        base = self._fd(dir_fd).path if dir_fd is not None else self.proc.cwd
        return normalize(posixpath.join(base, text)), is_bytes

    def _fd(self, fd: Any) -> OpenFile:
        if not isinstance(fd, int):
            fd = fd.fileno()
        of = self.proc.fds.get(fd)
        if of is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return of

    def _op(self, name: str, path: str, shown: Any, fn: Callable[[], Any], shown2: Any = None) -> Any:
        """Run one operation: faults first, then the work, then trace and virtual cost."""
        kernel = self.kernel
        start = kernel.begin(self.proc, name, path)
        try:
            try:
                result = fn()
            except OSError as exc:
                if exc.errno != errno.ESTALE or self._reval or not path.startswith("/"):
                    raise
                self._reval = True  # Linux retries a path walk that met a stale handle, uncached
                try:
                    result = fn()
                finally:
                    self._reval = False
        except OSError as exc:
            kernel.finish(self.proc, name, path, start, _errname(exc.errno))
            if exc.filename is None and shown is not None:
                raise OSError(exc.errno, exc.strerror, _shown(shown), None, _shown(shown2)) from None
            raise
        kernel.finish(self.proc, name, path, start, "ok")
        return result

    def _real_write_refused(self, shown: Any) -> OSError:
        return OSError(errno.EROFS, "simfs: the real Python installation is read-only inside a simulated rank", shown)

    def _stat_result(self, mount: Mount, attr: Attr) -> os.stat_result:
        """A stat result whose times read on the same clock as time.time() in the rank."""
        size = attr.size
        mtime, ctime = attr.mtime + self.kernel.epoch, attr.ctime + self.kernel.epoch
        fields = [attr.st_mode, attr.ino, self.kernel.dev_of(mount), attr.nlink, 0, 0, size,
                  int(mtime), int(mtime), int(ctime), mtime, mtime, ctime,
                  int(mtime * 1e9), int(mtime * 1e9), int(ctime * 1e9),
                  4096, (size + 511) // 512, 0]
        return os.stat_result(fields[:os.stat_result.n_fields])

    # -- metadata ----------------------------------------------------------------------------
    def stat(self, path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return self.fstat(path)
        p, _ = self._abs(path, dir_fd)
        if self.kernel.is_real(p):
            return (_real.stat if follow_symlinks else _real.lstat)(p)

        def work() -> os.stat_result:
            r = self.vfs.resolve(p, follow=follow_symlinks, reval=self._reval)
            return self._stat_result(r.mount, r.client.getattr(r.ino))

        return self._op("stat" if follow_symlinks else "lstat", p, path, work)

    def lstat(self, path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        return self.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        if fd < FD_BASE:
            return _real.fstat(fd)
        of = self._fd(fd)
        return self._op("fstat", of.path, None, lambda: self._stat_result(of.mount, of.client.getattr(of.ino)))

    def access(self, path: Any, mode: int, *, dir_fd: int | None = None, effective_ids: bool = False,
               follow_symlinks: bool = True) -> bool:
        p, _ = self._abs(path, dir_fd)
        if self.kernel.is_real(p):
            return False if mode & os.W_OK else _real.access(p, mode)
        try:
            self._op("access", p, path, lambda: self.vfs.resolve(p, follow=follow_symlinks, reval=self._reval))
        except OSError:
            return False
        return True

    def listdir(self, path: Any = ".") -> list:
        if isinstance(path, int):
            of = self._fd(path)
            return self._op("listdir", of.path, None, lambda: [n for n, _ in self._list(of.client, of.ino)])
        p, is_bytes = self._abs(path)
        if self.kernel.is_real(p):
            return _real.listdir(os.fsencode(p) if is_bytes else p)

        def work() -> list:
            r = self.vfs.resolve(p, reval=self._reval)
            return [os.fsencode(n) if is_bytes else n for n, _ in self._list(r.client, r.ino)]

        return self._op("listdir", p, path, work)

    def _list(self, client: Any, ino: int) -> list[tuple[str, int]]:
        if client.server.kinds.get(ino) != DIR:
            raise fs_error(errno.ENOTDIR)
        return client.listdir(ino)

    def scandir(self, path: Any = ".") -> _ScandirIterator:
        if isinstance(path, int):
            of = self._fd(path)
            entries = self._op("listdir", of.path, None, lambda: self._list(of.client, of.ino))
            return _ScandirIterator(self, of.path, False, entries, of.client.server.kinds, fd_mode=True)
        p, is_bytes = self._abs(path)
        if self.kernel.is_real(p):
            return _real.scandir(os.fsencode(p) if is_bytes else p)
        shown = os.fspath(path)

        def work() -> tuple[list, dict]:
            r = self.vfs.resolve(p, reval=self._reval)
            return self._list(r.client, r.ino), r.client.server.kinds

        entries, kinds = self._op("listdir", p, path, work)
        return _ScandirIterator(self, shown, is_bytes, entries, kinds)

    def readlink(self, path: Any, *, dir_fd: int | None = None) -> Any:
        p, is_bytes = self._abs(path, dir_fd)
        if self.kernel.is_real(p):
            return _real.readlink(os.fsencode(p) if is_bytes else p)

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
        if self.kernel.is_real(p):
            return _real.statvfs(p)
        return self._op("statvfs", p, path, lambda: self._statvfs(self.vfs.resolve(p, reval=self._reval).mount))

    def fstatvfs(self, fd: int) -> os.statvfs_result:
        of = self._fd(fd)
        return self._op("statvfs", of.path, None, lambda: self._statvfs(of.mount))

    def _statvfs(self, mount: Mount) -> os.statvfs_result:
        used, inodes = mount.server.usage()
        blocks, files = 1 << 32, 1 << 32
        free = blocks - (used + 4095) // 4096
        return os.statvfs_result((4096, 4096, blocks, free, free, files, files - inodes, files - inodes, 0, 255))

    def getcwd(self) -> str:
        return self.proc.cwd

    def getcwdb(self) -> bytes:
        return os.fsencode(self.proc.cwd)

    def chdir(self, path: Any) -> None:
        p, _ = self._abs(path)

        def work() -> None:
            r = self.vfs.resolve(p, reval=self._reval)
            if r.client.server.kinds.get(r.ino) != DIR:
                raise fs_error(errno.ENOTDIR)
            self.proc.cwd = r.path

        self._op("chdir", p, path, work)

    # -- namespace ---------------------------------------------------------------------------
    def _in_parent(self, name: str, path: Any, dir_fd: int | None, action: Callable[[ResolvedParent], None]) -> None:
        """An operation on a name in its directory (mkdir, rmdir, unlink)."""
        p, _ = self._abs(path, dir_fd)
        if self.kernel.is_real(p):
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

    def rename(self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        s, _ = self._abs(src, src_dir_fd)
        d, _ = self._abs(dst, dst_dir_fd)
        if self.kernel.is_real(s) or self.kernel.is_real(d):
            raise self._real_write_refused(src)

        def work() -> None:
            sp = self.vfs.resolve_parent(s, reval=self._reval)
            dp = self.vfs.resolve_parent(d, reval=self._reval)
            if sp.mount is not dp.mount:
                raise fs_error(errno.EXDEV)
            sp.client.rename(sp.dir_ino, sp.name, dp.dir_ino, dp.name)

        self._op("rename", s, src, work, dst)

    replace = rename

    def link(self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None,
             follow_symlinks: bool = True) -> None:
        s, _ = self._abs(src, src_dir_fd)
        d, _ = self._abs(dst, dst_dir_fd)
        if self.kernel.is_real(s) or self.kernel.is_real(d):
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
        if self.kernel.is_real(d):
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
        if self.kernel.is_real(p):
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
        mtime = times[1] if times is not None else ns[1] / 1e9 if ns is not None else self.kernel.wall_time()
        self._setattr("utime", path, dir_fd, follow_symlinks, mtime=mtime - self.kernel.epoch)

    def truncate(self, path: Any, length: int) -> None:
        if isinstance(path, int):
            return self.ftruncate(path, length)
        if length < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        p, _ = self._abs(path)
        if self.kernel.is_real(p):
            raise self._real_write_refused(path)

        def work() -> None:
            r = self.vfs.resolve(p, reval=self._reval)
            self.kernel.flush_fault(self.proc, "truncate", p)
            r.client.truncate(r.ino, length)

        self._op("truncate", p, path, work)
        return None

    # -- open files --------------------------------------------------------------------------
    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        p, _ = self._abs(path, dir_fd)
        if self.kernel.is_real(p):
            if flags & _WRITE_FLAGS:
                raise self._real_write_refused(path)
            return _real.open(p, flags, mode)
        if _O_TMPFILE and flags & _O_TMPFILE == _O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "simfs: O_TMPFILE is not supported", path)
        return self._op("open", p, path, lambda: self._open(p, flags, mode))

    def _open(self, p: str, flags: int, mode: int, hops: int = 0) -> int:
        access = flags & os.O_ACCMODE
        created = False
        if flags & os.O_CREAT:
            par = self.vfs.resolve_parent(p, reval=self._reval)
            mount, client = par.mount, par.client
            ino, created = client.create(par.dir_ino, par.name, mode & ~self.proc.umask, bool(flags & os.O_EXCL))
            if mount.server.kinds.get(ino) == LINK:
                if flags & os.O_NOFOLLOW or hops >= 40:
                    raise fs_error(errno.ELOOP)
                # O_CREAT through a symbolic link creates its target if that is missing
                target = posixpath.join(posixpath.dirname(par.path), client.readlink(ino))
                return self._open(normalize(target), flags, mode, hops + 1)
        else:
            r = self.vfs.resolve(p, follow=not flags & os.O_NOFOLLOW, reval=self._reval)
            mount, client, ino = r.mount, r.client, r.ino
        kind = mount.server.kinds.get(ino)
        if kind == LINK:
            raise fs_error(errno.ELOOP)
        if kind == DIR:
            if access != os.O_RDONLY or flags & os.O_CREAT:
                raise fs_error(errno.EISDIR)
        elif flags & os.O_DIRECTORY:
            raise fs_error(errno.ENOTDIR)
        if not created:
            client.open_revalidate(ino)
        writable = access in (os.O_WRONLY, os.O_RDWR)
        if flags & os.O_TRUNC and writable and kind == FILE and not created:
            self.kernel.flush_fault(self.proc, "truncate", p)
            client.truncate(ino, 0)
        of = OpenFile(mount, client, ino, p, kind, flags, access in (os.O_RDONLY, os.O_RDWR), writable,
                      bool(flags & os.O_APPEND), bool(flags & _SYNC_FLAGS))
        client.opened(ino)
        return self.proc.alloc_fd(of)

    def close(self, fd: int) -> None:
        if fd < FD_BASE:
            return _real.close(fd)
        of = self._fd(fd)
        del self.proc.fds[fd]
        of.refs -= 1
        if of.refs > 0:
            self._op("close", of.path, None, lambda: None)
            return None
        self._op("close", of.path, None, lambda: self._release(of))
        return None

    def _release(self, of: OpenFile) -> None:
        """Last close of an open file description: locks go, dirty data is flushed."""
        self.kernel.drop_locks(of, self.proc)
        client = of.client
        try:
            if of.epoch != client.epoch:
                raise fs_error(errno.EIO)
            if of.writable and client.has_dirty(of.ino):
                try:
                    self.kernel.flush_fault(self.proc, "close", of.path)
                except OSError:
                    client.discard(of.ino)
                    raise
                if of.mount.profile.data_durable == "close":
                    client.commit(of.ino)
                else:
                    client.flush(of.ino)
            if of.mount.profile.data_durable != "close":
                client.closed_without_commit(of.ino)
        finally:
            client.closed(of.ino)

    def _check_io(self, of: OpenFile, write: bool) -> None:
        if of.epoch != of.client.epoch:
            raise fs_error(errno.EIO)
        if of.kind == DIR:
            raise fs_error(errno.EISDIR)
        if not (of.writable if write else of.readable):
            raise fs_error(errno.EBADF)

    def read(self, fd: int, n: int) -> bytes:
        if fd < FD_BASE:
            return _real.read(fd, n)
        of = self._fd(fd)
        if n < 0:
            raise ValueError("negative read length")

        def work() -> bytes:
            self._check_io(of, False)
            data = of.client.read(of.ino, of.pos, n)
            of.pos += len(data)
            return data

        return self._op("read", of.path, None, work)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        of = self._fd(fd)

        def work() -> bytes:
            self._check_io(of, False)
            return of.client.read(of.ino, offset, n)

        return self._op("read", of.path, None, work)

    def write(self, fd: int, data: Any) -> int:
        if fd < FD_BASE:
            return _real.write(fd, data)
        of = self._fd(fd)
        return self._op("write", of.path, None, lambda: self._write(of, _frozen(data), None))

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        of = self._fd(fd)
        return self._op("write", of.path, None, lambda: self._write(of, _frozen(data), offset))

    def _write(self, of: OpenFile, data: bytes, offset: int | None) -> int:
        self._check_io(of, True)
        if not data:
            return 0  # a zero-length write changes nothing (not even past the end)
        client = of.client
        if of.mount.profile.write_back == "through":
            self.kernel.flush_fault(self.proc, "write", of.path)
        if offset is None:
            if of.append:
                of.pos = client.getattr(of.ino).size
            offset = of.pos
            of.pos += len(data)
        client.write(of.ino, offset, data)
        if of.sync:
            self.kernel.flush_fault(self.proc, "fsync", of.path)
            client.commit(of.ino)
        return len(data)

    def lseek(self, fd: int, pos: int, how: int) -> int:
        of = self._fd(fd)

        def work() -> int:
            if how == os.SEEK_SET:
                new = pos
            elif how == os.SEEK_CUR:
                new = of.pos + pos
            elif how == os.SEEK_END:
                new = of.client.getattr(of.ino).size + pos
            else:
                raise fs_error(errno.EINVAL)
            if new < 0:
                raise fs_error(errno.EINVAL)
            of.pos = new
            return new

        return self._op("lseek", of.path, None, work)

    def fsync(self, fd: Any) -> None:
        of = self._fd(fd)

        def work() -> None:
            if of.epoch != of.client.epoch:
                raise fs_error(errno.EIO)
            if of.kind == DIR:
                of.client.sync_dir(of.ino)
                return
            self.kernel.flush_fault(self.proc, "fsync", of.path)
            of.client.commit(of.ino)

        self._op("fsync", of.path, None, work)

    fdatasync = fsync

    def ftruncate(self, fd: int, length: int) -> None:
        of = self._fd(fd)

        def work() -> None:
            self._check_io(of, True)
            if length < 0:
                raise fs_error(errno.EINVAL)
            self.kernel.flush_fault(self.proc, "truncate", of.path)
            of.client.truncate(of.ino, length)

        self._op("truncate", of.path, None, work)

    def dup(self, fd: int) -> int:
        of = self._fd(fd)
        of.refs += 1
        return self.proc.alloc_fd(of)

    def dup2(self, fd: int, fd2: int, inheritable: bool = True) -> int:
        of = self._fd(fd)
        if fd2 < FD_BASE:
            raise BypassError("os.dup2", "it would put a simulated file on a real descriptor")
        if fd2 in self.proc.fds:
            self.close(fd2)
        of.refs += 1
        self.proc.fds[fd2] = of
        return fd2

    def isatty(self, fd: int) -> bool:
        if fd < FD_BASE:
            return _real.isatty(fd)
        self._fd(fd)
        return False

    def exit_process(self) -> None:
        """The process ends: the kernel closes what it left open (flushing dirty data)."""
        for fd in sorted(self.proc.fds):
            try:
                self.close(fd)
            except OSError:
                pass  # an exiting process never sees errors of its implicit closes
        self.proc.alive = False

    # -- locks -------------------------------------------------------------------------------
    def lock(self, fd: Any, operation: int, *, posix: bool) -> None:
        """flock (owner: the open file) or lockf (owner: the process), whole-file."""
        of = self._fd(fd)
        name = "lockf" if posix else "flock"
        owner: Any = self.proc if posix else of
        self._op(name, of.path, None, lambda: self.kernel.lock(of, owner, operation))


class DirEntry:
    """What ``os.scandir`` yields inside a simulated rank."""

    __slots__ = ("name", "path", "_ino", "_kind", "_sys", "_stat", "_lstat")

    def __init__(self, sys: Syscalls, name: Any, path: Any, ino: int, kind: str) -> None:
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


class _ScandirIterator:
    """The iterator ``os.scandir`` returns (also a context manager)."""

    def __init__(self, sys: Syscalls, shown: Any, is_bytes: bool, entries: list[tuple[str, int]],
                 kinds: dict[int, str], fd_mode: bool = False) -> None:
        def make(name: str, ino: int) -> DirEntry:
            out_name = os.fsencode(name) if is_bytes else name
            path = out_name if fd_mode else (os.path.join(shown, out_name))
            return DirEntry(sys, out_name, path, ino, kinds.get(ino, FILE))

        self._it: Iterator[DirEntry] = (make(n, i) for n, i in entries)

    def __iter__(self) -> _ScandirIterator:
        return self

    def __next__(self) -> DirEntry:
        return next(self._it)

    def __enter__(self) -> _ScandirIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._it = iter(())
