"""The raw system calls confinement needs, through ctypes and the C library's ``syscall`` (no
compiled extension, no dependency): their numbers from the kernel's table for this machine
(syscall_table.py) and errors raised as OSError with the kernel's errno."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform

from . import syscall_table

# include/uapi/linux/audit.h: AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 (what seccomp_data.arch holds)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

MACHINE = platform.machine()
NUMBERS: dict[str, int] = syscall_table.TABLES.get(MACHINE, {})
AUDIT_ARCH: int | None = _AUDIT_ARCH.get(MACHINE)  # None: no seccomp filter is written for this machine

# include/uapi/linux/prctl.h
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2  # include/uapi/linux/mman.h


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded at the first call (importing simfs loads nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def syscall(name: str, *args: int) -> int:
    """The system call ``name`` of this machine (pointers passed as ``ctypes.addressof``); OSError
    with its errno when it fails, ENOSYS when simfs knows no number for it here."""
    number = NUMBERS.get(name)
    if number is None:
        raise OSError(errno.ENOSYS, f"{name}: no system call number known on {MACHINE}")
    return _checked(int(_libc().syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))), name)


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """prctl(2); OSError with its errno when it fails."""
    return _checked(int(_libc().prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0),
                                      ctypes.c_ulong(0))), "prctl")


def _checked(result: int, name: str) -> int:
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")
    return result
