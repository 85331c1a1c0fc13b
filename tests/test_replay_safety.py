"""A replay string is data, never code: it runs only a job function of the user's own code with
JSON arguments, and says when this process hashes str differently from the recorded run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import simfs
from _replay_jobs import write_named
from simfs.runspec import decode, encode


def recorded(job_ref: str, args: list, tmp_path) -> str:
    """A replay string of a real run, with its job and arguments replaced by hand."""
    result = simfs.Cluster(seed=0).run(write_named, "f")
    spec = decode(result.replay)
    spec["job"], spec["args"], spec["kwargs"] = job_ref, args, {}
    return encode(spec)


@pytest.mark.parametrize("job_ref", [
    "posix:system", "os:system", "builtins:exec", "builtins:eval", "subprocess:run", "shutil:rmtree",
    "pathlib:Path.unlink", "importlib:import_module", "pytest:main", "torch:save",
    "_replay_jobs:os.system",  # a stdlib function reached through a user module
    "_replay_jobs:system",  # ...or imported into it by name
])
def test_a_replay_string_never_runs_stdlib_builtins_or_installed_code(job_ref: str, tmp_path) -> None:
    canary = tmp_path / "canary"
    text = recorded(job_ref, [f"touch {canary}"], tmp_path)
    with pytest.raises(simfs.SimfsError, match="replay string"):
        simfs.replay(text)
    assert not canary.exists()


@pytest.mark.parametrize("job_ref", ["", "no_colon", "a b:c", "x:y;z", "os:system\n"])
def test_a_malformed_job_reference_is_refused(job_ref: str, tmp_path) -> None:
    with pytest.raises(simfs.SimfsError, match="replay string"):
        simfs.replay(recorded(job_ref, [], tmp_path))


def test_the_users_own_job_still_replays(tmp_path) -> None:
    result = simfs.Cluster(seed=0).run(write_named, "f")
    again = simfs.replay(result.replay)
    assert again.returns == result.returns and again.ok


def test_a_hash_seed_mismatch_is_reported(tmp_path) -> None:
    """A run recorded under one PYTHONHASHSEED and replayed under another says so."""
    script = textwrap.dedent("""
        import sys, simfs
        sys.path.insert(0, sys.argv[2])
        from _replay_jobs import write_named
        if sys.argv[1] == "record":
            print(simfs.Cluster(seed=0).run(write_named, "f").replay)
        else:
            print("\\n".join(simfs.replay(sys.stdin.read().strip()).notes))
    """)
    tests_dir = os.path.dirname(os.path.abspath(__file__))

    def run(mode: str, seed: str, stdin: str = "") -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script, mode, tests_dir], input=stdin, env=env,
                              capture_output=True, text=True, timeout=120, check=True)
        return done.stdout.strip()

    text = run("record", "1")
    assert "PYTHONHASHSEED=1" in run("replay", "2", text)
    assert "PYTHONHASHSEED" not in run("replay", "1", text)
