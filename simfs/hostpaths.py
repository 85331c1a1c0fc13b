"""Real paths any code of a rank may read: the Python installation (the interpreter's prefixes,
its standard library and site directories), which every node of a real cluster has on its disk.
Everything else a rank's own code names is on its simulated machine; the import system reads
further real paths (tasks/importreads.py)."""

from __future__ import annotations

import os
import site
import sys
import sysconfig

_SITE_DIRS = ("site-packages", "dist-packages")  # Debian's name for site-packages


def _installation() -> tuple[str, ...]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            paths.add(value)
    paths.update(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    for entry in sys.path:  # site directories added by .pth files (another environment's packages)
        if entry and os.path.isabs(entry) and os.path.basename(entry.rstrip("/")) in _SITE_DIRS:
            paths.add(entry)
    out = set()
    for p in paths:
        if not os.path.exists(p):
            continue
        real = os.path.realpath(p)
        if real not in ("/", "/tmp", "/proc"):
            out.update({os.path.normpath(p), real})
    return tuple(sorted(out))


class HostPaths:
    """Which absolute, normalized paths are read from the real disk (read-only) by any code of a
    rank, as of when this was made (a run makes one: sys.path may have changed since the last)."""

    def __init__(self, prefixes: tuple[str, ...] | None = None) -> None:
        self.prefixes = _installation() if prefixes is None else prefixes
        self._exact = frozenset(self.prefixes)
        self._under = tuple(p + "/" for p in self.prefixes)

    def readable(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._under)


_cache: dict[tuple[str, ...], HostPaths] = {}


def host_paths() -> HostPaths:
    """The readable paths for the current sys.path (remade only when sys.path changed)."""
    key = tuple(sys.path)
    found = _cache.get(key)
    if found is None:
        _cache.clear()
        found = _cache[key] = HostPaths()
    return found
