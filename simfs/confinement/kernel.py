"""The few raw system calls confinement needs, through ctypes and the C library's ``syscall``
(no compiled extension, no dependency): their numbers per architecture and errors raised as
OSError with the kernel's errno."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform

# Numbers shared by every architecture (include/uapi/asm-generic/unistd.h; since Linux 5.1 a new
# system call gets one number everywhere): landlock(7), io_uring_setup(2).
_COMMON = {
    "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
}
# arch/x86/entry/syscalls/syscall_64.tbl
_X86_64 = {
    "socket": 41, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "capget": 125, "capset": 126,
    "utime": 132, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
    "lremovexattr": 198, "fremovexattr": 199, "utimes": 235, "fchownat": 260, "futimesat": 261,
    "fchmodat": 268, "utimensat": 280,
}
# include/uapi/asm-generic/unistd.h (arm64 has no chmod, chown, lchown, utime, utimes, futimesat)
_AARCH64 = {
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
    "fremovexattr": 16, "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88,
    "capget": 90, "capset": 91, "socket": 198,
}
# include/uapi/linux/audit.h: AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 (what seccomp_data.arch holds)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

MACHINE = platform.machine()
NUMBERS: dict[str, int] = {**_COMMON, **{"x86_64": _X86_64, "aarch64": _AARCH64}.get(MACHINE, {})}
AUDIT_ARCH: int | None = _AUDIT_ARCH.get(MACHINE)  # None: no seccomp filter is written for this machine

# include/uapi/linux/prctl.h
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


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
