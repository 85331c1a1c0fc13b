"""The seccomp allow-list (simfs/confinement/seccomp.py, policy.py, syscall_table.py): the tables are
the kernel's (checked against this machine's headers), every system call of a table is classified,
and the compiled filter, run by a classic BPF interpreter, gives every call and argument the verdict
the policy states."""

from __future__ import annotations

import errno
import os
import platform
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simfs.confinement import policy, seccomp, syscall_table

AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
HEADERS = {"x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"]}


@pytest.mark.parametrize("machine", sorted(syscall_table.TABLES))
@pytest.mark.parametrize("kind", sorted(policy.POLICIES))
def test_every_call_of_the_kernels_table_is_classified(machine: str, kind: str) -> None:
    assert sorted(set(syscall_table.TABLES[machine]) - set(policy.POLICIES[kind])) == []


def test_the_table_is_this_machines_kernel_headers() -> None:
    machine = platform.machine()
    header = next((Path(p) for p in HEADERS.get(machine, []) if os.path.exists(p)), None)
    if header is None:
        pytest.skip(f"no kernel headers for {machine} here (linux-libc-dev)")
    defined = dict(re.findall(r"#define __NR_(\w+) (\d+)", header.read_text()))
    table = syscall_table.TABLES[machine]
    assert {name: int(n) for name, n in defined.items()} == {name: table[name] for name in defined}


def _run(program: list[seccomp.Instruction], arch: int, nr: int, args: list[int]) -> int:
    """A classic BPF interpreter for seccomp programs (only the opcodes seccomp.py emits)."""
    data = nr.to_bytes(4, "little") + arch.to_bytes(4, "little") + bytes(8) + \
        b"".join((a % 2**64).to_bytes(8, "little") for a in args)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == seccomp.BPF_LD_W_ABS:
            acc = int.from_bytes(data[k:k + 4], "little")
            pc += 1
        elif code == seccomp.BPF_JA:
            pc += 1 + k
        elif code == seccomp.BPF_RET_K:
            return k
        else:
            taken = {seccomp.BPF_JEQ_K: acc == k, seccomp.BPF_JGE_K: acc >= k,
                     seccomp.BPF_JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def _expected(verdict: policy.Verdict | None, args: list[int]) -> int:
    if verdict is None:
        return seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
    if isinstance(verdict, policy.Allow):
        return seccomp.SECCOMP_RET_ALLOW
    if isinstance(verdict, policy.Refuse):
        return seccomp.SECCOMP_RET_ERRNO | verdict.errno

    def holds(test: policy.Test) -> bool:
        value, low = args[test.arg] % 2**64, args[test.arg] % 2**32
        if test.op == "eq":
            return value == test.k
        if test.op == "lo_eq":
            return low == test.k
        if test.op == "lo_ne":
            return low != test.k
        if test.op == "lo_has":
            return bool(low & test.k)  # type: ignore[operator]
        if test.op == "lo_none":
            return not low & test.k  # type: ignore[operator]
        return low not in test.k  # type: ignore[operator]

    allowed = any(all(holds(t) for t in tests) for tests in verdict.alternatives)
    return seccomp.SECCOMP_RET_ALLOW if allowed else seccomp.SECCOMP_RET_ERRNO | errno.EPERM


PROGRAMS = {(machine, kind): seccomp.program(AUDIT[machine], table, rules)
            for machine, table in syscall_table.TABLES.items() for kind, rules in policy.POLICIES.items()}
ARG = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2, 3, policy.CLONE_THREAD, policy.CLONE_PARENT,
                                                            *policy.TERMINAL_IOCTLS, *policy.FILE_LOCKS_AND_OWNERS,
                                                            0x7E020000, 2**32, 2**32 + 5]))


@given(st.sampled_from(sorted(PROGRAMS)), st.data(), st.lists(ARG, min_size=6, max_size=6))
def test_the_filter_gives_every_call_the_policys_verdict(key: tuple[str, str], data: st.DataObject,
                                                           args: list[int]) -> None:
    machine, kind = key
    table = syscall_table.TABLES[machine]
    numbers = {n: name for name, n in table.items()}
    nr = data.draw(st.one_of(st.sampled_from(sorted(numbers)), st.integers(0, 1100)))
    verdict = policy.POLICIES[kind].get(numbers[nr]) if nr in numbers else None
    assert _run(PROGRAMS[key], AUDIT[machine], nr, args) == _expected(verdict, args)


@pytest.mark.parametrize("machine", sorted(syscall_table.TABLES))
def test_other_architectures_and_x32_calls_are_refused(machine: str) -> None:
    program = PROGRAMS[machine, "rank"]
    enosys = seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
    other = next(a for m, a in AUDIT.items() if m != machine)
    assert _run(program, other, 0, [0] * 6) == enosys
    assert _run(program, AUDIT[machine], seccomp.X32_SYSCALL_BIT | 0, [0] * 6) == enosys


def test_what_the_issue_named_is_refused_to_a_rank() -> None:
    """prlimit on another pid, the keyring, System V IPC, TIOCSTI, flock, a new process."""
    x86 = syscall_table.X86_64
    rank = PROGRAMS["x86_64", "rank"]
    arch = AUDIT["x86_64"]
    eperm = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
    assert _run(rank, arch, x86["prlimit64"], [1234, 0, 99, 0, 0, 0]) == eperm
    assert _run(rank, arch, x86["prlimit64"], [0, 0, 99, 0, 0, 0]) == seccomp.SECCOMP_RET_ALLOW
    assert _run(rank, arch, x86["prlimit64"], [1234, 0, 0, 99, 0, 0]) == seccomp.SECCOMP_RET_ALLOW  # a read
    for name in ("add_key", "keyctl", "shmget", "msgget", "semget", "flock", "fork", "setsid"):
        assert _run(rank, arch, x86[name], [0] * 6) == eperm, name
    assert _run(rank, arch, x86["ioctl"], [0, 0x5412, 0, 0, 0, 0]) == eperm
    assert _run(rank, arch, x86["ioctl"], [0, 0x541B, 0, 0, 0, 0]) == seccomp.SECCOMP_RET_ALLOW  # FIONREAD
    thread = 0x3D0F00  # pthread_create's flags
    assert _run(rank, arch, x86["clone"], [thread, 0, 0, 0, 0, 0]) == seccomp.SECCOMP_RET_ALLOW
    assert _run(rank, arch, x86["clone"], [0x1200011, 0, 0, 0, 0, 0]) == eperm  # fork(3)'s
    assert _run(PROGRAMS["x86_64", "child"], arch, x86["clone"], [0x1200011, 0, 0, 0, 0, 0]) == \
        seccomp.SECCOMP_RET_ALLOW
