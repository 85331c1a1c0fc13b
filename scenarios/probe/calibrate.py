"""Measurements to a simfs Profile: each measured value set on the parameter that models it, with
its source ('measured by simfs probe on HOST at DATE: what'). A cache lifetime that outlived the
probe's timeout is set to that lower bound, never to 'not cached', and its source says 'at least'
(LOWER_BOUND) and how to measure it. What was not measured keeps the simfs default (a coherent
local-like mount) and says so in no source."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from simfs import Profile

from .lifetime import Lifetime, first_attr_lifetime, listing_ends, longest_attr_lifetime
from .report import AttrLifetimes, Caches, Consistency, Contention, Lag, Locks, ProbeReport, Rates, Stats
from .settings import rerun_timeout

LOWER_BOUND = "a lower bound"
"""What the source of a parameter set from a lifetime that outlived the timeout says."""


def _lag(lags: list[Lag], op: str, mode: str) -> Lag | None:
    return next((lag for lag in lags if lag.op == op and lag.mode == mode), None)


def _fmt(stats: Stats, timeout: float) -> str:
    if stats.not_seen:
        seen = f"; the others p50 {stats.p50:.3f} s, max {stats.max:.3f} s" if stats.p50 is not None else ""
        return f"not seen within the --timeout of {timeout:g} s in {stats.not_seen} of {stats.n} trials{seen}"
    return f"p50 {stats.p50:.3f} s, max {stats.max:.3f} s over {stats.n} trials"


def _said(life: Lifetime, timeout: float) -> str:
    if not life.lower_bound:
        return str(life)
    return (f"{life}, {LOWER_BOUND} (the probe's --timeout was {timeout:g} s; rerun with --timeout "
            f"{rerun_timeout(timeout):g} to measure it)")


class _Builder:
    """Parameters and their sources, as the measurements come in."""

    def __init__(self, where: str, timeout: float) -> None:
        self.where = where
        self.timeout = timeout
        self.params: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, name: str, value: Any, why: str) -> None:
        self.params[name] = value
        self.sources[name] = f"measured by simfs probe {self.where}: {why}"

    def lifetime(self, name: str, life: Lifetime, what: str) -> None:
        """A cache lifetime: its seconds, 0.0 only when the change was seen at once."""
        self.set(name, life.value, f"{what}: {_said(life, self.timeout)}")


def _attrs(b: _Builder, lo: str, hi: str, chain: AttrLifetimes | None) -> None:
    if chain is None:
        return
    first, longest = first_attr_lifetime(chain, b.timeout), longest_attr_lifetime(chain, b.timeout)
    b.lifetime(lo, first, f"first lifetime of a {chain.kind}'s cached attributes ({_fmt(chain.first, b.timeout)})")
    if not first.cached:
        b.set(hi, 0.0, f"a {chain.kind}'s attributes are not cached: another node's change showed at once")
        return
    said = ", ".join(f"{p:.2f} s" for p in chain.periods) or "none measured"
    b.lifetime(hi, longest, f"longest lifetime of a {chain.kind}'s cached attributes (successive lifetimes: "
                            f"{said}; " + ("the last two agree: the cap)" if chain.capped else "no cap reached)"))


def _lookups(b: _Builder, caches: Caches, lags: list[Lag]) -> None:
    negative, positive = caches.negative_lifetime, caches.positive_lifetime
    neg = Lifetime.of(negative, b.timeout) if negative is not None else None
    if negative is None or neg is None:
        return
    pos = Lifetime.of(positive, b.timeout) if positive is not None else None
    mode = "all" if neg.cached else "positive" if pos is not None and pos.cached else "none"
    b.set("lookupcache", mode, f"'not found' kept after the name was made elsewhere: {_fmt(negative, b.timeout)}"
          + (f"; a removed name kept: {_fmt(positive, b.timeout)}" if positive is not None else ""))
    if mode == "none":
        return
    if mode == "all":
        tied, what = caches.listing_drops_negative is True, "a cached 'not found'"
    else:  # only a removed name was cached: did listing end that early?
        listed = _lag(lags, "unlink", "listed")
        tied = listing_ends(positive, listed.since_lookup if listed is not None else None, b.timeout) is True
        what = "a removed name's cached entry"
    b.set("lookup_tied_to_parent", tied, f"listing the parent {'ended' if tied else 'did not end'} {what} early")
    if tied:
        return
    if mode == "all":
        b.lifetime("negative_ttl", neg, "'not found' kept after the name was made elsewhere")
    if pos is not None:
        b.lifetime("positive_ttl", pos, "a removed name kept after another node removed it")


def _consistency(b: _Builder, c: Consistency, granularity: float) -> None:
    if c.close_to_open is not None:
        b.set("cto", c.close_to_open, "an open right after another node's close read "
              + ("the whole new content" if c.close_to_open else "stale or cut content"))
    b.set("eexist_drops_entry", not c.eexist_stale, f"mkdir after a cached 'not found' gave {c.eexist_errno}; "
          f"isdir right after said {'False (stale)' if c.eexist_stale else 'True'}")
    b.set("unlink_open", "estale" if "ESTALE" in c.rename_over_open else "posix",
          f"a reader holding a file renamed over read: {c.rename_over_open}")
    b.set("rename", "atomic" if not (c.rename_torn or c.rename_missing) else "copy_delete",
          f"{c.rename_reads} reads during renames: {c.rename_torn} torn, {c.rename_missing} missing")
    if c.same_tick and granularity > 0:
        b.set("change_detection", "change_attr" if c.same_tick_seen else "timestamps",
              "a same-size overwrite within one mtime tick was " + ("seen" if c.same_tick_seen else
                                                                    f"not seen within {b.timeout:g} s"))


def calibrate(*, where: str, timeout: float, lags: list[Lag], caches: Caches, consistency: Consistency | None,
              contention: Contention | None, locks: Locks, rates: Rates, name: str = "probed") -> Profile:
    """The profile the measurements describe; ``where`` names host and date for the sources,
    ``timeout`` the probe's --timeout (what a trial not seen waited)."""
    b = _Builder(where, timeout)
    if caches.file is not None:
        _attrs(b, "acregmin", "acregmax", caches.file)
        _attrs(b, "acdirmin", "acdirmax", caches.dir)
    _lookups(b, caches, lags)
    b.set("mtime_granularity", caches.mtime_granularity, "the smallest step of a rewritten file's mtime")
    if consistency is not None:
        _consistency(b, consistency, caches.mtime_granularity)
    if contention is not None:
        one = all(w == 1 for w in contention.excl_winners)
        b.set("exclusive_create", "atomic" if one else "racy",
              f"O_EXCL raced by {contention.ranks} ranks: winners per trial {contention.excl_winners}")
    if locks.flock_scope is not None:
        b.set("flock", locks.flock_scope, f"a second flock holder was refused on the same node: "
              f"{locks.flock_same_node}, on another node: {locks.flock_cross_node}")
    b.set("rpc_latency", round(rates.create_latency, 6), "median seconds per file create on one rank")
    if rates.write_mb_s_total > 0:
        b.set("bandwidth", rates.write_mb_s_total * 1e6, "aggregate sequential write bandwidth, bytes/s")
    b.set("capacity", rates.capacity, "statvfs: f_blocks x f_frsize")
    fresh = _lag(lags, "mkdir", "fresh")
    bounded = lower_bounds(b.sources)
    notes = (f"calibrated by simfs probe {where}; parameters without a source keep the simfs default"
             + (f"; mkdir seen by another node {_fmt(fresh.lag, timeout)} after it returned" if fresh else "")
             + (f"; lower bounds (outlived the --timeout of {timeout:g} s): {', '.join(bounded)}" if bounded else ""))
    return Profile(name=name, notes=notes, sources=b.sources, **b.params)


def lower_bounds(sources: Mapping[str, str]) -> list[str]:
    """The parameters of a calibrated profile's ``sources`` set from a lifetime that outlived the
    probe's timeout."""
    return [k for k, text in sources.items() if LOWER_BOUND in text]


def profile_record(profile: Profile) -> dict[str, Any]:
    """The profile as JSON-safe data for the report (infinities as the string 'inf')."""
    out: dict[str, Any] = {k: ("inf" if isinstance(v, float) and math.isinf(v) else v)
                           for k, v in profile.to_dict().items()}
    out["sources"] = dict(profile.sources)
    return out


def profile_from_report(report: ProbeReport) -> Profile:
    """The calibrated profile a report holds."""
    record = dict(report.profile)
    sources = record.pop("sources", {})
    params = {k: (math.inf if v == "inf" else v) for k, v in record.items()}
    return Profile.from_dict({**params, "sources": sources}, source="probe report")
