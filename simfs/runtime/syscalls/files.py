"""Calls on open files of a simulated process: open, read, write, seek, fsync, close, dup,
and advisory locks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import posixpath
from typing import Any

from ... import _real
from ...errors import BypassError
from ...fs.inode import DIR, FILE, LINK, fs_error
from ...port import native
from ...tasks.process import FD_BASE
from .base import SyscallsBase, frozen
from .openfile import NullFile, OpenFile

_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_SYNC_FLAGS = os.O_SYNC | getattr(os, "O_DSYNC", 0)


class FileCalls(SyscallsBase):
    # -- open files --------------------------------------------------------------------------
    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        p, _ = self._abs(path, dir_fd)
        if p == NullFile.path:
            return self._open_null(flags)
        if self.machine.is_real(p):
            fd = native.open_file(p, flags, mode, path)
            self.proc.real_fds.add(fd)
            return fd
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
                return self._open(native.normalize(target), flags, mode, hops + 1)
        else:
            r = self.vfs.resolve(p, follow=not flags & os.O_NOFOLLOW, reval=self._reval)
            mount, client, ino = r.mount, r.client, r.ino
        kind = mount.server.kinds.get(ino)
        assert kind is not None  # every inode number a server hands out has a kind
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
        if writable and mount.path == "/proc":
            raise fs_error(errno.EACCES)
        if flags & os.O_TRUNC and writable and kind == FILE and not created:
            client.truncate(ino, 0)  # frees space: never ENOSPC (the data goes at write or close)
        of = OpenFile(mount, client, ino, p, kind, flags, access in (os.O_RDONLY, os.O_RDWR), writable,
                      bool(flags & os.O_APPEND), bool(flags & _SYNC_FLAGS))
        client.opened(ino)
        return self.proc.alloc_fd(of)

    def _open_null(self, flags: int) -> int:
        """open(2) of /dev/null: every node has it, readable and writable by everyone (0666);
        O_CREAT and O_TRUNC change nothing on a device, O_DIRECTORY is ENOTDIR."""
        if flags & os.O_DIRECTORY:
            raise fs_error(errno.ENOTDIR)
        if flags & os.O_CREAT and flags & os.O_EXCL:
            raise fs_error(errno.EEXIST)
        access = flags & os.O_ACCMODE
        return self.proc.alloc_fd(NullFile(flags, access in (os.O_RDONLY, os.O_RDWR),
                                           access in (os.O_WRONLY, os.O_RDWR)))

    def open_io(self, path: Any, flags: int, mode: int = 0o666) -> int:
        """open(2) and the check io.FileIO makes after it, in one call: a descriptor that names a
        directory is closed again, and IsADirectoryError raised."""
        fd = self.open(path, flags, mode)
        if fd >= FD_BASE and self._fd(fd).kind == DIR:
            self.close(fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return fd

    def close_held(self, fd: int) -> None:
        """close(2) of a descriptor the live process still holds: io.FileIO's close of a file
        whose descriptor the process's exit, or os.closerange, closed already does nothing."""
        if self.holds(fd):
            self.close(fd)

    def close(self, fd: int) -> None:
        if fd < FD_BASE:
            _real.close(self._real_fd(fd))
            self.proc.real_fds.discard(fd)
            return None
        described = self._described(fd)
        del self.proc.fds[fd]
        described.refs -= 1
        if isinstance(described, NullFile):
            return None
        of = described
        if of.refs > 0:
            self._op("close", of.path, None, lambda: None)
            return None
        self._fd_op("close", of, lambda: self._release(of))
        return None

    def _fd_op(self, name: str, of: OpenFile, fn: Any) -> Any:
        """An operation on a descriptor: Linux retries a path walk that met ESTALE, never a
        call on a descriptor (a close that reports ESTALE has already released the file)."""
        retrying, self._reval = self._reval, True
        try:
            return self._op(name, of.path, None, fn)
        finally:
            self._reval = retrying

    def _injected(self, op: str, of: OpenFile) -> OSError | None:
        """An injected ENOSPC / EDQUOT due where data reaches the server now, if any."""
        try:
            self.machine.flush_fault(self.proc, op, of.path)
        except OSError as exc:
            return exc
        return None

    def _send_dirty(self, of: OpenFile, op: str, commit: bool, inject: bool = True) -> None:
        """Where a write-back mount's data reaches the server (close, fsync): an injected
        ENOSPC / EDQUOT and a full server fail the same way: the dirty data is lost (as Linux
        drops pages whose write-back failed) and the error is raised here, once."""
        client = of.client
        if client.has_dirty(of.ino):
            client.flush(of.ino, self._injected(op, of) if inject else None)
        error = client.take_error(of.ino)
        if error is not None:
            raise error
        if commit:
            client.commit(of.ino)

    def _release(self, of: OpenFile) -> None:
        """Last close of an open file description: locks go, dirty data is flushed."""
        self.machine.drop_locks(of, self.proc)
        client = of.client
        try:
            if of.epoch != client.epoch:
                raise fs_error(errno.EIO)
            durable_at_close = of.mount.profile.data_durable == "close"
            if of.writable:  # a read-only close reports nothing (fs/nfs/file.c nfs_file_flush)
                self._send_dirty(of, "close", commit=durable_at_close and client.has_dirty(of.ino))
            if of.mount.profile.data_durable == "fsync":
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
            return _real.read(self._real_fd(fd), n)
        if n < 0:
            raise ValueError("negative read length")
        if self._null_io(fd, write=False):
            return b""
        of = self._fd(fd)

        def work() -> bytes:
            self._check_io(of, False)
            data = of.client.read(of.ino, of.pos, n)
            of.pos += len(data)
            return data

        return self._op("read", of.path, None, work)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        if self._null_io(fd, write=False):
            return b""
        of = self._fd(fd)

        def work() -> bytes:
            self._check_io(of, False)
            return of.client.read(of.ino, offset, n)

        return self._op("read", of.path, None, work)

    def write(self, fd: int, data: Any) -> int:
        if fd < FD_BASE:
            return _real.write(self._real_fd(fd), data)
        if self._null_io(fd, write=True):
            return len(frozen(data))
        of = self._fd(fd)
        return self._op("write", of.path, None, lambda: self._write(of, frozen(data), None))

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        if self._null_io(fd, write=True):
            return len(frozen(data))
        of = self._fd(fd)
        return self._op("write", of.path, None, lambda: self._write(of, frozen(data), offset))

    def _null_io(self, fd: int, *, write: bool) -> bool:
        """Whether ``fd`` names /dev/null, whose reads are at their end and whose writes take
        every byte: EBADF only where the open did not ask for that direction."""
        null = self._null(fd)
        if null is not None and not (null.writable if write else null.readable):
            raise fs_error(errno.EBADF)
        return null is not None

    def _write(self, of: OpenFile, data: bytes, offset: int | None) -> int:
        self._check_io(of, True)
        if not data:
            return 0  # a zero-length write changes nothing (not even past the end)
        client = of.client
        # space is claimed at write() where the mount sends or reserves it now (a local disk's
        # delalloc reservation, Lustre grants); an injected ENOSPC/EDQUOT fires exactly there
        claims_now = of.mount.profile.write_back != "close"
        failure = self._injected("write", of) if claims_now else None
        at = offset
        if at is None:
            if of.append:
                of.pos = client.getattr(of.ino).size
            at = of.pos
        written = client.write(of.ino, at, data, failure)
        if offset is None:
            of.pos = at + written
        if of.sync:  # (where space was claimed at write, an injected error had its chance there)
            self._send_dirty(of, "write", commit=True, inject=not claims_now)
        return written

    def lseek(self, fd: int, pos: int, how: int) -> int:
        if self._null(fd) is not None:
            return 0  # drivers/char/mem.c null_lseek: every seek lands at 0
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
        if self._null(fd) is not None:
            raise fs_error(errno.EINVAL)  # no fsync in /dev/null's file operations: EINVAL, as Linux
        of = self._fd(fd)

        def work() -> None:
            if of.epoch != of.client.epoch:
                raise fs_error(errno.EIO)
            if of.kind == DIR:
                of.client.sync_dir(of.ino)
                return
            self._send_dirty(of, "fsync", commit=True)

        self._fd_op("fsync", of, work)

    fdatasync = fsync

    def ftruncate(self, fd: int, length: int) -> None:
        of = self._fd(fd)

        def work() -> None:
            self._check_io(of, True)
            if length < 0:
                raise fs_error(errno.EINVAL)
            # allocates nothing (a hole); dirty data it flushes first reports its errors at close
            of.client.truncate(of.ino, length)

        self._op("truncate", of.path, None, work)

    def dup(self, fd: int) -> int:
        of = self._described(fd)
        of.refs += 1
        return self.proc.alloc_fd(of)

    def dup2(self, fd: int, fd2: int, inheritable: bool = True) -> int:
        of = self._described(fd)
        if fd2 < FD_BASE:
            raise BypassError("os.dup2", "it would put a simulated file on a real descriptor")
        if fd2 in self.proc.fds:
            self.close(fd2)
        of.refs += 1
        self.proc.fds[fd2] = of
        return fd2

    def isatty(self, fd: int) -> bool:
        if fd < FD_BASE:
            return _real.isatty(self._real_fd(fd))
        self._described(fd)
        return False

    def kind_of(self, fd: int) -> str:
        """What an open descriptor names: "f" (a file), "d" (a directory) or "c" (/dev/null)."""
        kind: str = self._described(fd).kind
        return kind

    def holds(self, fd: int) -> bool:
        """Whether the (live) process has ``fd`` open."""
        return self.proc.alive and fd in self.proc.fds

    def descriptors(self, low: int, high: int) -> list[int]:
        """The simulated descriptors the process has open in [low, high)."""
        return [fd for fd in self.proc.fds if low <= fd < high]

    def sync(self) -> None:
        """sync(2): every dirty file of the process's node reaches its server."""
        for mount in self.vfs.mounts:
            client = mount.clients[self.proc.node]
            for ino in list(client.dirty):
                client.flush(ino)

    def fcntl(self, fd: int, cmd: int, arg: Any = 0) -> int:
        """fcntl(2) on a simulated descriptor: its flags (F_GETFD, F_GETFL); setting them is
        accepted (close-on-exec, O_NONBLOCK: nothing here differs); record locks are refused."""
        of = self._described(fd)
        if cmd == fcntl.F_GETFD:
            return fcntl.FD_CLOEXEC
        if cmd == fcntl.F_GETFL:
            return of.flags
        if cmd in (fcntl.F_SETFD, fcntl.F_SETFL):
            return 0
        raise BypassError(f"fcntl.fcntl(cmd={cmd})", "record locks through fcntl() are not simulated",
                          "use fcntl.lockf() or fcntl.flock()")

    def exit_process(self) -> None:
        """The process ends: the kernel closes what it left open (flushing dirty data)."""
        for fd in sorted(self.proc.fds) + sorted(self.proc.real_fds):
            with contextlib.suppress(OSError):  # an exiting process never sees its implicit closes' errors
                self.close(fd)
        self.proc.alive = False
        self.machine.fs.proc[self.proc.node].remove(self.proc.pid)

    # -- locks -------------------------------------------------------------------------------
    def lock(self, fd: Any, operation: int, *, posix: bool) -> None:
        """flock (owner: the open file) or lockf (owner: the process), whole-file; on /dev/null,
        which no other process can contend for here, it is granted at once."""
        if self._null(fd) is not None:
            return
        of = self._fd(fd)
        name = "lockf" if posix else "flock"
        owner: Any = self.proc if posix else of
        self._op(name, of.path, None, lambda: self.machine.lock(of, owner, operation))

