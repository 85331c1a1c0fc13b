"""Which crash states restart the job alike. Each restarted job that ran left a tape (its
requests to the disks and their answers, simfs/fs/tape.py); the tapes form a tree, since what a
run asks next depends only on the answers it got so far. A new crash state is walked down the
tree: each request asked again of a replica of its disk. If every answer is the one a run got,
the job would run exactly as that run did and gets its verdict; at the first other answer the job
must run. Only restarts that start alike are compared: at one virtual time, on one cluster,
every node just booted (an exhaustive walk restarts every crash state so: ``CrashWalk``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simfs.errors import SimfsError
from simfs.fs.server import QUERIES, Server
from simfs.fs.tape import Step, Tape

from .outcome import Failure


@dataclass
class _Node:
    """A point of the tree: the request the runs that got here made next, or that they ended
    here (with ``verdict``) or looked at what no replay answers (``opaque``); the runs that went
    on, by the answer they got."""

    step: Step | None = None
    ended: bool = False
    verdict: Failure | None = None
    opaque: bool = False
    after: dict[Any, _Node] = field(default_factory=dict)

    def said(self) -> str:
        if self.step is not None:
            return f"asked {self.step.request}{self.step.args} of disk {self.step.disk} at {self.step.at}"
        return "ended" if self.ended else "looked at /proc"


class Unknown:
    """No run got these answers: the job must run."""


UNKNOWN = Unknown()


class RestartClasses:
    """The restarted job's runs so far, as a tree of their tapes."""

    def __init__(self) -> None:
        self._root = _Node()
        self.runs = 0  # tapes added
        self.known = 0  # verdicts given without a run

    def verdict(self, disks: Sequence[Server]) -> Failure | Unknown | None:
        """The verdict of the restarted job on ``disks`` (crash copies, left unchanged) if a run
        got every answer they give, else UNKNOWN."""
        node: _Node | None = self._root
        clock = [0.0]
        replicas: dict[int, Server] = {}  # a disk's, from its first request that changes something
        while node is not None and node.step is not None:
            step = node.step
            server = replicas.get(step.disk)
            if server is None:
                server = disks[step.disk]
                if step.request not in QUERIES:
                    server = replicas[step.disk] = server.replica(lambda: clock[0])
            node = node.after.get(step.ask(server, clock))
        if node is None or not node.ended:
            return UNKNOWN
        self.known += 1
        return node.verdict

    def add(self, tape: Tape, verdict: Failure | None) -> None:
        """A run's tape and its verdict."""
        self.runs += 1
        node = self._root
        for step in tape.steps:
            if node.step is None and not (node.ended or node.opaque):
                node.step = step
            elif node.step is None or not node.step.same_request(step):
                _defect(node, f"asked {step.request}{step.args} of disk {step.disk} at {step.at}")
            node = node.after.setdefault(step.answer, _Node())
        if tape.opaque:
            if node.step is not None or node.ended:
                _defect(node, "looked at /proc")
            node.opaque = True
        elif node.step is not None or node.opaque:
            _defect(node, "ended")
        else:
            node.ended, node.verdict = True, verdict


def _defect(node: _Node, other: str) -> None:
    raise SimfsError(f"two restarted jobs got the same answers from the disks, then one {node.said()} and the "
                     f"other {other}: the restarted job depends on something else that changed between its runs "
                     "(greenlet ranks keep module-level state from one run to the next; carrier='process' starts "
                     "each run in fresh processes), or this is a simfs defect")
