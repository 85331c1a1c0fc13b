"""Preparing a run leaves the caller as it was: simfs imports torch's heavy modules before it forks
rank processes, and importing torch._dynamo sets TORCHINDUCTOR_CACHE_DIR and makes a directory
under the temporary directory. Each way a user starts a run (Cluster.run on either carrier,
scenarios.explore, `simfs run`) is the first of a fresh interpreter here, with torch installed and
TMPDIR a directory of the test's: the environment, the caller's observations (tests/_host_state.py)
and the temporary directory are the same after as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

JOB = """
def job():
    os.makedirs("/shared/d", exist_ok=True)
    with open(f"/shared/d/{os.environ['RANK']}", "w") as f:
        f.write("x")
    return len(os.listdir("/shared/d"))
"""
RUNS = {
    "process": "simfs.Cluster(1, 2, carrier='process').run(job).ok",
    "greenlet": "simfs.Cluster(1, 2, carrier='greenlet').run(job).ok",
    "explore": ("scenarios.explore(job, nodes=1, ranks_per_node=2, profile='nfs', max_examples=3, "
                "carrier='process').failure is None"),
}


def _fresh(code: str, tmp: Path) -> dict:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][7:])  # type: ignore[no-any-return]


# (rank processes and a confined search: a fresh interpreter importing torch each, run by .ci/run)
@pytest.mark.parametrize("way", [pytest.param(way, marks=pytest.mark.slow) if way in ("explore", "process") else way
                                 for way in sorted(RUNS)])
def test_a_first_run_leaves_the_callers_environment_and_files(way: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = _fresh(f"""
        import json, os, socket
        import simfs, scenarios
        from _host_state import Host
        import sys
        {textwrap.indent(JOB, " " * 8).strip()}
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host = Host([], b"blob", listener)
        with host.watch() as problems:
            ok = {RUNS[way]}
        print("RESULT " + json.dumps({{"ok": ok, "problems": problems, "left": os.listdir({str(tmp)!r})}}))
        """, tmp)
    # importing torch registers its own atexit handlers: that much of the caller's interpreter changes
    # when simfs imports torch for rank processes to share (docs/limits.md)
    problems = [p for p in out["problems"] if not (way == "process" and p.startswith("host atexit callbacks"))]
    assert out["ok"] and problems == [], "\n".join(problems)
    assert out["left"] == []


@pytest.mark.slow  # simfs run in a fresh interpreter: run by .ci/run
def test_simfs_run_leaves_the_temporary_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    job = tmp_path / "job.py"
    job.write_text("import os\n" + JOB)
    done = subprocess.run([sys.executable, "-m", "simfs", "run", f"{job}:job", "--examples", "3", "--nodes", "1",
                           "--report", "", "--jobs", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in tmp.iterdir()) == []
