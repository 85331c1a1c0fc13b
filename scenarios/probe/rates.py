"""fsync latency, metadata operations per second (mdtest-like: create, stat, unlink of many
empty files per rank) and sequential bandwidth (IOR-like: 1 MiB transfers, write + fsync, then
each rank reads another rank's file), per rank and aggregate, each bounded."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from .context import Context
from .report import Rates, Stats

TRANSFER = 1 << 20  # IOR's common transfer size


def _fsyncs(path: str, count: int) -> list[float | None]:
    out: list[float | None] = []
    block = b"x" * 4096
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            out.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return out


def _timed(ctx: Context, action: Callable[[], int]) -> tuple[int, float]:
    """Every rank runs ``action`` from a barrier; (units done here, seconds here)."""
    ctx.comm.barrier()
    start = time.perf_counter()
    done = action()
    return done, time.perf_counter() - start


def _metadata(ctx: Context, folder: str) -> dict[str, tuple[int, float]]:
    names = [os.path.join(folder, f"f{i}") for i in range(ctx.settings.metadata_files)]

    def create() -> int:
        for name in names:
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
        return len(names)

    def stat() -> int:
        for name in names:
            os.stat(name)
        return len(names)

    def unlink() -> int:
        for name in names:
            os.unlink(name)
        return len(names)

    return {"create": _timed(ctx, create), "stat": _timed(ctx, stat), "unlink": _timed(ctx, unlink)}


def _write(path: str, size: int, seconds: float) -> int:
    block, done, end = os.urandom(TRANSFER), 0, time.monotonic() + seconds
    with open(path, "wb") as f:
        while done < size and time.monotonic() < end:
            f.write(block)
            done += TRANSFER
        f.flush()
        os.fsync(f.fileno())
    return done


def _read(path: str, seconds: float) -> int:
    done, end = 0, time.monotonic() + seconds
    with open(path, "rb", buffering=0) as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # no pages left from a local write
        while time.monotonic() < end:
            chunk = f.read(TRANSFER)
            if not chunk:
                break
            done += len(chunk)
    return done


def _aggregate(results: list[tuple[int, float]]) -> float:
    """All units over the slowest rank's time (io500's aggregate rates)."""
    slowest = max(seconds for _, seconds in results)
    return sum(units for units, _ in results) / slowest if slowest > 0 else 0.0


def measure(ctx: Context) -> Rates:
    """Every rank in its own directory (a collective)."""
    ctx.progress.phase("rates", 3)
    name = ctx.session.fresh("rates")
    if ctx.actor:
        os.mkdir(ctx.session.path(name))
    ctx.comm.barrier()
    mine = ctx.session.path(name, f"rank{ctx.rank}")
    os.mkdir(mine)
    fsync = [v for row in ctx.comm.all_gather_object(_fsyncs(os.path.join(mine, "fsync"), ctx.settings.fsyncs))
             for v in row]
    ctx.progress.advance()
    meta = ctx.comm.all_gather_object(_metadata(ctx, mine))
    ctx.progress.advance()
    s = ctx.settings
    wrote = _timed(ctx, lambda: _write(os.path.join(mine, "data"), s.bandwidth_bytes, s.bandwidth_seconds))
    ctx.comm.barrier()
    other = ctx.session.path(name, f"rank{(ctx.rank + 1) % ctx.comm.world_size}", "data")
    read = _timed(ctx, lambda: _read(other, s.bandwidth_seconds))
    writes, reads = ctx.comm.all_gather_object(wrote), ctx.comm.all_gather_object(read)
    ctx.progress.advance()
    vfs = os.statvfs(ctx.session.root)
    return Rates(
        fsync=Stats.of(fsync),
        create_per_s=_aggregate([m["create"] for m in meta]),
        stat_per_s=_aggregate([m["stat"] for m in meta]),
        unlink_per_s=_aggregate([m["unlink"] for m in meta]),
        create_latency=statistics.median(m["create"][1] / max(m["create"][0], 1) for m in meta),
        write_mb_s=[units / seconds / 1e6 for units, seconds in writes],
        read_mb_s=[units / seconds / 1e6 for units, seconds in reads],
        write_mb_s_total=_aggregate(writes) / 1e6,
        read_mb_s_total=_aggregate(reads) / 1e6,
        capacity=float(vfs.f_blocks * vfs.f_frsize),
    )
