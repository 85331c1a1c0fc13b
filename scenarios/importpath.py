"""The import path of simfs's processes. simfs installs four top-level packages, ``simfs``,
``scenarios``, ``checkpoint`` and ``coord`` (pyproject.toml's [tool.setuptools.packages.find]),
names a user's project may use for modules of its own. A process holds one module per name, so
the code that imports a name decides which one it means: where simfs's own code needs one of its
packages (the built-in scenarios, ``simfs probe``), it is found in simfs's installation whatever
lies first on ``sys.path``; a user's job is imported with the current directory first, as
``python -m`` has it, and keeps a module of its own of such a name. docs/architecture.md, "Import
names", says why."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

OWN_PACKAGES = ("simfs", "scenarios", "checkpoint", "coord")  # pyproject.toml [tool.setuptools.packages.find]
INSTALLED_AT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where the four lie side by side


class ShadowedPackage(ImportError):
    """simfs's own code needs one of its packages, and this process imported another module of
    that name first."""


@dataclass(frozen=True)
class Shadow:
    """A user's module named like one of simfs's packages, met by a job's import of that name."""

    name: str  # the top-level name
    path: str  # its file, or its package's directory
    theirs: bool  # a job's ``import name`` gets this module (else simfs's, imported already)

    def note(self) -> str:
        """What a job imported now gets for the name, and the fix."""
        own = own_location(self.name)
        if self.theirs:
            return (f"note: {self.path} is named like simfs's package {self.name}: your job's `import {self.name}` "
                    f"gets it, not simfs's ({own}); if the job means simfs's {self.name}, rename yours")
        return (f"note: {self.path} is named like simfs's package {self.name}, which simfs itself runs on: your "
                f"job's `import {self.name}` gets simfs's ({own}), not yours; rename yours to import it in a job")


class _OwnFirst(importlib.abc.MetaPathFinder):
    """Ahead of every other finder: the pinned top-level names, found in simfs's installation
    only (their submodules follow from their packages' ``__path__``)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is not None or fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [INSTALLED_AT])


_FINDER = _OwnFirst()


def own_location(name: str) -> str:
    """The directory of simfs's own package ``name``."""
    return os.path.join(INSTALLED_AT, name)


def _is_own(path: str, name: str) -> bool:
    own, real = os.path.realpath(own_location(name)), os.path.realpath(path)
    return real == own or real.startswith(own + os.sep)


def _where(module: ModuleType) -> str | None:
    """A module's file, or its (namespace) package's first directory."""
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        return file
    return next(iter(getattr(module, "__path__", None) or ()), None)


def _imported_elsewhere(name: str) -> str | None:
    """Where the module this process imported as ``name`` lies, if it is not simfs's package."""
    module = sys.modules.get(name)
    where = _where(module) if module is not None else None
    return None if where is None or _is_own(where, name) else where


def _first_on_path(name: str) -> str | None:
    """The user's module or package ``name`` that ``sys.path`` holds ahead of simfs's installation,
    found without importing it. A directory without ``__init__.py`` (a ``checkpoint/`` of saved
    states) is no module of the user's: it is a namespace portion, which a regular package anywhere
    on the path outranks, as simfs's does where it is installed in site-packages."""
    spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
    if spec is None or spec.origin is None or _is_own(spec.origin, name):
        return None
    origin = os.path.abspath(spec.origin)
    return os.path.dirname(origin) + os.sep if spec.submodule_search_locations else origin


def pin(names: Iterable[str]) -> None:
    """Find these of simfs's packages in its installation from now on, in this process and in those
    it forks, whatever lies first on ``sys.path`` (an editable install's finder comes after every
    ``sys.path`` entry, so even a directory named ``checkpoint`` there would hide simfs's)."""
    _FINDER.names.update(names)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def require_own(names: Iterable[str], who: str) -> None:
    """Make ``import NAME`` give simfs's own package for each of ``names``, which ``who`` (a command,
    "the built-in scenarios") needs; ShadowedPackage if this process imported another module of such
    a name already."""
    names = tuple(names)
    for name in names:
        other = _imported_elsewhere(name)
        if other is not None:
            raise ShadowedPackage(
                f"{who}: simfs's own package {name} ({own_location(name)}) is needed, but this process imported "
                f"another module named {name} first: {other}. A process holds one module per name: run {who} in "
                f"another process, or rename yours", name=name, path=other)
    pin(names)


def for_jobs() -> None:
    """The import path a user's job is imported with: the current directory first, as ``python -m``
    has it (the job's own modules outrank installed ones), and simfs's own packages pinned except
    those the job has a module of its own for (Shadow)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    pin(name for name in OWN_PACKAGES if _imported_elsewhere(name) is None and _first_on_path(name) is None)


def shadows() -> list[Shadow]:
    """The user's modules named like simfs's packages that a job imported now would meet."""
    found = []
    for name in OWN_PACKAGES:
        imported = _imported_elsewhere(name)
        if imported is not None:
            found.append(Shadow(name, imported, theirs=True))
            continue
        first = _first_on_path(name)
        if first is not None:
            found.append(Shadow(name, first, theirs=name not in sys.modules and name not in _FINDER.names))
    return found
