"""Client cache lifetimes (nfstest_cache's methods): how long a 'not found' and a found entry
outlive the change, the lifetimes of cached file and directory attributes and their backoff
(acXXmin doubling up to acXXmax), and the server's timestamp granularity."""

from __future__ import annotations

import itertools
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Literal

from .context import Context
from .lifetime import listing_ends
from .report import AttrLifetimes, Caches, Lag, Stats
from .rounds import Experiment, run_round
from .settings import MAX_LINKS, NO_LAG

OLD_TIME = 1_000_000_000  # the mtime a change sets (2001): visible whatever the server's tick
AGREE = 0.25
"""Two lifetimes within 25% agree (the cap is reached); also where in the next lifetime the change
lands: a quarter of the last one after it started, far from both its ends at 5 ms polling."""

Kind = Literal["file", "dir"]


@dataclass
class AttrChange:
    """The observer caches the attributes of ``root/t``; rank 0 sets its mtime far back."""

    kind: Kind
    delay: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    def prepare(self, root: str) -> None:
        if self.kind == "dir":
            os.mkdir(f"{root}/t")
        else:
            with open(f"{root}/t", "w") as f:
                f.write("x")

    def look(self, root: str) -> None:
        os.stat(f"{root}/t")

    def act(self, root: str) -> None:
        os.utime(f"{root}/t", (OLD_TIME, OLD_TIME))

    def check(self, root: str) -> bool:
        return int(os.stat(f"{root}/t").st_mtime) == OLD_TIME

    def close(self) -> None:
        return None


def _lifetimes(ctx: Context, delays: dict[Kind, float | None]) -> dict[Kind, list[float | None]]:
    """One round of ``trials`` files and directories per kind: the time from each lookup until the
    change showed (None: not within the timeout)."""
    kinds = list(delays)
    experiments: list[Experiment] = [AttrChange(k, delays[k]) for k in kinds for _ in range(ctx.settings.trials)]
    trials = run_round(ctx, "attr", experiments)
    out: dict[Kind, list[float | None]] = {k: [] for k in kinds}
    for i, observed in enumerate(trials):
        out[kinds[i // ctx.settings.trials]] += [t.since_lookup for t in observed]
    return out


def _attr_chains(ctx: Context) -> dict[Kind, AttrLifetimes]:
    """First lifetime over trials, then each next one: change just after the k-th expiry (a
    quarter of the last lifetime after it) and see when the change shows. Files and directories
    share the rounds."""
    kinds: tuple[Kind, ...] = ("file", "dir")
    timeout = ctx.settings.timeout
    round_one = _lifetimes(ctx, dict.fromkeys(kinds))
    ctx.progress.advance()
    firsts = {k: Stats.of(round_one[k]) for k in kinds}
    # a trial not seen within the timeout: the first lifetime is at least the timeout, nothing to follow
    outlived: dict[Kind, float | None] = {k: timeout if firsts[k].not_seen else None for k in kinds}
    periods: dict[Kind, list[float]] = {k: [] if firsts[k].not_seen or (p := firsts[k].p50) is None else [p]
                                        for k in kinds}
    capped = {k: bool(periods[k]) and periods[k][0] < NO_LAG for k in kinds}  # not cached: nothing to follow
    active = {k for k in kinds if periods[k] and not capped[k]}
    for _ in range(MAX_LINKS):
        delays = {k: sum(periods[k]) + AGREE * periods[k][-1] for k in sorted(active)}
        active = {k for k, d in delays.items() if d <= timeout}
        if not active:
            break
        totals = _lifetimes(ctx, {k: delays[k] for k in sorted(active)})
        ctx.progress.advance()
        for k in sorted(active):
            if None in totals[k]:  # not seen within the timeout: this lifetime is at least that long
                outlived[k] = timeout
                active.discard(k)
                continue
            periods[k].append(statistics.median(t for t in totals[k] if t is not None) - sum(periods[k]))
            if abs(periods[k][-1] - periods[k][-2]) <= AGREE * periods[k][-2]:
                capped[k] = True
                active.discard(k)
    return {k: AttrLifetimes(k, firsts[k], periods[k], capped[k], outlived[k]) for k in kinds}


def mtime_granularity(ctx: Context) -> float:
    """Rank 0 rewrites a file until its mtime has moved twice (or the time runs out); the tick is
    the smallest step, or whole seconds when every mtime is one (collective)."""
    ticks = 0.0
    path = ctx.session.path(ctx.session.fresh("mtime"))  # on every rank: names stay in step
    if ctx.actor:
        seen: set[int] = set()
        end = time.monotonic() + ctx.settings.granularity_seconds
        while len(seen) < 3 and time.monotonic() < end:
            with open(path, "w") as f:
                f.write("x")
            seen.add(os.stat(path).st_mtime_ns)
        values = sorted(seen)
        steps = [b - a for a, b in itertools.pairwise(values)]
        if not steps:
            ticks = ctx.settings.granularity_seconds  # never moved: at least this coarse
        elif all(v % 1_000_000_000 == 0 for v in values):
            ticks = 2.0 if all(v % 2_000_000_000 == 0 for v in values) and min(steps) >= 2e9 else 1.0
        else:
            ticks = min(steps) / 1e9 if min(steps) >= 1000 else 0.0
    value: float = ctx.comm.broadcast_object(ticks)
    return value


def _stats(lags: list[Lag], ops: tuple[str, ...], mode: str) -> Stats | None:
    picked = [lag.since_lookup for lag in lags if lag.op in ops and lag.mode == mode]
    if not picked:
        return None
    return Stats(sum(s.n for s in picked), *_merge(picked), not_seen=sum(s.not_seen for s in picked))


def _merge(stats: list[Stats]) -> tuple[float | None, float | None, float | None]:
    """p50, p99 and max across several ops' figures (the worst of each)."""
    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return worst([s.p50 for s in stats]), worst([s.p99 for s in stats]), worst([s.max for s in stats])


def measure(ctx: Context, lags: list[Lag]) -> Caches:
    """Attribute chains and the timestamp tick (a collective), with the lookup-cache lifetimes
    read off the visibility lags."""
    ctx.progress.phase("caches", 2 + MAX_LINKS)
    negative = _stats(lags, ("mkdir", "create", "rename"), "looked")
    listed = _stats(lags, ("mkdir", "create", "rename"), "listed")
    drops = listing_ends(negative, listed, ctx.settings.timeout)
    chains = _attr_chains(ctx) if ctx.cross_node else {}
    granularity = mtime_granularity(ctx)
    ctx.progress.advance(2 + MAX_LINKS)
    return Caches(negative, _stats(lags, ("unlink",), "looked"), drops, chains.get("file"), chains.get("dir"),
                  granularity)
