"""What the code that runs on a rank's side (the interception, simulated file objects, the
greenlets' torch.distributed) calls on the kernel, as Protocols. A greenlet rank is served by the
kernel's own objects (runtime/scheduler.py, machine.py, syscalls/, dist.py); a rank process by its
clients of the port (rank/client.py, rank/dist.py), which hold nothing of the kernel's."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from .dirent import ScandirIterator
from .groups import SimGroup
from .process import Process
from .task import Task
from .waitqueue import WaitQueue


class Scheduler(Protocol):
    """The scheduler as a rank's threads see it."""

    mains: dict[int, Task]  # rank -> its main task

    @property
    def now(self) -> float: ...

    def elapse(self, cost: float) -> None: ...

    def block(self, queue: WaitQueue, timeout: float | None = None) -> bool: ...

    def notify_all(self, queue: WaitQueue) -> None: ...

    def spawn(self, fn: Callable[[], Any], rank: int, context: Any, name: str, *,
              is_main: bool, start_at: float | None = None, gr_context: Any = None, daemon: bool = False) -> Task: ...


class Machine(Protocol):
    """The simulated machine's clock, trace and real paths, as a rank's side sees them."""

    run_start: float

    @property
    def sched(self) -> Scheduler: ...

    def now(self) -> float: ...

    def wall_time(self) -> float: ...

    def is_real(self, path: str) -> bool: ...

    def note(self, op: str, path: str, outcome: str, rank: int = -1, node: int = -1) -> None: ...

    def warned(self, rank: int, category: str, message: str, filename: str, lineno: int) -> None: ...


class SystemCalls(Protocol):
    """The system calls a simulated file object (rank/fileobj.py) and fsspec's view of the
    simulated filesystems (rank/fsspec_view.py) make."""

    proc: Process

    @property
    def machine(self) -> Machine: ...

    def open_io(self, path: Any, flags: int, mode: int = 0o666) -> int: ...

    def close_held(self, fd: int) -> None: ...

    def close(self, fd: int) -> None: ...

    def read(self, fd: int, n: int) -> bytes: ...

    def write(self, fd: int, data: Any) -> int: ...

    def lseek(self, fd: int, pos: int, how: int) -> int: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def kind_of(self, fd: int) -> str: ...

    def stat(self, path: Any, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> os.stat_result: ...

    def scandir(self, path: Any = ".") -> ScandirIterator | os._ScandirIterator[Any]: ...

    def mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None: ...

    def rmdir(self, path: Any, *, dir_fd: int | None = None) -> None: ...

    def unlink(self, path: Any, *, dir_fd: int | None = None) -> None: ...

    def rename(self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None: ...

    def utime(self, path: Any, times: tuple[float, float] | None = None, *, ns: tuple[int, int] | None = None,
              dir_fd: int | None = None, follow_symlinks: bool = True) -> None: ...

    def _abs(self, path: Any, dir_fd: int | None = None) -> tuple[str, bool]: ...

    def _real_write_refused(self, shown: Any) -> OSError: ...


class World(Protocol):
    """A rank's torch.distributed world: its process groups and their collectives."""

    initialized: Any  # rank -> whether its default group is initialized

    def group(self, group: Any, rank: int) -> SimGroup: ...

    def init(self, rank: int, timeout: Any) -> None: ...

    def destroy(self, rank: int) -> None: ...

    def new_group(self, rank: int, ranks: list[int] | None, timeout: Any) -> Any: ...

    def collective(self, rank: int, group: Any, kind: str, payload: Any, *, timeout: float | None = None,
                   nbytes: int = 0, root: int = -1) -> Any: ...
