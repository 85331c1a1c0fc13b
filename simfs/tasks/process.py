"""The state a rank owns as a real process would: environment, pid, hostname, cwd, the
``random`` module's generator, the ``os.urandom`` stream, and its file descriptors (the kernel's
open file descriptions; a rank process's own table stays empty: its descriptors are the host's)."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable, Mapping
from random import Random  # for annotations: the Process.random property hides the module there
from typing import TYPE_CHECKING, Any, Protocol

from ..choices import derive_seed
from .console import Console

if TYPE_CHECKING:
    from .task import Task
    from .waitqueue import WaitQueue



TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")  # tempfile's candidates from the environment, in its order


def named_tempdir(env: Mapping[str, str], isdir: Callable[[str], bool]) -> str:
    """The temporary directory an environment names, as tempfile.gettempdir() picks it (the first
    of TEMP_VARIABLES that is a directory, else /tmp), without its test of writing a file there."""
    for key in TEMP_VARIABLES:
        value = env.get(key)
        if value and isdir(value):
            return os.path.abspath(value)
    return "/tmp"

class Threads(Protocol):
    """What a process's exit asks of the scheduler (the host's, or a rank process's client of it)."""

    def busy_threads(self, rank: int) -> list[Task]: ...

    def block(self, queue: WaitQueue, timeout: float | None = None) -> bool: ...


FD_BASE = 1 << 30  # above any real descriptor: a simulated fd reaching a real syscall gets EBADF
# what a Python process starts with: SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored
_PYTHON_SIGNAL_DEFAULTS: dict[int, Any] = {signal.SIGINT: signal.default_int_handler, signal.SIGPIPE: signal.SIG_IGN,
                           signal.SIGXFSZ: signal.SIG_IGN}


class Process:
    """One simulated rank process."""

    def __init__(self, *, rank: int, local_rank: int, node: int, world_size: int, local_world_size: int,
                 pid: int, hostname: str, env: dict[str, str], cwd: str, seed: int, run: int) -> None:
        self.rank = rank
        self.local_rank = local_rank
        self.node = node
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.pid = pid
        self.hostname = hostname
        self.env = env
        self.cwd = cwd
        self.umask = 0o022
        self._seed = (seed, run, rank)
        self._random: Random | None = None
        self._urandom: Random | None = None
        self._tempnames: Random | None = None
        self.fds: dict[int, Any] = {}  # the kernel's open file descriptions (runtime/syscalls/openfile.py)
        # real descriptors the host opened for this process (a greenlet rank's reads of the Python
        # installation): the only real ones its calls may name; a rank process opens its own
        self.real_fds: set[int] = set()
        self.console = Console()
        self.signal_handlers: dict[int, Any] = dict(_PYTHON_SIGNAL_DEFAULTS)
        self.atexit: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        self.settings: dict[str, Any] = {}  # per-process scheduling and group ids rank code set
        self.alive = True
        self.last_op = ("", "")
        self.ops = 0  # filesystem operations it began (every thread's): what a Pause counts
        self.sys: Any = None  # the Syscalls bound to this process
        self.dist: Any = None  # the simulated torch.distributed state of this rank
        self.c10d_host: Any = None  # what torch's stores ask of the kernel on greenlet ranks (rank/c10d/host.py Asks)

    @property
    def seed_parts(self) -> tuple[int, int, int]:
        """(the run seed, the run's index, the rank): what this process's generators derive from."""
        return self._seed

    def _stream(self, name: str) -> Random:
        seed, run, rank = self._seed
        return random.Random(derive_seed(seed, name, run, rank))

    @property
    def random(self) -> Random:
        """The ``random`` module's generator of this process (seeded from the run seed)."""
        if self._random is None:
            self._random = self._stream("random")
        return self._random

    @property
    def tempnames(self) -> Random:
        """tempfile's name generator of this process."""
        if self._tempnames is None:
            self._tempnames = self._stream("tempfile")
        return self._tempnames

    def urandom(self, n: int) -> bytes:
        if self._urandom is None:
            self._urandom = self._stream("urandom")
        return self._urandom.randbytes(n)

    def exit_normally(self, sched: Threads) -> None:
        """The main thread is done: wait for the process's non-daemon threads that still make
        progress (a thread done here, whose end the scheduler has yet to see, is asked about
        again), then run its atexit handlers."""
        while busy := sched.busy_threads(self.rank):
            if busy[0].state != "done":
                sched.block(busy[0].finished)
        self.run_atexit()

    def run_atexit(self) -> None:
        """The process exits normally: its atexit handlers run, last registered first."""
        while self.atexit:
            fn, args, kwargs = self.atexit.pop()
            try:
                fn(*args, **kwargs)
            except SystemExit:
                pass
            except Exception:  # noqa: BLE001 - as atexit does: reported, the next handler still runs
                import traceback

                traceback.print_exc()

    def alloc_fd(self, of: Any) -> int:
        """The lowest free simulated descriptor, now naming the open file description ``of``."""
        fd = FD_BASE
        while fd in self.fds:
            fd += 1
        self.fds[fd] = of
        return fd


def torchrun_env(base: dict[str, str], *, rank: int, local_rank: int, node: int, world_size: int,
                 local_world_size: int, nodes: int, master: str, run_id: str) -> dict[str, str]:
    """The environment torchrun gives a worker."""
    env = dict(base)
    env.update({
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(nodes),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "ROLE_NAME": "default",
        "MASTER_ADDR": master,
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "OMP_NUM_THREADS": "1",
    })
    for key in TEMP_VARIABLES:
        env.pop(key, None)  # the launcher's temp dir is a path on another machine
    return env
