"""Rank programs for the probe tests, run on real gloo processes by ``_procs.run_procs`` (spawned:
module-level functions of an importable module)."""

from __future__ import annotations

import os
import time

import coord
from scenarios.probe import ProbeReport, Settings, probe


def probe_quick(path: str, paths: list[str] | None, trials: int | None = None,
                timeout: float | None = None) -> ProbeReport:
    """``simfs probe PATH --quick [--timeout S]`` on this rank, as the library call."""
    return probe(path, paths=paths, settings=Settings.quick_mode(trials=trials, timeout=timeout))


def probe_failing(path: str, failing_rank: int) -> str:
    """The probe with its consistency phase raising on ``failing_rank`` (a node that fails
    mid-probe); the others' collectives break. What this rank raised, by type."""
    from scenarios.probe import consistency

    def broken(ctx: object) -> None:
        raise OSError("injected failure")

    if coord.get_comm().rank == failing_rank:
        consistency.measure = broken  # type: ignore[assignment]
    try:
        probe(path, settings=Settings.quick_mode())
    except (OSError, RuntimeError) as exc:
        return type(exc).__name__
    return "finished"


def wait_for_directory(mounts: list[str], name: str, timeouts: list[float]) -> list[str]:
    """Rank 0 creates ``name`` after rank 1 looked it up; rank 1 polls for it with each timeout
    in turn (a fresh name each time): 'seen' or 'timed out' per timeout, on rank 1."""
    comm = coord.get_comm()
    root = os.path.join(mounts[comm.rank], name)
    if comm.rank == 0:
        os.mkdir(root)
    comm.barrier()
    out = []
    for i, limit in enumerate(timeouts):
        path = os.path.join(root, str(i))
        if comm.rank == 1:
            os.path.exists(path)
        comm.barrier()
        if comm.rank == 0:
            os.mkdir(path)
        comm.barrier()
        if comm.rank == 1:
            deadline = time.monotonic() + limit
            while not os.path.isdir(path) and time.monotonic() < deadline:
                time.sleep(0.01)
            out.append("seen" if os.path.isdir(path) else "timed out")
        comm.barrier()
    return out
