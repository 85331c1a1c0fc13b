"""The simfs command: `simfs run` searches a job or the library, writes reports, and exits with
what a CI step needs; bad input is a usage error that names what is wrong."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import simfs
from scenarios.cli import main
from scenarios.outcome import decode

ROOT = Path(__file__).resolve().parent.parent
JOBS = "tests._explore_jobs"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from an empty directory (the default report directory is relative)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    return tmp_path


def test_a_failing_job_shows_its_root_cause_and_replay(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", f"{JOBS}:lingua_makedirs", "--profile", "beegfs", "--examples", "20"])
    out = capsys.readouterr().out
    assert code == 1
    assert "root cause: rank" in out and "FileExistsError" in out
    assert out.index("root cause") < out.index("simfs replay 'scenarios1:")
    report = decode((in_tmp / "reports" / "runs" / "report.json").read_bytes())
    (outcome,) = report.outcomes
    assert (outcome.verdict, outcome.expected, outcome.as_expected) == ("fail", "pass", False)
    replay = outcome.finding.replay if outcome.finding else ""
    assert main(["replay", replay]) == 1
    assert "FileExistsError" in capsys.readouterr().out


def test_a_passing_job_exits_0_and_reports(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", f"{JOBS}:rank0_makedirs", "--profile", "beegfs", "--examples", "20", "--report",
                 str(in_tmp / "out")])
    assert code == 0, capsys.readouterr().out
    assert {p.name for p in (in_tmp / "out").iterdir()} == {"report.json", "report.xml", "report.html"}


def test_a_crash_job_from_the_command_line(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", f"{JOBS}:save_tracker_in_place", "--recover", f"{JOBS}:resume", "--crashes", "exhaustive",
                 "--nodes", "1", "--profile", "local", "--report", ""])
    out = capsys.readouterr().out
    assert code == 1 and "lost power" in out


@pytest.mark.parametrize("argv, fragment", [
    (["run", "nocolon:"], "module:function"),
    (["run", "no_such_module_xyz:job"], "no_such_module_xyz"),
    (["run", f"{JOBS}:no_such_function"], "no_such_function"),
    (["run", "missing_file.py:job"], "missing_file.py"),
    (["run", f"{JOBS}:rank0_makedirs", "--profile", "nope"], "nope"),
    (["run", "no-such-scenario"], "no-such-scenario"),
    (["run", f"{JOBS}:rank0_makedirs", "--shard", "3/2"], "--shard"),
    (["run", f"{JOBS}:rank0_makedirs", "--faults", "gremlins"], "gremlins"),
    (["run", "--family", "gremlins"], "--family gremlins: no such family (the families: checkpoint, dcp, ddp"),
])
def test_bad_input_exits_2_naming_it(in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     fragment: str) -> None:
    assert main([*argv, "--report", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simfs: error:") and fragment in err


@pytest.mark.parametrize(("flag", "value", "says"), [("--watchdog", "0", "(0, 86400] seconds"),
                                                     ("--shrink-time", "-1", "[0, 86400] seconds"),
                                                     ("--shrink-time", "soon", "number of seconds")])
def test_seconds_are_checked(in_tmp: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str,
                             says: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", f"{JOBS}:rank0_makedirs", flag, value])
    assert info.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--examples", "--nodes", "--ranks-per-node", "--jobs"])
def test_counts_must_be_at_least_one(in_tmp: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", f"{JOBS}:rank0_makedirs", flag, "0"])
    assert info.value.code == 2 and ">= 1" in capsys.readouterr().err


def test_help_shows_defaults_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "(default: 60.0)" in out and "seconds" in out and "--shard K/N" in out


def _simfs(*args: str, cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "simfs", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, **kw)  # type: ignore[call-overload,no-any-return]


def _in_a_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a user pastes it into a shell, with this interpreter's ``simfs`` on the PATH."""
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


BUGGY_JOB_FILE = '''
import os
import torch.distributed as dist


def job():
    """Every rank makes the directory it does not see: FileExistsError where a lookup cache lies."""
    if not os.path.exists("/shared/trace"):
        os.makedirs("/shared/trace", exist_ok=True)
    dist.barrier()


def no_rank_hung(result):
    assert not result.hung, f"ranks {sorted(result.hung)} hung"
'''


@pytest.fixture(scope="module")
def job_file_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`simfs run` of a job file with a known bug and a property, in a directory below the one
    simfs runs in (its module is not importable by name from there), its output a pipe as in CI."""
    where = tmp_path_factory.mktemp("job_file")
    (where / "jobs").mkdir()
    (where / "jobs" / "buggy.py").write_text(BUGGY_JOB_FILE)
    return where, _simfs("run", "jobs/buggy.py:job", "--check", "jobs/buggy.py:no_rank_hung", "--profile", "beegfs",
                         "--examples", "10", "--carrier", "greenlet", "--report", "", "--db", "", cwd=where)


def test_an_unexpected_failure_is_shown_with_a_replay_command_that_works_in_a_shell(
        job_file_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    where, run = job_file_run
    assert run.returncode == 1, run.stdout + run.stderr
    account = run.stdout[run.stdout.index("simfs scenarios"):]  # after the table
    assert re.search(r"^jobs/buggy.py:job on beegfs: root cause: rank \d \(node \d\) raised FileExistsError", account,
                     re.M), account
    assert "\nthe counterexample:\n  - stale cache: " in account
    (command,) = re.findall(r"^reproduce: (.*)$", account, re.M)
    assert command.startswith("simfs replay --job jobs/buggy.py:job --check jobs/buggy.py:no_rank_hung 'scenarios1:")
    replayed = _in_a_shell(command, where)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert re.match(r"root cause: rank \d \(node \d\) raised FileExistsError", replayed.stdout), replayed.stdout


def test_outside_a_terminal_each_finished_search_prints_a_line(
        job_file_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, run = job_file_run
    before_the_table = run.stdout[:run.stdout.index("simfs scenarios")].strip().splitlines()
    assert len(before_the_table) == 1 and re.fullmatch(
        r"\[1/1\] jobs/buggy.py:job on beegfs: fail \(expected pass\): UNEXPECTED, \d+ examples? in \d+\.\d s",
        before_the_table[0]), run.stdout


def test_verbose_shows_each_expected_failure_too(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "makedirs-every-rank", "--profile", "beegfs", "--examples", "20", "--seed", "3", "--jobs", "1",
            "--shrink-time", "1", "--report", "", "--db", ""]
    assert main(argv) == 0
    assert "root cause" not in capsys.readouterr().out  # an expected failure, as the table says
    assert main([*argv, "-v"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^makedirs-every-rank on beegfs \(an expected failure\): root cause: rank \d", out, re.M), out
    (command,) = re.findall(r"^reproduce: (simfs replay '.*')$", out, re.M)  # a library scenario: importable
    assert main(["replay", command.split("'")[1]]) == 1


def test_help_and_version_do_not_import_torch(tmp_path: Path) -> None:
    code = ("import sys; sys.argv = ['simfs', '--help']\nfrom scenarios.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip().endswith("False"), proc.stdout + proc.stderr
    version = _simfs("--version", cwd=tmp_path)
    assert version.returncode == 0 and re.match(r"simfs \d", version.stdout)


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(f"'{sys.executable}' -m simfs profiles nfs | head -c 10", shell=True, cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert "BrokenPipe" not in proc.stderr and "Traceback" not in proc.stderr


def test_ctrl_c_writes_the_partial_report_and_exits_130(tmp_path: Path) -> None:
    (tmp_path / "slowjob.py").write_text(
        "import time, torch.distributed as dist\n"
        "def job():\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < 0.5:\n"  # real seconds: a search that takes a while
        "        pass\n"
        "    dist.barrier()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "simfs", "run", "slowjob.py:job", "--examples", "1000",
                             "--report", "out"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(8)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["interrupted"] is True


def test_a_job_searched_on_rank_processes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", f"{JOBS}:lingua_makedirs", "--profile", "beegfs", "--examples", "10", "--carrier", "process"])
    out = capsys.readouterr().out
    assert code == 1 and "root cause: rank" in out and "FileExistsError" in out
    report = decode((in_tmp / "reports" / "runs" / "report.json").read_bytes())
    replay = report.outcomes[0].finding.replay if report.outcomes[0].finding else ""
    from scenarios.replaying import decode as decode_replay

    assert decode_replay(replay)[0].carrier == "process"  # the replay string names the carrier
    assert main(["replay", replay]) == 1
    assert "FileExistsError" in capsys.readouterr().out


def test_a_family_whose_library_is_missing_is_left_out_saying_how_to_install_it(
        in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightning", None)  # as if it were not installed
    assert main(["run", "--family", "stacks", "--report", ""]) == 2
    assert ("scenario lightning-test-best needs lightning, not installed here: pip install -e '.[stacks]'"
            in capsys.readouterr().err)
    assert main(["run", "lightning-test-best", "--report", ""]) == 2
    assert "lightning-test-best needs lightning" in capsys.readouterr().err
    from scenarios.cli import _installed
    from scenarios.registry import all_scenarios

    kept, note = _installed(all_scenarios(), asked=False)
    assert "lightning-test-best" not in {sc.name for sc in kept} and "trainer-rotate" in {sc.name for sc in kept}
    assert note == ("left out 1 scenario whose libraries are not installed: pip install -e '.[stacks]' "
                    "(after torch==2.13.0) installs lightning")


def _comparable(report: Any) -> Any:
    """A report's outcomes without what differs from run to run (wall times)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "wall_time"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(msgspec.to_builtins(report.outcomes))


def test_three_shards_merged_equal_one_unsharded_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["makedirs-every-rank", "makedirs-rank0-barrier"]  # 10 searches: 2 scenarios on 5 profiles each
    common = [sys.executable, "-m", "simfs", "run", *names, "--examples", "5", "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    shards = [subprocess.Popen([*common, "--shard", f"{k}/3", "--report", str(tmp_path / f"shard{k}")], env=env,
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for k in (1, 2, 3)]
    whole = subprocess.run([*common, "--report", str(tmp_path / "whole")], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    for shard in shards:
        assert shard.wait(timeout=600) in (0, 1), shard.stderr.read()
    reports = [str(tmp_path / f"shard{k}") for k in (3, 1, 2)]  # in any order
    code = main(["report", "merge", *reports, "--report", str(tmp_path / "merged")])
    assert code == whole.returncode and "3 reports merged" in capsys.readouterr().out
    merged = decode((tmp_path / "merged" / "report.json").read_bytes())
    unsharded = decode((tmp_path / "whole" / "report.json").read_bytes())
    assert len(merged.outcomes) == 10 and _comparable(merged) == _comparable(unsharded)
    assert merged.shard == "" and (tmp_path / "merged" / "report.xml").exists()
    assert (tmp_path / "merged" / "report.html").exists()


def test_merging_refuses_what_is_not_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scenarios.outcome import SCHEMA, Report, encode

    def write(name: str, **fields: Any) -> str:
        report = Report(**{"schema": SCHEMA, "simfs_version": "1.0", "command": "simfs run", "seed": 0,
                           "started": "2026-01-01T00:00:00+00:00", "wall_time": 1.0, "interrupted": False,
                           "outcomes": [], "shard": "1/2", **fields})
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_bytes(encode(report))
        return str(tmp_path / name)

    one, two = write("one"), write("two", shard="2/2")
    cases = [([one, write("seed", shard="2/2", seed=1)], "different seeds"),
             ([one, write("version", shard="2/2", simfs_version="2.0")], "different simfs versions"),
             ([one, write("again")], "are both shard 1/2"),
             ([one], "shard 2/2 is missing"),
             ([one, write("three", shard="2/3")], "shards of different counts"),
             ([one, write("whole", shard="")], "written without --shard"),
             ([one, str(tmp_path / "nowhere")], "nowhere: not a simfs report (")]
    for reports, fragment in cases:
        assert main(["report", "merge", *reports, "--report", str(tmp_path / "out")]) == 2
        assert fragment in capsys.readouterr().err
    assert main(["report", "merge", one, two, "--report", str(tmp_path / "out")]) == 0


def test_quick_runs_each_verdict_once_on_a_shared_filesystem_where_it_can() -> None:
    from scenarios.cli import _tasks, parser
    from scenarios.registry import all_scenarios

    quick, _ = _tasks(parser().parse_args(["run", "--quick"]))
    whole, _ = _tasks(parser().parse_args(["run"]))
    assert len(quick) < len(whole) / 2
    chosen: dict[str, list[str]] = {}
    for task in quick:
        chosen.setdefault(task.scenario, []).append(task.profile)
    installed = {sc.name: sc for sc in all_scenarios() if not sc.missing()}
    assert set(chosen) == set(installed)  # every scenario still runs
    for name, profiles in chosen.items():
        expect = installed[name].expect
        verdicts = [expect[p] for p in profiles]
        assert sorted(verdicts) == sorted(set(expect.values())), name  # each verdict once
        for profile, verdict in zip(profiles, verdicts):
            shared = [p for p, v in expect.items() if v == verdict and not simfs.profiles.get(p).on_node]
            assert profile == (shared[0] if shared else next(p for p, v in expect.items() if v == verdict)), name


def test_quick_searches_a_third_of_each_scenarios_examples() -> None:
    from scenarios.budgets import QUICK_LEAST
    from scenarios.cli import _tasks, parser
    from scenarios.registry import get

    quick, _ = _tasks(parser().parse_args(["run", "--quick"]))
    for task in quick:
        assert task.examples == max(QUICK_LEAST, get(task.scenario).max_examples // 3), task
    assert {task.examples for task in quick} >= {QUICK_LEAST, 100}  # the trainers' 12 -> 5, a 300 -> 100
    asked, _ = _tasks(parser().parse_args(["run", "--quick", "--examples", "7", "makedirs-once"]))
    assert [task.examples for task in asked] == [7] * len(asked)


@pytest.mark.parametrize("argv, seconds", [(["run", "makedirs-once"], 10.0),
                                           (["run", "--shrink-time", "25"], 25.0),
                                           (["run", "tests._explore_jobs:rank0_makedirs"], 10.0)])
def test_a_search_asked_for_by_name_shrinks_for_as_long_as_told(argv: list[str], seconds: float) -> None:
    """A search of scenarios named or of a job shrinks for 10 s; --shrink-time sets every search's."""
    from scenarios.cli import _tasks, parser

    tasks, _ = _tasks(parser().parse_args(argv))
    assert tasks and {task.shrink_time for task in tasks} == {seconds}


@pytest.mark.parametrize("argv", [["run"], ["run", "--family", "stacks"], ["run", "--quick"]])
def test_a_sweep_shrinks_an_expected_failure_for_less_than_a_surprise(argv: list[str]) -> None:
    """Each of a sweep's searches may shrink for 3 s where its scenario expects the profile to pass
    (a failure there is a regression) and for 1 s where it expects a failure (the verdict is what
    the sweep reports; the main job would otherwise shrink every known bug for 3 s)."""
    from scenarios.cli import _tasks, parser
    from scenarios.registry import get

    tasks, _ = _tasks(parser().parse_args(argv))
    budgets = {(get(task.scenario).expect[task.profile], task.shrink_time) for task in tasks}
    assert budgets == {("pass", 3.0), ("fail", 1.0)}


@pytest.mark.parametrize("flags, steered", [((), False), (("--steer",), True)])
def test_steer_reaches_each_search(flags: tuple[str, ...], steered: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`simfs run --steer`: each search hands its examples' rarity to Hypothesis's target phase."""
    from scenarios import runner
    from scenarios.cli import _tasks, parser

    (task,), _ = _tasks(parser().parse_args(["run", *flags, "--examples", "8", "--profile", "nfs", "makedirs-once"]))
    told: list[str] = []
    monkeypatch.setattr(importlib.import_module("scenarios.explore"), "hypothesis_target",
                        lambda value, label: told.append(label))
    outcome, _ = runner._search(task, "nfs", None, b"steer")  # (simfs run calls it in a confined child)
    assert outcome.verdict == "pass" and outcome.examples >= 8
    assert len(told) == (outcome.examples - 1 if steered else 0)


def test_quick_and_a_profile_are_refused_together(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--quick", "--profile", "nfs", "--report", ""]) == 2
    assert "--quick or --profile" in capsys.readouterr().err


def test_rank_output_stays_off_the_console_and_the_finding_keeps_it(tmp_path: Path) -> None:
    """Ranks that print and warn at every example: the console shows the table and, for the
    failure, the counterexample's output once (each distinct warning once, with its count); the
    report keeps it. A search that passes prints none of it."""
    jobs = "tests._output_jobs"
    passed = _simfs("run", f"{jobs}:warns_and_passes", "--profile", "nfs", "--examples", "10", "--report", "passed",
                    cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "every example" not in passed.stdout + passed.stderr
    failed = _simfs("run", f"{jobs}:warns_and_races", "--profile", "beegfs", "--examples", "20", "--report", "failed",
                    cwd=tmp_path)
    shown = failed.stdout + failed.stderr
    assert failed.returncode == 1 and "FileExistsError" in shown, shown
    assert shown.count("a rank warns at every example") == 1, shown
    assert re.search(r"warning \(4 times, ranks 0-3\): \S+_output_jobs.py:12: UserWarning: a rank warns", shown)
    assert shown.count("printed by a rank at every example") == 4  # each rank's stdout, once
    (outcome,) = decode((tmp_path / "failed" / "report.json").read_bytes()).outcomes
    assert outcome.finding is not None
    (warned,) = outcome.finding.warnings
    assert (warned.category, warned.count, warned.ranks, warned.lineno) == ("UserWarning", 4, [0, 1, 2, 3], 12)
    assert [(o.rank, o.stdout) for o in outcome.finding.output] == \
        [(rank, "printed by a rank at every example\n") for rank in range(4)]
