"""What the measurements mean for a training job, in words: a verdict per topic and what to do."""

from __future__ import annotations

from . import shortfall
from .lifetime import Lifetime, first_attr_lifetime, longest_attr_lifetime
from .report import Caches, Consistency, Contention, Lag, Locks, ProbeReport, Verdict
from .settings import NO_LAG

WAIT_FACTOR = 3
"""Recommended wait timeouts are this many times the p99 lag: a p99 over a few trials understates
the tail, and a wait that times out fails the job while a long one costs nothing when it succeeds."""


def _missed(lag: Lag) -> str:
    share = "" if lag.lag.not_seen == lag.lag.n else f", {lag.lag.not_seen} of {lag.lag.n} trials"
    return f"{lag.op} ({lag.mode}{share})"


def _visibility(lags: list[Lag], timeout: float) -> list[Verdict]:
    """One verdict: changes some trial of which was not seen within the timeout (the others only
    as context), else the worst lag seen."""
    missed = [lag for lag in lags if lag.lag.not_seen]
    seen = [lag for lag in lags if not lag.lag.not_seen and lag.lag.p99 is not None]
    worst = max(seen, key=lambda lag: lag.lag.p99 or 0.0) if seen else None
    p99 = (worst.lag.p99 or 0.0) if worst is not None else 0.0
    if missed:
        others = "" if worst is None else ("; the others were seen at once" if p99 < NO_LAG else
                                           f"; the others within {p99:.2f} s (p99, {worst.op} {worst.mode})")
        return [Verdict("bad", "visibility", f"not seen by another node within {timeout:g} s: "
                        f"{', '.join(_missed(lag) for lag in missed)}: invisible there at least that long{others}",
                        "wait timeouts must exceed it (NFS directory caches live up to 60 s: acdirmax)")]
    if worst is None:
        return []
    if p99 < NO_LAG:
        return [Verdict("ok", "visibility", f"changes made on one node are seen on the others at once "
                                            f"(p99 {p99 * 1000:.0f} ms)")]
    return [Verdict("warn", "visibility", f"a change made on one node stays invisible on another for up "
                                          f"to {p99:.2f} s (p99, {worst.op} {worst.mode})",
                    f"wait timeouts >= {WAIT_FACTOR} x p99 visibility lag = {WAIT_FACTOR * p99:.1f} s "
                    f"(coord.wait_visible, coord.makedirs_once)")]


def _caches(c: Caches, timeout: float) -> list[Verdict]:
    out = []
    neg = Lifetime.of(c.negative_lifetime, timeout) if c.negative_lifetime is not None else None
    if neg is not None and neg.cached:
        if c.listing_drops_negative:
            out.append(Verdict("info", "lookup cache", f"a cached 'not found' lives {neg}; listing the "
                                                       f"parent ends it", "coord.wait_visible revalidates this way"))
        else:
            out.append(Verdict("warn", "lookup cache", f"a cached 'not found' lives {neg} and listing the "
                                                       f"parent does not end it: only time does",
                               "have waiters not look a path up before it is made (barrier after the creation), "
                               "or wait longer than that"))
    for chain in (c.file, c.dir):
        if chain is None:
            continue
        first, longest = first_attr_lifetime(chain, timeout), longest_attr_lifetime(chain, timeout)
        if not first.cached:
            continue
        if first.lower_bound:
            shows = f"was not seen within {timeout:g} s: its attributes are cached {first}"
        else:
            later = f"up to {longest}" if not longest.lower_bound else f"{longest} (no cap reached)"
            shows = f"shows after {first}, later after unchanged revalidations: {later}"
        out.append(Verdict("info", f"{chain.kind} attributes", f"another node's change to a {chain.kind}'s size "
                           f"or times {shows}",
                           "do not decide from another node's stat() alone; rank 0 decides (coord.rank0_decides)"))
    return out


def _consistency(c: Consistency, timeout: float) -> list[Verdict]:
    out = []
    if c.close_to_open:
        out.append(Verdict("ok", "close-to-open", "an open after another node's close reads the whole new file"))
    else:
        lag = c.close_to_open_lag.p99 if c.close_to_open_lag is not None else None
        out.append(Verdict("bad", "close-to-open", "an open right after another node's close read stale or cut "
                           "content" + (f" (whole after {lag:.2f} s)" if lag is not None else ""),
                           "verify what you read (size and checksum; checkpoint does) or wait out the attribute "
                           "cache before reading another node's new file"))
    if c.rename_torn or c.rename_missing:
        out.append(Verdict("bad", "rename", f"a reader saw {c.rename_torn} torn and {c.rename_missing} missing "
                           f"files in {c.rename_reads} reads while they were replaced by rename",
                           "publish with a commit marker written last, not by rename alone"))
    else:
        out.append(Verdict("ok", "rename", f"replacing a file by rename is atomic for a reader on another node "
                                           f"({c.rename_reads} reads)"))
    if c.eexist_stale or c.makedirs_raised:
        out.append(Verdict("bad", "makedirs", "after EEXIST a stale 'not found' remains: os.makedirs(exist_ok=True) "
                           "raises FileExistsError", "use coord.makedirs_once"))
    if "ESTALE" in c.rename_over_open:
        out.append(Verdict("warn", "ESTALE", "a reader holding a file another node renamed over gets ESTALE",
                           "keep old checkpoints until their readers finish (checkpoint reader leases); reopen on "
                           "ESTALE"))
    if c.same_tick and not c.same_tick_seen:
        out.append(Verdict("bad", "timestamps", f"a same-size rewrite within one mtime tick was not seen within "
                           f"{timeout:g} s by a node that read the old content", "write new content under a new name"))
    return out


def _contention(c: Contention) -> list[Verdict]:
    out = []
    bad = [w for w in c.excl_winners if w != 1]
    if bad:
        out.append(Verdict("bad", "O_EXCL", f"O_CREAT|O_EXCL by {c.ranks} ranks had {bad} winners in "
                           f"{len(bad)} of {c.excl_trials} races",
                           "locks built on O_EXCL (coord.FileLock, filelock's SoftFileLock) are unsafe here: "
                           "decide through torch.distributed (coord.rank0_decides)"))
    else:
        out.append(Verdict("ok", "O_EXCL", f"O_CREAT|O_EXCL by {c.ranks} ranks: exactly one winner in "
                                           f"{c.excl_trials} of {c.excl_trials} races"))
    if c.excl_errors:
        out.append(Verdict("warn", "O_EXCL", f"the losers of an O_EXCL race got {', '.join(c.excl_errors)}, not "
                                             f"EEXIST", "treat any error of an exclusive create as 'taken' and look"))
    if c.makedirs_errors:
        out.append(Verdict("bad", "makedirs", f"os.makedirs(exist_ok=True) raced by every rank raised "
                                              f"{', '.join(c.makedirs_errors)}", "use coord.makedirs_once"))
    if c.makedirs_raised:
        out.append(Verdict("bad", "makedirs", f"os.makedirs(exist_ok=True) raced by every rank raised "
                                              f"FileExistsError {c.makedirs_raised} times in {c.makedirs_trials}",
                           "use coord.makedirs_once"))
    return out


def _locks(locks: Locks) -> list[Verdict]:
    out = []
    for kind, same, cross in (("flock", locks.flock_same_node, locks.flock_cross_node),
                              ("fcntl", locks.fcntl_same_node, locks.fcntl_cross_node)):
        if cross is True:
            out.append(Verdict("ok", kind, f"{kind} excludes across nodes"))
        elif cross is not None:
            out.append(Verdict("bad", kind, f"{kind} does not exclude across nodes here ({cross}: a second holder "
                                            f"on another node was granted or failed)", "use coord.FileLock"))
        if same is not True:
            out.append(Verdict("bad", kind, f"{kind} does not exclude two processes on one node ({same})",
                               "use coord.FileLock"))
    return out


def judge(report: ProbeReport) -> list[Verdict]:
    """The verdicts of a report (its own ``verdicts`` field ignored)."""
    out = _visibility(report.visibility, report.timeout)
    if report.caches is not None:
        out += _caches(report.caches, report.timeout)
    if report.consistency is not None:
        out += _consistency(report.consistency, report.timeout)
    if report.contention is not None:
        out += _contention(report.contention)
    out += _locks(report.locks)
    r = report.rates
    fsync = f"{r.fsync.p50 * 1000:.2f} ms" if r.fsync.p50 is not None else "n/a"
    out.append(Verdict("info", "rates", f"fsync p50 {fsync}; {r.create_per_s:.0f} creates/s, {r.stat_per_s:.0f} "
                                        f"stats/s, {r.unlink_per_s:.0f} unlinks/s; write {r.write_mb_s_total:.0f} "
                                        f"MB/s, read {r.read_mb_s_total:.0f} MB/s (all ranks)"))
    if report.clock_uncertainty >= NO_LAG:
        out.append(Verdict("warn", "clocks", f"the ranks' clocks are known to +-{report.clock_uncertainty:.3f} s: "
                                             f"shorter lags are noise"))
    if report.needs_two_nodes:
        out.append(Verdict("info", "coverage", "needs a second node (or --paths with a second mount): "
                                               + ", ".join(report.needs_two_nodes),
                           "run under torchrun with --nnodes 2 or more"))
    stopped = shortfall.verdict(report)
    return out if stopped is None else [*out, stopped]
