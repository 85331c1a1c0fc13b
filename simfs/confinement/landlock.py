"""Landlock (landlock(7)), unprivileged: the calling thread and everything it starts later may read
and execute only what the caller names (readable.py) and write only where the caller says, bind and connect no
TCP port, and reach no abstract Unix socket and signal no process outside its domain. Each right is
handled only where the running kernel's ABI knows it, as the kernel documentation's sample does."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from collections.abc import Iterable

from . import kernel

# include/uapi/linux/landlock.h
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2; with ABI 1 linking or renaming across directories is always refused
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV = 1 << 15  # ABI 5
ACCESS_NET_BIND_TCP = 1 << 0  # ABI 4
ACCESS_NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

TRUNCATE_ABI, NET_ABI, IOCTL_DEV_ABI, SCOPE_ABI = 3, 4, 5, 6  # landlock(7), "Kernel versions"
_FS_ABI1 = (1 << 13) - 1  # EXECUTE through MAKE_SYM
_FS_SINCE = {2: ACCESS_FS_REFER, TRUNCATE_ABI: ACCESS_FS_TRUNCATE, IOCTL_DEV_ABI: ACCESS_FS_IOCTL_DEV}
_READ = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
# the rights a rule on a file (not a directory) may grant; others are EINVAL (landlock_add_rule(2))
_FILE = ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_READ_FILE | ACCESS_FS_TRUNCATE | ACCESS_FS_IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def abi() -> int:
    """The running kernel's Landlock ABI version; 0 without Landlock (ENOSYS: not built in,
    EOPNOTSUPP: not enabled at boot, e.g. missing from the lsm= list)."""
    try:
        return kernel.syscall("landlock_create_ruleset", 0, 0, CREATE_RULESET_VERSION)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def handled_fs(version: int) -> int:
    """The filesystem rights ABI ``version`` knows: the ones a ruleset can refuse there."""
    return _FS_ABI1 | sum(right for since, right in _FS_SINCE.items() if version >= since)


def restrict(version: int, readable: Iterable[str], writable: Iterable[str], sinks: Iterable[str]) -> None:
    """Enforce the policy on the calling thread (``version`` >= 1, from abi()): see ruleset()."""
    fd = ruleset(version, readable, writable, sinks)
    try:
        enforce(fd)
    finally:
        os.close(fd)


def enforce(ruleset_fd: int) -> None:
    """Restrict the calling thread (and what it starts later) by a ruleset made before (a forked
    process inherits its parent's: one system call instead of one per rule)."""
    kernel.syscall("landlock_restrict_self", ruleset_fd, 0)


def ruleset(version: int, readable: Iterable[str], writable: Iterable[str], sinks: Iterable[str]) -> int:
    """A ruleset's descriptor (close-on-exec; ``version`` >= 1, from abi()): ``writable``
    directories or files get every right, ``sinks`` (character devices, skipped where absent) may
    be opened for writing, what lies beneath ``readable`` may be read and executed, and nothing
    else may be opened at all."""
    fs = handled_fs(version)
    attr = _RulesetAttr(handled_access_fs=fs,
                        handled_access_net=ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP if version >= NET_ABI else 0,
                        scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= SCOPE_ABI else 0)
    fd = kernel.syscall("landlock_create_ruleset", ctypes.addressof(attr), ctypes.sizeof(attr), 0)
    try:
        for path in readable:
            _allow(fd, path, _READ)
        for path in writable:
            _allow(fd, path, fs)
        for device in sinks:
            if os.path.exists(device):
                _allow(fd, device, ACCESS_FS_WRITE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _allow(ruleset: int, path: str, access: int) -> None:
    """A rule for ``path``; none when it is gone (a file that a package manager replaced between
    the listing of its directory and here: what is not there cannot be read)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE
        rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        kernel.syscall("landlock_add_rule", ruleset, RULE_PATH_BENEATH, ctypes.addressof(rule), 0)
    finally:
        os.close(fd)
