"""A user's own project, installed as a user installs it, imports inside ranks exactly as in the
host: a package installed editable (setuptools' editable finder, flat layout), one installed editable
through a ``.pth`` path entry (src layout), a namespace package, a zip archive and a directory on
PYTHONPATH, and the current directory, imported lazily inside ranks on every node, the host never
having imported them. The import system reads those real files; the rank's own ``open()`` of the
same path is on its simulated machine, and no bytecode is written next to them.

Each test runs a fresh interpreter of the test's own virtual environment: a venv that sees this
environment's packages (simfs, torch) through a ``.pth`` file and has the user projects installed
with ``pip install -e``."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _pyproject(name: str, find: str) -> str:
    """A setuptools project's pyproject.toml; ``find``: its [tool.setuptools.packages.find] lines."""
    return (f'[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "0.1"\n\n[tool.setuptools.packages.find]\n{find}\n')


FLAT_PROJECT = {
    "pyproject.toml": _pyproject("userpkg", 'include = ["userpkg*", "userns*"]\nnamespaces = true'),
    "userpkg/__init__.py": "",
    "userpkg/naming.py": """
        def shard_name(rank):
            return f"shard-{rank}"
        """,
    # a module whose body does simulated I/O while ranks import it side by side
    "userpkg/registry.py": """
        import os
        os.makedirs("/shared/registry", exist_ok=True)
        SEEN = [os.path.exists(f"/shared/registry/{i}") for i in range(3)]
        """,
    "userpkg/jobs.py": """
        import os
        import torch.distributed as dist

        def job():
            '''Every import below happens inside the ranks (the host imported only this module).'''
            import checkpoint
            import coord
            import userlib.layout
            import userns.plugin
            from userpkg import naming, registry

            rank = dist.get_rank()
            coord.makedirs_once("/shared/out")
            with open(f"/shared/out/{naming.shard_name(rank)}", "w") as f:
                f.write(userlib.layout.LAYOUT + userns.plugin.NAME)
            dist.barrier()
            assert sorted(os.listdir("/shared/out")) == [naming.shard_name(r) for r in range(dist.get_world_size())]
            return [checkpoint.__name__, registry.SEEN, userlib.layout.LAYOUT, userns.plugin.NAME]

        def lazy_extras():
            import zipped_helper
            import pythonpath_helper
            import cwd_helper
            return [zipped_helper.WHERE, pythonpath_helper.WHERE, cwd_helper.WHERE]

        def reads_own_source():
            '''The rank's own open() of a real file of the project: its simulated machine has none.'''
            import userpkg.naming
            try:
                open(userpkg.naming.__file__).read()
            except FileNotFoundError:
                return "not on the simulated machine"
            return "read the real file"
        """,
    "userns/plugin.py": "NAME = 'ns'\n",  # a namespace package: no __init__.py
    "tests/test_ranks.py": """
        import torch.distributed as dist
        import pytest

        @pytest.mark.simfs(nodes=2, ranks_per_node=2, profile=["nfs", "local"], max_examples=5)
        def test_lazy_imports_in_ranks():
            from userpkg.jobs import job
            job()
            dist.barrier()
        """,
}

SRC_PROJECT = {
    "pyproject.toml": _pyproject("userlib", 'where = ["src"]'),
    "src/userlib/__init__.py": "",
    "src/userlib/layout.py": "LAYOUT = 'src'\n",
}


# a job module in the current directory of `simfs run`, importing a neighbour lazily in the ranks
CWD_JOBS = """
import torch.distributed as dist

def job():
    import cwd_helper
    dist.barrier()
    assert cwd_helper.WHERE == "current directory"
"""


@dataclass(frozen=True)
class UserEnv:
    python: Path  # the venv's interpreter
    flat: Path  # the flat-layout project (editable finder)
    elsewhere: Path  # a directory outside both projects (the current directory of the commands)
    pythonpath: Path  # a directory and a zip archive on PYTHONPATH
    zipped: Path

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env["PYTHONPATH"] = os.pathsep.join((str(self.pythonpath), str(self.zipped)))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode writing on, as by default: ranks still write none
        return subprocess.run([str(self.python), *args], cwd=cwd or self.elsewhere, env=env, text=True,
                              capture_output=True, timeout=600)

    def python_code(self, code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("-c", textwrap.dedent(code), cwd=cwd)

    def rank_returned(self, job: str, rank: int, *, nodes: int, profile: str) -> str:
        """The repr of what ``rank`` returned from a Cluster.run of userpkg.jobs's ``job`` (one rank a node)."""
        done = self.python_code(f"""
            import simfs
            from userpkg.jobs import {job}
            result = simfs.Cluster(nodes={nodes}, ranks_per_node=1, profile={profile!r}).run({job})
            assert result.ok, result.summary()
            print(repr(result.returns[{rank}]))
            """)
        _assert_ok(done)
        return done.stdout.splitlines()[-1]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def _pycache_dirs(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("__pycache__")]


def _compiled(*roots: Path) -> set[str]:
    """The modules with bytecode under the roots ('naming' for naming.cpython-311.pyc)."""
    return {pyc.name.partition(".")[0] for cache in _pycache_dirs(*roots) for pyc in cache.iterdir()}


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> UserEnv:
    root = tmp_path_factory.mktemp("user")
    flat, src, elsewhere, pythonpath = root / "userpkg", root / "userlib", root / "elsewhere", root / "pythonpath"
    _write(flat, FLAT_PROJECT)
    _write(src, SRC_PROJECT)
    _write(pythonpath, {"pythonpath_helper.py": "WHERE = 'PYTHONPATH'\n"})
    _write(elsewhere, {"cwd_helper.py": "WHERE = 'current directory'\n",
                       "cwd_jobs.py": CWD_JOBS})
    zipped = root / "helpers.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("zipped_helper.py", "WHERE = 'zip'\n")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    # this environment's packages (simfs, torch, pip), with their own .pth files processed
    parents = [p for p in site.getsitepackages() if os.path.isdir(p)]
    Path(venv_site, "_test_parent_env.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in parents))
    for project in (flat, src):
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(project)], check=True,
                       capture_output=True, text=True)
    finders = list(Path(venv_site).glob("__editable__*userpkg*finder.py"))
    assert finders, "the flat project should be installed through setuptools' editable finder"
    assert any(str(src / "src") in p.read_text() for p in Path(venv_site).glob("__editable__*userlib*.pth")), \
        "the src-layout project should be installed through a .pth path entry"
    for cache in _pycache_dirs(flat, src, pythonpath, elsewhere):  # written by the installs' builds, if any
        for pyc in cache.iterdir():
            pyc.unlink()
        cache.rmdir()
    return UserEnv(python, flat, elsewhere, pythonpath, zipped)


def _assert_ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, \
        f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"


def test_cluster_run_imports_lazily_on_every_rank(user_env: UserEnv) -> None:
    done = user_env.python_code("""
        import sys
        import simfs
        from userpkg.jobs import job
        assert "coord" not in sys.modules and "userlib" not in sys.modules
        for seed in range(3):
            result = simfs.Cluster(nodes=2, ranks_per_node=2, profile="nfs", seed=seed).run(job)
            assert result.ok, result.summary()
            assert set(result.returns) == {0, 1, 2, 3}
            print(result.returns[3])
            for name in ("coord", "checkpoint", "userlib", "userlib.layout", "userns", "userns.plugin",
                         "userpkg.naming", "userpkg.registry"):
                sys.modules.pop(name, None)
        """)
    _assert_ok(done)
    assert done.stdout.splitlines()[-1] == "['checkpoint', [False, False, False], 'src', 'ns']"
    # the host compiled what it imported (userpkg, userpkg.jobs); the ranks compiled nothing
    assert _compiled(user_env.flat, user_env.flat.parent / "userlib") <= {"__init__", "jobs"}


def test_zip_pythonpath_and_current_directory_import_in_ranks(user_env: UserEnv) -> None:
    returned = user_env.rank_returned("lazy_extras", 1, nodes=2, profile="nfs")
    assert returned == "['zip', 'PYTHONPATH', 'current directory']"
    # (the host compiles what it imports itself there: cwd_jobs, under `simfs run`)
    assert not {"pythonpath_helper", "cwd_helper"} & _compiled(user_env.pythonpath, user_env.elsewhere)


def test_a_ranks_own_open_of_a_project_file_is_simulated(user_env: UserEnv) -> None:
    assert user_env.rank_returned("reads_own_source", 0, nodes=1, profile="local") == "'not on the simulated machine'"


def test_explore_imports_on_every_rank(user_env: UserEnv) -> None:
    done = user_env.python_code("""
        import scenarios
        from userpkg.jobs import job
        finding = scenarios.explore(job, nodes=2, ranks_per_node=2, profile="nfs", max_examples=20, seed=1)
        assert not finding.failed, str(finding)
        print(finding.examples)
        """)
    _assert_ok(done)
    assert int(done.stdout.splitlines()[-1]) >= 20


def test_simfs_run_of_a_user_job_from_another_directory(user_env: UserEnv) -> None:
    done = user_env.run("-m", "simfs", "run", "userpkg.jobs:job", "--profile", "nfs", "--examples", "10",
                        "--jobs", "1", "--report", str(user_env.elsewhere.parent / "report"))
    _assert_ok(done)


def test_simfs_run_of_a_job_in_its_current_directory_on_worker_processes(user_env: UserEnv) -> None:
    done = user_env.run("-m", "simfs", "run", "cwd_jobs:job", "--profile", "nfs", "--examples", "10",
                        "--jobs", "2", "--report", str(user_env.elsewhere.parent / "report-cwd"))
    _assert_ok(done)


def test_pytest_plugin_test_inside_the_user_project(user_env: UserEnv) -> None:
    done = user_env.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=user_env.flat)
    _assert_ok(done)
    assert "2 passed" in done.stdout, done.stdout
