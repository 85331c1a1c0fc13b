"""Python file objects of a simulated process: ``open()``'s rules, real io buffering and text
layers over a simulated raw file (what ``io.FileIO`` is for a real process)."""

from __future__ import annotations

import io
import os
import warnings
from typing import Any

from .. import _real
from ..tasks.console import Console
from ..tasks.kernel import SystemCalls
from ..tasks.process import FD_BASE

_BUFFER_SIZE = 1 << 16
_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


class SimFileIO(io.RawIOBase):
    """A raw file of a simulated process (what ``io.FileIO`` is for a real one)."""

    def __init__(self, sys: SystemCalls, file: Any, mode: str = "r", closefd: bool = True, opener: Any = None) -> None:
        super().__init__()
        kind = next((c for c in mode if c in "rwax"), None)
        if kind is None or any(c not in "rwax+b" for c in mode):
            raise ValueError(f"invalid mode: {mode!r}")
        plus = "+" in mode
        flags = _FLAGS[kind] | os.O_CLOEXEC
        if plus:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        self._sys = sys
        self._readable = kind == "r" or plus
        self._writable = kind != "r" or plus
        self._appending = kind == "a"
        self._mode = {"r": "rb", "w": "wb", "a": "ab", "x": "xb"}[kind] if not plus else \
            {"r": "rb+", "w": "rb+", "a": "ab+", "x": "xb+"}[kind]
        if isinstance(file, int):
            if file < 0:
                raise ValueError("negative file descriptor")
            fd = file
            self._closefd = closefd
        else:
            if not closefd:
                raise ValueError("Cannot use closefd=False with file name")
            fd = opener(file, flags) if opener is not None else sys.open_io(file, flags, 0o666)
            if not isinstance(fd, int) or fd < 0:
                raise ValueError(f"opener returned {fd!r}")
            self._closefd = True
        self._fd = fd
        self.name = file
        try:  # open_io checked what it opened; a descriptor given or an opener's is checked here
            if (isinstance(file, int) or opener is not None) and sys.kind_of(fd) == "d":
                raise IsADirectoryError(21, os.strerror(21), file)
            if self._appending:
                sys.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            if self._closefd:
                sys.close(fd)
            raise

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def closefd(self) -> bool:
        return self._closefd

    def fileno(self) -> int:
        self._checkClosed()
        return self._fd

    def readable(self) -> bool:
        self._checkClosed()
        return self._readable

    def writable(self) -> bool:
        self._checkClosed()
        return self._writable

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def isatty(self) -> bool:
        self._checkClosed()
        return False

    def readinto(self, buffer: Any) -> int:
        self._checkClosed()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        view = memoryview(buffer).cast("B")
        data = self._sys.read(self._fd, len(view))
        n = len(data)
        view[:n] = data
        return n

    def readall(self) -> bytes:
        self._checkClosed()
        chunks: list[bytes] = []
        while True:
            data = self._sys.read(self._fd, 1 << 20)
            if not data:
                return b"".join(chunks)
            chunks.append(data)

    def write(self, data: Any) -> int:
        self._checkClosed()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        return self._sys.write(self._fd, data)

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        self._checkClosed()
        return self._sys.lseek(self._fd, pos, whence)

    def tell(self) -> int:
        return self.seek(0, os.SEEK_CUR)

    def truncate(self, size: int | None = None) -> int:
        self._checkClosed()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        if size is None:
            size = self.tell()
        self._sys.ftruncate(self._fd, size)
        return size

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._closefd:
                self._sys.close_held(self._fd)
        finally:
            super().close()

    def __repr__(self) -> str:
        return f"<simfs.SimFileIO name={self.name!r} mode={self._mode!r}>"


class NullIO(io.RawIOBase):
    """/dev/null of a simulated machine: writes vanish, reads are at their end, and a seek
    anywhere lands at 0 (Linux's null_lseek, drivers/char/mem.c: ``return file->f_pos = 0``), so
    it opens buffered for reading and writing ("r+b"), as dill does at import."""

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return 0

    def tell(self) -> int:
        return self.seek(0, io.SEEK_CUR)

    def readinto(self, buffer: Any) -> int:
        return 0

    def write(self, data: Any) -> int:
        return memoryview(data).nbytes


def _null_file(mode: str, buffering: int, encoding: str | None, errors: str | None, newline: str | None) -> Any:
    raw = NullIO()
    buffered = io.BufferedRandom(raw) if "+" in mode else io.BufferedReader(raw) if "r" in mode else \
        io.BufferedWriter(raw)  # (as io.open buffers a file opened so)
    if "b" in mode:
        return raw if buffering == 0 else buffered
    # (io.text_encoding is there from Python 3.10; typeshed declares it from 3.11 only)
    return io.TextIOWrapper(buffered, io.text_encoding(encoding), errors, newline)  # type: ignore[attr-defined]


class ConsoleIO(io.RawIOBase):
    """A raw file over one of the process's console descriptors (0-2, tasks/console.py)."""

    def __init__(self, console: Console, fd: int, closefd: bool) -> None:
        super().__init__()
        self._console, self._fd, self._closefd = console, fd, closefd

    def fileno(self) -> int:
        return self._fd

    def readable(self) -> bool:
        return self._fd == 0

    def writable(self) -> bool:
        return self._fd != 0

    def readinto(self, buffer: Any) -> int:
        data = self._console.read(self._fd, len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def write(self, data: Any) -> int:
        return self._console.write(self._fd, bytes(data))

    def close(self) -> None:
        if not self.closed and self._closefd and self._fd not in self._console.closed:
            self._console.close(self._fd)
        super().close()


def sim_open(sys: SystemCalls, file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None, closefd: bool = True, opener: Any = None) -> Any:
    """``open()`` for a simulated process (same rules as io.open)."""
    if isinstance(file, int) and 0 <= file < FD_BASE:
        sys.proc.console.check(file)
        raw: Any = ConsoleIO(sys.proc.console, file, closefd)
        if "b" in mode:
            return raw if buffering == 0 else io.BufferedWriter(raw) if file else io.BufferedReader(raw)
        return io.TextIOWrapper(io.BufferedWriter(raw) if file else io.BufferedReader(raw),
                                io.text_encoding(encoding),  # type: ignore[attr-defined]  # 3.10+
                                errors, newline, line_buffering=True)
    if not isinstance(file, int):
        file = os.fspath(file)
        if file in (os.devnull, os.fsencode(os.devnull)):
            return _null_file(mode, buffering, encoding, errors, newline)
        if isinstance(file, (str, bytes)) and file and sys.machine.is_real(sys._abs(file)[0]):
            if set(mode) & set("wax+"):
                raise sys._real_write_refused(file)
            return _real.builtin_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    modes = set(mode)
    if modes - set("axrwb+t") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: '{mode}'")
    kinds = sum(c in modes for c in "xrwa")
    text, binary = "t" in modes, "b" in modes
    if text and binary:
        raise ValueError("can't have text and binary mode at once")
    if kinds != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if binary and encoding is not None:
        raise ValueError("binary mode doesn't take an encoding argument")
    if binary and errors is not None:
        raise ValueError("binary mode doesn't take an errors argument")
    if binary and newline is not None:
        raise ValueError("binary mode doesn't take a newline argument")
    if binary and buffering == 1:
        warnings.warn("line buffering (buffering=1) isn't supported in binary mode, "
                      "the default buffer size will be used", RuntimeWarning, 2)
    raw = SimFileIO(sys, file, "".join(c for c in mode if c in "xrwa+"), closefd, opener=opener)
    result: Any = raw
    try:
        line_buffering = buffering == 1
        if buffering in (1, -1):
            buffering = _BUFFER_SIZE
        if buffering == 0:
            if binary:
                return result
            raise ValueError("can't have unbuffered text I/O")
        buffer: io.BufferedRandom | io.BufferedReader | io.BufferedWriter
        if "+" in modes:
            buffer = io.BufferedRandom(raw, buffering)
        elif "r" in modes:
            buffer = io.BufferedReader(raw, buffering)
        else:
            buffer = io.BufferedWriter(raw, buffering)
        result = buffer
        if binary:
            return result
        wrapper = io.TextIOWrapper(buffer, io.text_encoding(encoding),  # type: ignore[attr-defined]  # 3.10+
                                   errors, newline, line_buffering)
        result = wrapper
        wrapper.mode = mode  # type: ignore[misc]  # writable, as io.open sets it (typeshed: read-only)
        return wrapper
    except BaseException:
        result.close()
        raise


