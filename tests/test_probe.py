"""``simfs probe`` on the local disk: two gloo ranks (two "nodes" of one machine) see each other's
changes at once and every verdict is the coherent one; the probe leaves nothing behind, also after
a rank fails or Ctrl-C; an unusable PATH is refused before anything happens; the emitted profile
runs a job through ``simfs run --profile FILE.toml``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import simfs
from _probe_jobs import probe_failing, probe_quick
from _procs import run_procs
from scenarios.cli import main
from scenarios.probe import ProbeReport, profile_from_report, read_report
from scenarios.probe.session import PREFIX
from scenarios.probe.settings import NO_LAG


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
