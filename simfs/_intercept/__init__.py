"""Interception of the Python APIs rank code uses, installed once per process.

Outside a simulated rank every patched function behaves exactly as the original; inside one
it acts on the rank's simulated machine."""

from __future__ import annotations

import importlib.util
import threading

from . import clock, files, oslevel, procstate, stdlib, thirdparty, threads
from .registry import scan_modules

_lock = threading.Lock()
_installed = False


def install() -> None:
    """Install the patches (first call) and catch up with modules imported since."""
    global _installed
    with _lock:
        if not _installed:
            for group in (oslevel, files, procstate, clock, stdlib, threads, thirdparty):
                group.install()
            if importlib.util.find_spec("fsspec") is not None:
                from ..fsspec_view import register

                register()
            _installed = True
        scan_modules()
