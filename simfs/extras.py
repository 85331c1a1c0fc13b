"""Which of simfs's extras (pyproject.toml's optional-dependencies) installs a library, read from
simfs's installed metadata, so that a message about a missing library can name the extra."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, requires

# extras of tools and test-only libraries, not features (pyproject.toml: [tool.deptry]'s
# optional_dependencies_dev_groups): never the extra a feature's message names
_NOT_FEATURES = ("test", "dev")
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_for(module: str) -> str | None:
    """The first extra of simfs's, in pyproject.toml's order, that installs the distribution named
    like ``module``'s top-level package (``lightning.pytorch``: lightning, in ``stacks``); None where
    none does, or where simfs's metadata is not installed."""
    try:
        declared = requires("simfs") or []
    except PackageNotFoundError:
        return None
    wanted = _normalized(module.partition(".")[0])
    for requirement in declared:
        name, extra = _REQUIREMENT.match(requirement), _EXTRA.search(requirement)
        if name and extra and extra[1] not in _NOT_FEATURES and _normalized(name[1]) == wanted:
            return extra[1]
    return None


def install_command(extra: str) -> str:
    return f"pip install 'simfs[{extra}]'"


def install_hint(module: str) -> str:
    """How to install ``module``: the extra that brings it, or that none does."""
    extra = extra_for(module)
    if extra is None:
        return f"no extra of simfs installs {module.partition('.')[0]}: install it yourself"
    return f"simfs's {extra} extra installs it: {install_command(extra)}"
