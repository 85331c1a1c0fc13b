"""Messages between the host and a rank process over a Unix socket pair: length-prefixed bytes.
What the host reads from a rank is untrusted: typed messages of plain data (schema.py, no pickle),
at most MAX_MESSAGE bytes, so nothing a rank sends can run code in the host or take its memory.
The host's answers are typed messages of the same schema."""

from __future__ import annotations

import struct
from typing import Any

from .. import _real

_LENGTH = struct.Struct("!Q")
_CHUNK = 1 << 16  # bytes a read(2) asks for beyond what the message needs (os.read allocates them)
_PART = 1 << 20  # the most a read(2) of a long message asks for (and allocates) at once
# the largest message a rank may send the host: object collectives (broadcast_object_list of a
# state dict) and store values cross in one; tensors do not (outbox.py)
MAX_MESSAGE = 1 << 30
# real seconds a reader polls for the next message before it sleeps in the kernel: a request and
# its answer alternate within tens of microseconds, and waking a sleeping process costs as much
# (measured in benchmarks/carrier_bench.py); between polls the reader yields its CPU
SPIN = 200e-6


class Oversized(ValueError):
    """A message longer than the reader takes."""


def soon(fd: int) -> bool:
    """Whether ``fd``'s next message is here, or arrives within SPIN (polled, not slept for)."""
    return buffered(fd) or arrived(fd, SPIN)


def arrived(fd: int, seconds: float) -> bool:
    """Whether ``fd`` became readable within ``seconds``, polled without sleeping."""
    poller = _pollers.get(fd)
    if poller is None:
        poller = _pollers[fd] = _real.poll()
        poller.register(fd, _real.POLLIN)
    deadline = _real.perf_counter() + seconds
    while not poller.poll(0):
        if _real.perf_counter() > deadline:
            return False
        _real.sched_yield()
    return True


def send(fd: int, data: bytes) -> None:
    """Write one message to the socket ``fd``."""
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[_real.write(fd, view):]


def receive(fd: int, limit: int | None = None) -> bytes | None:
    """The next message's bytes, or None when the other end is gone (closed, or its process died);
    Oversized when it says it is longer than ``limit`` bytes (nothing of it is read).
    One read(2) usually brings a whole message (requests and answers alternate); what a read
    brings past it waits for the next call. A longer message is read in parts of at most _PART
    bytes: what the reader holds grows with what was sent, never with what a header claims."""
    buffer = _pending.pop(fd, b"")
    while len(buffer) < _LENGTH.size:
        part = _read(fd, _CHUNK)
        if not part:
            return None
        buffer = buffer + part if buffer else part
    length = _LENGTH.unpack_from(buffer)[0]
    if limit is not None and length > limit:
        raise Oversized(f"a message of {length} bytes, more than the {limit} taken")
    need = _LENGTH.size + length
    if len(buffer) >= need:
        if len(buffer) > need:
            _pending[fd] = buffer[need:]
        return bytes(buffer[_LENGTH.size:need])
    parts = [buffer[_LENGTH.size:]]
    have = len(parts[0])
    while have < length:
        part = _read(fd, min(length - have, _PART))
        if not part:
            return None
        parts.append(part)
        have += len(part)
    return b"".join(parts)


def _read(fd: int, size: int) -> bytes:
    try:
        return _real.read(fd, size)
    except ConnectionResetError:
        return b""


_pending: dict[int, bytes] = {}  # descriptor -> bytes read past the last message
_pollers: dict[int, Any] = {}  # descriptor -> a poll object watching it (arrived())


def buffered(fd: int) -> bool:
    """Whether bytes of ``fd``'s next message were read already (waiting for ``fd`` would not see them)."""
    return fd in _pending


def forget(fd: int | None = None) -> None:
    """Drop what was read past the last message on ``fd`` (every descriptor: None), as the
    descriptor closes (or, in a new rank process, the host's were never its own)."""
    if fd is None:
        _pending.clear()
        _pollers.clear()
    else:
        _pending.pop(fd, None)
        _pollers.pop(fd, None)
