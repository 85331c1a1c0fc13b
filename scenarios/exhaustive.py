"""Exhaustive crash states (ALICE, CrashMonkey): the job's recorded run is cut at every
operation, and at each cut every crash state the persistence model allows there is made real
and the restarted job runs on it. Cuts and states that leave the same disks are run once.

The job runs once: before each of its operations (and after its last) the disks' distinct crash
states are copied as a power loss there would leave them (``Filesystems.op_hook``), and each
restarted job runs on a new cluster holding such a copy (``Cluster.restart_with``). Every restart
starts at one virtual time, ``restart_gap`` after the job's end (a crash at an earlier cut leaves
the cluster down longer: ``Crash.down_until``), so a state whose disks answer every request of
an earlier restart as they answered it restarts the job as it did and needs no run
(scenarios/restarts.py). A failing state is then made again by a power loss in a rerun of the
job, which gives the finding its full story and replay string (and checks that both ways agree)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import simfs
from simfs import hostrun
from simfs.errors import SimfsError
from simfs.faults import PowerLoss
from simfs.fs.filesystems import Filesystems
from simfs.fs.journal import CrashState
from simfs.fs.server import Server
from simfs.fs.tape import Tape

from . import coverage
from .draws import BufferChoices
from .example import STATE_LIMIT, Crash, Example, Execution, execute, finish, start
from .finding import Finding, finding_of
from .outcome import Failure
from .restarts import UNKNOWN, RestartClasses, Unknown
from .target import Target
from .verdict import judge


@dataclass(frozen=True)
class Cut:
    """One distinct crash state: a power loss before operation ``ops + 1`` (``ops`` = all of
    them: after the job), the index of each shared disk's state there, the virtual time, the
    disks as it leaves them (in the order of ``Filesystems.disks()``), and the kinds of event it
    is (scenarios/coverage.py: the power loss, and the state each shared disk was left in)."""

    ops: int
    index: int
    at: float
    disks: tuple[Server, ...]
    kinds: frozenset[str] = frozenset()


class CrashWalk:
    """The job, run once with its simple schedule, and the distinct crash states of its run
    (at most ``limit``): at every cut, or with ``during_job=False`` only after it ended. Its
    restarts start when the job's run ended (``down_until``); ``classes`` tells which need no run
    (``alike=False``: every one runs)."""

    def __init__(self, target: Target, limit: int, *, during_job: bool = True, alike: bool = True) -> None:
        self.target = target
        self.limit = limit
        self.cuts: list[Cut] = []
        self.classes = RestartClasses() if alike else None
        self._seen: set[tuple[bytes, ...]] = set()
        # each disk's last copy by what it was made from: a disk that did not change is not copied
        # again, and the cuts that share a copy are counted (each restart run takes a copy its own)
        self._last: dict[int, tuple[tuple[Any, ...], Server]] = {}
        self._holders: dict[int, int] = {}
        self._generations: list[tuple[int, int]] = []
        self._fs: Filesystems | None = None
        self._job_ended = False  # the cuts recorded now are after the job's last operation
        cluster, execution = start(target, Example(), watch=self._watch if during_job else None)
        cluster.fs.op_hook = None
        self.down_until = cluster.fs.clock.now
        self.total = sum(execution.job.node_ops)
        if not execution.job.crashed:
            self._fs = cluster.fs
            self._job_ended = True
            self._record(self.total)  # the disks as the job left them
        self.simple = finish(cluster, target, Example(), execution)

    def _watch(self, cluster: simfs.Cluster) -> None:
        self._fs = cluster.fs
        cluster.fs.op_hook = self._record

    def _record(self, ops: int) -> None:
        """Before operation ``ops + 1``: copy the disks as each new distinct crash state leaves them."""
        if len(self.cuts) >= self.limit or self._fs is None:
            return
        disks = self._fs.disks()
        generations = [d.server.generation() for d in disks]
        if generations == self._generations:
            return  # no disk changed since the last cut: its states were all seen there
        self._generations = generations
        # a node's own disk keeps nothing unsynced (as Crash.picker does): the shared disks are walked
        keyed = [d.server.keyed_crash_states(1 if d.path == "/" else STATE_LIMIT) for d in disks]
        offered = max((len(k) for d, k in zip(disks, keyed) if d.path != "/"), default=1)
        for index in range(offered):
            chosen = [k[min(index, len(k) - 1)] for k in keyed]
            key = tuple(digest for _, digest in chosen)
            if key in self._seen:
                continue
            self._seen.add(key)
            copies = tuple(self._copy(i, d.server, state) for i, (d, (state, _)) in enumerate(zip(disks, chosen)))
            kinds = {"power loss after the job" if self._job_ended else "power loss during the job"}
            for d, (state, _), states in zip(disks, chosen, keyed):
                if d.path != "/":
                    kinds.update(f"crash state: {kind}" for kind in state.kinds([s for s, _ in states]))
            self.cuts.append(Cut(ops, index, self._fs.clock.now, copies, frozenset(kinds)))
            if len(self.cuts) >= self.limit:
                return

    def _copy(self, disk: int, server: Server, state: CrashState) -> Server:
        made = server.copy_key(state)
        last = self._last.get(disk)
        copy = last[1] if last is not None and last[0] == made else server.crashed_copy(state)[0]
        self._last[disk] = made, copy
        self._holders[id(copy)] = self._holders.get(id(copy), 0) + 1
        return copy

    def _passed(self, cut: Cut) -> list[bool]:
        """``cut`` is done with its disks: whether a later cut still holds each."""
        for disk in cut.disks:
            self._holders[id(disk)] -= 1
        return [self._holders[id(disk)] > 0 for disk in cut.disks]

    def _taken(self, cut: Cut, clock: Callable[[], float]) -> list[Server]:
        """``cut``'s disks for a run to take over: a copy that later cuts share is replicated."""
        return [disk.replica(clock) if held else disk for disk, held in zip(cut.disks, self._passed(cut))]

    def restart(self, cluster: simfs.Cluster, cut: Cut) -> tuple[simfs.Result, Tape]:
        """The restarted job run on ``cluster`` on ``cut``'s disks, and its tape (cuts in order)."""
        assert self.target.recover is not None, "an exhaustive walk needs the restarted job"  # explore checks it
        cluster.restart_with(self._taken(cut, cluster.fs.clock), cut.at)
        cluster.stay_down(self.down_until)
        tape = cluster.fs.tape = Tape(cluster.fs.clock)
        return cluster.run(self.target.recover, faults=[], choices=BufferChoices(None, None)), tape

    def example(self, cut: Cut) -> Example:
        """The example that makes ``cut``'s crash state by a power loss in a run of the job."""
        return Example(crash=Crash(PowerLoss(after_ops=cut.ops) if cut.ops < self.total else None, pick=cut.index,
                                   exact=True, down_until=self.down_until))

    def restarts(self) -> Iterator[tuple[Cut, Failure | None]]:
        """Each cut with the verdict of the restarted job on its disks: run there, or known from
        an earlier run that got every answer they give."""
        cluster = self.target.cluster()  # one for every restart: each makes it as a power loss leaves it
        for cut in self.cuts:
            known = UNKNOWN if self.classes is None else self.classes.verdict(cut.disks)
            if not isinstance(known, Unknown):
                self._passed(cut)
                yield cut, known
                continue
            recovered, tape = self.restart(cluster, cut)
            failure = judge(recovered, self.target.check, run=1)
            if self.classes is not None:
                self.classes.add(tape, failure)
            yield cut, failure

    def replayed(self, cut: Cut) -> tuple[Example, Execution]:
        """``cut``'s crash made again by a power loss in a rerun of the job (its full story)."""
        example = self.example(cut)
        execution = execute(self.target, example)
        if execution.failure is None:
            raise SimfsError(f"simfs defect: the restarted job failed on the disks copied at operation {cut.ops} "
                             f"(state {cut.index}) but passed when a power loss there made them again")
        return example, execution


def exhaust(target: Target, *, limit: int, started: float) -> Finding:
    """Every distinct crash state of the job's simple run (at most ``limit``), the restarted
    job on each; the first failure in order (earliest cut, simplest state) is the finding. Its
    runs are one series (simfs.hostrun): the host is prepared for them once."""
    with hostrun.series():
        return _exhaust(target, limit=limit, started=started)


def _exhaust(target: Target, *, limit: int, started: float) -> Finding:
    walk = CrashWalk(target, limit)
    simple = walk.simple
    if simple.failure is not None:
        return finding_of(target, Example(), simple, examples=1, wall=time.perf_counter() - started, found_at=1)
    runs = 1
    reached = [coverage.reached(Example(), simple)]
    for cut, failure in walk.restarts():
        runs += 1
        reached.append(cut.kinds)
        if failure is not None:
            example, execution = walk.replayed(cut)
            return finding_of(target, example, execution, examples=runs, wall=time.perf_counter() - started,
                              found_at=runs, notes=[_summary(walk, runs - 1, cut.ops)],
                              coverage=coverage.tally(reached))
    notes = [_summary(walk, len(walk.cuts), walk.total)]
    if len(walk.cuts) >= limit:
        notes = [f"bounded: stopped at {limit} distinct crash states (cut {walk.cuts[-1].ops} of {walk.total})"]
    return finding_of(target, Example(), simple, examples=runs, wall=time.perf_counter() - started, found_at=0,
                      notes=notes, coverage=coverage.tally(reached))


def _summary(walk: CrashWalk, states: int, cut: int) -> str:
    said = f"{states} distinct crash states tried, over cuts 0..{cut} of {walk.total} operations"
    if walk.classes is None:
        return said
    return f"{said} (the restarted job ran on {walk.classes.runs}; the others answered as one of those did)"
