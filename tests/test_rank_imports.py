"""The import system inside a rank reads the real disk, read-only; the rank's own code does not, even
while a module is being imported (its body, a module ``__getattr__`` reached through ``from m import
x``), and a finder a rank installs cannot write a real file through the import system's access."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import simfs


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Path]:
    """A real directory on the host's sys.path (not part of the Python installation)."""
    tag = f"simfs_rank_imports_{abs(hash(str(tmp_path))) % 10**8}"
    root = tmp_path / tag
    root.mkdir()
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.startswith("rankmod_")]:
            del sys.modules[name]


def test_a_module_body_reads_the_simulated_machine_not_its_real_directory(modules: Path) -> None:
    (modules / "rankmod_body.py").write_text(
        "import os\n"
        "SEES_OWN_FILE = os.path.exists(__file__)\n"
        "SEES_SIMULATED = os.path.exists('/shared/marker')\n")

    def job() -> tuple[bool, bool]:
        if not os.path.exists("/shared/marker"):
            open("/shared/marker", "w").close()
        body = importlib.import_module("rankmod_body")  # (made by the test: imported by name)
        return body.SEES_OWN_FILE, body.SEES_SIMULATED

    result = simfs.Cluster(nodes=1, ranks_per_node=1, profile="local").run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == (False, True)
    assert not (modules / "__pycache__").exists()


def test_a_package_getattr_reached_through_from_import_is_the_ranks_own_code(modules: Path) -> None:
    """``from pkg import name`` inside a module body: importlib's _handle_fromlist calls the package's
    ``__getattr__`` while an import is under way; that is the rank's code, on its simulated machine."""
    (modules / "rankmod_pkg").mkdir()
    (modules / "rankmod_pkg" / "__init__.py").write_text(
        "import os\n"
        "SEEN = []\n"
        "def __getattr__(name):\n"
        "    if name == 'answer':\n"
        "        SEEN.append(os.path.exists(__file__))\n"
        "        return True\n"
        "    raise AttributeError(name)\n")
    (modules / "rankmod_user.py").write_text("from rankmod_pkg import answer\n")

    def job() -> list[bool]:
        package = importlib.import_module("rankmod_pkg")
        importlib.import_module("rankmod_user")  # its body is the import under way
        return list(package.SEEN)

    result = simfs.Cluster(nodes=1, ranks_per_node=1, profile="local").run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == [False, False]  # asked by _handle_fromlist, then by the module body


def test_a_finder_a_rank_installs_cannot_write_the_real_disk(modules: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary.txt"

    class WritingFinder:
        """A finder that tries to write a real file while the import system runs it."""

        outcome = ""

        @classmethod
        def find_spec(cls, name: str, path: object = None, target: object = None) -> None:
            if name == "rankmod_missing":
                try:
                    with open(canary, "w") as f:
                        f.write("escaped")
                    cls.outcome = "wrote"
                except OSError as exc:
                    cls.outcome = errno.errorcode.get(exc.errno or 0, str(exc))
                except simfs.BypassError as exc:
                    cls.outcome = f"refused: {exc}"
            return None

    def job() -> str:
        sys.meta_path.insert(0, WritingFinder)  # type: ignore[arg-type]
        try:
            importlib.import_module("rankmod_missing")
        except ImportError:
            pass
        finally:
            sys.meta_path.remove(WritingFinder)  # type: ignore[arg-type]
        return WritingFinder.outcome

    result = simfs.Cluster(nodes=1, ranks_per_node=1, profile="local").run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == "EROFS"
    assert not canary.exists()


def test_a_long_import_is_progress_for_the_watchdog(modules: Path) -> None:
    """A rank process makes the import system's reads itself, without asking the host; every few
    hundred it still tells the host, so an import that takes longer than the watchdog (its module
    bodies asking the simulation nothing) is not taken for a rank stuck outside simfs."""
    count = 500
    for i in range(count):  # each body spins ~2 ms of real time and makes no simulated call
        (modules / f"rankmod_slow{i}.py").write_text("for _ in range(60_000):\n    pass\n")

    def job() -> int:
        for i in range(count):
            importlib.import_module(f"rankmod_slow{i}")
        return count

    watchdog = 0.5
    result = simfs.Cluster(nodes=1, ranks_per_node=1, profile="local", watchdog=watchdog).run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == count and result.wall_time > watchdog
