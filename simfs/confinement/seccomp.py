"""A seccomp filter (seccomp(2), SECCOMP_MODE_FILTER) built from an allow-list: every system call of
the kernel's table for this machine (syscall_table.py) runs, runs only with arguments that keep it
to the process itself, or fails with an errno, as policy.py classifies it; a number the table does
not name fails with ENOSYS, as on a kernel without it. Landlock covers the filesystem, TCP and
scoping; the filter covers what Landlock does not see: new sockets, io_uring, real files' metadata,
other processes' limits, memory and priorities, the kernel's keyrings, System V and POSIX IPC,
locks on real files, a terminal's input queue, namespaces and mounts, and (a rank) new processes.
The kernel caches the verdict of each number whose test reads no argument (Linux 5.11+): those
calls do not run the filter at all."""

from __future__ import annotations

import ctypes
import errno
import functools

from . import kernel, policy

# include/uapi/linux/seccomp.h
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
# include/uapi/linux/bpf_common.h: the classic BPF opcodes a filter uses
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
BPF_JA = 0x05 | 0x00  # BPF_JMP | BPF_JA: a jump of k instructions, forward, any distance
BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian
# on both machines: an argument's low half first)
_NR, _ARCH, _ARGS = 0, 4, 16
# arch/x86/include/uapi/asm/unistd.h: x32 system calls carry this bit under the x86_64 arch value
X32_SYSCALL_BIT = 0x40000000
_MAX_JUMP = 255  # a conditional jump's offset is one byte
_LEAF = 4  # numbers a branch of the search tests one by one

Instruction = tuple[int, int, int, int]  # (code, jt, jf, k)


class _Program(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _Instruction(ctypes.Structure):  # struct sock_filter, include/uapi/linux/filter.h
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


def available() -> bool:
    """Whether simfs can write a filter for this machine (it knows its system call table)."""
    return kernel.AUDIT_ARCH is not None


class _Assembler:
    """Instructions whose jumps may name a label further on (resolved by ``code``)."""

    def __init__(self) -> None:
        self._code: list[tuple[int, int | str, int | str, int]] = []
        self._labels: dict[str, int] = {}

    def emit(self, code: int, k: int | str, jt: int | str = 0, jf: int | str = 0) -> None:
        """An instruction; ``k`` may name a label only for BPF_JA (whose offset is k)."""
        self._code.append((code, jt, jf, k if isinstance(k, str) else k & 0xFFFFFFFF))  # type: ignore[arg-type]

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def code(self) -> list[Instruction]:
        def offset(at: int, target: int | str, limit: int = _MAX_JUMP) -> int:
            jump = target if isinstance(target, int) else self._labels[target] - at - 1
            assert 0 <= jump <= limit, f"a jump of {jump} instructions"
            return jump

        return [(code, offset(at, jt), offset(at, jf), offset(at, k, 0xFFFFFFFF) if isinstance(k, str) else k)
                for at, (code, jt, jf, k) in enumerate(self._code)]


def _test(asm: _Assembler, test: policy.Test, fail: str) -> None:
    """Fall through when ``test`` holds, jump to ``fail`` when it does not."""
    low = _ARGS + 8 * test.arg
    asm.emit(BPF_LD_W_ABS, low)
    if test.op == "eq":
        assert isinstance(test.k, int)
        asm.emit(BPF_JEQ_K, test.k, 0, fail)
        asm.emit(BPF_LD_W_ABS, low + 4)
        asm.emit(BPF_JEQ_K, test.k >> 32, 0, fail)
    elif test.op == "lo_eq":
        asm.emit(BPF_JEQ_K, int(test.k), 0, fail)  # type: ignore[arg-type]
    elif test.op == "lo_ne":
        asm.emit(BPF_JEQ_K, int(test.k), fail, 0)  # type: ignore[arg-type]
    elif test.op == "lo_has":
        asm.emit(BPF_JSET_K, int(test.k), 0, fail)  # type: ignore[arg-type]
    elif test.op == "lo_none":
        asm.emit(BPF_JSET_K, int(test.k), fail, 0)  # type: ignore[arg-type]
    elif test.op == "lo_not_in":
        assert isinstance(test.k, tuple)
        for value in test.k:
            asm.emit(BPF_JEQ_K, value, fail, 0)
    else:
        raise ValueError(f"seccomp: unknown test {test.op!r}")


def program(audit_arch: int, numbers: dict[str, int], rules: dict[str, policy.Verdict]) -> list[Instruction]:
    """The filter as (code, jt, jf, k) instructions: another architecture's calls (a 32-bit
    ``int 0x80`` from a 64-bit process) and x32 calls fail with ENOSYS; each number of the table
    is allowed, tested or refused as ``rules`` say (a name without a rule is refused, ENOSYS);
    every other number fails with ENOSYS."""
    enosys = SECCOMP_RET_ERRNO | errno.ENOSYS
    asm = _Assembler()
    asm.emit(BPF_LD_W_ABS, _ARCH)
    asm.emit(BPF_JEQ_K, audit_arch, 1, 0)
    asm.emit(BPF_RET_K, enosys)
    asm.emit(BPF_LD_W_ABS, _NR)
    asm.emit(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1)
    asm.emit(BPF_RET_K, enosys)
    calls = sorted((number, name, rules.get(name, policy.Refuse(errno.ENOSYS, "unclassified")))
                   for name, number in numbers.items())
    _search(asm, calls)
    return asm.code()


def _search(asm: _Assembler, calls: list[tuple[int, str, policy.Verdict]]) -> None:
    """A binary search over the sorted numbers (the number loaded): a call costs a few
    comparisons, not a walk of the table, and the kernel proves each number's constant verdict in
    as few steps when the filter is loaded. A number no leaf names fails with ENOSYS."""
    if len(calls) > _LEAF:
        middle = len(calls) // 2
        pivot = calls[middle][0]
        asm.emit(BPF_JGE_K, pivot, 0, 1)
        asm.emit(BPF_JA, f"from {pivot}")
        _search(asm, calls[:middle])
        asm.label(f"from {pivot}")
        _search(asm, calls[middle:])
        return
    for number, name, verdict in calls:
        if isinstance(verdict, policy.AllowIf):
            asm.emit(BPF_JEQ_K, number, 0, f"after {name}")
            for index, tests in enumerate(verdict.alternatives):
                for test in tests:
                    _test(asm, test, f"{name} {index}")
                asm.emit(BPF_RET_K, SECCOMP_RET_ALLOW)
                asm.label(f"{name} {index}")
            asm.emit(BPF_RET_K, SECCOMP_RET_ERRNO | errno.EPERM)
            asm.label(f"after {name}")  # reached by the first jump: the number is still loaded
        else:
            ret = SECCOMP_RET_ALLOW if isinstance(verdict, policy.Allow) else SECCOMP_RET_ERRNO | verdict.errno
            asm.emit(BPF_JEQ_K, number, 0, 1)
            asm.emit(BPF_RET_K, ret)
    asm.emit(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)


@functools.cache
def compiled(kind: str) -> _Program:
    """Policy ``kind``'s filter ("rank" or "child", policy.POLICIES) as the kernel takes it, built
    once per process (a forked child inherits it)."""
    assert kernel.AUDIT_ARCH is not None, "seccomp.available() is False on this machine"
    code = program(kernel.AUDIT_ARCH, kernel.NUMBERS, policy.POLICIES[kind])
    instructions = (_Instruction * len(code))(*(_Instruction(*insn) for insn in code))
    prog = _Program(len(code), ctypes.addressof(instructions))
    prog.keep = instructions  # the program points into it
    return prog


def install(kind: str) -> None:
    """Load policy ``kind``'s filter on the calling thread and what it starts later (no_new_privs
    must be set). Filters stack: a rank forked from a confined child runs under both."""
    kernel.prctl(kernel.PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(compiled(kind)))
