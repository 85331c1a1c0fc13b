"""The process carrier's wire (simfs/runtime/carrier/wire.py): messages survive any split into
reads and a closed end reads as the end (what they may hold: tests/test_plaindata.py)."""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simfs.runtime.carrier import wire

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner,
                                                                                            max_size=4),
    max_leaves=20)


def _pair() -> tuple[int, int]:
    a, b = socket.socketpair()
    return a.detach(), b.detach()


@settings(max_examples=50)
@given(st.lists(PLAIN, min_size=1, max_size=5), st.data())
def test_messages_survive_any_split_into_writes(messages: list[Any], data: st.DataObject) -> None:
    sender, receiver = _pair()
    try:
        stream = b"".join(_framed(m) for m in messages)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
        for start, end in zip([0, *cuts], [*cuts, len(stream)]):
            if end > start:
                os.write(sender, stream[start:end])
        assert [pickle.loads(wire.receive(receiver) or b"") for _ in messages] == messages
    finally:
        _close(sender, receiver)


def test_a_closed_end_reads_as_none() -> None:
    sender, receiver = _pair()
    os.write(sender, _framed("a message cut short")[:12])
    os.close(sender)
    try:
        assert wire.receive(receiver) is None
    finally:
        _close(receiver)


def _close(*fds: int) -> None:
    for fd in fds:
        wire.forget(fd)
        os.close(fd)


def _framed(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(8, "big") + data
