"""Which operation of a counterexample's trace failed, and how to name it."""

from __future__ import annotations

import errno
import re
from collections.abc import Sequence

from ..outcome import Event, Failure


def failing_event(trace: Sequence[Event], failure: Failure | None) -> Event | None:
    """The operation where ``failure`` happened: of its run and rank, the last one whose outcome
    is the errno its error names (on the path it names, if any), else that rank's last one (a
    sleep is no operation)."""
    if failure is None or failure.rank is None:
        return None
    mine = [e for e in trace if e.run == failure.run and e.rank == failure.rank and e.op != "sleep"]
    name = _errno_named(failure.error)
    matching = [e for e in mine if name and errno_of(e.outcome) == name]
    on_path = [e for e in matching if e.path and repr(e.path) in failure.error]
    for candidates in (on_path, matching, mine):
        if candidates:
            return candidates[-1]
    return None


def _errno_named(error: str) -> str | None:
    """'EEXIST' for "FileExistsError: [Errno 17] File exists: ..." (or an errno name in it)."""
    number = re.search(r"\[Errno (\d+)\]", error)
    if number:
        return errno.errorcode.get(int(number.group(1)))
    return next((word for word in re.findall(r"\bE[A-Z0-9]+\b", error) if hasattr(errno, word)), None)


def errno_of(outcome: str) -> str | None:
    """'ENOENT' for the outcome 'ENOENT (stale: ...)', None for 'ok' or 'arrived'."""
    first = outcome.split(" ", 1)[0]
    return first if first.startswith("E") and hasattr(errno, first) else None


def describe(event: Event) -> str:
    """'mkdir /shared/trace → EEXIST'."""
    return " ".join(part for part in (event.op, event.path, "→", event.outcome) if part)


def failing_label(event: Event, failure: Failure | None) -> str:
    """'rank 1: mkdir /shared/trace → EEXIST'; when the operation is only the rank's last before
    it raised, the exception follows: 'rank 1: close /shared/ckpt/latest → ok, then JSONDecodeError'."""
    text = f"rank {event.rank}: {describe(event)}"
    if failure is None or failure.kind not in ("raised", "thread"):
        return text
    named = _errno_named(failure.error)
    if named is not None and named == errno_of(event.outcome):
        return text
    name = failure.error.split(":", 1)[0].rsplit(".", 1)[-1]
    return f"{text}, then {name}" if name.isidentifier() else text
