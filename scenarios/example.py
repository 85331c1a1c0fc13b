"""One example of a search: every perturbation it makes, and running it. A run is a pure
function of its example, so the same example always gives the same failure and trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import simfs
from simfs import Result, plaindata
from simfs.faults import Fault
from simfs.fs.journal import CrashState
from simfs.fs.server import Server

from .draws import BufferChoices
from .outcome import Failure
from .target import Target
from .verdict import judge

# crash states considered when a crash is drawn (the simplest first, identical images merged)
STATE_LIMIT = 256
PICK_SCALE = 1 << 32
Picker = Callable[[str, Server], CrashState]


@dataclass(frozen=True)
class Crash:
    """Where and how the cluster crashes. ``fault`` fires during the job (None: a power loss
    right after the job ended); ``pick`` selects each disk's crash state: a fraction of
    ``PICK_SCALE`` of the distinct states, or with ``exact`` the index of one. ``down_until``:
    the cluster stays down until that virtual time (None: the restarted job starts the cluster's
    ``restart_gap`` after the crash; ``Cluster.stay_down``)."""

    fault: Fault | None
    pick: int = 0
    exact: bool = False
    down_until: float | None = None

    def picker(self, offered: list[int] | None = None, kinds: list[str] | None = None) -> Picker:
        """Picks each disk's crash state; ``offered`` gets how many distinct states each shared
        disk had (what an exhaustive walk iterates over), ``kinds`` what kind of state each disk
        but its root was left in (CrashState.kinds: the search's coverage)."""
        def pick(mount: str, server: Server) -> CrashState:
            states = server.crash_states(STATE_LIMIT)
            if mount == "/" and self.exact:  # a node's own disk
                state = states[0]  # nothing unsynced kept: exhaustive walks the shared disks
            else:
                if mount != "/" and offered is not None:
                    offered.append(len(states))
                index = self.pick if self.exact else self.pick * len(states) // PICK_SCALE
                state = states[min(index, len(states) - 1)]
            if kinds is not None and mount != "/":  # (a node's own root disk: what the job's shared data is not on)
                kinds.extend(state.kinds(states))
            return state
        return pick


@dataclass(frozen=True)
class Example:
    """The decisions of one example: the job's schedule, cache lifetimes and wake-ups (None:
    simple), its faults (start skew, pauses, slow operations, errnos), an optional crash, and the
    restarted job's own decisions."""

    schedule: bytes | None = None
    lifetimes: bytes | None = None
    faults: tuple[Fault, ...] = ()
    crash: Crash | None = None
    recover_schedule: bytes | None = None
    recover_lifetimes: bytes | None = None
    timing: bytes | None = None  # each wake-up's delay (runtime/wakeup.py); None: every rank wakes at once
    recover_timing: bytes | None = None


@dataclass
class Execution:
    """What running an example did: the job's run, the restarted job's, the first failure."""

    job: Result
    recover: Result | None = None
    failure: Failure | None = None
    crash_fired: bool = False
    notes: list[str] = field(default_factory=list)
    crash_states: list[str] = field(default_factory=list)  # what kind of state each crashed disk kept

    @property
    def results(self) -> list[Result]:
        return [self.job] if self.recover is None else [self.job, self.recover]


def _crash_fired(result: Result) -> bool:
    return bool(result.crashed) or any(e.rank < 0 and e.op in ("server-crash", "crash") for e in result.trace)


def start(target: Target, example: Example, picker: Picker | None = None,
          watch: Callable[[simfs.Cluster], None] | None = None) -> tuple[simfs.Cluster, Execution]:
    """Run the job of an example (with its crash, if any) on a new cluster; ``picker``
    replaces the crash's own choice of crash states; ``watch`` sees the cluster before the run."""
    cluster = target.cluster()
    if watch is not None:
        watch(cluster)
    crash = example.crash
    kinds: list[str] = []
    cluster.fs.crash_picker = picker or (crash or Crash(None)).picker(kinds=kinds)
    faults = list(example.faults)
    if crash is not None and crash.fault is not None:
        faults.append(crash.fault)
    first = cluster.run(target.job, faults=faults,
                        choices=BufferChoices(example.schedule, example.lifetimes, example.timing))
    execution = Execution(first, crash_fired=_crash_fired(first), crash_states=kinds)
    if crash is not None and crash.fault is None:
        execution.notes = cluster.power_loss()
        execution.crash_fired = True
    return cluster, execution


def finish(cluster: simfs.Cluster, target: Target, example: Example, execution: Execution) -> Execution:
    """Judge the job's run (unless its ranks died in a crash: then only the restart is
    judged), then run ``recover`` on the restarted cluster and judge it."""
    if not execution.job.crashed:
        execution.failure = judge(execution.job, target.check, run=0)
    if execution.failure is None and target.recover is not None:
        if example.crash is not None and example.crash.down_until is not None and execution.crash_fired:
            cluster.stay_down(example.crash.down_until)
        second = cluster.run(target.recover, faults=[],
                             choices=BufferChoices(example.recover_schedule, example.recover_lifetimes,
                                                   example.recover_timing))
        execution.recover = second
        execution.failure = judge(second, target.check, run=1)
    return execution


def execute(target: Target, example: Example) -> Execution:
    """Run the example: the job, then ``recover`` on the restarted cluster."""
    cluster, execution = start(target, example)
    return finish(cluster, target, example, execution)


plaindata.register(Crash, Example)
