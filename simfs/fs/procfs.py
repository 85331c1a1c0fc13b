"""/proc of one simulated node: a directory per live process of the node (stat, status,
cmdline, environ), and the node's boot id, which changes when the node reboots. Stale-lock code
checks a holder's pid here or with os.kill(pid, 0); pids of different nodes may collide, as
they do. Read-only for ranks."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..profiles import get
from .client import Draws, Meter
from .inode import ROOT
from .mount import Mount

CLK_TCK = 100  # sysconf(_SC_CLK_TCK) on Linux: /proc/<pid>/stat counts times in these ticks
# a coherent in-memory filesystem (procfs never caches stale entries, nothing to crash)
PROCFS = get("local").replace(name="procfs", crash_order="prefix", torn_sector=0, entry_durable="op",
                              data_durable="close")


class ProcFs:
    """The /proc mount of one node and the processes it lists."""

    def __init__(self, node: int, clock: Callable[[], float], choices: Draws, meter: Meter,
                 interleave: Callable[[], None], mounts: Sequence[tuple[str, str, int]] = ()) -> None:
        self.node = node
        self.clock = clock
        self.mountinfo = _mountinfo([*mounts, ("/proc", "proc", 0)])
        self.mount = Mount("/proc", PROCFS, [node], clock, choices, meter, interleave, host=node)
        self.boots = 0
        self.boot_time = 0.0
        self.pids: set[int] = set()
        # written on the first look at /proc: each process's files (pid -> ppid, start, argv,
        # environment), and the boot id of the boot it was written for
        self._unwritten: dict[int, tuple[int, int, list[str], dict[str, str]]] = {}
        self._boot_written = -1
        self.reboot()

    @property
    def server(self) -> Any:
        return self.mount.server

    def reboot(self) -> None:
        """The node (re)starts: no process, a new boot id."""
        for pid in list(self.pids):
            self.remove(pid)
        self._unwritten.clear()
        self.boots += 1
        self.boot_time = self.clock()

    @property
    def boot_id(self) -> str:
        """/proc/sys/kernel/random/boot_id of the node's current boot (without the newline)."""
        return str(uuid.UUID(int=(self.node << 64) | self.boots))

    def add(self, pid: int, ppid: int, argv: list[str], env: dict[str, str]) -> None:
        """A process started on this node."""
        self._unwritten[pid] = (ppid, int((self.clock() - self.boot_time) * CLK_TCK), argv, env)
        self.pids.add(pid)

    def ensure(self) -> None:
        """Someone looks at /proc: the processes' files exist (written only then: most jobs never
        look, and a run of thousands of ranks should not pay for it)."""
        if self._boot_written != self.boots:
            self._write("sys/kernel/random/boot_id", self.boot_id + "\n")
            self._boot_written = self.boots
        while self._unwritten:
            pid, (ppid, start, argv, env) = self._unwritten.popitem()
            files = _process_files(pid, ppid, start, argv, env, self.mountinfo)
            for file, text in files.items():
                self._write(f"{pid}/{file}", text)

    def remove(self, pid: int) -> None:
        """A process ended: its directory goes."""
        self.pids.discard(pid)
        if self._unwritten.pop(pid, None) is not None:
            return
        server = self.server
        ino = server.lookup(ROOT, str(pid))
        if ino is not None:
            for name, _ in server.readdir(ino):
                server.unlink(ino, name)
            server.rmdir(ROOT, str(pid))

    def _write(self, path: str, text: str) -> None:
        server = self.server
        parts = path.split("/")
        ino = ROOT
        for name in parts[:-1]:
            child = server.lookup(ino, name)
            ino = child if child is not None else server.mkdir(ino, name, 0o555)[0]
        file_ino, _, _ = server.create(ino, parts[-1], 0o444, False)
        server.truncate(file_ino, 0)
        server.write(file_ino, 0, text.encode())


def _process_files(pid: int, ppid: int, start: int, argv: list[str], env: dict[str, str],
                   mountinfo: str) -> dict[str, str]:
    """The files of /proc/<pid> (``start``: clock ticks since boot)."""
    name = "python"
    # fields 1..52 of proc(5) /proc/<pid>/stat; field 22 is the start time since boot
    fields = [str(pid), f"({name})", "S", str(ppid), str(pid), str(pid)] + ["0"] * 15 + [str(start)] + ["0"] * 30
    return {
        "stat": " ".join(fields) + "\n",
        "status": f"Name:\t{name}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n",
        "cmdline": "\0".join(argv) + "\0",
        "environ": "".join(f"{k}={v}\0" for k, v in env.items()),
        "mountinfo": mountinfo,
    }


def _mountinfo(mounts: Sequence[tuple[str, str, int]]) -> str:
    """/proc/<pid>/mountinfo (proc(5): mount ID, parent ID, major:minor, root, mount point, options,
    separator, filesystem type, source, super options) of a node whose mounts are (mount point,
    filesystem type, device number), the root first."""
    lines = [f"{i + 1} {1 if i else 0} 0:{dev} / {path} rw,relatime - {fstype} simfs-{fstype} rw"
             for i, (path, fstype, dev) in enumerate(mounts)]
    return "\n".join(lines) + "\n"
