"""Replay strings (``result.replay`` / ``simfs.replay``) and the ``simfs`` command line."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # so that 'tests._replay_jobs' is importable, as the CLI needs
    sys.path.insert(0, str(ROOT))

from scenarios.cli import main  # noqa: E402
from tests import _replay_jobs as jobs  # noqa: E402

JOBS = "tests._replay_jobs"


def _same_run(a: simfs.Result, b: simfs.Result) -> None:
    assert b.trace == a.trace
    assert b.returns == a.returns
    assert {r: (type(e), str(e)) for r, e in b.errors.items()} == {r: (type(e), str(e)) for r, e in a.errors.items()}
    assert b.crashed == a.crashed
    assert set(b.hung) == set(a.hung)
    assert b.virtual_time == a.virtual_time
    assert b.ops == a.ops


def _spec(text: str) -> dict:
    body = text[len("simfs1:"):]
    return json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def _encode(spec: object) -> str:
    raw = json.dumps(spec).encode()
    return "simfs1:" + base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


# -- replay strings --------------------------------------------------------------------------------

def test_replay_string_has_the_versioned_prefix():
    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=1).run(jobs.always_ok)
    assert result.ok, result.summary()
    assert result.replay.startswith("simfs1:")
    assert result.replay in result.summary()


def test_seeds_give_different_runs():
    """The replay checks below are meaningful only if runs differ from seed to seed."""
    traces = {tuple(simfs.Cluster(nodes=2, ranks_per_node=2, seed=s).run(jobs.schedule_sensitive).trace)
              for s in range(4)}
    assert len(traces) > 1


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_replay_of_an_importable_job_reproduces_the_run(seed):
    original = simfs.Cluster(nodes=2, ranks_per_node=2, seed=seed).run(jobs.schedule_sensitive)
    assert original.trace
    again = simfs.replay(original.replay)
    _same_run(original, again)
    # and a replay of the replay is still the same run
    _same_run(original, simfs.replay(again.replay))


def test_replay_of_a_failing_run_fails_the_same_way():
    original = simfs.Cluster(nodes=2, ranks_per_node=2, seed=0).run(jobs.fails_on_rank1)
    assert set(original.errors) == {1}
    again = simfs.replay(original.replay)
    _same_run(original, again)
    assert isinstance(again.errors[1], RuntimeError)


def test_replay_with_an_explicit_job():
    marker = "closure-value"

    def closure_job():  # not importable: the replay string cannot name it
        time.sleep(dist.get_rank() * 0.5)
        with open(f"/shared/c{dist.get_rank()}", "w") as f:
            f.write(marker)
        return sorted(os.listdir("/shared")), time.time()

    original = simfs.Cluster(nodes=2, ranks_per_node=2, seed=4).run(closure_job)
    with pytest.raises(ValueError, match="pass it"):
        simfs.replay(original.replay)
    _same_run(original, simfs.replay(original.replay, closure_job))


def test_replay_passes_job_arguments():
    original = simfs.Cluster(nodes=2, ranks_per_node=2, seed=6).run(jobs.write_named, "blob", size=3)
    assert original.ok, original.summary()
    _same_run(original, simfs.replay(original.replay, jobs.write_named, "blob", size=3))


def test_replay_with_an_explicit_job_overrides_the_recorded_one():
    original = simfs.Cluster(nodes=1, ranks_per_node=2, seed=2).run(jobs.always_ok)
    other = simfs.replay(original.replay, jobs.fails_on_rank1)
    assert set(other.errors) == {1}


def test_custom_profile_and_faults_replay_identically():
    nfs = simfs.profiles.get("nfs").replace(acdirmin=5.0, acdirmax=5.0, acregmin=1.0, acregmax=1.0, flock="node")
    custom = simfs.Profile(name="my-site", acregmin=2.0, acregmax=float("inf"), acdirmin=0.5, acdirmax=9.0,
                           lookupcache="positive", rename="copy_delete", jitter=0.3)
    faults = [
        simfs.SlowRank(rank=1, delay=3.0),
        simfs.InjectErrno("EIO", path="/shared/out/r2", count=1),
        simfs.SlowOps(delay=0.25, op="listdir"),
        simfs.CrashNode(node=1, at_time=10.0),
    ]
    cluster = simfs.Cluster(nodes=2, ranks_per_node=2, seed=5, faults=faults,
                            mounts={"/shared": nfs, "/bucket": custom},
                            local_profile=simfs.profiles.get("local").replace(torn_sector=512))
    original = cluster.run(jobs.schedule_sensitive)
    # the faults did something
    assert original.crashed, original.summary()
    assert any(e.op == "crash" for e in original.trace)
    assert any("injected" in e.outcome for e in original.trace)
    again = simfs.replay(original.replay)
    _same_run(original, again)
    assert again.crashed == original.crashed


def test_cluster_env_survives_a_replay():
    """``Cluster(env=...)`` is part of what ranks observe, so it is part of the run."""
    original = simfs.Cluster(nodes=1, ranks_per_node=2, seed=3, env={"SIMFS_TEST_VALUE": "from-env"}).run(jobs.read_env)
    assert original.returns == {0: "from-env", 1: "from-env"}
    _same_run(original, simfs.replay(original.replay))


def test_collective_cost_survives_a_replay():
    """Collective latency and bandwidth set the virtual times ranks observe."""
    original = simfs.Cluster(nodes=2, ranks_per_node=2, seed=3, collective_latency=0.5,
                             collective_bandwidth=1e5).run(jobs.barrier_times)
    default = simfs.Cluster(nodes=2, ranks_per_node=2, seed=3).run(jobs.barrier_times)
    assert original.ok, original.summary()
    assert original.returns != default.returns  # the options matter
    _same_run(original, simfs.replay(original.replay))


@settings(max_examples=15)
@given(st.data())
def test_hypothesis_driven_run_replays_exactly(data):
    profile = simfs.profiles.get("nfs").replace(jitter=0.9)
    cluster = simfs.Cluster(nodes=2, ranks_per_node=2, profile=profile, seed=11)
    original = cluster.run(jobs.schedule_sensitive, choices=data)
    assert "draws" in _spec(original.replay)
    again = simfs.replay(original.replay)
    _same_run(original, again)


def test_hypothesis_draws_decide_the_run():
    """The draws, not the seed, decide a Hypothesis-driven run (so recording them matters)."""
    traces = set()

    @settings(max_examples=10, database=None)
    @given(st.data())
    def collect(data):
        r = simfs.Cluster(nodes=2, ranks_per_node=2, seed=0).run(jobs.schedule_sensitive, choices=data)
        traces.add(tuple(r.trace))

    collect()
    assert len(traces) > 1


@pytest.mark.parametrize("text", [
    "",
    "garbage",
    "simfs2:eJzLSM3JyddRKMnILFYAorz8EoWs4vw8AGOKCGA",
    "simfs1:",
    "simfs1:!!!not base64!!!",
    "simfs1:eJzLSM3JyddRKMnILFYAorz8EoWs4vw8AGOKCGA",  # valid zlib + base64, but not JSON
])
def test_corrupt_or_foreign_strings_are_refused(text):
    with pytest.raises(ValueError) as info:
        simfs.replay(text)
    message = str(info.value)
    assert "replay string" in message


def test_non_string_is_refused():
    with pytest.raises((ValueError, TypeError), match="replay"):
        simfs.replay(None)  # type: ignore[arg-type]


def test_truncated_and_altered_strings_are_refused():
    good = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(jobs.always_ok).replay
    for bad in (good[: len(good) // 2], good[:-3], good[:20] + ("A" if good[20] != "A" else "B") + good[21:]):
        with pytest.raises(ValueError, match="replay string"):
            simfs.replay(bad)


def test_other_versions_are_refused():
    good = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(jobs.always_ok).replay
    spec = _spec(good)
    assert spec["v"] == 1
    with pytest.raises(ValueError, match="version"):
        simfs.replay(_encode({**spec, "v": 2}))
    with pytest.raises(ValueError, match="version"):
        simfs.replay(_encode([1, 2, 3]))


def test_incomplete_spec_is_a_value_error():
    good = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(jobs.always_ok).replay
    spec = _spec(good)
    del spec["nodes"]
    with pytest.raises(ValueError, match="replay string"):
        simfs.replay(_encode(spec))


def test_unimportable_recorded_job_is_explained():
    good = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(jobs.always_ok).replay
    spec = _spec(good)
    assert spec["job"] == f"{JOBS}:always_ok"
    with pytest.raises(ValueError, match="no_such_module_xyz"):
        simfs.replay(_encode({**spec, "job": "no_such_module_xyz:job"}))
    with pytest.raises(ValueError, match="missing_function"):
        simfs.replay(_encode({**spec, "job": f"{JOBS}:missing_function"}))


def test_replaying_a_later_run_of_a_cluster_is_refused():
    cluster = simfs.Cluster(nodes=2, ranks_per_node=2, seed=0)
    first = cluster.run(jobs.always_ok)
    second = cluster.run(jobs.always_ok)
    assert first.replay != second.replay
    _same_run(first, simfs.replay(first.replay))
    with pytest.raises(ValueError) as info:
        simfs.replay(second.replay)
    message = str(info.value)
    assert "#1" in message and "earlier runs" in message


# -- the command line ------------------------------------------------------------------------------

@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run CLI commands from an empty directory (the default report path is relative)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    return tmp_path


def test_demo_shows_the_naive_pattern_failing_and_the_fixed_one_not(in_tmp, capsys):
    report = in_tmp / "demo.json"
    assert main(["run", "--seeds", "5", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    naive = re.search(r"naive_makedirs on beegfs:.*?failed on (\d+) of 5 seeds", out, re.S)
    fixed = re.search(r"fixed_makedirs on beegfs:.*?failed on (\d+) of 5 seeds", out, re.S)
    assert naive and fixed, out
    assert int(naive.group(1)) > 0
    assert int(fixed.group(1)) == 0
    assert re.search(r"naive_exists on nfs:.*?failed on [1-5] of 5 seeds", out, re.S), out
    assert re.search(r"fixed_exists on nfs:.*?failed on 0 of 5 seeds", out, re.S), out
    assert "simfs replay simfs1:" in out

    data = json.loads(report.read_text())
    assert set(data) == {"job", "failures"}
    assert set(data["failures"]) == {"naive_makedirs", "fixed_makedirs", "naive_exists", "fixed_exists"}
    assert len(data["failures"]["naive_makedirs"]) == int(naive.group(1))
    assert data["failures"]["fixed_makedirs"] == []
    keys = {"seed", "schema", "ok", "virtual_time", "wall_time", "ops", "returns", "errors", "crashed", "hung",
            "notes", "replay"}
    for failure in data["failures"]["naive_makedirs"]:
        assert keys <= set(failure)
        assert failure["schema"] == 1 and failure["ok"] is False
        assert 0 <= failure["seed"] < 5
        assert failure["errors"] or failure["crashed"] or failure["hung"]
        for err in failure["errors"].values():
            assert {"type", "message", "traceback"} <= set(err)
    # a reported failure replays as a failure
    first = data["failures"]["naive_makedirs"][0]
    replayed = simfs.replay(first["replay"])
    assert not replayed.ok
    assert {str(r): type(e).__name__ for r, e in replayed.errors.items()} == \
        {r: e["type"] for r, e in first["errors"].items()}


def test_default_report_path(in_tmp, capsys):
    assert main(["run", f"{JOBS}:always_ok", "--nodes", "1", "--ranks-per-node", "2", "--seeds", "1"]) == 0
    assert (in_tmp / "reports" / "runs" / "simfs-run.json").is_file()


def test_run_a_job_that_succeeds(in_tmp, capsys):
    report = in_tmp / "ok.json"
    code = main(["run", f"{JOBS}:always_ok", "--nodes", "2", "--ranks-per-node", "2", "--seeds", "2",
                 "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("simfs run ok: 4 ranks") == 2
    data = json.loads(report.read_text())
    assert data["job"] == f"{JOBS}:always_ok"
    assert [run["seed"] for run in data["runs"]] == [0, 1]
    assert all(run["ok"] and run["returns"] == {str(r): repr(r) for r in range(4)} for run in data["runs"])


def test_run_a_job_that_fails(in_tmp, capsys):
    report = in_tmp / "fail.json"
    code = main(["run", f"{JOBS}:fails_on_rank1", "--nodes", "2", "--ranks-per-node", "2", "--seeds", "2",
                 "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 1
    assert "rank 1 raised RuntimeError: rank 1 fails on purpose" in out
    data = json.loads(report.read_text())
    assert [run["ok"] for run in data["runs"]] == [False, False]
    assert all(set(run["errors"]) == {"1"} for run in data["runs"])
    assert "fails_on_rank1" in data["runs"][0]["errors"]["1"]["traceback"]


def test_run_a_job_from_a_file(in_tmp, capsys):
    job_file = in_tmp / "myjob.py"
    job_file.write_text("import torch.distributed as dist\n\ndef job():\n    return dist.get_world_size()\n")
    assert main(["run", f"{job_file}:job", "--nodes", "1", "--ranks-per-node", "3", "--seeds", "1",
                 "--report", ""]) == 0
    assert "simfs run ok: 3 ranks" in capsys.readouterr().out


def test_run_kills_a_job_stuck_in_c_code_and_shows_where(in_tmp, capsys):
    """simfs run supervises its runs from outside the process: a rank in C code that holds the
    GIL is killed after --watchdog seconds, with its stack, and the command exits 3."""
    job_file = in_tmp / "stuck.py"
    job_file.write_text("def spin():\n    return sum(range(10 ** 12))\n")
    code = main(["run", f"{job_file}:spin", "--seeds", "1", "--watchdog", "1", "--report", ""])
    err = capsys.readouterr().err
    assert code == 3
    assert "stuck.py" in err and "spin" in err


def test_run_with_trace_and_a_fault(in_tmp, capsys):
    fault = json.dumps({"type": "CrashNode", "node": 1, "at_time": 0.0})
    report = in_tmp / "crash.json"
    code = main(["run", f"{JOBS}:always_ok", "--nodes", "2", "--ranks-per-node", "2", "--seeds", "1",
                 "--fault", fault, "--trace", "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 1  # node 1's ranks died
    assert "crash" in out
    run = json.loads(report.read_text())["runs"][0]
    assert set(run["crashed"]) == {"2", "3"}
    assert run["trace"]


def test_run_with_a_profile_file(in_tmp, capsys):
    path = in_tmp / "site.toml"
    simfs.profiles.get("lustre").replace(flock="node").save(path)
    assert main(["run", f"{JOBS}:always_ok", "--nodes", "2", "--ranks-per-node", "1", "--seeds", "1",
                 "--profile", str(path), "--report", ""]) == 0
    out = capsys.readouterr().out
    replay = re.search(r"replay: (simfs1:\S+)", out).group(1)
    assert _spec(replay)["mounts"]["/shared"] == {"base": "lustre", "flock": "node"}


@pytest.mark.parametrize("spec, fragment", [
    ("nocolon", "module:function"),
    (f"{JOBS}:", "module:function"),
    (":always_ok", "module:function"),
    ("no_such_module_xyz:job", "no_such_module_xyz"),
    (f"{JOBS}:no_such_function", "no_such_function"),
    ("missing_file.py:job", "missing_file.py"),
])
def test_bad_job_spec_exits_2(in_tmp, capsys, spec, fragment):
    assert main(["run", spec, "--seeds", "1", "--report", ""]) == 2
    captured = capsys.readouterr()
    assert fragment in captured.err
    assert captured.err.startswith("simfs: error:")


@pytest.mark.parametrize("fault", [
    "{not json",
    '{"type": "Bogus"}',
    '{"node": 1, "after_ops": 2}',
    '{"type": "CrashNode", "node": 1}',
    '{"type": "CrashNode", "nod": 1, "after_ops": 2}',
    '{"type": "CrashNode", "node": 7, "after_ops": 2}',
])
def test_bad_fault_exits_2(in_tmp, capsys, fault):
    assert main(["run", f"{JOBS}:always_ok", "--seeds", "1", "--fault", fault, "--report", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simfs: error:") and len(err.strip()) > len("simfs: error:")


def test_bad_cluster_arguments_exit_2(in_tmp, capsys):
    assert main(["run", f"{JOBS}:always_ok", "--nodes", "0", "--seeds", "1", "--report", ""]) == 2
    assert "nodes" in capsys.readouterr().err
    assert main(["run", f"{JOBS}:always_ok", "--profile", "nope", "--seeds", "1", "--report", ""]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["run", f"{JOBS}:always_ok", "--profile", "missing.toml", "--seeds", "1", "--report", ""]) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_replay_command(in_tmp, capsys):
    ok = simfs.Cluster(nodes=2, ranks_per_node=2, seed=3).run(jobs.always_ok)
    assert main(["replay", ok.replay]) == 0
    assert capsys.readouterr().out.startswith("simfs run ok: 4 ranks")

    bad = simfs.Cluster(nodes=2, ranks_per_node=2, seed=3).run(jobs.fails_on_rank1)
    assert main(["replay", bad.replay, "--trace"]) == 1
    out = capsys.readouterr().out
    assert "rank 1 raised RuntimeError" in out

    assert main(["replay", "simfs1:definitely-not-valid"]) == 2
    assert "replay string" in capsys.readouterr().err


def test_replay_command_with_a_job(in_tmp, capsys):
    def not_importable():
        return 1

    original = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(not_importable)
    assert main(["replay", original.replay]) == 2
    assert "not importable" in capsys.readouterr().err
    assert main(["replay", original.replay, "--job", f"{JOBS}:always_ok"]) == 0


def test_profiles_command_lists_names(capsys):
    assert main(["profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["local", "nfs", "beegfs", "lustre", "objectstore"]


def test_profiles_command_shows_and_saves(in_tmp, capsys):
    path = in_tmp / "x.toml"
    assert main(["profiles", "nfs", "--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert "acregmin = 3.0" in out and "lookupcache = 'all'" in out
    loaded = simfs.Profile.load(path)
    assert loaded == simfs.profiles.get("nfs")
    assert loaded.notes == simfs.profiles.get("nfs").notes
    assert main(["profiles", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_console_script(tmp_path):
    exe = Path(sys.executable).parent / "simfs"
    cmd = [str(exe)] if exe.exists() else ["simfs"]
    proc = subprocess.run([*cmd, "profiles"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == simfs.profiles.names()
