"""The cluster probe: measure a real shared filesystem from every rank (torch.distributed only
coordinates and timestamps), judge it, and calibrate a simfs profile from it."""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Sequence

import msgspec

from coord import Comm, get_comm

from . import caches, consistency, contention, locks, rates, visibility
from .calibrate import calibrate, profile_from_report, profile_record
from .clock import Clock
from .context import Context, Progress, Silent
from .report import SCHEMA, ProbeReport, read_report, write_report
from .session import ProbeRefused, open_session
from .settings import Settings
from .verdicts import judge

__all__ = ["ProbeRefused", "ProbeReport", "Settings", "probe", "profile_from_report", "read_report", "write_report"]

_CROSS_NODE = ["visibility lags", "lookup and attribute cache lifetimes", "close-to-open", "rename atomicity",
               "EEXIST and ESTALE", "flock and fcntl across nodes"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("simfs")
    except PackageNotFoundError:
        return "unknown"


def probe(path: str | os.PathLike[str], *, paths: Sequence[str] | None = None, settings: Settings | None = None,
          comm: Comm | None = None, progress: Progress | None = None, command: str = "") -> ProbeReport:
    """Probe ``path`` from every rank of ``comm`` (default: torch.distributed's world, or this
    process alone); ``paths[i]``: rank i's own mount point of it. A collective; every rank gets the
    report. Raises ProbeRefused (on every rank) when some rank cannot write there."""
    comm = get_comm(comm)
    settings = settings or Settings.default()
    if paths is not None and len(paths) != comm.world_size:
        raise ValueError(f"--paths names {len(paths)} mount points for {comm.world_size} ranks: give one per rank")
    mount = os.path.abspath(paths[comm.rank] if paths is not None else os.fspath(path))
    progress = progress or Silent()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    wall = time.perf_counter()
    with open_session(comm, mount, settings.timeout) as session:
        progress.phase("clocks", 1)
        clock = Clock.synchronize(comm)
        who = comm.all_gather_object((comm.node, mount, socket.gethostname()))
        observers = [r for r, (node, where, _) in enumerate(who) if (node, where) != who[0][:2]]
        ctx = Context(comm, session, clock, settings, observers, progress)
        lags = visibility.measure(ctx) if ctx.cross_node else []
        found_caches = caches.measure(ctx, lags)
        found_consistency = consistency.measure(ctx) if ctx.cross_node else None
        found_contention = contention.measure(ctx) if comm.world_size > 1 else None
        found_locks = locks.measure(ctx)
        found_rates = rates.measure(ctx)
    hosts = [host for _, _, host in who]
    where = f"at {started} from {', '.join(dict.fromkeys(hosts))} on {os.fspath(path)}"
    profile = calibrate(where=where, timeout=settings.timeout, lags=lags, caches=found_caches,
                        consistency=found_consistency, contention=found_contention, locks=found_locks,
                        rates=found_rates)
    report = ProbeReport(
        schema=SCHEMA, simfs_version=_version(), command=command, started=started,
        wall_time=time.perf_counter() - wall, path=os.fspath(path), paths=[m for _, m, _ in who], hosts=hosts,
        world_size=comm.world_size, nodes=len({node for node, _, _ in who}), observers=observers,
        quick=settings.quick, trials=settings.trials, timeout=settings.timeout,
        clock_uncertainty=clock.uncertainty,
        needs_two_nodes=[] if observers else _CROSS_NODE + (["O_EXCL and makedirs races"] if comm.world_size == 1
                                                           else []),
        visibility=lags, caches=found_caches, consistency=found_consistency, contention=found_contention,
        locks=found_locks, rates=found_rates, verdicts=[], profile=profile_record(profile))
    return msgspec.structs.replace(report, verdicts=judge(report))
