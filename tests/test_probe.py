"""``simfs probe`` on the local disk: two gloo ranks (two "nodes" of one machine) see each other's
changes at once and every verdict is the coherent one; the probe leaves nothing behind, also after
a rank fails or Ctrl-C; an unusable PATH is refused before anything happens; the emitted profile
runs a job through ``simfs run --profile FILE.toml``. And from measurements built by hand: a cache
that outlived the timeout is reported and calibrated as a lower bound, never as 'not cached'."""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

import simfs
from _probe_jobs import probe_failing, probe_quick
from _procs import run_procs
from scenarios.cli import main
from scenarios.probe import ProbeReport, profile_from_report, read_report
from scenarios.probe.caches import Kind
from scenarios.probe.calibrate import calibrate, lower_bounds, profile_record
from scenarios.probe.command import _finish
from scenarios.probe.display import show
from scenarios.probe.lifetime import Lifetime
from scenarios.probe.report import SCHEMA, AttrLifetimes, Caches, Lag, Locks, Rates, Stats
from scenarios.probe.session import PREFIX
from scenarios.probe.settings import MAX_LINKS, NO_LAG
from scenarios.probe.shortfall import advice, rerun_command
from scenarios.probe.verdicts import judge
from scenarios.probe.visibility import MODES, OPS


def test_two_ranks_on_a_local_disk(tmp_path) -> None:
    started = time.monotonic()
    reports = run_procs(probe_quick, 2, str(tmp_path), None, nodes=2, timeout=60)
    took = time.monotonic() - started
    report: ProbeReport = reports[0]
    assert reports[1].profile == report.profile  # every rank gets the report
    assert report.observers == [1] and report.nodes == 2 and report.quick
    assert report.wall_time < 20 and took < 30, (report.wall_time, took)
    for lag in report.visibility:
        assert lag.lag.not_seen == 0 and lag.lag.p99 is not None and lag.lag.p99 < NO_LAG, lag
    caches, consistency, contention, locks = report.caches, report.consistency, report.contention, report.locks
    assert caches is not None and consistency is not None and contention is not None
    assert caches.listing_drops_negative is None  # nothing cached to drop
    for chain in (caches.file, caches.dir):
        assert chain is not None and chain.periods[0] < NO_LAG
    assert consistency.close_to_open and consistency.rename_reads > 0
    assert (consistency.rename_torn, consistency.rename_missing) == (0, 0)
    assert consistency.eexist_errno == "EEXIST" and not consistency.eexist_stale and not consistency.makedirs_raised
    assert consistency.rename_over_open == "old"  # POSIX: the open file lives on
    assert contention.excl_winners == [1] * report.trials and contention.makedirs_raised == 0
    assert (locks.flock_same_node, locks.flock_cross_node, locks.flock_scope) == (True, True, "cluster")
    assert (locks.fcntl_same_node, locks.fcntl_cross_node) == (True, True)
    assert report.needs_two_nodes == []
    levels = {v.topic: v.level for v in report.verdicts}
    assert all(levels[t] == "ok" for t in ("visibility", "close-to-open", "rename", "O_EXCL", "flock", "fcntl"))
    assert not [v for v in report.verdicts if v.level == "bad"], report.verdicts
    profile = profile_from_report(report)
    assert profile.coherent and profile.lookupcache == "none"
    assert (profile.flock, profile.exclusive_create, profile.cto, profile.unlink_open) == ("cluster", "atomic", True,
                                                                                          "posix")
    assert "measured by simfs probe" in (profile.source("flock") or "")
    assert os.listdir(tmp_path) == []


def test_a_failing_rank_leaves_nothing_behind(tmp_path) -> None:
    outcomes = run_procs(probe_failing, 2, str(tmp_path), 1, nodes=2, timeout=60)
    assert outcomes[1] == "OSError" and outcomes[0] == "RuntimeError", outcomes
    assert os.listdir(tmp_path) == []


def test_ctrl_c_leaves_nothing_behind(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "scenarios.cli", "probe", str(tmp_path), "--report", ""],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not os.listdir(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.001)
    assert [n for n in os.listdir(tmp_path) if n.startswith(PREFIX)], "the probe directory never appeared"
    # at once: a probe of one process on a local disk is over within a second of making its directory
    # (a signal after that finds the command done and kills the interpreter: returncode -2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert os.listdir(tmp_path) == []


def test_an_interrupt_right_after_the_probe_directory_is_made_removes_it(tmp_path, monkeypatch) -> None:
    """Ctrl-C delivered the moment mkdir returns, before the session has recorded its outcome (the
    window the test above hits under load), still removes the directory."""
    from coord import get_comm
    from scenarios.probe.session import open_session

    real_mkdir = os.mkdir

    def mkdir_then_interrupted(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "mkdir", mkdir_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        with open_session(get_comm(), str(tmp_path), 5.0):
            pass
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["missing", "file", "unwritable"])
def test_an_unusable_path_is_refused(tmp_path, capsys, kind) -> None:
    if kind == "missing":
        path, why = str(tmp_path / "nope"), "does not exist"
    elif kind == "file":
        path, why = str(tmp_path / "f"), "not a directory"
        (tmp_path / "f").write_text("x")
    elif os.getuid() == 0:  # root writes anywhere permissions allow: sysfs refuses a mkdir
        path, why = "/sys", "cannot create a directory there: Operation not permitted"
    else:
        path, why = str(tmp_path / "ro"), "not writable"
        (tmp_path / "ro").mkdir(mode=0o555)
    before = sorted(os.listdir(path)) if os.path.isdir(path) else None
    assert main(["probe", path, "--quick", "--report", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err
    assert f"cannot probe {path!r}: " in err and why in err, err
    assert not (tmp_path / "reports").exists()
    assert (sorted(os.listdir(path)) if os.path.isdir(path) else None) == before


def test_report_profile_and_simfs_run_with_the_profile(tmp_path, capsys) -> None:
    """One process: the report and profile files, then `simfs run JOB --profile FILE.toml`."""
    target = tmp_path / "mount"
    target.mkdir()
    assert main(["probe", str(target), "--quick", "--report", str(tmp_path / "r"), "--emit-profile",
                 str(tmp_path / "cluster.toml")]) == 0
    out = capsys.readouterr().out
    assert "verdicts" in out and "needs a second node" in out
    report = read_report(tmp_path / "r" / "probe.json")
    assert report.world_size == 1 and report.needs_two_nodes and report.caches is not None
    profile = simfs.Profile.load(tmp_path / "cluster.toml")
    assert profile.name == "cluster" and profile == profile_from_report(report).replace(name="cluster")
    assert os.listdir(target) == []
    job = tmp_path / "job.py"
    job.write_text("import os\n\ndef job():\n    os.makedirs('/shared/out', exist_ok=True)\n")
    assert main(["run", f"{job}:job", "--profile", str(tmp_path / "cluster.toml"), "--examples", "3",
                 "--report", ""]) == 0
    assert "1 of 1 results as expected" in capsys.readouterr().out
    assert main(["run", f"{job}:job", "--profile", str(tmp_path / "absent.toml"), "--report", ""]) == 2
    assert "does not exist" in capsys.readouterr().err


# -- measurements built by hand: what a timeout means ---------------------------------------------

TIMEOUT = 10.0
RATES = Rates(Stats.of([0.001]), 1000.0, 1000.0, 1000.0, 0.001, [100.0], [100.0], 100.0, 100.0, 1e12)
LOCKS = Locks(True, False, True, False, "node")
AT_ONCE, MISSED = Stats.of([0.028] * 5), Stats.of([None] * 5)
LIFETIMES: dict[Kind, tuple[str, str]] = {"file": ("acregmin", "acregmax"), "dir": ("acdirmin", "acdirmax")}


def _report(lags: list[Lag], caches: Caches, command: str = "simfs probe /mnt/a --paths /mnt/a,/mnt/b") -> ProbeReport:
    """The report ``simfs probe`` writes for these measurements (two mounts, one machine)."""
    profile = calibrate(where="on test", timeout=TIMEOUT, lags=lags, caches=caches, consistency=None,
                        contention=None, locks=LOCKS, rates=RATES)
    report = ProbeReport(
        schema=SCHEMA, simfs_version="test", command=command, started="2026-01-01T00:00:00+00:00", wall_time=1.0,
        path="/mnt/a", paths=["/mnt/a", "/mnt/b"], hosts=["h", "h"], world_size=2, nodes=1, observers=[1],
        quick=False, trials=5, timeout=TIMEOUT, clock_uncertainty=0.0, needs_two_nodes=[], visibility=lags,
        caches=caches, consistency=None, contention=None, locks=LOCKS, rates=RATES, verdicts=[],
        profile=profile_record(profile))
    return msgspec.structs.replace(report, verdicts=judge(report))


def _shown(report: ProbeReport) -> str:
    out = io.StringIO()
    show(report, Console(file=out, width=400))
    return out.getvalue()


def test_caches_that_outlive_the_timeout_are_lower_bounds_not_none() -> None:
    """The reported sshfs case: a removed name and every cached attribute outlive --timeout 10
    (sshfs's own 20 s cache), a 'not found' is not cached. Calibrated before as lookupcache='none'
    and zero attribute lifetimes without a source."""
    unlinks = {("unlink", "looked"), ("unlink", "listed")}
    lags = [Lag(op, mode, MISSED if (op, mode) in unlinks else AT_ONCE, MISSED if (op, mode) in unlinks else AT_ONCE)
            for op in OPS for mode in MODES]
    chains = {kind: AttrLifetimes(kind, MISSED, [], False, TIMEOUT) for kind in LIFETIMES}
    report = _report(lags, Caches(AT_ONCE, MISSED, None, chains["file"], chains["dir"], 1.0))
    profile = profile_from_report(report)
    bounded = ["acregmin", "acregmax", "acdirmin", "acdirmax", "positive_ttl"]
    assert profile.lookupcache == "positive" and not profile.lookup_tied_to_parent
    assert [getattr(profile, name) for name in bounded] == [TIMEOUT] * len(bounded)
    for name in bounded:
        assert "at least 10 s, a lower bound" in (profile.source(name) or ""), name
        assert "rerun with --timeout 120" in (profile.source(name) or ""), name
    assert sorted(lower_bounds(profile.sources)) == sorted(bounded)

    visibility = [v for v in report.verdicts if v.topic == "visibility"]
    assert [v.level for v in visibility] == ["bad"], visibility  # not also 'seen at once'
    assert "unlink (looked), unlink (listed)" in visibility[0].text
    assert "the others were seen at once" in visibility[0].text
    rerun = "simfs probe /mnt/a --paths /mnt/a,/mnt/b --timeout 120"
    stopped = [v for v in report.verdicts if v.topic == "timeout"]
    assert len(stopped) == 1 and stopped[0].recommendation.endswith(rerun), stopped
    assert "file attributes, dir attributes" in stopped[0].text and "acregmin" in stopped[0].text
    closing = advice(report)
    assert closing is not None and closing.startswith("simfs probe stopped short") and closing.endswith(rerun)

    shown = _shown(report)
    assert "successive: >= 10.00 s (not seen within 10 s)" in shown, shown
    assert "successive:  " not in shown and "seen on the others at once" not in shown


def test_the_command_ends_saying_it_stopped_short_and_emits_no_zero_lifetime(tmp_path) -> None:
    """``simfs probe --emit-profile``'s output on the reported case: the TOML file's lifetimes are
    the lower bound, and the last line printed is the rerun."""
    lags = [Lag(op, mode, MISSED if mode != "fresh" else AT_ONCE, MISSED) for op in OPS for mode in MODES]
    chains = {kind: AttrLifetimes(kind, MISSED, [], False, TIMEOUT) for kind in LIFETIMES}
    report = _report(lags, Caches(MISSED, MISSED, False, chains["file"], chains["dir"], 1.0))
    out = io.StringIO()
    emitted = tmp_path / "cluster.toml"
    _finish(argparse.Namespace(report="", emit_profile=str(emitted)), report, Console(file=out, width=100))
    profile = simfs.Profile.load(emitted)
    assert profile.lookupcache == "all" and not profile.lookup_tied_to_parent
    lifetimes = ["acregmin", "acregmax", "acdirmin", "acdirmax", "negative_ttl", "positive_ttl"]
    assert {name: getattr(profile, name) for name in lifetimes} == dict.fromkeys(lifetimes, TIMEOUT)
    assert all("a lower bound" in (profile.source(name) or "") for name in lifetimes), profile.sources
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("simfs probe stopped short: not seen within --timeout 10 s: mkdir (looked)"), last
    assert last.endswith("to measure them, rerun (on every rank, under the same launcher): simfs probe /mnt/a "
                         "--paths /mnt/a,/mnt/b --timeout 120"), last


def test_a_probe_that_saw_everything_has_no_shortfall() -> None:
    lags = [Lag(op, mode, AT_ONCE, AT_ONCE) for op in OPS for mode in MODES]
    chains = {kind: AttrLifetimes(kind, AT_ONCE, [1.0, 1.0], True) for kind in LIFETIMES}
    report = _report(lags, Caches(Stats.of([2.0] * 5), AT_ONCE, False, chains["file"], chains["dir"], 1.0))
    assert advice(report) is None and not [v for v in report.verdicts if v.topic == "timeout"]
    assert lower_bounds(profile_from_report(report).sources) == []
    assert [v.level for v in report.verdicts if v.topic == "visibility"] == ["ok"]


@pytest.mark.parametrize(("command", "timeout", "rerun"), [
    ("simfs probe /x", 10.0, "simfs probe /x --timeout 120"),
    ("simfs probe /x --timeout 10 --quick", 10.0, "simfs probe /x --quick --timeout 120"),
    ("simfs probe /x --timeout=30", 30.0, "simfs probe /x --timeout 120"),
    ("simfs probe '/my mount' --ti 100", 100.0, "simfs probe '/my mount' --timeout 200"),
    ("", 3.0, "simfs probe /mnt/a --paths /mnt/a,/mnt/b --timeout 120"),  # a library call: rebuilt
])
def test_the_rerun_command_raises_the_timeout(command: str, timeout: float, rerun: str) -> None:
    report = msgspec.structs.replace(_report([], Caches(None, None, None, None, None, 1.0), command), timeout=timeout)
    assert rerun_command(report) == rerun


@st.composite
def _stats(draw: st.DrawFn) -> Stats:
    """Trials of a lag or lifetime, some maybe not seen within TIMEOUT."""
    n = draw(st.integers(1, 10))
    missed = draw(st.integers(0, n))
    seen = draw(st.lists(st.floats(0.0, 1.2 * TIMEOUT), min_size=n - missed, max_size=n - missed))
    return Stats.of([*seen, *[None] * missed])


@st.composite
def _chain(draw: st.DrawFn, kind: Kind) -> AttrLifetimes:
    """A chain of attribute lifetimes as the probe ends one: the first outlived the timeout, was
    not cached, reached its cap, a later one outlived the timeout, or it stopped growing at the
    timeout or after MAX_LINKS revalidations."""
    first = draw(_stats())
    if first.not_seen:
        return AttrLifetimes(kind, first, [], False, TIMEOUT)
    assert first.p50 is not None
    if first.p50 < NO_LAG:
        return AttrLifetimes(kind, first, [first.p50], True)
    periods = [first.p50, *draw(st.lists(st.floats(first.p50, 60.0), max_size=MAX_LINKS))]
    end = draw(st.sampled_from(["capped", "outlived", "stopped"]))
    return AttrLifetimes(kind, first, periods, end == "capped" and len(periods) > 1,
                         TIMEOUT if end == "outlived" else None)


@st.composite
def _measurements(draw: st.DrawFn) -> tuple[list[Lag], Caches]:
    lags = [Lag(op, mode, draw(_stats()), draw(_stats())) for op in OPS for mode in MODES]
    negative, positive = draw(_stats()), draw(_stats())
    kept = Lifetime.of(negative, TIMEOUT)
    drops = draw(st.booleans()) if kept is not None and kept.cached else None
    return lags, Caches(negative, positive, drops, draw(_chain("file")), draw(_chain("dir")), 1.0)


@given(_measurements())
def test_no_measurement_that_timed_out_becomes_zero_or_none(measurements: tuple[list[Lag], Caches]) -> None:
    """Whatever the probe measured: a lifetime with a trial not seen within the timeout is
    calibrated as at least the timeout (a lower bound, so said in its source), the lookup cache
    it shows is never 'none', one verdict per topic of visibility, and no empty figure shown."""
    lags, caches = measurements
    report = _report(lags, caches)
    profile = profile_from_report(report)
    assert caches.negative_lifetime is not None and caches.positive_lifetime is not None
    if caches.negative_lifetime.not_seen:
        assert profile.lookupcache == "all"
        if not profile.lookup_tied_to_parent:
            assert profile.negative_ttl >= TIMEOUT and "a lower bound" in (profile.source("negative_ttl") or "")
    if caches.positive_lifetime.not_seen:
        assert profile.lookupcache != "none"
        if not profile.lookup_tied_to_parent:
            assert profile.positive_ttl >= TIMEOUT and "a lower bound" in (profile.source("positive_ttl") or "")
    for chain in (caches.file, caches.dir):
        assert chain is not None
        lo, hi = LIFETIMES[chain.kind]
        if chain.first.not_seen:
            assert getattr(profile, lo) >= TIMEOUT and "a lower bound" in (profile.source(lo) or "")
        if chain.first.not_seen or chain.next_at_least is not None:
            assert getattr(profile, hi) >= TIMEOUT and "a lower bound" in (profile.source(hi) or "")
        if getattr(profile, hi) == 0:  # 'not cached' only from a change seen at once in every trial
            assert not chain.first.not_seen and chain.first.p50 is not None and chain.first.p50 < NO_LAG
    for name in lower_bounds(profile.sources):
        assert getattr(profile, name) > 0, name

    visibility = [v for v in report.verdicts if v.topic == "visibility"]
    assert len(visibility) == 1
    assert (visibility[0].level == "bad") == any(lag.lag.not_seen for lag in lags)
    chains = [c for c in (caches.file, caches.dir) if c is not None]
    missed = any(lag.lag.not_seen for lag in lags)
    if missed or any(c.next_at_least is not None for c in chains):
        assert advice(report) is not None
    if not missed and all(c.capped for c in chains):
        assert advice(report) is None
    shown = _shown(report)
    assert "successive:  " not in shown and "successive: (" not in shown
