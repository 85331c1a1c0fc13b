"""Real paths a rank may read: the Python installation and the directories on sys.path, so that
imports keep working. Everything else a rank names is on its simulated machine."""

from __future__ import annotations

import os
import sys
import sysconfig


def _python_prefixes() -> tuple[str, ...]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(value)
    for entry in sys.path:
        if entry and os.path.isabs(entry) and os.path.exists(entry):
            paths.add(entry)
    for name, module in list(sys.modules.items()):  # packages found by other finders (editable installs)
        if "." not in name and module is not None:
            for where in getattr(module, "__path__", None) or []:
                if isinstance(where, str) and os.path.isabs(where):
                    paths.add(where)
    out = set()
    for p in paths:
        real = os.path.realpath(p)
        if real not in ("/", "/tmp", "/proc"):
            out.update({p, real})
    return tuple(sorted(out))


class HostPaths:
    """Which absolute, normalized paths are read from the real disk (read-only), as of when
    this was made (a run makes one: sys.path may have changed since the last)."""

    def __init__(self) -> None:
        self.prefixes = _python_prefixes()
        self._exact = frozenset(self.prefixes)
        self._under = tuple(p + "/" for p in self.prefixes)

    def readable(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._under)


_cache: dict[tuple[tuple[str, ...], int], HostPaths] = {}


def host_paths() -> HostPaths:
    """The readable paths for the current sys.path (remade only when sys.path changed)."""
    key = (tuple(sys.path), sum(1 for name in sys.modules if "." not in name))
    found = _cache.get(key)
    if found is None:
        _cache.clear()
        found = _cache[key] = HostPaths()
    return found
