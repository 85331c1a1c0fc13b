"""The filesystems of a simulated cluster: what persists from one run to the next (servers,
node clients and their caches, virtual time). A run borrows them; a crash changes them."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from ..choices import ChoiceSource
from ..clock import VirtualClock
from ..errors import ConfigError
from ..profiles import Profile
from .client import Meter
from .inode import ROOT
from .journal import CrashState
from .mount import Mount
from .procfs import ProcFs
from .server import Server
from .tape import Tape, taping
from .vfs import NodeVfs


class ChoiceProxy:
    """The current run's choice source, for the long-lived filesystem model."""

    __slots__ = ("source",)

    def __init__(self) -> None:
        self.source: ChoiceSource | None = None

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        assert self.source is not None, "a draw outside a run"
        return self.source.choose(n)

    def fraction(self) -> float:
        assert self.source is not None, "a draw outside a run"
        return self.source.fraction()


class Filesystems:
    """Shared mounts (one server, a client per node) and each node's local disk at '/'."""

    def __init__(self, nodes: int, mounts: dict[str, Profile], local: Profile) -> None:
        self.nodes = nodes
        self.clock = VirtualClock()
        self.choices = ChoiceProxy()
        self.meter = Meter()
        self.interleave_hook: Callable[[], None] | None = None  # set while a run is going
        # picks the crash state of a disk that loses power (mount point, server) instead of a draw:
        # how an exhaustive search walks every state the persistence model allows
        self.crash_picker: Callable[[str, Server], CrashState] | None = None
        # called before each operation of a rank with how many came before (an exhaustive
        # search copies the disks' crash states there instead of running the job again)
        self.op_hook: Callable[[int], None] | None = None
        # records the requests of the next run and their answers (tape.py; an exhaustive search
        # tells by them which crash states would restart the job alike)
        self.tape: Tape | None = None
        # a shared mount whose profile is a disk inside a node is node 0's disk
        self.shared = [Mount(path, prof, list(range(nodes)), self.clock, self.choices, self.meter, self.interleave,
                             host=0 if prof.on_node else None) for path, prof in mounts.items()]
        self.local = [Mount("/", local, [n], self.clock, self.choices, self.meter, self.interleave, host=n)
                      for n in range(nodes)]
        self._devs = {id(m): i + 1 for i, m in enumerate([*self.shared, *self.local])}
        self.proc = [ProcFs(n, self.clock, self.choices, self.meter, self.interleave,
                            [(m.path, m.profile.name, self._devs[id(m)]) for m in (self.local[n], *self.shared)])
                     for n in range(nodes)]
        for disk in self.local:
            _make_dirs(disk.server, ["/tmp", "/proc", *(m.path for m in self.shared)])
        for mount in self.shared:  # a nested mount point is a directory of the mount around it
            outer = [m for m in self.shared if m is not mount and mount.path.startswith(m.path + "/")]
            if outer:
                parent = max(outer, key=lambda m: len(m.path))
                _make_dirs(parent.server, [mount.path[len(parent.path):]])
        self.vfs = [NodeVfs(n, [*self.shared, self.proc[n].mount], self.local[n]) for n in range(nodes)]

    def interleave(self) -> None:
        """Let other ranks run in the middle of a multi-request operation."""
        if self.interleave_hook is not None:
            self.interleave_hook()

    def taped(self) -> AbstractContextManager[None]:
        """A run's block: its requests go on ``tape`` (if set), which is then taken off."""
        tape, self.tape = self.tape, None
        return nullcontext() if tape is None else taping(self.disks(), [p.mount for p in self.proc], tape)

    def dev_of(self, mount: Mount) -> int:
        return self._devs.get(id(mount), 0)

    def disks(self) -> list[Mount]:
        """Every disk: the shared mounts, then each node's local disk."""
        return [*self.shared, *self.local]

    def mount_named(self, path: str) -> Mount:
        for mount in self.shared:
            if mount.path == path:
                return mount
        raise ConfigError(f"no shared mount at {path!r}; mounts: {[m.path for m in self.shared]}")

    def crash_disk(self, mount: Mount) -> str:
        """A disk loses what it had not made durable, keeping a drawn (or picked) crash state."""
        if self.crash_picker is not None:
            return mount.server.crash_into(self.crash_picker(mount.path, mount.server))
        return mount.server.crash(self.choices)

    def node_lost_power(self, node: int) -> list[tuple[str, str]]:
        """A node crashed: its clients forget everything (dirty data is lost) and its disks (its
        local disk, and shared mounts that are disks inside it) keep what a crash state allows.
        Returns (mount point, crash summary) of each disk."""
        for mount in [*self.shared, self.local[node]]:
            mount.node_crashed(node)
        disks = [m for m in self.shared if m.host == node] + [self.local[node]]
        summaries = [(disk.path, self.crash_disk(disk)) for disk in disks]
        self.proc[node].reboot()
        return summaries


def _make_dirs(server: Server, paths: list[str]) -> None:
    """Directories that exist before any run, already durable (/tmp, mount points)."""
    for path in paths:
        ino = ROOT
        for name in [c for c in path.split("/") if c]:
            child = server.lookup(ino, name)
            if child is None:
                child, _ = server.mkdir(ino, name, 0o1777 if path == "/tmp" else 0o755)
                server.sync_dir(ino)
            ino = child
