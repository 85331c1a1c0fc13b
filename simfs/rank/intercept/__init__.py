"""Interception of the Python APIs rank code uses: installed once per process, verified at
every run (a rank may have replaced a patched name), refusing by default what it does not
simulate, with an audit hook as the backstop.

Outside a simulated rank every patched function behaves exactly as the original; inside one
it acts on the rank's simulated machine."""

from __future__ import annotations

import sys
import threading

from . import (
    audit,
    clock,
    files,
    hostcalls,
    imports,
    libraries,
    mapping,
    oslevel,
    procstate,
    selecting,
    signals,
    stdlib,
    thirdparty,
    threads,
    warned,
)
from .registry import scan_modules, verify

_lock = threading.Lock()
_installed = False


def install(*, modules_unchanged: bool = False) -> None:
    """Install the patches (first call), put back any that was replaced, and catch up with
    modules imported since (``modules_unchanged``: the caller saw that sys.modules holds the
    very modules it held at the last call, so there are none)."""
    global _installed
    with _lock:
        if not _installed:
            for group in (files, procstate, clock, stdlib, threads, signals, selecting, thirdparty, hostcalls, imports,
                          libraries, mapping, warned, oslevel):
                group.install()
            oslevel.patch_everything_else()
            audit.install()
            _installed = True
        else:
            verify()
            if not modules_unchanged:
                thirdparty.install()  # libraries imported since the last run
        if sys.modules.get("fsspec") is not None:
            from ..fsspec_view import register

            register()
        scan_modules()
