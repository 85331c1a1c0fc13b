"""Measurements to a simfs Profile: each measured value set on the parameter that models it, with
its source ('measured by simfs probe on HOST at DATE: what'). What was not measured keeps the
simfs default (a coherent local-like mount) and says so in no source."""

from __future__ import annotations

import math
from typing import Any

from simfs import Profile

from .report import AttrLifetimes, Caches, Consistency, Contention, Lag, Locks, ProbeReport, Rates, Stats
from .settings import NO_LAG


def _lag(lags: list[Lag], op: str, mode: str) -> Stats | None:
    return next((lag.lag for lag in lags if lag.op == op and lag.mode == mode), None)


def _fmt(stats: Stats) -> str:
    if stats.p50 is None:
        return f"not seen within the timeout in {stats.n} trials"
    more = f", {stats.not_seen} not seen" if stats.not_seen else ""
    return f"p50 {stats.p50:.3f} s, max {stats.max:.3f} s over {stats.n} trials{more}"


class _Builder:
    """Parameters and their sources, as the measurements come in."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.params: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def set(self, name: str, value: Any, why: str) -> None:
        self.params[name] = value
        self.sources[name] = f"measured by simfs probe {self.where}: {why}"


def _attrs(b: _Builder, lo: str, hi: str, chain: AttrLifetimes | None) -> None:
    if chain is None or not chain.periods:
        return
    first = chain.periods[0] if chain.periods[0] >= NO_LAG else 0.0
    last = max(chain.periods) if first else 0.0
    said = ", ".join(f"{p:.2f}" for p in chain.periods)
    b.set(lo, round(first, 3), f"first lifetime of a {chain.kind}'s cached attributes, {_fmt(chain.first)}")
    bound = "the cap" if chain.capped else "a lower bound (still growing when the probe stopped)"
    b.set(hi, round(max(last, first), 3), f"successive lifetimes {said} s; the longest is {bound}")


def _lookups(b: _Builder, caches: Caches) -> None:
    negative, positive = caches.negative_lifetime, caches.positive_lifetime
    neg = negative.p50 if negative is not None and negative.p50 is not None else 0.0
    pos = positive.p50 if positive is not None and positive.p50 is not None else 0.0
    if negative is None:
        return
    mode = "all" if neg >= NO_LAG else "positive" if pos >= NO_LAG else "none"
    b.set("lookupcache", mode, f"'not found' kept {_fmt(negative)} after the name was made elsewhere"
          + (f"; a removed name kept {_fmt(positive)}" if positive is not None else ""))
    if mode == "none":
        return
    tied = bool(caches.listing_drops_negative)
    b.set("lookup_tied_to_parent", tied, "listing the parent " + ("ended" if tied else "did not end")
          + " a cached 'not found' early")
    if not tied:
        b.set("negative_ttl", round(neg, 3) if neg >= NO_LAG else 0.0, f"'not found' kept {_fmt(negative)}")
        if positive is not None:
            b.set("positive_ttl", round(pos, 3) if pos >= NO_LAG else 0.0, f"a removed name kept {_fmt(positive)}")


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
              "a same-size overwrite within one mtime tick was " + ("seen" if c.same_tick_seen else "never seen"))


def calibrate(*, where: str, lags: list[Lag], caches: Caches, consistency: Consistency | None,
              contention: Contention | None, locks: Locks, rates: Rates, name: str = "probed") -> Profile:
    """The profile the measurements describe; ``where`` names host and date for the sources."""
    b = _Builder(where)
    if caches.file is not None:
        _attrs(b, "acregmin", "acregmax", caches.file)
        _attrs(b, "acdirmin", "acdirmax", caches.dir)
    _lookups(b, caches)
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
    notes = (f"calibrated by simfs probe {where}; parameters without a source keep the simfs default"
             + (f"; mkdir seen by another node {_fmt(fresh)} after it returned" if fresh is not None else ""))
    return Profile(name=name, notes=notes, sources=b.sources, **b.params)


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
