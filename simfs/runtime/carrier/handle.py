"""The host's handle on one rank process: its pid and a pidfd (which says when it ended, and
signals it without the risk of a reused pid), its socket, the read ends of its stdout and
stderr, the memfd its faulthandler writes to, its wait queues and pending signals; killing it as
the host's own call, learning how it ended (from the zygote, its parent), reading its stacks."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import _real
from ...supervise import read_stacks
from ...tasks.process import Process
from ...tasks.task import current_task
from ...tasks.waitqueue import WaitQueue


@dataclass(eq=False)
class RankProcess:
    """The host's handle on one rank process."""

    proc: Process
    pid: int
    fd: int
    stacks: int
    outputs: tuple[int, int]  # the read ends of its stdout and stderr
    pidfd: int  # -1 until the zygote says the process started
    wait: Callable[[int], int]  # wait(pid): its wait status once it ended (zygote.py)
    queues: dict[int, WaitQueue] = field(default_factory=dict)  # the rank's wait queues, by its key
    signals: list[int] = field(default_factory=list)  # for its handlers, with its main thread's next answer
    greeted: bool = False  # its first word (messages.Hello) was read
    start_error: BaseException | None = None  # what ended it before it spoke
    killed: str = ""  # why the host killed it (empty: it was not)
    reaped: bool = False

    def kill(self, why: str) -> None:
        """SIGKILL the process (a crashed node, a stuck rank, the end of the run), as the host's
        own call even when a rank's request led here (the audit hook refuses rank tasks' kills)."""
        if self.reaped or self.pidfd < 0:
            return
        self.killed = self.killed or why
        task = current_task()
        if task is not None:
            task.host_calls += 1
        try:
            _real.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            if task is not None:
                task.host_calls -= 1

    def reap(self) -> int:
        """Wait for the process to be gone; its wait status (0 if reaped before, or never started)."""
        if self.reaped or self.pidfd < 0:
            return 0
        status = self.wait(self.pid)
        self.reaped = True
        _real.close(self.pidfd)
        return status

    def ends_within(self, seconds: float) -> bool:
        """Whether the process ends (or has ended) within ``seconds``; it is not reaped."""
        return self.reaped or bool(_real.readable([self.pidfd], seconds))

    def stacks_text(self) -> str:
        """What faulthandler wrote: the fatal signal's native and Python stacks, or the threads'
        stacks the host asked for."""
        return read_stacks(self.stacks)


class Forward:
    """A rank's Python signal handler as the host's Process holds it: delivering the signal queues
    it for the rank, whose own handler runs when its next answer arrives."""

    def __init__(self, rank: RankProcess) -> None:
        self._rank = rank

    def __call__(self, signum: int, frame: Any) -> None:
        self._rank.signals.append(signum)
