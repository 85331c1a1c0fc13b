"""What a confined process may read of the real filesystem (and execute): the system's programs
and libraries, /etc but its secrets, /proc and /sys, the harmless devices, the Python
installation, what was on ``sys.path`` and the directories of the modules imported when the
process was made. Nothing else: not the user's home, /tmp, /run or /var, so not the caller's
files, FIFOs, sockets or terminals (a rank reads its own data from the simulated machine; the
import system reads what the host could import)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable

from ..hostpaths import host_paths

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# in /etc, what no job reads and a root process could: password hashes, sudo rules, host keys,
# private keys and keytabs
SECRETS = frozenset({
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh",
    "/etc/ssl/private", "/etc/pki", "/etc/krb5.keytab", "/etc/security/opasswd", "/etc/wireguard",
    "/etc/NetworkManager/system-connections", "/etc/docker", "/etc/libvirt",
})
_UNSAFE = frozenset({"/", "/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/root", "/var", os.path.expanduser("~")})


@functools.cache
def system_roots() -> tuple[str, ...]:
    """The system's part, the same for every process of this machine."""
    return (*(p for p in (*SYSTEM, *DEVICES) if os.path.exists(p)), *_beside_secrets("/etc"))


def roots(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every path a confined process made now may read beneath: the system's, Python's and
    ``extra``'s (a job file's directory). A path that would open the rest of the machine (/,
    /tmp, a home) is taken only where it is the installation's or was named in ``extra``.
    A path that no longer exists (a stale editable install's, a deleted module's) is left out:
    Landlock cannot open it. Made again only when sys.path or the modules imported changed (a
    forked process finds its parent's)."""
    key = (tuple(sys.path), len(sys.modules), tuple(extra))
    found = _made.get(key)
    if found is None:
        known = {*host_paths().prefixes, *_search_path(), *_editable_packages()}
        python = {p for p in {*known, *_module_directories(tuple(known))} if p not in _UNSAFE and os.path.exists(p)}
        found = tuple(sorted({*system_roots(), *_outermost(python), *(os.path.realpath(p) for p in extra)}))
        _made.clear()
        _made[key] = found
    return found


_made: dict[tuple[tuple[str, ...], int, tuple[str, ...]], tuple[str, ...]] = {}


def _beside_secrets(path: str) -> list[str]:
    """``path`` itself, or, when a secret lies beneath it, what lies beside the secrets."""
    if path in SECRETS:
        return []
    if not any(secret.startswith(path + "/") for secret in SECRETS):
        return [path]
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [found for name in names for found in _beside_secrets(f"{path}/{name}")]


def _search_path() -> set[str]:
    out = set()
    for entry in sys.path:
        path = os.path.realpath(entry or os.curdir)
        if os.path.exists(path):
            out.add(path)
    return out


def _module_directories(known: tuple[str, ...]) -> set[str]:
    """Where imported modules lie beside ``known`` (a module loaded from a file by its path)."""
    under = tuple(p.rstrip("/") + "/" for p in known)
    out = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.isabs(file) and not file.startswith(under):
            out.add(os.path.dirname(os.path.realpath(file)))
    return out


def _editable_packages() -> set[str]:
    """The packages an editable install maps (setuptools' finders keep a MAPPING of name to
    directory), imported or not: a rank may import them later."""
    out: set[str] = set()
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict):
            out.update(os.path.realpath(p) for p in mapping.values() if isinstance(p, str) and os.path.isabs(p))
    return out


def _outermost(paths: set[str]) -> list[str]:
    """``paths`` without those beneath another of them."""
    kept: list[str] = []
    for path in sorted(paths):
        if not kept or not path.startswith(kept[-1].rstrip("/") + "/"):
            kept.append(path)
    return kept
