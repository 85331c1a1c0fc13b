"""The process carrier's wire (simfs/runtime/carrier/wire.py, messages.py): messages survive any
split into reads, a closed end reads as the end, an oversized message is refused unread, and a
rank's message decodes only as one of the declared kinds with fields of their types (what values
may hold: tests/test_plaindata.py)."""

from __future__ import annotations

import os
import socket
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfs import plaindata
from simfs.runtime.carrier import messages, wire

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
        assert [plaindata.load(wire.receive(receiver) or b"") for _ in messages] == messages
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


def test_an_oversized_message_is_refused_unread() -> None:
    sender, receiver = _pair()
    os.write(sender, (1 << 40).to_bytes(8, "big") + b"x" * 100)
    try:
        with pytest.raises(wire.Oversized, match=str(1 << 40)):
            wire.receive(receiver, wire.MAX_MESSAGE)
    finally:
        _close(sender, receiver)


@given(st.integers(0, 2**31), st.text(max_size=20), st.lists(PLAIN, max_size=4))
def test_a_request_crosses_as_itself(tid: int, op: str, args: list[Any]) -> None:
    message = messages.decode(messages.call(tid, op, "job.py:3 in job", tuple(args)))
    assert isinstance(message, messages.Call) and (message.tid, message.op, message.args) == (tid, op, args)


FORGED = {
    "an unknown kind": ["exec", 1, "x"],
    "a tid as text": ["call", "1", "sys", "", []],
    "a tid as a bool": ["done", True, b""],
    "an op too long": ["call", 1, "x" * 300, "", []],
    "a field short": ["raised", 1, None, "T", "t", "tb"],
    "a field more": ["done", 1, b"", 2],
    "not a list of arguments": ["call", 1, "sys", "", {"a": 1}],
}


@pytest.mark.parametrize("fields", FORGED.values(), ids=FORGED.keys())
def test_a_rank_message_of_the_wrong_shape_is_refused(fields: list[Any]) -> None:
    with pytest.raises(plaindata.Untrusted, match="malformed"):
        messages.decode(msgspec.msgpack.encode(fields))


def _framed(message: Any) -> bytes:
    data = plaindata.dumps(message)
    return len(data).to_bytes(8, "big") + data


def test_a_request_about_a_name_that_is_not_utf8_crosses() -> None:
    name = "/shared/" + b"caf\xe9".decode("utf-8", "surrogateescape")
    message = messages.decode(messages.call(1, "sys", f"job.py:3 in open {name}", ("stat", (name,), {})))
    assert isinstance(message, messages.Call) and message.args == ["stat", (name,), {}]
    assert "\\udce9" in message.where  # a text field: written as its escape
