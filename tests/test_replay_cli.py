"""Replay strings (``result.replay`` / ``simfs.replay``) and the ``simfs`` command line."""

from __future__ import annotations

import base64
import json
import os
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


SCRIPT = '''
import os
import torch.distributed as dist
import scenarios


def job():
    if not os.path.exists("/shared/trace"):
        os.makedirs("/shared/trace", exist_ok=True)
    dist.barrier()


if __name__ == "__main__":
    print(scenarios.explore(job, nodes=2, ranks_per_node=2, profile="beegfs", max_examples=10, carrier="greenlet",
                            database=None))
'''


def test_a_finding_of_a_job_in_a_script_prints_a_replay_command_that_works_in_a_shell(tmp_path):
    """The job is ``__main__``'s, which the replay string cannot import: the command names its file."""
    (tmp_path / "search.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    searched = subprocess.run([sys.executable, "search.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    assert searched.returncode == 0 and searched.stdout.startswith("FAILED: job on beegfs"), searched.stderr
    (command,) = [line.removeprefix("    or: ") for line in searched.stdout.splitlines() if line.startswith("    or: ")]
    assert command.startswith("simfs replay --job search.py:job 'scenarios1:")
    replayed = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert replayed.stdout.startswith("root cause: rank") and "FileExistsError" in replayed.stdout.splitlines()[0]


def test_profiles_command_lists_names(capsys):
    assert main(["profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["local", "nfs", "beegfs", "lustre", "objectstore", "local-posix"]


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


def test_preloaded_modules_survive_a_replay():
    """A module the cluster preloads ran its import-time code in the host: a replay preloads it too."""
    from scenarios.example import Example
    from scenarios.replaying import decode, encode
    from scenarios.target import Target

    original = simfs.Cluster(nodes=1, ranks_per_node=2, seed=3, preload=["json"]).run(jobs.read_env)
    assert simfs.runspec.decode(original.replay)["preload"] == ["json"]
    _same_run(original, simfs.replay(original.replay))
    target = Target(jobs.read_env, 1, 2, simfs.profiles.get("nfs"), carrier="process", preload=("json",))
    assert decode(encode(target, Example()))[0].preload == ("json",)
