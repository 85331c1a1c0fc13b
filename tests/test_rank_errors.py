"""A rank's exception of a class the host does not load keeps its meaning (simfs/rankerrors.py): its
builtin bases (``except TimeoutError`` catches coord's WaitTimeout), an OSError's errno, strerror
and filename, its module, qualified name, arguments and text, and the rank's traceback, on every
carrier, without any class of the rank's loaded in the host."""

from __future__ import annotations

import builtins
import errno
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import coord
import simfs
from simfs import plaindata

# builtin exception classes a job's class may derive from (every one Python defines)
BUILTIN_ERRORS = sorted((cls for cls in vars(builtins).values()
                         if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception),
                        key=lambda cls: cls.__name__)
# the arguments of the builtin exceptions that require some
REQUIRED: dict[str, list[Any]] = {
    "UnicodeDecodeError": ["utf-8", b"x", 0, 1, "bad"], "UnicodeEncodeError": ["utf-8", "x", 0, 1, "bad"],
    "UnicodeTranslateError": ["x", 0, 1, "bad"], "ExceptionGroup": ["several", [ValueError("one")]],
}
ARGS = st.lists(st.none() | st.integers() | st.text(max_size=20) | st.floats(allow_nan=False), max_size=3)


def _jobs_class(base: type[BaseException]) -> type[BaseException]:
    """A class of the job's own, as its module would define it (plain __init__ of its base)."""
    return type(f"Job{base.__name__}", (base,), {"__module__": "job.errors", "__qualname__": f"Job{base.__name__}"})


def _made(cls: type[BaseException], args: list[Any]) -> BaseException | None:
    try:
        return cls(*args)
    except Exception:  # noqa: BLE001 - arguments its base refuses (UnicodeDecodeError needs five)
        return None


@given(st.sampled_from(BUILTIN_ERRORS), ARGS)
def test_a_jobs_exception_keeps_its_builtin_bases_text_and_arguments(base: type[BaseException],
                                                                     args: list[Any]) -> None:
    error = _made(_jobs_class(base), args)
    if error is None:
        return
    back = plaindata.load(plaindata.dumps(error), records=True)
    assert isinstance(back, simfs.RankError) and isinstance(back, base)
    assert (type(back).__module__, type(back).__qualname__) == ("job.errors", f"Job{base.__name__}")
    assert back.type_name == f"job.errors.Job{base.__name__}"
    assert str(back) == str(error) and list(back.args) == list(error.args)
    if isinstance(error, OSError):
        assert (back.errno, back.strerror, back.filename) == (error.errno, error.strerror, error.filename)
    again = plaindata.load(plaindata.dumps(back), records=True)  # through a second hop (an isolated child's)
    assert type(again) is type(back) and str(again) == str(back)
    assert type(pickle.loads(pickle.dumps(back))) is type(back)


@pytest.mark.parametrize("base", BUILTIN_ERRORS, ids=lambda cls: cls.__name__)
def test_every_builtin_base_is_kept(base: type[BaseException]) -> None:
    """Each builtin exception class, as a job's class's only base (MemoryError's __new__ once refused
    the rebuilt class)."""
    error = _made(_jobs_class(base), REQUIRED.get(base.__name__, []))
    assert error is not None
    back = plaindata.load(plaindata.dumps(error), records=True)
    assert isinstance(back, base) and isinstance(back, simfs.RankError) and str(back) == str(error)


def test_names_that_are_not_builtin_exceptions_are_refused() -> None:
    data = plaindata.dumps(_jobs_class(ValueError)("x"))
    forged = data.replace(b"ValueError", b"SystemExi0")
    with pytest.raises(plaindata.Untrusted, match="bases"):
        plaindata.load(forged, records=True)


class Unreachable(FileNotFoundError):
    """A job's own OSError subclass."""


def _times_out() -> None:
    coord.wait_visible("/shared/never", timeout=5.0)


def _not_found() -> None:
    raise Unreachable(errno.ENOENT, "no such checkpoint", "/shared/ckpt/step-7")


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_a_ranks_timeout_is_a_timeout_error_in_the_result(carrier: str) -> None:
    result = simfs.Cluster(1, 1, carrier=carrier).run(_times_out)
    error = result.errors[0]
    assert isinstance(error, TimeoutError) and isinstance(error, simfs.RankError)
    assert error.type_name == "coord.errors.WaitTimeout" and "/shared/never" in str(error)
    assert "wait_visible" in result.tracebacks[0]


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_a_ranks_oserror_keeps_errno_and_filename(carrier: str) -> None:
    result = simfs.Cluster(1, 1, carrier=carrier).run(_not_found)
    error = result.errors[0]
    assert isinstance(error, FileNotFoundError)
    assert (error.errno, error.strerror, error.filename) == (errno.ENOENT, "no such checkpoint", "/shared/ckpt/step-7")
    assert type(error).__qualname__ == "Unreachable" and type(error).__module__ == __name__
    assert type(error) is not Unreachable  # rebuilt: the rank's class is never loaded in the host
