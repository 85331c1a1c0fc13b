"""What a measured cache lifetime says once the probe's timeout is taken into account: a value, a
lower bound (some trial outlived the timeout), or no caching at all. Every verdict, table row and
profile parameter reads a lifetime through here, so that a change not seen within the timeout is
never taken for 'not cached'."""

from __future__ import annotations

from dataclasses import dataclass

from .report import AttrLifetimes, Stats
from .settings import NO_LAG


@dataclass(frozen=True)
class Lifetime:
    """``seconds`` a cache kept a stale answer; ``lower_bound``: some trial was not seen within
    the timeout, so the cache lives at least ``seconds`` (the timeout) and maybe longer."""

    seconds: float
    lower_bound: bool = False

    @classmethod
    def of(cls, stats: Stats, timeout: float) -> Lifetime | None:
        """The median over the trials, or 'at least ``timeout``' when any trial hit it (a trial
        not seen waited at least the timeout); None for a measurement without trials."""
        if stats.not_seen:
            return cls(timeout, lower_bound=True)
        if stats.p50 is None:
            return None
        return cls(stats.p50)

    @property
    def cached(self) -> bool:
        """The cache kept a stale answer longer than scheduling noise (a lower bound always did)."""
        return self.lower_bound or self.seconds >= NO_LAG

    @property
    def value(self) -> float:
        """Seconds for a profile parameter: 0.0 only for a change seen at once."""
        return round(self.seconds, 3) if self.cached else 0.0

    def __str__(self) -> str:
        return f"at least {self.seconds:g} s" if self.lower_bound else f"{self.seconds:.2f} s"


def outlived(chain: AttrLifetimes, timeout: float) -> float | None:
    """Seconds the lifetime after the last of ``periods`` (the first, when there is none) lasted
    at least, not seen within the timeout; None: the chain ended otherwise. (A report written
    before ``next_at_least`` existed says so by an empty ``periods`` alone.)"""
    if chain.next_at_least is not None:
        return chain.next_at_least
    return None if chain.periods else timeout


def first_attr_lifetime(chain: AttrLifetimes, timeout: float) -> Lifetime:
    """The first lifetime of cached attributes (acXXmin): measured, or at least what outlived
    the timeout."""
    first = outlived(chain, timeout) if not chain.periods else None
    return Lifetime(chain.periods[0]) if first is None else Lifetime(first, lower_bound=True)


def longest_attr_lifetime(chain: AttrLifetimes, timeout: float) -> Lifetime:
    """The longest lifetime of cached attributes (acXXmax): the cap when the chain reached it,
    else a lower bound: the longest seen, or the one that outlived the timeout."""
    if chain.capped:
        return Lifetime(max(chain.periods))
    last = outlived(chain, timeout)
    return Lifetime(max([*chain.periods, *([] if last is None else [last])]), lower_bound=True)


def listing_ends(kept: Stats | None, listed: Stats | None, timeout: float) -> bool | None:
    """Listing the parent before each check ended a cached lookup early: ``listed`` (the same
    changes watched that way) took under half of ``kept``. None: nothing was cached to end."""
    cached = Lifetime.of(kept, timeout) if kept is not None else None
    if cached is None or not cached.cached or listed is None:
        return None
    after_listing = Lifetime.of(listed, timeout)
    return after_listing is not None and not after_listing.lower_bound and after_listing.seconds < cached.seconds / 2
