"""The simfs command's input side: modules of the user's named like simfs's own packages
(scenarios.importpath), a job file that cannot be imported (exit 2 with its file and line), `simfs
list`, --help's defaults, and a missing library's extra named."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import simfs
from scenarios.cli import main
from scenarios.example import Example
from scenarios.exitcodes import EXIT_USAGE
from scenarios.registry import all_scenarios, get
from scenarios.replaying import encode
from scenarios.target import Target

ROOT = Path(__file__).resolve().parent.parent
SIMFS = Path(sys.executable).parent / "simfs"  # the console script, as a user's shell runs it
OWN_CHECKPOINT = ROOT / "checkpoint" / "__init__.py"
QUIET = ["--report", "", "--db", "", "--jobs", "1"]


def _command(*args: str, cwd: Path, entry: tuple[str, ...] = (str(SIMFS),)) -> subprocess.CompletedProcess[str]:
    """``simfs ARGS`` from ``cwd`` as a shell starts it (no PYTHONHASHSEED: the command sets its own)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    return subprocess.run([*entry, *args], cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def shadowed(tmp_path: Path) -> Path:
    """A directory with a checkpoint.py of its own, which says so when it is imported."""
    (tmp_path / "checkpoint.py").write_text('print("THE USER\'S CHECKPOINT RAN")\nMINE = True\n')
    return tmp_path


# -- simfs's own packages first ---------------------------------------------------------------------

def test_a_checkpoint_module_in_the_directory_leaves_the_builtin_scenarios_alone(shadowed: Path) -> None:
    done = _command("run", "checkpoint-dedup", "--profile", "nfs", "--examples", "2", *QUIET, cwd=shadowed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 results as expected" in done.stdout
    assert "THE USER'S CHECKPOINT RAN" not in done.stdout + done.stderr


def test_a_replay_of_a_builtin_scenario_uses_simfs_checkpoint(shadowed: Path) -> None:
    sc = get("checkpoint-dedup")
    text = encode(Target(sc.job, sc.nodes, sc.ranks_per_node, simfs.profiles.get("nfs"), carrier=sc.carrier),
                  Example())
    done = _command("replay", text, cwd=shadowed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("no failure: checkpoint_dedup on nfs")


def test_a_job_importing_its_own_checkpoint_gets_it_and_is_told(shadowed: Path) -> None:
    (shadowed / "job.py").write_text("import checkpoint\n\n\ndef job():\n    assert checkpoint.MINE\n")
    done = _command("run", "job.py:job", "--carrier", "greenlet", "--examples", "2", "--nodes", "1",
                    "--ranks-per-node", "1", *QUIET, cwd=shadowed)
    assert done.returncode == 0, done.stdout + done.stderr
    told = " ".join(done.stdout.split())  # the console wraps long lines
    assert f"note: {shadowed / 'checkpoint.py'} is named like simfs's package checkpoint" in told
    assert "gets it, not simfs's" in told and "rename yours" in told


def test_a_directory_named_checkpoint_hides_nothing_from_a_job(tmp_path: Path) -> None:
    """A directory of saved states is no module: a job's `import checkpoint` gets simfs's (an
    editable install's finder comes after the current directory's namespace portion)."""
    (tmp_path / "checkpoint").mkdir()
    done = _python("from scenarios import importpath\nimportpath.for_jobs()\n"
                   "import checkpoint\nprint(checkpoint.__file__)\nprint(importpath.shadows())", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(OWN_CHECKPOINT), "[]"]


def test_the_builtin_scenarios_after_a_users_checkpoint_is_a_clear_error(shadowed: Path) -> None:
    """One process holds one module per name: the built-in library cannot run on the user's."""
    done = _python("import sys\nsys.path.insert(0, '')\nimport checkpoint\nimport scenarios.library", shadowed)
    assert done.returncode != 0
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("scenarios.importpath.ShadowedPackage: the built-in scenarios: simfs's own package "
                            f"checkpoint ({ROOT / 'checkpoint'}) is needed"), error
    assert f"imported another module named checkpoint first: {shadowed / 'checkpoint.py'}" in error
    assert "run the built-in scenarios in another process, or rename yours" in error


@pytest.mark.parametrize("entry", [(str(SIMFS),), (sys.executable, "-m", "simfs")], ids=["simfs", "python-m"])
def test_a_users_scenarios_package_in_the_directory_is_never_imported(tmp_path: Path, entry: tuple[str, ...]) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "__init__.py").write_text('raise SystemExit("THE USER\'S SCENARIOS RAN")\n')
    done = _command("list", cwd=tmp_path, entry=entry)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("scenario ") and "THE USER'S SCENARIOS RAN" not in done.stdout + done.stderr


def test_a_replay_finds_a_job_of_the_current_directory(tmp_path: Path) -> None:
    """The command no longer starts with the current directory on its import path: a replay puts it
    there for the job its string names, as `simfs run` does."""
    (tmp_path / "userjob.py").write_text("def job():\n    return 7\n")
    made = _python("import sys\nsys.path.insert(0, '')\nimport simfs, userjob\n"
                   "print(simfs.Cluster(nodes=1, ranks_per_node=1, carrier='greenlet').run(userjob.job).replay)",
                   tmp_path)
    assert made.returncode == 0, made.stderr
    done = _command("replay", made.stdout.strip(), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7" in done.stdout


# -- a job that cannot be imported ------------------------------------------------------------------

@pytest.mark.parametrize(("source", "where", "error"), [
    ("import os\n\ndef job(:\n    pass\n", "broken.py:3: SyntaxError: invalid syntax", "def job(:"),
    ("import os\nimport no_such_module_for_simfs\n\ndef job():\n    pass\n",
     "broken.py:2: ModuleNotFoundError: No module named 'no_such_module_for_simfs'", "import no_such_module_for_simfs"),
], ids=["syntax", "import"])
def test_a_job_file_that_cannot_be_imported_is_bad_input(tmp_path: Path, source: str, where: str,
                                                          error: str) -> None:
    (tmp_path / "broken.py").write_text(source)
    done = _command("run", "broken.py:job", *QUIET, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert done.stderr.startswith(f"simfs: error: cannot import the job 'broken.py:job': {where}\n    {error}\n")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 3


# -- simfs list, --help, extras -----------------------------------------------------------------------

def test_list_has_a_header_fits_100_columns_and_marks_what_is_not_installed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "accelerate", None)  # not installed, as far as imports go
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["scenario", "family", "cluster", "expected", "verdicts"]
    assert max(map(len, lines)) <= 100
    missing = {sc.name for sc in all_scenarios() if "accelerate" in sc.needs}
    assert missing, "the stacks family needs accelerate"
    marked, current = set(), None
    for line in lines:
        if line and not line.startswith(" "):
            current = line.split()[0]
        elif line.startswith("    NOT INSTALLED: accelerate (pip install 'simfs[stacks]')"):
            marked.add(current)
    assert marked == missing
    assert lines[-1] == f"{len(missing)} of {len(all_scenarios())} scenarios need libraries not installed here " \
                        "(NOT INSTALLED)"


def _option_entries(help_text: str) -> list[str]:
    """Each option's entry of a --help: its line and the indented lines after it."""
    entries: list[str] = []
    for line in help_text.splitlines():
        if re.match(r"  -|  [A-Z]+ ", line) or not entries:
            entries.append(line)
        elif line.startswith("   "):
            entries[-1] += " " + line.strip()
    return [" ".join(entry.split()) for entry in entries]


@pytest.mark.parametrize("command", [["run"], ["replay"], ["profiles"], ["probe"]])
def test_help_states_each_default_once(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    entries = _option_entries(capsys.readouterr().out)
    assert len(entries) > 1
    for entry in entries:
        assert "(default: None)" not in entry and "(default: False)" not in entry, entry
        suffix = entry.rfind("(default: ")
        assert suffix < 0 or "default" not in entry[:suffix], entry


def test_preload_of_a_missing_library_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "accelerate", None)
    with pytest.raises(simfs.ConfigError) as info:
        simfs.Cluster(preload=["accelerate"], carrier="process")
    assert str(info.value) == ("Cluster: preload entry must be an installed module, got 'accelerate' (simfs's stacks "
                               "extra installs it: pip install 'simfs[stacks]')")
    with pytest.raises(simfs.ConfigError, match="no extra of simfs installs no_such_module_for_simfs"):
        simfs.Cluster(preload=["no_such_module_for_simfs"], carrier="process")
