"""Which system calls a confined process may make: every call of the kernel's table
(syscall_table.py) is classified here, as allowed, allowed only with arguments that keep it to the
process itself, or refused with an errno and a reason. The seccomp filter (seccomp.py) is built
from it; a call the table does not name (a newer kernel's) is refused with ENOSYS. Two policies:
``RANK``, a rank process (no new process, no new process group or session), and ``CHILD``,
simfs.isolated's child, which forks rank processes (each in a session of its own, which dies with
the child's zygote) and itself stays in its process group."""

from __future__ import annotations

import errno
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Allow:
    """The call runs as it is (Landlock, where it applies, still checks it)."""


@dataclass(frozen=True)
class Refuse:
    """The call fails with ``errno``; ``why``: what it would reach."""

    errno: int
    why: str


# a test on one argument of the call (seccomp_data.args[i]); "lo": its low 32 bits, the whole of
# an int or unsigned int argument (the kernel truncates them)
@dataclass(frozen=True)
class Test:
    arg: int
    op: str  # "eq" (all 64 bits), "lo_eq", "lo_ne", "lo_has" (a bit set), "lo_none" (no bit of k set), "lo_not_in"
    k: int | tuple[int, ...]


@dataclass(frozen=True)
class AllowIf:
    """Allowed when every test of one of ``alternatives`` holds, else EPERM (``why``)."""

    alternatives: tuple[tuple[Test, ...], ...]
    why: str


Verdict = Allow | Refuse | AllowIf
ALLOW = Allow()


def _refuse(names: Iterable[str], code: int, why: str) -> dict[str, Verdict]:
    return dict.fromkeys(names, Refuse(code, why))


def _to_itself(names: Iterable[str], why: str) -> dict[str, Verdict]:
    """Calls whose first argument names a process (pid_t): allowed on the caller itself (0) only."""
    return dict.fromkeys(names, AllowIf(((Test(0, "lo_eq", 0),),), why))


# include/uapi/linux/sched.h: the namespace flags of clone(2), and CLONE_PARENT (the child would be
# the caller's sibling, a child of the host); CLONE_THREAD makes a thread, not a process
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
CLONE_PARENT = 0x00008000
CLONE_THREAD = 0x00010000
# include/uapi/asm-generic/ioctls.h: what a process does to a terminal beyond its own output
# (TIOCSTI pushes input the user's shell then runs), and include/uapi/asm-generic/fcntl.h: locks
# and leases on real files, signals on a file's I/O to another process
TERMINAL_IOCTLS = (0x5412, 0x541C, 0x541D, 0x540E, 0x5410, 0x5423, 0x5414, 0x5437, 0x40045436)
# F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_SETOWN, F_SETOWN_EX, F_SETSIG
FILE_LOCKS_AND_OWNERS = (6, 7, 37, 38, 1024, 8, 15, 10)
# include/uapi/linux/resource.h and include/uapi/linux/ioprio.h: the target of setpriority(2) and
# ioprio_set(2) that is the calling process alone (its process group is the host's, its user the caller's)
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1
MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20  # include/uapi/linux/mman.h, asm-generic/mman-common.h

_ALLOWED = (
    # files and descriptors (Landlock decides what a path may be opened for)
    "read", "write", "open", "close", "stat", "fstat", "lstat", "newfstatat", "statx", "lseek", "pread64", "pwrite64",
    "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", "access", "faccessat", "faccessat2", "pipe",
    "pipe2", "dup", "dup2", "dup3", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat",
    "renameat2", "mkdir", "mkdirat", "rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink",
    "symlinkat", "readlink", "readlinkat", "openat", "openat2", "mknod", "mknodat", "truncate", "ftruncate",
    "fallocate", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "readahead", "fadvise64", "statfs",
    "fstatfs", "ustat", "sysfs", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
    "getxattrat", "listxattrat", "file_getattr", "umask", "sendfile", "splice", "tee", "vmsplice",
    "copy_file_range", "close_range", "cachestat", "inotify_rm_watch", "io_setup", "io_destroy", "io_getevents",
    "io_submit", "io_cancel", "io_pgetevents", "memfd_create", "memfd_secret", "execve", "execveat",
    # waiting on descriptors, events and timers
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
    "timerfd_settime", "timerfd_gettime",
    # the process's own memory
    "mmap", "mprotect", "munmap", "mremap", "msync", "mincore", "madvise", "brk", "mlock", "mlock2", "munlock",
    "mlockall", "munlockall", "mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",
    "remap_file_pages", "pkey_mprotect", "pkey_alloc", "pkey_free", "membarrier", "mseal", "map_shadow_stack",
    # its threads, signals, clocks and identity
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
    "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "kill", "tkill", "tgkill", "pidfd_open",
    "pidfd_send_signal", "pause", "nanosleep", "clock_nanosleep", "getitimer", "setitimer", "alarm", "time",
    "gettimeofday", "clock_gettime", "clock_getres", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
    "set_robust_list", "get_robust_list", "set_tid_address", "rseq", "restart_syscall", "sched_yield",
    "sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_getattr", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "getcpu", "getpriority", "ioprio_get", "arch_prctl",
    "prctl", "personality", "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "lsm_get_self_attr", "lsm_list_modules", "getrandom", "uname", "sysinfo", "times", "getrusage", "getrlimit",
    "setrlimit", "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
    "getgroups", "getpgid", "getpgrp", "getsid", "capget", "exit", "exit_group", "wait4", "waitid",
    # its sockets (socket(2) itself is refused: only the pairs it makes or holds)
    "socketpair", "shutdown", "getsockname", "getpeername", "setsockopt", "getsockopt", "recvfrom", "recvmsg",
    "recvmmsg",
)
_REFUSED: dict[str, Verdict] = {
    **_refuse(("socket",), errno.EACCES, "a new socket reaches the network or the host's Unix sockets"),
    **_refuse(("io_uring_setup", "io_uring_enter", "io_uring_register"), errno.EPERM,
              "io_uring's operations bypass a system call filter"),
    **_refuse(("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime",
               "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
               "removexattr", "lremovexattr", "fremovexattr", "removexattrat", "file_setattr"), errno.EPERM,
              "it changes a real file's mode, owner, times or attributes (Landlock does not see them)"),
    **_refuse(("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
               "process_mrelease"), errno.EPERM, "it reaches another process's memory or descriptors"),
    **_refuse(("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget",
               "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
               "mq_notify", "mq_getsetattr"), errno.EPERM,
              "System V and POSIX IPC objects are the machine's and outlive the run"),
    **_refuse(("add_key", "request_key", "keyctl"), errno.EPERM, "the kernel's keyrings are the user's"),
    **_refuse(("flock",), errno.EPERM, "a lock on a real file holds off the machine's other processes"),
    **_refuse(("inotify_init", "inotify_init1", "inotify_add_watch"), errno.EPERM,
              "it shows the names of files made in directories Landlock refuses"),
    **_refuse(("connect", "bind", "listen", "accept", "accept4"), errno.EACCES,
              "a socket pair's socket, named or connected anew, reaches the machine's Unix sockets"),
    **_refuse(("setpgid",), errno.EPERM, "a rank process leads a session of its own from its start, the isolated "
              "child a group its supervisor kills: neither joins another"),
    **_refuse(("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "open_tree_attr",
               "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "statmount", "listmount"),
              errno.EPERM, "namespaces and mounts"),
    **_refuse(("setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
               "setgroups", "capset", "lsm_set_self_attr"), errno.EPERM, "it changes the process's credentials"),
    **_refuse(("reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
               "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "iopl", "ioperm",
               "modify_ldt", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "sethostname",
               "setdomainname", "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "fanotify_mark",
               "name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "uretprobe"), errno.EPERM,
              "it acts on the machine, not on the process"),
    # never implemented for 64-bit processes, or removed (sys_ni_syscall)
    **_refuse(("create_module", "get_kernel_syms", "query_module", "nfsservctl", "getpmsg", "putpmsg",
               "afs_syscall", "tuxcall", "security", "vserver", "epoll_ctl_old", "epoll_wait_old", "uselib",
               "_sysctl", "set_thread_area", "get_thread_area"), errno.ENOSYS, "not implemented"),
    # glibc falls back to clone(2), whose flags a filter can read (clone3's are behind a pointer)
    **_refuse(("clone3",), errno.ENOSYS, "its flags are behind a pointer; clone(2) instead"),
}
_OWN: dict[str, Verdict] = {
    **_to_itself(("sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr", "migrate_pages",
                  "move_pages"), "on another process"),
    "prlimit64": AllowIf(((Test(0, "lo_eq", 0),), (Test(2, "eq", 0),)),
                         "setting another process's resource limits"),
    "setpriority": AllowIf(((Test(0, "lo_eq", PRIO_PROCESS), Test(1, "lo_eq", 0)),),
                           "on another process, a process group or a user"),
    "ioprio_set": AllowIf(((Test(0, "lo_eq", IOPRIO_WHO_PROCESS), Test(1, "lo_eq", 0)),),
                          "on another process, a process group or a user"),
    "sendto": AllowIf(((Test(4, "eq", 0),),), "to an address (a socket pair's socket names its peer already)"),
    "ioctl": AllowIf(((Test(1, "lo_not_in", TERMINAL_IOCTLS),),),
                     "a terminal's input, console, process group, line discipline or size"),
    "fcntl": AllowIf(((Test(1, "lo_not_in", FILE_LOCKS_AND_OWNERS),),),
                     "a lock or lease on a real file, or its I/O signals sent to another process"),
}
_NO_NEW_PROCESS: dict[str, Verdict] = {
    **_refuse(("fork", "vfork"), errno.EPERM, "a rank starts no process (simfs refuses subprocess and os.fork)"),
    **_refuse(("setsid",), errno.EPERM, "a rank process leads its own session from its start"),
    # a message's address is behind a pointer the filter cannot read: a rank sends on its pairs with write(2)
    **_refuse(("sendmsg", "sendmmsg"), errno.EACCES, "its destination address is behind a pointer"),
    # memory RLIMIT_DATA (Cluster's rank_memory) does not count: shared anonymous maps and new
    # memory files; every page a rank can then pin is private (the host's outboxes are its files)
    **_refuse(("memfd_create", "memfd_secret"), errno.EPERM, "memory outside the rank's private memory"),
    "mmap": AllowIf(((Test(3, "lo_none", MAP_ANONYMOUS),), (Test(3, "lo_none", MAP_SHARED),)),
                    "shared anonymous memory, outside the rank's private memory"),
    "clone": AllowIf(((Test(0, "lo_has", CLONE_THREAD), Test(0, "lo_none", CLONE_NEW | CLONE_PARENT)),),
                     "a new process (a rank starts threads only), a namespace, or a sibling of the rank"),
}
_PROCESSES: dict[str, Verdict] = {
    **dict.fromkeys(("fork", "vfork", "sendmsg", "sendmmsg"), ALLOW),  # the zygote hands pidfds over its pair
    # each rank process the child's zygote forks makes a session of its own before it confines itself; the
    # child leads a process group, and setsid(2) fails for a group leader (EPERM), so it stays in that group
    "setsid": ALLOW,
    "clone": AllowIf(((Test(0, "lo_none", CLONE_NEW | CLONE_PARENT),),), "a namespace, or a sibling of the process"),
}
_COMMON: dict[str, Verdict] = {**dict.fromkeys(_ALLOWED, ALLOW), **_REFUSED, **_OWN}
RANK: dict[str, Verdict] = {**_COMMON, **_NO_NEW_PROCESS}
CHILD: dict[str, Verdict] = {**_COMMON, **_PROCESSES}
POLICIES = {"rank": RANK, "child": CHILD}
