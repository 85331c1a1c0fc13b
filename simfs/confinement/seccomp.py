"""A seccomp filter (seccomp(2), SECCOMP_MODE_FILTER) for what Landlock does not see: creating a
socket of any family, io_uring (its operations bypass a system call filter), and changing real
files' metadata (mode, owner, times, extended attributes). Those system calls fail with an errno,
every other one runs. The filter reads only the system call's number and architecture, so the
kernel caches its verdict per number (Linux 5.11+): allowed calls do not run it at all."""

from __future__ import annotations

import ctypes
import errno
import functools

from . import kernel

# include/uapi/linux/seccomp.h
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
# include/uapi/linux/bpf_common.h: the classic BPF opcodes a filter uses
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
# struct seccomp_data: int nr; __u32 arch; ...
_NR, _ARCH = 0, 4
# arch/x86/include/uapi/asm/unistd.h: x32 system calls carry this bit under the x86_64 arch value
X32_SYSCALL_BIT = 0x40000000

# errno per refused call: socket(2) documents EACCES for a denied socket; io_uring_setup gets EPERM
# as under the kernel.io_uring_disabled sysctl; chmod(2), chown(2), utimensat(2) and setxattr(2)
# document EPERM for a caller without the privilege
REFUSED: dict[str, int] = {
    "socket": errno.EACCES,
    **dict.fromkeys(("io_uring_setup", "io_uring_enter", "io_uring_register"), errno.EPERM),
    **dict.fromkeys(("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
                     "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
                     "setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat"), errno.EPERM),
}


class _Instruction(ctypes.Structure):  # struct sock_filter, include/uapi/linux/filter.h
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def available() -> bool:
    """Whether simfs can write a filter for this machine (it knows its system call numbers)."""
    return kernel.AUDIT_ARCH is not None


def program(audit_arch: int, numbers: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: another architecture's calls (a 32-bit
    ``int 0x80`` from a 64-bit process) and x32 calls fail with ENOSYS, each refused number
    with its errno, the rest are allowed. Names this machine has no number for are skipped."""
    enosys = SECCOMP_RET_ERRNO | errno.ENOSYS
    code = [(BPF_LD_W_ABS, 0, 0, _ARCH), (BPF_JEQ_K, 1, 0, audit_arch), (BPF_RET_K, 0, 0, enosys),
            (BPF_LD_W_ABS, 0, 0, _NR), (BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, enosys)]
    for name, err in REFUSED.items():
        if name in numbers:
            code += [(BPF_JEQ_K, 0, 1, numbers[name]), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | err)]
    return code + [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]


@functools.cache
def compiled() -> _Program:
    """The filter as the kernel takes it (built once per process: a forked child inherits it)."""
    assert kernel.AUDIT_ARCH is not None, "seccomp.available() is False on this machine"
    code = program(kernel.AUDIT_ARCH, kernel.NUMBERS)
    instructions = (_Instruction * len(code))(*(_Instruction(*insn) for insn in code))
    prog = _Program(len(code), instructions)
    prog.keep = instructions  # the program points into it
    return prog


def install() -> None:
    """Load the filter on the calling thread and what it starts later (no_new_privs must be set)."""
    kernel.prctl(kernel.PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(compiled()))
