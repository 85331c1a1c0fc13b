"""Messages between the host and a rank process over a Unix socket pair: length-prefixed
pickles. What the host reads from a rank is untrusted: it is loaded by an unpickler that can
build plain data only (containers, numbers, text, bytes, numpy arrays, exceptions of the standard
library and of simfs), so nothing a rank sends can run code in the host (pickle's documentation,
"Restricting Globals"). What a rank reads from the host is trusted and loaded as is."""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from ... import _real

_LENGTH = struct.Struct("!Q")
_CHUNK = 1 << 16  # bytes a read(2) asks for beyond what the message needs (os.read allocates them)
# classes a rank's message may name, by module: plain data only (their construction runs no code
# the rank chose)
_PLAIN: dict[str, frozenset[str]] = {
    "builtins": frozenset({"complex", "bytearray", "frozenset", "set", "range", "slice", "object"}),
    "collections": frozenset({"OrderedDict", "deque"}),
    "copyreg": frozenset({"_reconstructor"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone"}),
    "decimal": frozenset({"Decimal"}),
    "fractions": frozenset({"Fraction"}),
    "pathlib": frozenset({"PurePath", "PurePosixPath", "PosixPath", "Path"}),
    "os": frozenset({"stat_result", "statvfs_result", "times_result", "uname_result"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.dtypes": frozenset({"Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType",
                               "Int16DType", "Int8DType", "UInt8DType", "UInt16DType", "UInt32DType",
                               "UInt64DType", "BoolDType", "Complex64DType", "Complex128DType", "BytesDType",
                               "StrDType"}),
}
_EXCEPTION_MODULES = ("builtins", "simfs.errors", "torch.distributed")  # their exception classes only


class Untrusted(pickle.UnpicklingError):
    """A rank's message names something the host does not load."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in _PLAIN.get(module, ()):
            return super().find_class(module, name)
        if module in _EXCEPTION_MODULES:
            cls = super().find_class(module, name)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                return cls
        raise Untrusted(f"{module}.{name}")


def load_untrusted(data: bytes) -> Any:
    """A rank's message as plain data; raises Untrusted naming a class it may not hold."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def send(fd: int, message: Any) -> None:
    """Write one message (a whole pickle) to the socket ``fd``."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[_real.write(fd, view):]


def receive(fd: int) -> bytes | None:
    """The next message's bytes, or None when the other end is gone (closed, or its process died).
    One read(2) usually brings a whole message (requests and answers alternate); what a read
    brings past it waits for the next call."""
    buffer = _pending.pop(fd, b"")
    need = _LENGTH.size
    while True:
        if len(buffer) >= _LENGTH.size:
            need = _LENGTH.size + _LENGTH.unpack_from(buffer)[0]
            if len(buffer) >= need:
                if len(buffer) > need:
                    _pending[fd] = buffer[need:]
                return bytes(buffer[_LENGTH.size:need])
        try:
            part = _real.read(fd, max(_CHUNK, need - len(buffer)))  # a large message: in one read when it can
        except ConnectionResetError:
            return None
        if not part:
            return None
        buffer = buffer + part if buffer else part


_pending: dict[int, bytes] = {}  # descriptor -> bytes read past the last message


def forget(fd: int | None = None) -> None:
    """Drop what was read past the last message on ``fd`` (every descriptor: None), as the
    descriptor closes (or, in a new rank process, the host's were never its own)."""
    if fd is None:
        _pending.clear()
    else:
        _pending.pop(fd, None)
