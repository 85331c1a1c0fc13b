"""Judging a run: the property (no rank raised, none hung, no thread died, ``check`` holds) and,
when it fails, its root cause first: the rank that raised in the user's code, not the ranks
that then timed out waiting for it at a collective."""

from __future__ import annotations

import traceback

from simfs import Result
from simfs.report import where_raised

from .outcome import Failure
from .target import Check

# what ranks raise when a peer never arrived: symptoms, reported after a root cause
_SYMPTOMS = ("DistBackendError", "CollectiveMismatch", "WaitTimeout", "TimeoutError")


def _last_time(result: Result, rank: int) -> float:
    times = [e.time for e in result.trace if e.rank == rank]
    return times[-1] if times else 0.0


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def judge(result: Result, check: Check | None, run: int) -> Failure | None:
    """The first failure of the property for one run, or None if it holds."""
    if result.errors:
        rank = min(result.errors, key=lambda r: (type(result.errors[r]).__name__ in _SYMPTOMS,
                                                  _last_time(result, r), r))
        exc = result.errors[rank]
        return Failure(run, rank, "raised", _error_text(exc), where_raised(exc), result.tracebacks.get(rank, ""))
    if result.thread_errors:
        rank = min(result.thread_errors)
        died = result.thread_errors[rank][0]
        return Failure(run, rank, "thread", f"{died}", where_raised(died.error), died.traceback)
    if result.hung:
        rank = min(result.hung)
        info = result.hung[rank]
        return Failure(run, rank, "hung", str(info), getattr(info, "where", ""), "")
    if result.crashed:
        rank = min(result.crashed)
        return Failure(run, rank, "crashed", str(result.crashed[rank]), result.crashed[rank].where, "")
    if check is not None:
        try:
            verdict = check(result)
        except Exception as exc:  # noqa: BLE001  (any exception of the user's check is its verdict)
            return Failure(run, None, "check", _error_text(exc), where_raised(exc),
                           "".join(traceback.format_exception(exc)))
        if verdict is False:
            name = getattr(check, "__qualname__", repr(check))
            return Failure(run, None, "check", f"check {name} returned False", "", "")
    return None
