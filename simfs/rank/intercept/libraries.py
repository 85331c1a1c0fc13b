"""ctypes.util.find_library inside a rank. CPython answers it by running ``/sbin/ldconfig -p``
(then gcc and ld) in a child process, which a rank may not start; libraries are the machine's,
read-only, as imports are, so a rank gets the answer the host's library cache gives: the listing is
read once, outside any rank, when the interception is installed. trio, for one, asks for pthread
while it is imported (httpx and huggingface_hub import it)."""

from __future__ import annotations

import ctypes.util
import os
import re
import struct
import subprocess

from ...tasks.task import Task
from .registry import patch_function

# Lib/ctypes/util.py, _findSoname_ldconfig: the ABI tag ldconfig prints per machine
_ABI = {"x86_64-64": "libc6,x86-64", "ppc64-64": "libc6,64bit", "sparc64-64": "libc6,64bit",
        "s390x-64": "libc6,64bit", "ia64-64": "libc6,IA-64"}


def _ldconfig_listing() -> bytes:
    """``ldconfig -p`` as CPython runs it (C locale); empty where it cannot run."""
    try:
        return subprocess.run(["/sbin/ldconfig", "-p"], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, env={"LC_ALL": "C", "LANG": "C"}, check=False).stdout
    except OSError:
        return b""


def soname(listing: bytes, name: str) -> str | None:
    """What CPython's find_library answers for ``name`` from the ldconfig ``listing`` (its first
    try; the gcc and ld fallbacks need child processes and a compiler, so a rank gets None where
    only they would find the library)."""
    machine = os.uname().machine + ("-32" if struct.calcsize("l") == 4 else "-64")
    pattern = rf"\s+(lib{re.escape(name)}\.[^\s]+)\s+\({_ABI.get(machine, 'libc6')}"
    found = re.search(os.fsencode(pattern), listing)
    return os.fsdecode(found.group(1)) if found else None


def install() -> None:
    listing = _ldconfig_listing()

    def find_library(task: Task, name: str) -> str | None:
        return soname(listing, name)

    patch_function(ctypes.util, "find_library", find_library)
