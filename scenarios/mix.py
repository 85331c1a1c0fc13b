"""Swarm-style fault mixes (FoundationDB's simulation, TigerBeetle's VOPR): each example
enables a random subset of the fault kinds it may use, then draws that subset's parameters from
Hypothesis, so one search visits runs with only skew, only stale caches, both, or none --
rather than every fault at a fixed rate, which hides bugs that one kind of fault masks."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace

from hypothesis import strategies as st
from hypothesis.strategies import DataObject

from simfs.faults import CrashNode, CrashServer, Fault, InjectErrno, Pause, PowerLoss, SlowOps, SlowRank
from simfs.runtime.wakeup import SLICE

from .draws import position, uniform_position
from .example import PICK_SCALE, Crash, Example

KINDS = ("interleave", "cache", "skew", "drift", "slow", "errno")
DEFAULT_KINDS = ("interleave", "cache", "skew", "drift")
# how late a rank may start: up to five minutes, as after a slow import or a node that joined
# late; the scale is drawn first so that small and large delays are both common
SKEW_SCALES = (1.0, 10.0, 60.0, 300.0)
# drift: each rank's wake-up as it leaves a collective or a store wait (runtime/wakeup.py, drawn
# from the example's timing bytes) and a few pauses between operations, PCT-style (Burckhardt et
# al., ASPLOS 2010: a few change points drawn uniformly over the run's steps find any bug of small
# depth with a stated probability); at most MAX_PAUSES, each at an operation drawn uniformly over
# its rank's operations in the recorded run, for a duration up to one of these bounds:
PAUSE_SCALES = (
    5e-4,  # kernel/sched/fair.c sysctl_sched_migration_cost = 0.5 ms: what the scheduler takes a
    #        task's cache warmth to be worth; wake-ups and cross-CPU migrations cost up to this
    SLICE,  # kernel/sched/fair.c: a slice of another task on the rank's CPU (3 ms, runtime/wakeup.py)
    0.2,  # mm/page-writeback.c MAX_PAUSE = HZ/5: balance_dirty_pages stops a writer for up to 200 ms
    #       once the node's dirty pages pass their limit; a full collection of CPython's heap is as long
    2.0,  # the job's own work between two operations, which costs no virtual time in simfs: rank 0
    #       logging, evaluating or saving while the others go on (seconds)
)
MAX_PAUSES = 3
_PAUSE = struct.Struct(">HHBH")  # a pause's rank, operation (fractions of 2**16), bound, duration
_PAUSE_BYTES = 1 + MAX_PAUSES * _PAUSE.size
SLOW_SCALES = (0.001, 0.01, 0.1, 1.0)  # extra virtual seconds per filesystem operation of a node
ERRNOS = ("EIO", "ENOSPC", "EDQUOT", "ESTALE")
# Hypothesis keeps the choices of one example within a few kilobytes; decisions past the end of
# a drawn byte string are the simple ones
MAX_BUFFER = 2048


def fault_kinds(faults: str | Iterable[str]) -> tuple[str, ...]:
    """``"default"`` (interleavings, cache lifetimes, start skew), ``"all"``, ``"none"``, or
    an iterable of kinds from ``KINDS``."""
    if isinstance(faults, str):
        faults = [faults]
    named = {"default": DEFAULT_KINDS, "all": KINDS, "none": ()}
    if isinstance(faults, list) and len(faults) == 1 and faults[0] in named:
        return named[faults[0]]
    kinds = tuple(faults)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"faults: unknown kind(s) {unknown}; use 'default', 'all', 'none' or kinds from {KINDS}")
    return tuple(k for k in KINDS if k in kinds)


@dataclass(frozen=True)
class Space:
    """What examples may vary, learnt from one simple run of the job."""

    kinds: tuple[str, ...]
    nodes: int
    ranks_per_node: int
    buffer: int  # bytes of drawn decisions per run
    ops: tuple[str, ...]  # filesystem operations the job makes (errno targets)
    node_ops: tuple[int, ...]  # operations of each node's ranks in the recorded run (crash points)
    rank_ops: tuple[int, ...] = ()  # operations of each rank in the recorded run (pause points)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


def buffer_size(switches: int) -> int:
    return min(MAX_BUFFER, 2 * switches + 32)


def _scaled(data: DataObject, scales: tuple[float, ...]) -> float:
    scale = data.draw(st.sampled_from(scales))
    return scale * data.draw(st.integers(1, 1000)) / 1000


def _buffer(data: DataObject, size: int) -> bytes:
    return data.draw(st.binary(min_size=size, max_size=size))


def draw_example(data: DataObject, space: Space) -> Example:
    """An example without a crash: each kind of the space on or off, then its parameters."""
    on = {kind for kind in space.kinds if data.draw(st.booleans())}
    faults: list[Fault] = []
    if "skew" in on:
        late = data.draw(st.lists(st.integers(0, space.world_size - 1), min_size=1, max_size=space.world_size,
                                  unique=True))
        faults.extend(SlowRank(rank, round(_scaled(data, SKEW_SCALES), 3)) for rank in sorted(late))
    if "slow" in on:
        node = data.draw(st.integers(0, space.nodes - 1))
        ranks = tuple(range(node * space.ranks_per_node, (node + 1) * space.ranks_per_node))
        faults.append(SlowOps(round(_scaled(data, SLOW_SCALES), 6), ranks=ranks))
    if "drift" in on:
        faults.extend(_pauses(data, space))
    if "errno" in on and space.ops:
        faults.append(InjectErrno(data.draw(st.sampled_from(ERRNOS)), op=data.draw(st.sampled_from(space.ops)),
                                  ranks=(data.draw(st.integers(0, space.world_size - 1)),), count=1))
    return Example(
        schedule=_buffer(data, space.buffer) if "interleave" in on else None,
        lifetimes=_buffer(data, space.buffer) if "cache" in on else None,
        faults=tuple(faults),
        timing=_buffer(data, space.buffer) if "drift" in on else None,
    )


def _pauses(data: DataObject, space: Space) -> list[Pause]:
    """Up to MAX_PAUSES change points read from one drawn byte string (fresh bytes each example:
    Hypothesis's own integers repeat an earlier example's values more often): a rank and one of
    its operations, each uniform, and a duration log-uniform over the three decades below a bound.
    Shrinking lowers the bytes: no pause (the ranks' wake-ups alone), then rank 0's first
    operation, the shortest duration."""
    raw = data.draw(st.binary(min_size=_PAUSE_BYTES, max_size=_PAUSE_BYTES))
    pauses = []
    for i in range(raw[0] % (MAX_PAUSES + 1)):
        rank, before, bound, length = _PAUSE.unpack_from(raw, 1 + i * _PAUSE.size)
        rank = rank * space.world_size >> 16
        ops = space.rank_ops[rank] if rank < len(space.rank_ops) else 0
        seconds = PAUSE_SCALES[bound % len(PAUSE_SCALES)] * 1000.0 ** (length / 65536 - 1)
        pauses.append(Pause(rank, before * ops >> 16, float(f"{seconds:.3g}")))
    return pauses


def draw_crash(data: DataObject, space: Space, mounts_with_server: bool) -> Crash:
    """A crash at an operation drawn uniformly over those of the recorded run (or right after
    its end), of a kind drawn from those that apply."""
    node_ops = space.node_ops
    kinds = ["power"] + (["node"] if space.nodes > 1 else []) + (["server"] if mounts_with_server else [])
    kind = data.draw(st.sampled_from(kinds))
    pick = position(data.draw(uniform_position), PICK_SCALE)
    node = data.draw(st.integers(0, space.nodes - 1)) if kind == "node" else None
    count = node_ops[node] if node is not None else sum(node_ops)
    point = position(data.draw(uniform_position), count + 1)  # == count: after the job's last operation
    if point == count:
        return Crash(None, pick)
    if node is not None:
        return Crash(CrashNode(node, after_ops=point), pick)
    return Crash(CrashServer(after_ops=point) if kind == "server" else PowerLoss(after_ops=point), pick)


def draw_recover(data: DataObject, space: Space, example: Example) -> Example:
    """The restarted job's own decisions (a restart is not a replay of the job's schedule)."""
    return replace(example,
                   recover_schedule=_buffer(data, space.buffer) if example.schedule is not None else None,
                   recover_lifetimes=_buffer(data, space.buffer) if example.lifetimes is not None else None,
                   recover_timing=_buffer(data, space.buffer) if example.timing is not None else None)
