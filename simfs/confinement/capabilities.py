"""Dropping every capability (capabilities(7)) of a process that has some, root's in particular:
what Landlock and the seccomp filter leave to a privileged process (reboot, loading kernel
modules, setting the clock or the hostname, raw I/O ports, tracing, changing others' limits and
priorities) needs one. The bounding set is left alone: with no_new_privs set, execve(2) grants no
capability the process does not already hold, root's included."""

from __future__ import annotations

import ctypes

from . import kernel

# include/uapi/linux/capability.h
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):  # struct __user_cap_header_struct
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):  # struct __user_cap_data_struct (two of them in version 3)
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def held() -> int:
    """The calling thread's permitted set as a bit mask (capget(2); proc(5)'s CapPrm line of
    /proc/thread-self/status says the same, but reading it took ~8 ms in a process with torch)."""
    header, data = _Header(LINUX_CAPABILITY_VERSION_3, 0), (_Data * 2)()
    kernel.syscall("capget", ctypes.addressof(header), ctypes.addressof(data))
    return int(data[0].permitted) | int(data[1].permitted) << 32


def drop() -> None:
    """Empty the calling thread's ambient, effective, permitted and inheritable sets (capset(2));
    lowering them needs no capability."""
    kernel.prctl(kernel.PR_CAP_AMBIENT, kernel.PR_CAP_AMBIENT_CLEAR_ALL)
    header, data = _Header(LINUX_CAPABILITY_VERSION_3, 0), (_Data * 2)()
    kernel.syscall("capset", ctypes.addressof(header), ctypes.addressof(data))
