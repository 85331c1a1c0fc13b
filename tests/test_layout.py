"""The port's two sides in the code's own imports: a rank's side (rank/: its port clients, the
interception, c10d, fsspec's view) and what both sides share (tasks/, port/) import nothing of the
kernel's (runtime/, the filesystem model fs/, the cluster and what runs it), directly or through
any other module; what both share imports neither side."""

from __future__ import annotations

import ast
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
    """The simfs modules (their first part below simfs) that ``path`` imports, wherever it does."""
    package = path.relative_to(SIMFS.parent).with_suffix("").parts
    package = package[:-1]  # a module's relative imports start at its package (an __init__ is one)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            parts = base + (node.module.split(".") if node.module else [])
            names = [parts] if node.module or len(parts) > 1 else [parts + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for parts in names:
            if parts[:1] == ["simfs"] and len(parts) > 1:
                found.add(parts[1])
            elif parts == ["simfs"] and isinstance(node, ast.ImportFrom):
                found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("top", RANK_SIDE + SHARED)
def test_no_rank_side_module_imports_the_kernel(top: str) -> None:
    crossing = {f"{path.relative_to(SIMFS)} -> simfs.{name}" for path in _modules(top)
                for name in _imported(path) & set(KERNEL)}
    assert not crossing


def _units() -> list[str]:
    """simfs's modules and packages, by their first name below simfs."""
    return sorted({p.relative_to(SIMFS).parts[0].removesuffix(".py") for p in SIMFS.rglob("*.py")} - {"__init__"})


@pytest.mark.parametrize("top", RANK_SIDE + SHARED)
def test_nothing_a_rank_side_module_imports_leads_to_the_kernel(top: str) -> None:
    """Through any chain of imports (simfs/report.py named the kernel's TraceEvent at 6b43f71)."""
    imports = {unit: set().union(*(_imported(p) for p in _modules(unit))) - {unit} for unit in _units()}
    reached: set[str] = set()
    todo = [top]
    while todo:
        unit = todo.pop()
        for name in imports.get(unit, set()) - reached:
            reached.add(name)
            todo.append(name)
    assert not reached & set(KERNEL)


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
