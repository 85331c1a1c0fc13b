"""Every rank racing for one name: O_CREAT|O_EXCL must have exactly one winner, and
os.makedirs(exist_ok=True) must not raise (CPython re-raises EEXIST when isdir() then says no)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from .context import Context
from .report import Contention

Outcome = tuple[bool, str | None]  # (counted, the errno name of a failure other than EEXIST)


def _failure(exc: OSError) -> str | None:
    return None if exc.errno == errno.EEXIST else errno.errorcode.get(exc.errno or 0, str(exc))


def _excl(path: str) -> Outcome:
    """(won, how it lost otherwise)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError as exc:
        return False, _failure(exc)
    return True, None


def _makedirs_raises(path: str) -> Outcome:
    """(raised FileExistsError, what else it raised)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return exc.errno == errno.EEXIST, _failure(exc)
    return False, None


def _race(ctx: Context, label: str, attempt: Callable[[str], Outcome], *parts: str) -> tuple[list[int], list[str]]:
    """``trials`` races: rank 0 makes a fresh directory, every rank looks the name up (caching
    'not found' where the client does), then all attempt at once; how many counted each time,
    and the other errors seen."""
    counts, errors = [], []
    for _ in range(ctx.settings.trials):
        name = ctx.session.fresh(label)
        if ctx.actor:
            os.mkdir(ctx.session.path(name))
        ctx.comm.barrier()
        target = ctx.session.path(name, *parts)
        os.path.exists(target)
        ctx.comm.barrier()
        outcomes = ctx.comm.all_gather_object(attempt(target))
        counts.append(sum(counted for counted, _ in outcomes))
        errors += [error for _, error in outcomes if error is not None]
        ctx.progress.advance()
    return counts, sorted(set(errors))


def measure(ctx: Context) -> Contention:
    """Both races, ``trials`` times each (a collective)."""
    ctx.progress.phase("contention", 2 * ctx.settings.trials)
    winners, excl_errors = _race(ctx, "excl", _excl, "x")
    raised, makedirs_errors = _race(ctx, "makedirs", _makedirs_raises, "x", "y")
    return Contention(ctx.comm.world_size, ctx.settings.trials, winners, excl_errors, ctx.settings.trials,
                      sum(raised), makedirs_errors)
