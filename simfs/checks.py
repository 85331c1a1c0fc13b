"""Validation of sizes, counts and times given to simfs: each check names the argument and the
range it must lie in."""

from __future__ import annotations

import math
from typing import Any

from .errors import ConfigError, invalid
from .extras import install_hint

MAX_NODES = 4096
MAX_RANKS = 65536
MAX_SECONDS = 100 * 365 * 86400.0  # virtual durations beyond a century are mistakes
MAX_BANDWIDTH = 1e15  # bytes per second


def count(where: str, name: str, value: Any, lo: int, hi: int) -> int:
    """An int (not a bool) in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(where, name, f"an int in [{lo}, {hi}]", value)
    return value


def number(where: str, name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
           unit: str = "") -> float:
    """A finite real number in [lo, hi] (or (lo, hi] with ``lo_open``), as a float."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (value > lo if lo_open else value >= lo) and value <= hi)
    if not ok:
        left = "(" if lo_open else "["
        raise invalid(where, name, f"a finite number in {left}{lo:g}, {hi:g}]{unit}", value)
    return float(value)


def seconds(where: str, name: str, value: Any, *, positive: bool = False) -> float:
    """A duration in virtual seconds: finite, non-negative (or positive), at most a century."""
    return number(where, name, value, 0.0, MAX_SECONDS, lo_open=positive, unit=" seconds")


def bandwidth(where: str, name: str, value: Any) -> float:
    return number(where, name, value, 1.0, MAX_BANDWIDTH, unit=" bytes/s")


def environment(where: str, value: Any) -> dict[str, str]:
    """An environment: str keys (no '=' or NUL, not empty) to str values (no NUL)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(where, "env", "a dict of str to str", value)
    for key, item in value.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise invalid(where, "env key", "a non-empty str without '=' or NUL", key)
        if not isinstance(item, str) or "\0" in item:
            raise invalid(where, f"env[{key!r}]", "a str without NUL", item)
    return dict(value)


def absolute_path(where: str, name: str, value: Any) -> str:
    """An absolute, normalized path (no '..', no trailing '/', no NUL)."""
    import posixpath

    if (not isinstance(value, str) or not value.startswith("/") or "\0" in value
            or posixpath.normpath(value) != value or value.startswith("//")):
        raise invalid(where, name, "an absolute normalized path such as '/shared/run'", value)
    return value


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (finding a submodule imports its package)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # its package is missing or blocked, or not a package
        return False


def preload(where: str, value: Any, carrier: str) -> tuple[str, ...]:
    """Modules rank processes start with (``["transformers", "lightning.pytorch"]``): installed
    module names, in order, once each (a missing one's error names the extra that installs it);
    only rank processes have them."""
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise invalid(where, "preload", "a list of module names such as ['transformers']", value)
    names = tuple(dict.fromkeys(value))
    for module in names:
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            raise invalid(where, "preload entry", "a module name such as 'transformers'", module)
        if not installed(module):
            raise ConfigError(f"{invalid(where, 'preload entry', 'an installed module', module)} "
                              f"({install_hint(module)})")
    if names and carrier != "process":
        raise ConfigError(f"{where}: preload needs carrier='process': greenlet ranks share the modules of one "
                          "process, which imports each once already")
    return names
