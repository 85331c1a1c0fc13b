"""The pytest plugin (scenarios.pytest_plugin, entry point pytest11), through inner pytest sessions:
a marked rank program is searched and fails with its replay string, several profiles make several
tests, the options are checked, the simfs_cluster fixture, and one report (a directory, as `simfs run
--report` writes) from pytest-xdist workers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import scenarios
from scenarios.outcome import ScenarioOutcome
from scenarios.pytest_plugin import simfs_test
from scenarios.reporting import read_json

pytest_plugins = ["pytester"]

NAIVE = '''
import os
import pytest
import torch.distributed as dist

@pytest.mark.simfs(profile="beegfs")
def test_naive():
    d = "/shared/trace"
    if not os.path.exists(d):
        os.makedirs(d, exist_ok=True)
    dist.barrier()
'''

CORRECT = '''
import os
import torch.distributed as dist
from scenarios.pytest_plugin import simfs_test

@simfs_test(profile=["nfs", "beegfs", "lustre"])
def test_rank0_makes():
    if dist.get_rank() == 0:
        os.makedirs("/shared/trace")
    dist.barrier()
    assert os.path.isdir("/shared/trace")
'''

MAKEDIRS = NAIVE.strip().splitlines().index("        os.makedirs(d, exist_ok=True)") + 1  # its line, as written
BASE = ("-p", "no:cacheprovider", "-p", "no:benchmark")  # as the project's addopts
INNER = (*BASE, "--simfs-examples", "5")


@pytest.fixture(scope="module", autouse=True)
def _warm() -> Iterator[None]:
    """Load torch and every module a search imports before pytester's in-process sessions start:
    they drop the modules imported during them, and simfs's interception modules (patches of
    datetime...) and torch cannot be imported a second time into one process."""
    scenarios.explore(dist.barrier, nodes=1, ranks_per_node=2, profile="local", max_examples=2)
    yield


def _outcomes(path: str) -> dict[str, ScenarioOutcome]:
    return {o.scenario: o for o in read_json(path).outcomes}


def test_naive_job_fails_with_its_root_cause_and_replay_string(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_naive=NAIVE)
    result = pytester.runpytest(*INNER)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["FAILED: test_naive on beegfs (2 nodes x 2 ranks, each rank a process)*",
                                 "root cause: rank * raised FileExistsError*",
                                 f"  at *test_naive.py:{MAKEDIRS} in test_naive",
                                 "replay: scenarios.replay('scenarios1:*')"])
    replay = re.search(r"scenarios\.replay\('([^']+)'\)", result.stdout.str())
    assert replay is not None
    pytester.syspathinsert()  # the replay string names the job by module and name: import it again
    again = scenarios.replay(replay.group(1))
    assert again.failed and again.failure is not None and again.failure.error.startswith("FileExistsError")


def test_correct_job_passes_once_per_profile_and_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_correct=CORRECT, test_broken='''
import pytest

@pytest.mark.simfs(crashes=True)
def test_no_recover():
    pass
''')
    result = pytester.runpytest(*INNER, "-v", "--simfs-report", "out")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines_random(["*test_rank0_makes?nfs? PASSED*", "*test_rank0_makes?beegfs? PASSED*",
                                        "*test_rank0_makes?lustre? PASSED*"])
    outcomes = _outcomes(str(pytester.path / "out" / "report.json"))
    passed = outcomes["test_correct.py::test_rank0_makes[lustre]"]
    assert (passed.profile, passed.family, passed.expected, passed.verdict) == ("lustre", "pytest", "pass", "pass")
    assert passed.examples > 1 and passed.finding is not None and not passed.finding.failed
    broken = outcomes["test_broken.py::test_no_recover"]
    assert broken.verdict == "error" and "crashes need recover=" in broken.error and broken.finding is None
    assert len(outcomes) == 4


def test_a_report_directory_gets_every_format_and_the_failure_is_still_shown(pytester: pytest.Pytester) -> None:
    """`--simfs-report DIR/` writes the report the way `simfs run --report DIR` does, and pytest
    still prints its FAILURES section, the finding in it."""
    pytester.makepyfile(test_naive=NAIVE)
    result = pytester.runpytest(*INNER, "--simfs-carrier", "greenlet", "--simfs-report", "out/")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*= FAILURES =*", "FAILED: test_naive on beegfs (2 nodes x 2 ranks, *)*",
                                 "root cause: rank * raised FileExistsError*",
                                 "    or: simfs replay *'scenarios1:*'"])
    assert {p.name for p in (pytester.path / "out").iterdir()} == {"report.json", "report.xml", "report.html"}
    naive = _outcomes(str(pytester.path / "out" / "report.json"))["test_naive.py::test_naive"]
    assert naive.verdict == "fail" and naive.finding is not None and naive.finding.replay.startswith("scenarios1:")
    assert "FileExistsError" in (pytester.path / "out" / "report.xml").read_text()


@pytest.mark.parametrize(("value", "message"), [
    ("out/report.json", "*--simfs-report out/report.json: give a directory, not a file*"),
    ("a_file", "*--simfs-report a_file: give a directory, not a file*"),
    ("a_file/out", "*--simfs-report a_file/out: *a_file is a file, so the directory cannot be made*"),
])
def test_a_report_that_is_no_directory_is_refused_before_any_test_runs(pytester: pytest.Pytester, value: str,
                                                                       message: str) -> None:
    pytester.makefile("", a_file="not a directory")
    pytester.makepyfile(test_never="def test_never():\n    raise AssertionError('ran')\n")
    result = pytester.runpytest(*BASE, "--simfs-report", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "ran" not in result.stdout.str()


def test_a_report_that_cannot_be_written_is_said_after_the_failures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_takes_its_place='''
def test_takes_its_place():
    open("out", "w").close()  # where the report's directory was to be made
    raise AssertionError("the failure itself")
''')
    result = pytester.runpytest(*BASE, "--simfs-report", "out")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["simfs: --simfs-report */out: the report could not be written: *", "*= FAILURES =*",
                                 "*AssertionError: the failure itself"])


def test_simfs_profile_replaces_the_marks_profiles(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_correct=CORRECT, test_naive=NAIVE)
    result = pytester.runpytest(*INNER, "-v", "--simfs-profile", "local")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random(["*::test_rank0_makes PASSED*", "*::test_naive PASSED*"])


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_simfs_examples_must_be_a_count(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest(*BASE, "--simfs-examples", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --simfs-examples: must be an int >= 1 (examples per search), "
                                 f"got '{value}'"])


def test_unknown_profile_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*BASE, "--simfs-profile", "ntfs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--simfs-profile: unknown profile 'ntfs'*"])


@pytest.mark.parametrize(("source", "message"), [
    ('@pytest.mark.simfs(nodez=2)\ndef test_a():\n    pass\n', "*unknown keyword(s) nodez; it knows nodes*"),
    ('@pytest.mark.simfs(profile=["nfs", "ntfs"])\ndef test_a():\n    pass\n', "*unknown profile 'ntfs'*"),
    ('@pytest.mark.simfs()\ndef test_a(tmp_path):\n    pass\n', "*rank program run on every rank: it takes no*"),
    ('class TestA:\n    @pytest.mark.simfs()\n    def test_a(self):\n        pass\n', "*a module-level function*"),
])
def test_a_wrong_mark_is_a_collection_error(pytester: pytest.Pytester, source: str, message: str) -> None:
    pytester.makepyfile(f"import pytest\n\n{source}")
    result = pytester.runpytest(*BASE)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_simfs_test_checks_its_keywords_where_it_is_used() -> None:
    with pytest.raises(ValueError, match="unknown keyword"):
        simfs_test(rank=2)
    assert simfs_test(nodes=1).kwargs == {"nodes": 1}


def test_simfs_cluster_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import os
import torch.distributed as dist

def job():
    return dist.get_world_size(), os.uname().nodename

def test_defaults(simfs_cluster):
    cluster = simfs_cluster()
    shared = cluster.profiles["/shared"].name
    assert (cluster.nodes, cluster.ranks_per_node, shared, cluster.seed) == (2, 2, "beegfs", 7)
    result = cluster.run(job)
    assert result.ok, result.summary()
    assert sorted(result.returns.values()) == [(4, "node0"), (4, "node0"), (4, "node1"), (4, "node1")]

def test_arguments(simfs_cluster):
    cluster = simfs_cluster(1, 3, profile="nfs", seed=2)
    shared = cluster.profiles["/shared"].name
    assert (cluster.nodes, cluster.ranks_per_node, shared, cluster.seed) == (1, 3, "nfs", 2)
''')
    result = pytester.runpytest(*BASE, "--simfs-profile", "beegfs", "--simfs-seed", "7")
    result.assert_outcomes(passed=2)


def test_xdist_workers_write_one_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_naive=NAIVE, test_correct=CORRECT)
    report = pytester.path / "reports" / "report.json"
    result = pytester.runpytest_subprocess("-p", "xdist", "-n", "2", "-v", *INNER, "--simfs-report",
                                           str(report.parent))
    result.assert_outcomes(passed=3, failed=1)
    workers = set(re.findall(r"\[(gw\d)\] .*(?:PASSED|FAILED) test_", result.stdout.str()))
    assert workers == {"gw0", "gw1"}, result.stdout.str()
    outcomes = _outcomes(str(report))
    assert sorted(outcomes) == [f"test_correct.py::test_rank0_makes[{p}]" for p in ("beegfs", "lustre", "nfs")] + [
        "test_naive.py::test_naive"]
    naive = outcomes["test_naive.py::test_naive"]
    assert naive.verdict == "fail" and naive.profile == "beegfs" and naive.finding is not None
    assert naive.finding.replay.startswith("scenarios1:") and naive.finding.failure is not None
    assert naive.finding.failure.error.startswith("FileExistsError")
    assert all(o.verdict == "pass" and o.wall_time > 0 for name, o in outcomes.items() if name != naive.scenario)
    assert " -p xdist -n 2 " in read_json(str(report)).command
