"""``simfs probe`` on a real lagging network filesystem: two sshfs mounts of one directory over
loopback (rank 0 on one, rank 1 on the other) with distinct FUSE cache timeouts. sshfs's own
cache is off (``cache=no``) so that the kernel's FUSE timeouts are the only caches, and each
measurement must find the timeout that governs it within 25%:

* a 'not found' (mkdir/create/rename after the observer's lookup) lives ``negative_timeout``;
* a removed name and cached attributes live ``entry_timeout`` (FUSE revalidates a dentry whose
  entry expired with a LOOKUP, which brings fresh attributes: here ``attr_timeout`` >= entry);
* the lifetimes are fixed (no backoff) and listing the parent does not end a 'not found'.

Then the emitted profile, loaded into simfs, must give the same verdict as the real mounts for
"rank 0 creates a directory, the other node waits for it with a timeout", below and above the lag.

And on mounts whose caches outlive the probe's ``--timeout``: every lifetime is reported and
calibrated as a lower bound ('at least'), never as 'not cached', and a wait shorter than the lag
fails in simfs as it does on the real mounts.
"""

from __future__ import annotations

import os

import pytest

import simfs
from _probe_jobs import probe_quick, wait_for_directory
from _procs import run_procs
from scenarios.probe import ProbeReport, profile_from_report
from scenarios.probe.calibrate import lower_bounds
from scenarios.probe.shortfall import advice

pytestmark = [pytest.mark.sshfs, pytest.mark.slow]  # (slow: real mounts, left out of README's test command)

ENTRY, ATTR, NEGATIVE = 1.0, 1.0, 2.0
WITHIN = 0.25


def _near(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= WITHIN * expected


def _probe_and_wait(mounts: list[str], timeouts: list[float], probe_timeout: float | None = None
                    ) -> tuple[ProbeReport, list[str]]:
    report = probe_quick(mounts[0], mounts, timeout=probe_timeout)
    return report, wait_for_directory(mounts, "waited", timeouts)


def test_probe_measures_the_fuse_timeouts_and_calibrates_simfs(sshfs_mounts) -> None:
    pair = sshfs_mounts.pair(ENTRY, ATTR, NEGATIVE, sshfs_cache=False)
    mounts = [pair.a, pair.b]
    timeouts = [NEGATIVE / 2, NEGATIVE * 2]  # below and above the lag
    (report, _), (_, real) = run_procs(_probe_and_wait, 2, mounts, timeouts, timeout=120)
    assert os.listdir(pair.export) == ["waited"]  # the probe left nothing

    lags = {(lag.op, lag.mode): lag for lag in report.visibility}
    for op in ("mkdir", "create", "rename"):
        looked = lags[op, "looked"]
        assert _near(looked.lag.p50, NEGATIVE) and _near(looked.since_lookup.max, NEGATIVE), looked
        assert _near(lags[op, "listed"].lag.p50, NEGATIVE), lags[op, "listed"]  # listing does not help
        assert (lags[op, "fresh"].lag.p99 or 0) < 0.5, lags[op, "fresh"]
    assert _near(lags["unlink", "looked"].since_lookup.p50, ENTRY), lags["unlink", "looked"]
    caches = report.caches
    assert caches is not None and caches.file is not None and caches.dir is not None
    assert _near(caches.negative_lifetime.p50 if caches.negative_lifetime else None, NEGATIVE)
    assert caches.listing_drops_negative is False
    for chain in (caches.file, caches.dir):
        assert _near(chain.first.p50, ATTR) and chain.capped, chain  # fixed lifetimes: no backoff
        assert all(_near(p, ATTR) for p in chain.periods), chain
    assert caches.mtime_granularity == 1.0  # SFTP v3 times are whole seconds
    consistency = report.consistency
    assert consistency is not None and not consistency.eexist_stale  # FUSE revalidates an exclusive create
    assert report.contention is not None and report.contention.excl_winners == [1] * report.trials
    assert (report.locks.flock_cross_node, report.locks.flock_scope) == (False, "node")
    assert any("flock does not exclude across nodes here" in v.text and v.recommendation == "use coord.FileLock"
               for v in report.verdicts)
    assert any(v.recommendation.startswith("wait timeouts >= 3 x p99 visibility lag") for v in report.verdicts)

    profile = profile_from_report(report)
    assert (profile.lookupcache, profile.lookup_tied_to_parent, profile.flock) == ("all", False, "node")
    assert _near(profile.negative_ttl, NEGATIVE) and _near(profile.acregmin, ATTR) and _near(profile.acregmax, ATTR)
    assert "measured by simfs probe" in (profile.source("negative_ttl") or "")

    # the same job in simfs, on the emitted profile loaded back from TOML
    assert real == ["timed out", "seen"]
    path = os.path.join(os.path.dirname(pair.export), "cluster.toml")
    profile.save(path)
    loaded = simfs.Profile.load(path)
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile=loaded).run(
        wait_for_directory, ["/shared", "/shared"], "waited", timeouts)
    assert result.ok, result.summary()
    assert result.returns[1] == real


LONG, SHORT = 3.0, 1.0  # FUSE timeouts of the mounts, and the probe's --timeout under them


def test_caches_outliving_the_timeout_are_lower_bounds_in_the_report_and_the_profile(sshfs_mounts) -> None:
    pair = sshfs_mounts.pair(LONG, LONG, LONG, sshfs_cache=False)
    mounts = [pair.a, pair.b]
    waits = [SHORT / 2]  # shorter than the lag: times out on the real mounts
    (report, _), (_, real) = run_procs(_probe_and_wait, 2, mounts, waits, SHORT, timeout=120)
    assert os.listdir(pair.export) == ["waited"]

    lags = {(lag.op, lag.mode): lag for lag in report.visibility}
    for key in [(op, "looked") for op in ("mkdir", "create", "rename", "unlink")] + [("mkdir", "listed")]:
        assert lags[key].lag.not_seen == lags[key].lag.n, lags[key]  # the premise: the lag exceeds --timeout
    caches = report.caches
    assert caches is not None and caches.file is not None and caches.dir is not None
    for chain in (caches.file, caches.dir):
        assert chain.periods == [] and chain.next_at_least == SHORT and not chain.capped, chain

    profile = profile_from_report(report)
    lifetimes = ["acregmin", "acregmax", "acdirmin", "acdirmax", "negative_ttl", "positive_ttl"]
    assert profile.lookupcache == "all" and not profile.lookup_tied_to_parent, profile
    assert {name: getattr(profile, name) for name in lifetimes} == dict.fromkeys(lifetimes, SHORT)
    assert sorted(lower_bounds(profile.sources)) == sorted(lifetimes)
    for name in lifetimes:
        assert f"at least {SHORT:g} s, a lower bound" in (profile.source(name) or ""), name
    stopped = [v for v in report.verdicts if v.topic == "timeout"]
    assert len(stopped) == 1 and "lower bounds" in stopped[0].text, report.verdicts
    assert stopped[0].recommendation.endswith("--timeout 120"), stopped[0]
    closing = advice(report)
    assert closing is not None and "stopped short" in closing
    assert [v.level for v in report.verdicts if v.topic == "visibility"] == ["bad"]

    # the same wait in simfs on the emitted profile: timed out, as on the real mounts
    assert real == ["timed out"]
    path = os.path.join(os.path.dirname(pair.export), "short.toml")
    profile.save(path)
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile=simfs.Profile.load(path)).run(
        wait_for_directory, ["/shared", "/shared"], "waited", waits)
    assert result.ok, result.summary()
    assert result.returns[1] == real
