"""What a process that ran rank code sends the host (simfs/plaindata.py): plain data and simfs's
records load as themselves; anything else is refused by name, and the sending side stands in for
it, so nothing a rank made or forged runs code in the host (a canary file checks it)."""

from __future__ import annotations

import builtins
import collections
import copyreg
import os
import pickle
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import scenarios
import simfs
from simfs import plaindata, supervise

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=5), inner,
                                                                                            max_size=4),
    max_leaves=20)


@given(PLAIN)
def test_plain_data_loads_as_itself(value: Any) -> None:
    assert plaindata.load(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) == value


def test_numpy_arrays_and_standard_exceptions_load() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert (plaindata.load(pickle.dumps(array)) == array).all()
    error = plaindata.load(pickle.dumps(FileExistsError(17, "File exists", "/x")))
    assert isinstance(error, FileExistsError) and error.filename == "/x"
    assert plaindata.load(pickle.dumps(collections.OrderedDict(a=1))) == {"a": 1}
    same = plaindata.load(pickle.dumps(shutil.SameFileError("'/a' and '/a' are the same file")))
    assert isinstance(same, shutil.SameFileError) and "same file" in str(same)
    made = uuid.uuid1(node=5, clock_seq=9)
    assert plaindata.load(pickle.dumps(made)) == made


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
    with pytest.raises(plaindata.Untrusted, match=r"posix\.system"):
        plaindata.load(b"cposix\nsystem\n(S'true'\ntR.")


@pytest.mark.parametrize("forged", [
    _Runs(builtins.eval, "1"), _Runs(subprocess.Popen, ["true"]),
    _Runs(getattr, object, "__subclasses__"), _Runs(copyreg._reconstructor, _Plain, object, None), _Plain(),
    [1, {"nested": _Runs(builtins.exec, "pass")}],
], ids=["eval", "Popen", "getattr", "reconstructor", "a class of the job's", "nested exec"])
def test_anything_else_is_refused_by_name(forged: Any) -> None:
    with pytest.raises(plaindata.Untrusted):
        plaindata.load(pickle.dumps(forged))


@given(PLAIN)
def test_plain_data_crosses_unchanged(value: Any) -> None:
    assert plaindata.load(plaindata.dumps(value), records=True) == value


class _Mine(ValueError):
    pass


@given(PLAIN)
def test_what_the_host_would_refuse_crosses_as_its_stand_in(inner: Any) -> None:
    value = {"mine": _Plain(), "error": _Mine("no", inner), "cls": _Plain, "ok": [inner, 1.5],
             "result": simfs.CrashInfo(0, 0, 1.0, "mkdir", "/a", "job.py:3", "power loss")}
    back = plaindata.load(plaindata.dumps(value), records=True)
    assert back["ok"] == [inner, 1.5] and back["result"] == value["result"]
    assert isinstance(back["mine"], simfs.Foreign) and back["mine"].type_name == f"{__name__}._Plain"
    assert back["cls"] == simfs.Foreign(f"{__name__}._Plain", "a class or function")
    assert isinstance(back["error"], simfs.RankError) and back["error"].type_name == f"{__name__}._Mine"
    assert back["error"].message == str(value["error"])


def test_records_load_only_where_the_host_asks_for_them() -> None:
    data = plaindata.dumps(simfs.CrashInfo(0, 0, 1.0, "mkdir", "/a", "job.py:3", "power loss"))
    with pytest.raises(plaindata.Untrusted, match="CrashInfo"):
        plaindata.load(data)


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
