"""What a process that ran rank code sends the host (simfs/plaindata.py): msgpack whose values
the host rebuilds by rules of its own, never pickle. Plain data and simfs's records load as
themselves; anything else is refused by name, and the sending side stands in for it, so nothing a
rank made or forged runs code in the host (a canary file checks it)."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import math
import os
import pickle
import shutil
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scenarios
import simfs
from simfs import plaindata, supervise
from simfs.plaindata import Ext

HASHABLE = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
PLAIN = st.recursive(
    HASHABLE | st.complex_numbers(allow_nan=False) | st.datetimes() | st.decimals(allow_nan=False)
    | st.fractions() | st.uuids(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner,
                                                                                            max_size=4)
    | st.dictionaries(HASHABLE, inner, max_size=3) | st.frozensets(HASHABLE, max_size=3)
    | st.builds(collections.OrderedDict, st.dictionaries(st.integers(), inner, max_size=3)),
    max_leaves=20)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (a tuple is not a list here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(PLAIN)
def test_plain_data_crosses_unchanged(value: Any) -> None:
    assert _same(plaindata.load(plaindata.dumps(value)), value)


@given(st.integers(min_value=-(2**4000), max_value=2**4000))
def test_integers_of_any_size_cross(value: int) -> None:
    assert plaindata.load(plaindata.dumps(value)) == value


STANDARD = [
    collections.deque([1, (2, 3)], maxlen=5), range(2, 9, 3), slice(1, None, "x"), bytearray(b"ab"), {1, 2},
    datetime.date(2026, 1, 2), datetime.time(3, 4, 5, 6), datetime.timedelta(days=1, seconds=2),
    datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=2), "X")),
    decimal.Decimal("1.25"), fractions.Fraction(3, 7), Path("/a/b"), PurePosixPath("c"),
    uuid.uuid1(node=5, clock_seq=9), os.stat_result(tuple(range(10))), os.uname(), float("inf"),
]


@pytest.mark.parametrize("value", STANDARD, ids=[type(v).__name__ for v in STANDARD])
def test_standard_values_cross_unchanged(value: Any) -> None:
    back = plaindata.load(plaindata.dumps(value))
    assert type(back) is type(value) and back == value
    if isinstance(value, collections.deque):
        assert back.maxlen == value.maxlen


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "float32", "complex128", "S3", "U2"])
def test_numpy_arrays_and_scalars_cross_as_dtype_shape_and_bytes(dtype: str) -> None:
    array = np.arange(6).astype(dtype).reshape(2, 3)[:, ::2]  # not contiguous
    back = plaindata.load(plaindata.dumps(array))
    assert back.dtype == array.dtype and back.shape == array.shape and (back == array).all()
    assert back.flags.writeable and back.flags.owndata
    scalar = array[0, 1]
    again = plaindata.load(plaindata.dumps(scalar))
    assert type(again) is type(scalar) and again == scalar


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "uint8", "bool", "complex64"])
def test_tensors_cross_as_dtype_shape_and_bytes(dtype: str) -> None:
    import torch

    tensor = torch.arange(12).to(getattr(torch, dtype)).reshape(3, 4)[:, ::2]  # not contiguous
    back = plaindata.load(plaindata.dumps({"t": tensor, "empty": tensor[:0],
                                           "parameter": torch.nn.Parameter(torch.ones(2))}))
    assert back["t"].dtype == tensor.dtype and torch.equal(back["t"], tensor)
    assert back["empty"].shape == (0, 2) and torch.equal(back["parameter"], torch.ones(2))


def test_standard_exceptions_cross_with_their_fields() -> None:
    error = plaindata.load(plaindata.dumps(FileExistsError(17, "File exists", "/x")))
    assert isinstance(error, FileExistsError) and (error.errno, error.strerror, error.filename) == (17, "File exists",
                                                                                                     "/x")
    same = plaindata.load(plaindata.dumps(shutil.SameFileError("'/a' and '/a' are the same file")))
    assert isinstance(same, shutil.SameFileError) and "same file" in str(same)
    noted = KeyError("k")
    noted.add_note("while loading")
    back = plaindata.load(plaindata.dumps(noted))
    assert isinstance(back, KeyError) and back.__notes__ == ["while loading"]


def _message(code: int, fields: Any) -> bytes:
    return msgspec.msgpack.encode(Ext(code, msgspec.msgpack.encode(fields)))


FORGED = {
    # the escape of issue 29: an object array whose "pointers" are bytes the rank wrote
    "object array": _message(plaindata.NDARRAY, ["|O", [1], b"\x00" * 8]),
    "structured array": _message(plaindata.NDARRAY, ["[('a', 'O')]", [1], b"\x00" * 8]),
    "short array": _message(plaindata.NDARRAY, ["<f8", [4], b"\x00" * 8]),
    "negative shape": _message(plaindata.NDARRAY, ["<f8", [-1], b""]),
    "object scalar": _message(plaindata.NPSCALAR, ["|O", b"\x00" * 8]),
    "a tensor of an unknown dtype": _message(plaindata.TENSOR, ["qint8", [1], b"\x00"]),
    "a short tensor": _message(plaindata.TENSOR, ["float64", [2], b"\x00" * 8]),
    "os.system as an exception": _message(plaindata.EXCEPTION, ["posix", "system", ["true"], {}]),
    "eval as an exception": _message(plaindata.EXCEPTION, ["builtins", "eval", ["1"], {}]),
    "a dotted name": _message(plaindata.EXCEPTION, ["builtins", "ValueError.__init__", [], {}]),
    "os.system as a builder": _message(plaindata.CALL, ["os", "system", ["true"]]),
    "os.system as a value": _message(plaindata.OBJECT, ["os", "system"]),
    "an unregistered record": _message(plaindata.RECORD, ["collections", "Counter", []]),
    "an unknown tag": _message(99, []),
    "a path class": _message(plaindata.PATH, ["WindowsPath", "c:"]),
    "a pickle": pickle.dumps(collections.Counter()),
    "truncated": msgspec.msgpack.encode([1, 2, 3])[:-1],
    "an odd dict": _message(plaindata.DICT, [1]),
}


@pytest.mark.parametrize("data", FORGED.values(), ids=FORGED.keys())
def test_a_forged_message_is_refused(data: bytes) -> None:
    with pytest.raises(plaindata.Untrusted):
        plaindata.load(data, records=True)


def test_nesting_is_bounded_on_both_sides() -> None:
    deep: Any = ()
    for _ in range(plaindata.MAX_DEPTH + 5):
        deep = (deep,)
    with pytest.raises(plaindata.Untrusted, match="deeper"):
        plaindata.dumps(deep)
    data = msgspec.msgpack.encode([])
    for _ in range(plaindata.MAX_DEPTH + 5):
        data = msgspec.msgpack.encode(Ext(plaindata.TUPLE, msgspec.msgpack.encode([Ext(plaindata.TUPLE, data)])))
    with pytest.raises(plaindata.Untrusted, match="deeper"):
        plaindata.load(data)


class _Plain:
    pass


class _Mine(ValueError):
    pass


@given(PLAIN)
def test_what_the_host_would_refuse_crosses_as_its_stand_in(inner: Any) -> None:
    value = {"mine": _Plain(), "error": _Mine("no", inner), "cls": _Plain, "ok": [inner, 1.5],
             "result": simfs.CrashInfo(0, 0, 1.0, "mkdir", "/a", "job.py:3", "power loss"),
             "objects": np.array([_Plain()], dtype=object), "nan": math.nan}
    back = plaindata.load(plaindata.dumps(value), records=True)
    assert _same(back["ok"], [inner, 1.5]) and back["result"] == value["result"]
    assert isinstance(back["mine"], simfs.Foreign) and back["mine"].type_name == f"{__name__}._Plain"
    assert back["cls"] == simfs.Foreign(f"{__name__}._Plain", "a class or function")
    assert isinstance(back["error"], simfs.RankError) and back["error"].type_name == f"{__name__}._Mine"
    assert back["error"].message == str(value["error"]) and isinstance(back["error"], ValueError)
    assert isinstance(back["objects"], simfs.Foreign) and back["objects"].type_name == "numpy.ndarray"
    assert math.isnan(back["nan"])


def test_records_load_only_where_the_host_asks_for_them() -> None:
    data = plaindata.dumps(simfs.CrashInfo(0, 0, 1.0, "mkdir", "/a", "job.py:3", "power loss"))
    with pytest.raises(plaindata.Untrusted, match="CrashInfo"):
        plaindata.load(data)


def test_a_profile_crosses_through_its_registered_builder() -> None:
    profile = simfs.profiles.get("nfs")
    assert plaindata.load(plaindata.dumps(profile), records=True) == profile


class _Touches:
    """Pickles as a call that creates ``path``: run anywhere but in a confined process, the
    canary appears."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return os.system, (f"touch {self.path}",)


def _touching_error(path: str) -> BaseException:
    error = RuntimeError("carries a canary")
    error.canary = _Touches(path)  # type: ignore[attr-defined]
    return error


def test_a_value_the_isolated_call_returns_runs_nothing_here(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    back = simfs.isolated(_Touches, str(canary))
    assert isinstance(back, simfs.Foreign) and back.type_name.endswith("_Touches")
    assert not canary.exists()


def _forge(path: str) -> None:
    """Code in the isolated child replaces simfs's sender with pickle's own."""
    supervise.plaindata.dumps = lambda message: pickle.dumps(("value", _Touches(path), None))


def test_a_forged_message_from_the_isolated_child_runs_nothing_here(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    with pytest.raises(simfs.ChildFailed, match="does not load"):
        simfs.isolated(_forge, str(canary))
    assert not canary.exists()


def _evil_job(path: str) -> Any:
    return {"value": _Touches(path)}


def _evil_raise(path: str) -> None:
    raise _touching_error(path)


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_what_ranks_return_or_raise_in_a_search_runs_nothing_here(tmp_path: Path, carrier: str) -> None:
    canary = str(tmp_path / "canary")
    returned = scenarios.explore(lambda: _evil_job(canary), nodes=1, ranks_per_node=1, profile="local",
                                 max_examples=1, carrier=carrier)
    raised = scenarios.explore(lambda: _evil_raise(canary), nodes=1, ranks_per_node=1, profile="local",
                               max_examples=1, carrier=carrier)
    assert not os.path.exists(canary)
    assert not returned.failed and raised.failed, (returned, raised)
    assert isinstance(returned.results[0].returns[0]["value"], simfs.Foreign)
    error = raised.results[0].errors[0]
    assert isinstance(error, RuntimeError) and str(error) == "carries a canary"


def test_text_that_is_not_utf8_crosses_as_itself() -> None:
    """A name os.listdir decoded with surrogateescape (a file named in Latin-1), as text, in a
    list, as a key and in an exception's filename."""
    name = b"caf\xe9".decode("utf-8", "surrogateescape")
    value = {"name": name, "names": [name, "plain"], name: 1, "error": FileNotFoundError(2, "No such file", name)}
    back = plaindata.load(plaindata.dumps(value))
    assert back["name"] == name and back["names"] == [name, "plain"] and back[name] == 1
    assert back["error"].filename == name


def test_every_builtin_container_and_scalar_is_loadable() -> None:
    for cls in (type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset, complex):
        assert plaindata.loadable(cls), cls
