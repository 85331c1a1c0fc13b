"""The process carrier's wire (simfs/runtime/carrier/wire.py): messages survive any split into
reads, and what a rank sends the host loads as plain data or not at all."""

from __future__ import annotations

import builtins
import collections
import copyreg
import os
import pickle
import socket
import subprocess
from typing import Any

import numpy as np
import pytest
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


@given(PLAIN)
def test_plain_data_loads_as_itself(value: Any) -> None:
    assert wire.load_untrusted(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) == value


def test_numpy_arrays_and_standard_exceptions_load() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert (wire.load_untrusted(pickle.dumps(array)) == array).all()
    error = wire.load_untrusted(pickle.dumps(FileExistsError(17, "File exists", "/x")))
    assert isinstance(error, FileExistsError) and error.filename == "/x"
    assert wire.load_untrusted(pickle.dumps(collections.OrderedDict(a=1))) == {"a": 1}


class _Runs:
    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args


class _Plain:
    pass


def test_a_handwritten_call_of_os_system_is_refused() -> None:
    # protocol 0, written out: os.system may be simfs's dispatcher in this process, which pickles
    # under another name
    with pytest.raises(wire.Untrusted, match=r"posix\.system"):
        wire.load_untrusted(b"cposix\nsystem\n(S'true'\ntR.")


@pytest.mark.parametrize("forged", [
    _Runs(builtins.eval, "1"), _Runs(subprocess.Popen, ["true"]),
    _Runs(getattr, object, "__subclasses__"), _Runs(copyreg._reconstructor, _Plain, object, None), _Plain(),
    [1, {"nested": _Runs(builtins.exec, "pass")}],
], ids=["eval", "Popen", "getattr", "reconstructor", "a class of the job's", "nested exec"])
def test_anything_else_is_refused_by_name(forged: Any) -> None:
    with pytest.raises(wire.Untrusted):
        wire.load_untrusted(pickle.dumps(forged))


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
