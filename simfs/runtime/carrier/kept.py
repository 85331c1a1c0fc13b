"""Which zygote a run's rank processes are forked from: a new one for the run, or the one kept
for a series of runs of known jobs (``zygote_kept``: a search's examples, each a run of the job
and one of the restarted job). A kept zygote is forked at the series' first run, from the thread
that opened the series (it dies with that thread, PR_SET_PDEATHSIG), and forked again when it
ended, when a run's world is torch's c10d and the zygote's is not or the other way (such a zygote
made c10d's part that every rank installs alike: rank/libsetup.premake_c10d), when the Landlock
ruleset its ranks confine themselves with changed (modules imported from a new place), or when
the host preloaded more since (torch, after the first run's ranks imported it themselves:
preload.py); the series' end closes it and the ruleset, so the host is then as it was."""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from ...confinement import descriptors, prepared_descriptors
from ...confinement.confine import prepare as prepare_confinement
from ...confinement.confine import prepared_key
from ...confinement.confine import release as release_confinement
from ...rank import libsetup
from ...rank import main as rank_side
from .outbox import rank_outbox
from .preload import imports, prepare_c10d
from .zygote import Launch, Launched, Zygote

Job = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # a job and its arguments


class _Series:
    """The zygote of a series, and what it was forked with."""

    def __init__(self, jobs: tuple[Job, ...]) -> None:
        self.jobs = jobs
        self.zygote: Zygote | None = None
        self.native = False  # its ranks run torch's c10d (rank/libsetup.premake_c10d)
        self.ruleset: object = None  # confine.prepared_key() when it was forked
        self.preloaded = -1  # preload.imports() when it was forked

    def zygote_for(self, job: Callable[..., Any], native: bool) -> tuple[Zygote, int] | None:
        index = next((i for i, (known, _, _) in enumerate(self.jobs) if known is job), None)
        if index is None:
            return None
        if self.zygote is None or self.native != native or self.ruleset != prepared_key() or \
                self.preloaded != imports() or not self.zygote.alive():
            self.close()
            self.zygote, self.native = fork(self.jobs, native), native
            self.ruleset, self.preloaded = prepared_key(), imports()
        return self.zygote, index

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None


_local = threading.local()  # .series: the _Series open in this thread, or None


@contextmanager
def zygote_kept(*jobs: Callable[..., Any]) -> Iterator[None]:
    """The process-carrier runs of this block (in this thread) that run one of ``jobs`` with no
    arguments fork their ranks from one zygote (the others from their own); blocks nest (the
    outer one's jobs count)."""
    if getattr(_local, "series", None) is not None:
        yield
        return
    series = _local.series = _Series(tuple((job, (), {}) for job in jobs))
    try:
        yield
    finally:
        _local.series = None
        series.close()
        release_confinement()


def zygote_for(job: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               native: bool) -> tuple[Zygote, int, bool]:
    """The zygote to fork a run's ranks from (``native``: the run's world is torch's c10d), the
    index of its job among the zygote's, and whether the run owns it (closes it, and the ruleset,
    at its end)."""
    series: _Series | None = getattr(_local, "series", None)
    found = series.zygote_for(job, native) if series is not None and not args and not kwargs else None
    if found is not None:
        return (*found, False)
    return fork(((job, args, kwargs),), native), 0, True


def fork(jobs: tuple[Job, ...], native: bool) -> Zygote:
    """A zygote that starts rank processes of ``jobs``; it keeps the prepared ruleset, and where
    modules hold c10d's names, both found again here for the modules imported by now: each rank
    then finds them made. Else every rank looked through every module again, whenever the host had
    imported one since the run's preparation (the interception's install imports some): as it
    confined itself, ~17 ms and 3,400 pages copied a rank; as it installed c10d, 3-8 ms."""
    prepare_c10d()
    prepare_confinement()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return Zygote.fork(prepared_descriptors(), _launcher(jobs), functools.partial(_prepare_zygote, native))


def _prepare_zygote(native: bool) -> None:
    """In the zygote, before its forks: what each rank process would find alike at its start."""
    descriptors.find_console_handlers()
    libsetup.premake_c10d(native)


def _launcher(jobs: tuple[Job, ...]) -> Launch:
    def launch(new: Launched) -> NoReturn:
        fd, stacks, out_w, err_w, own = new.descriptors
        job, args, kwargs = jobs[new.job]
        rank_side.main(fd, stacks, (out_w, err_w), rank_outbox(new.rank, own, new.outboxes), new.start, job, args,
                       kwargs, parent=new.zygote, memory=new.memory)
    return launch
