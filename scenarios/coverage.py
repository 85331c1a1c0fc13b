"""Which kinds of event an example reached: stale cache answers by cache, crashes by kind and by
the operation they came after, the crash states the disks were left in, start skew, slow
operations and injected errnos. A search counts the examples that reached each kind (its coverage
of the fault space), so that a pass says how far the search went, not only how many examples."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from simfs.faults import CrashNode, CrashServer, PowerLoss, SlowOps, SlowRank
from simfs.report import TraceEvent

from .example import Crash, Example, Execution

_STALE = re.compile(r"'s (.+?) cache answered")
_CRASHES = ("crash", "server-crash", "disk-crash")


def crash_hit(execution: Execution) -> TraceEvent | None:
    """The last operation of a rank before the job's crash (None: no crash during the job)."""
    hit = [e for e in execution.job.trace if e.rank < 0 and e.op in _CRASHES]
    if not hit:
        return None
    before = [e for e in execution.job.trace if e.rank >= 0 and e.op != "pause" and e.time <= hit[0].time]
    return before[-1] if before else None


def _crash_kind(crash: Crash) -> str:
    fault = crash.fault
    if isinstance(fault, CrashNode):
        return "node crash"
    if isinstance(fault, CrashServer):
        return "server restart"
    if isinstance(fault, PowerLoss):
        return "power loss"
    return "power loss after the job"


def reached(example: Example, execution: Execution) -> frozenset[str]:
    """The kinds of event one example reached."""
    kinds: set[str] = set()
    for fault in example.faults:
        if isinstance(fault, SlowRank):
            kinds.add("start skew")
        elif isinstance(fault, SlowOps):
            kinds.add("slow operations")
    for result in execution.results:
        for e in result.trace:
            if e.stale:
                found = _STALE.search(e.stale)
                kinds.add(f"stale {found.group(1) if found else 'cache'} answer")
            if e.outcome.endswith(" (injected)"):
                kinds.add(f"injected {e.outcome.split()[0]}")
            if e.op == "pause":
                kinds.add("pause")
    if example.crash is not None and execution.crash_fired:
        kind = _crash_kind(example.crash)
        hit = crash_hit(execution) if example.crash.fault is not None else None
        if example.crash.fault is None:
            kinds.add(kind)
        else:
            kinds.add(f"{kind} after {hit.op}" if hit is not None else f"{kind} before the first operation")
    kinds.update(f"crash state: {what}" for what in execution.crash_states)
    return frozenset(kinds)


RARITY = "rarity of the events reached"  # the label of the steering score (hypothesis.target)


class Rarity:
    """The steering score of a search's examples: each kind of event an example reached counts
    1 / (1 + the examples before it that reached it), so an example that reached what few others
    did scores high, and Hypothesis's target phase mutates it towards more of the same."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def score(self, kinds: frozenset[str]) -> float:
        """The example's score, then its kinds counted."""
        value = sum(1.0 / (1 + self._counts[kind]) for kind in kinds)
        self._counts.update(kinds)
        return value


def tally(examples: Iterable[frozenset[str]]) -> dict[str, int]:
    """How many examples reached each kind, the most reached first (ties by name)."""
    counts: Counter[str] = Counter()
    for kinds in examples:
        counts.update(kinds)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
