"""What simfs reads from the real machine on a rank's behalf: source lines for tracebacks come from
the real disk (never from the simulated one, never as simulated operations), so a traceback
formatted inside a rank shows its lines, and two runs in one process trace the same."""

from __future__ import annotations

import linecache
import traceback

import simfs


def failing_job() -> str:
    try:
        raise RuntimeError("boom")  # this line must appear in the traceback
    except RuntimeError:
        return traceback.format_exc()


def test_a_traceback_formatted_in_a_rank_shows_its_source_lines() -> None:
    result = simfs.Cluster().run(failing_job)
    assert 'raise RuntimeError("boom")  # this line must appear in the traceback' in result.returns[0]
    assert not [e for e in result.trace if e.path.endswith(".py")], "source lookups became simulated operations"


def test_two_runs_in_one_process_trace_the_same_whatever_linecache_holds() -> None:
    """Before: a rank's linecache lookups went through the simulation, so whether the host had
    cached a file decided what the rank did (and traced)."""
    linecache.clearcache()
    first = simfs.Cluster(seed=1).run(failing_job)
    linecache.getlines(__file__)  # the host caches this file now
    second = simfs.Cluster(seed=1).run(failing_job)
    assert first.returns == second.returns
    assert [tuple(e)[1:] for e in first.trace] == [tuple(e)[1:] for e in second.trace]
