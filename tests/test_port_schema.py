"""The port (simfs/port: schema.py, framing.py): messages survive any split into reads, a closed
end reads as the end, an oversized message is refused unread; every request and answer crosses as
itself, a rank's message decodes only as one of the declared kinds with fields of their types
(what values may hold: tests/test_plaindata.py), and the kernel serves every request the schema
declares, by one handler each."""

from __future__ import annotations

import os
import socket
import threading
import tracemalloc
import types
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfs import plaindata
from simfs.port import framing as wire
from simfs.port import schema
from simfs.runtime.carrier.hostdist import DistRequests
from simfs.runtime.carrier.requests import ProcessRequests
from simfs.runtime.syscalls import CALLS

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


def test_a_header_claiming_a_long_message_takes_no_more_memory_than_was_sent() -> None:
    """A 16-byte frame header is not an allocation: the reader holds what arrived, in parts."""
    sender, receiver = _pair()
    os.write(sender, (wire.MAX_MESSAGE - 1).to_bytes(8, "big") + b"x" * 100)
    os.close(sender)
    tracemalloc.start()
    try:
        assert wire.receive(receiver, wire.MAX_MESSAGE) is None  # the sender went away after 100 bytes
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        _close(receiver)
    assert peak < 4 << 20, f"the reader allocated {peak} bytes for 100 sent"


@given(st.integers(0, 3 << 20), st.binary(min_size=1, max_size=64))
@settings(max_examples=10, deadline=None)
def test_a_message_longer_than_a_part_crosses_whole(length: int, pattern: bytes) -> None:
    body = (pattern * (length // len(pattern) + 1))[:length]
    sender, receiver = _pair()
    done = threading.Thread(target=wire.send, args=(sender, body))
    done.start()
    try:
        assert wire.receive(receiver, wire.MAX_MESSAGE) == body
    finally:
        done.join()
        _close(sender, receiver)


def _strategy(info: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    """Values of a field's declared type (free-form fields: any plain data)."""
    if isinstance(info, msgspec.inspect.StrType):
        return st.text(max_size=min(info.max_length or 40, 40))
    if isinstance(info, msgspec.inspect.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, msgspec.inspect.UnionType):
        return st.one_of([_strategy(t) for t in info.types])
    if isinstance(info, msgspec.inspect.ListType):
        return st.lists(_strategy(info.item_type), max_size=4)
    if isinstance(info, msgspec.inspect.DictType):
        return st.dictionaries(st.text(max_size=5), _strategy(info.value_type), max_size=4)
    kinds: dict[type, st.SearchStrategy[Any]] = {
        msgspec.inspect.IntType: st.integers(-2**63, 2**63 - 1), msgspec.inspect.FloatType: st.floats(allow_nan=False),
        msgspec.inspect.BoolType: st.booleans(), msgspec.inspect.NoneType: st.none(), msgspec.inspect.AnyType: PLAIN}
    return kinds[type(info)]


def _requests() -> st.SearchStrategy[schema.Request]:
    def of(kind: type[schema.Request]) -> st.SearchStrategy[schema.Request]:
        info = msgspec.inspect.type_info(kind)
        assert isinstance(info, msgspec.inspect.StructType)
        return st.builds(kind, *[_strategy(f.type) for f in info.fields])
    return st.one_of([of(kind) for kind in schema.REQUESTS])


@given(st.integers(0, 2**31), _requests())
def test_every_request_crosses_as_itself(tid: int, request: schema.Request) -> None:
    message = schema.decode(schema.call(tid, "job.py:3 in job", request))
    assert isinstance(message, schema.Call) and (message.tid, message.request) == (tid, request)


def test_a_rank_starts_from_what_the_host_meant() -> None:
    odd = "/opt/" + b"caf\xe9".decode("utf-8", "surrogateescape")  # a name decoded with surrogateescape
    start = schema.RankSpec(9, 3, 1, 1, 8, 4, 4242, "node1", {"HOME": odd, "RANK": "3"}, odd, 0o27, 2**100, 2,
                            1.7e9, 12.5, [odd, "/usr/lib/python3.11"], True, False, list(range(8)), "WORLD", 1800.0)
    assert schema.decode_spec(schema.spec(start)) == start


@given(st.integers(0, 2**31), st.floats(0, 1e9), st.lists(st.integers(1, 64), max_size=3), PLAIN)
def test_an_answer_crosses_as_itself(tid: int, now: float, signals: list[int], value: Any) -> None:
    answer = schema.decode_answer(schema.answer(tid, now, signals, value))
    assert answer == schema.Answer(tid, now, signals, value)
    assert schema.decode_answer(schema.native(tid, now, signals)) == schema.Native(tid, now, signals)


@pytest.mark.parametrize("error", [FileNotFoundError(2, "No such file or directory", "/shared/x"),
                                   OSError(18, "Invalid cross-device link", "/a", None, "/b"),
                                   TimeoutError("the barrier timed out"), ValueError("negative read length")],
                         ids=repr)
def test_a_failed_request_raises_its_error_in_the_rank(error: BaseException) -> None:
    answer = schema.decode_answer(schema.failed(3, 1.5, [], error))
    assert isinstance(answer, schema.Failed) and type(answer.error) is type(error)
    assert answer.error.args == error.args and str(answer.error) == str(error)
    if isinstance(error, OSError):
        assert (answer.error.errno, answer.error.filename, answer.error.filename2) == \
            (error.errno, error.filename, error.filename2)


def test_the_schema_names_the_kernels_system_calls() -> None:
    assert set(typing.get_args(schema.CallName)) == CALLS


def test_the_kernel_serves_every_request_by_one_handler() -> None:
    machine = types.SimpleNamespace(reads_on_rank=None)
    process = ProcessRequests(machine, None, lambda rank: None).handlers()  # type: ignore[arg-type]
    dist = DistRequests(None, None, lambda rank: 0).handlers()  # type: ignore[arg-type]
    assert not set(process) & set(dist)
    assert set(process) | set(dist) == set(schema.REQUESTS)


FORGED = {
    "an unknown kind": ["exec", 1, "x"],
    "a tid as text": ["Call", "1", "", ["Progress"]],
    "a tid as a bool": ["Done", True, b""],
    "an unknown request": ["Call", 1, "", ["Exec", "/bin/sh"]],
    "an unknown system call": ["Call", 1, "", ["SystemCall", "execve", ["/bin/sh"], {}, False, 18]],
    "a group name too long": ["Call", 1, "", ["Collective", "x" * 300, "barrier", None, None, 0]],
    "a field short": ["Raised", 1, None, "T", "t", "tb"],
    "a field more": ["Done", 1, b"", 2],
    "a note in another rank's name": ["Call", 1, "", ["Note", "mkdir", "/x", "ok", 0, 0]],
    "not a list of arguments": ["Call", 1, "", ["SystemCall", "stat", {"a": 1}, {}, False, 18]],
    "a timeout as text": ["Call", 1, "", ["Block", 1, "lock", "1.0"]],
}


@pytest.mark.parametrize("fields", FORGED.values(), ids=FORGED.keys())
def test_a_rank_message_of_the_wrong_shape_is_refused(fields: list[Any]) -> None:
    with pytest.raises(plaindata.Untrusted, match="malformed"):
        schema.decode(msgspec.msgpack.encode(fields))


def _framed(message: Any) -> bytes:
    data = plaindata.dumps(message)
    return len(data).to_bytes(8, "big") + data


def test_a_request_about_a_name_that_is_not_utf8_crosses() -> None:
    name = "/shared/" + b"caf\xe9".decode("utf-8", "surrogateescape")
    message = schema.decode(schema.call(1, f"job.py:3 in open {name}", schema.SystemCall("stat", [name], {})))
    assert isinstance(message, schema.Call) and message.request == schema.SystemCall("stat", [name], {})
    assert "\\udce9" in message.where  # a text field: written as its escape
    note = schema.decode(schema.call(1, "", schema.Note("open", name, "ok")))
    assert isinstance(note, schema.Call) and note.request == schema.Note("open", name, "ok")
