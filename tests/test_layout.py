"""The port's two sides in the code's own imports: a rank's side (rank/: its port clients, the
interception, c10d, fsspec's view) and what both sides share (tasks/, port/) import nothing of the
kernel's (runtime/, the filesystem model fs/, the cluster and what runs it), directly or through
any other module; what both share imports neither side."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from simfs.fs import inode
from simfs.tasks import dirent

SIMFS = Path(__file__).resolve().parent.parent / "simfs"
SHARED = ("tasks", "port")
RANK_SIDE = ("rank",)
KERNEL = ("runtime", "fs", "cluster", "hostrun", "supervise")  # the simulated kernel, and what runs it


def _modules(top: str) -> list[Path]:
    place = SIMFS / top
    return sorted(place.rglob("*.py")) if place.is_dir() else [place.with_suffix(".py")]


def _imported(path: Path) -> set[str]:
    """The simfs modules (their first name below simfs) that ``path`` imports, wherever it does."""
    package = path.relative_to(SIMFS.parent).with_suffix("").parts[:-1]  # where relative imports start
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            names = [module + [alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        found.update(parts[1] for parts in names if parts[0] == "simfs")
    return found


@functools.cache
def _imports() -> dict[str, set[str]]:
    """Each of simfs's modules and packages (by its first name below simfs): what it imports."""
    units = {p.relative_to(SIMFS).parts[0].removesuffix(".py") for p in SIMFS.rglob("*.py")} - {"__init__"}
    return {unit: set().union(*map(_imported, _modules(unit))) - {unit} for unit in units}


def _chains(top: str) -> dict[str, list[str]]:
    """Every module ``top`` reaches through imports, with the chain that first reaches it."""
    chains = {top: [top]}
    todo = [top]
    while todo:
        unit = todo.pop()
        for name in sorted(_imports().get(unit, set()) - set(chains)):
            chains[name] = [*chains[unit], name]
            todo.append(name)
    return chains


@pytest.mark.parametrize("top", RANK_SIDE + SHARED)
def test_no_rank_side_module_leads_to_the_kernel(top: str) -> None:
    """Directly or through any chain of imports (simfs/report.py named the kernel's TraceEvent,
    so rank/ reached it, at 003b054)."""
    crossing = [" -> ".join(chain) for name, chain in _chains(top).items() if name in KERNEL]
    assert not crossing


@pytest.mark.parametrize("top", SHARED)
def test_what_both_sides_share_imports_neither(top: str) -> None:
    crossing = {f"{path.relative_to(SIMFS)} -> simfs.{name}" for path in _modules(top)
                for name in _imported(path) & set(RANK_SIDE + KERNEL)}
    assert not crossing


def test_the_walk_sees_the_kernels_imports() -> None:
    """The check can fail: the kernel's own modules are seen importing each other."""
    assert "tasks" in _imported(SIMFS / "runtime" / "scheduler.py")
    assert "fs" in _imported(SIMFS / "runtime" / "syscalls" / "openfile.py")


def test_a_directory_entrys_kinds_are_the_filesystems() -> None:
    assert (dirent.FILE, dirent.DIR, dirent.LINK) == (inode.FILE, inode.DIR, inode.LINK)
