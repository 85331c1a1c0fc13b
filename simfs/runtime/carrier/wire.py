"""Messages between the host and a rank process over a Unix socket pair: length-prefixed
pickles. What the host reads from a rank is untrusted: it is loaded as plain data only
(simfs.plaindata.load), so nothing a rank sends can run code in the host. What a rank reads from
the host is trusted and loaded as is."""

from __future__ import annotations

import pickle
import struct
from typing import Any

from ... import _real

_LENGTH = struct.Struct("!Q")
_CHUNK = 1 << 16  # bytes a read(2) asks for beyond what the message needs (os.read allocates them)


def send(fd: int, message: Any) -> None:
    """Write one message (a whole pickle) to the socket ``fd``."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[_real.write(fd, view):]


def receive(fd: int) -> bytes | None:
    """The next message's bytes, or None when the other end is gone (closed, or its process died).
    One read(2) usually brings a whole message (requests and answers alternate); what a read
    brings past it waits for the next call. A message larger than a read (a collective's tensors)
    is read into one buffer of its size, not grown a read at a time."""
    buffer = _pending.pop(fd, b"")
    while len(buffer) < _LENGTH.size:
        part = _read(fd, _CHUNK)
        if not part:
            return None
        buffer = buffer + part if buffer else part
    need = _LENGTH.size + _LENGTH.unpack_from(buffer)[0]
    if len(buffer) >= need:
        if len(buffer) > need:
            _pending[fd] = buffer[need:]
        return bytes(buffer[_LENGTH.size:need])
    message = bytearray(need - _LENGTH.size)
    have = len(buffer) - _LENGTH.size
    message[:have] = buffer[_LENGTH.size:]
    view = memoryview(message)
    while have < len(message):
        try:
            got = _real.readv(fd, [view[have:]])
        except ConnectionResetError:
            return None
        if not got:
            return None
        have += got
    return bytes(message)


def _read(fd: int, size: int) -> bytes:
    try:
        return _real.read(fd, size)
    except ConnectionResetError:
        return b""


_pending: dict[int, bytes] = {}  # descriptor -> bytes read past the last message


def forget(fd: int | None = None) -> None:
    """Drop what was read past the last message on ``fd`` (every descriptor: None), as the
    descriptor closes (or, in a new rank process, the host's were never its own)."""
    if fd is None:
        _pending.clear()
    else:
        _pending.pop(fd, None)
