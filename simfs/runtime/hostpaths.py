"""Real paths a rank may read: the Python installation, so that imports keep working.
Everything else a rank names is on its simulated machine."""

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
        if "site-packages" in entry or "dist-packages" in entry:
            paths.add(entry)
    return tuple(sorted(os.path.realpath(p) for p in paths if p and p != "/"))


class HostPaths:
    """Which absolute, normalized paths are read from the real disk (read-only)."""

    def __init__(self) -> None:
        self.prefixes = _python_prefixes()

    def readable(self, path: str) -> bool:
        for prefix in self.prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return True
        return False
