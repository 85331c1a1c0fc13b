"""The measurement skeleton every lag shares: rank 0 prepares, the observers look, rank 0
changes, the observers poll until they see the change or time out; all on one timeline.

A round runs many experiments at once, each in its own fresh directory, so that a round costs the
longest lag rather than their sum. Experiments acted on before the observers start polling must not
be polled earlier (polling a name that is not there yet would cache 'not found' and measure
another thing); delayed ones are changed while the observers poll (cache lifetimes after a
revalidation, readers racing a writer)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Protocol

from .context import Context
from .settings import POLL


class Experiment(Protocol):
    """One change and how to see it. ``delay``: None to change before polling starts, else the
    seconds after it starts. ``details``: what either side noted (errnos, counts), gathered."""

    delay: float | None
    details: dict[str, object]

    def prepare(self, root: str) -> None: ...  # rank 0, before anyone looks

    def look(self, root: str) -> None: ...  # observer: its prior lookup (or nothing)

    def act(self, root: str) -> None: ...  # rank 0: the change

    def check(self, root: str) -> bool: ...  # observer: seen yet?

    def close(self) -> None: ...  # either side: release what it holds


@dataclass
class Trial:
    """One experiment seen by one observer, on rank 0's timeline (seconds)."""

    looked: float
    acted: float
    seen: float | None  # None: not within the timeout
    first: bool  # the very first check already saw it
    details: dict[str, object] = field(default_factory=dict)

    @property
    def lag(self) -> float | None:
        return None if self.seen is None else max(self.seen - self.acted, 0.0)

    @property
    def since_lookup(self) -> float | None:
        return None if self.seen is None else max(self.seen - self.looked, 0.0)


def _poll(ctx: Context, experiments: list[Experiment], roots: list[str], start: float,
          seen: dict[int, float], first: dict[int, bool]) -> None:
    """Check every unseen experiment in turn until all are seen or each is past its deadline."""
    deadline = {i: start + (e.delay or 0.0) + ctx.settings.timeout for i, e in enumerate(experiments)}
    pending = list(range(len(experiments)))
    while pending:
        for i in list(pending):
            ok = experiments[i].check(roots[i])
            now = ctx.clock.now()
            first.setdefault(i, ok)
            if ok:
                seen[i] = now
                pending.remove(i)
            elif now > deadline[i]:
                pending.remove(i)
        time.sleep(POLL)


def _act_delayed(ctx: Context, experiments: list[Experiment], roots: list[str], start: float,
                 acted: dict[int, float]) -> None:
    for i in sorted((i for i, e in enumerate(experiments) if e.delay is not None),
                    key=lambda i: experiments[i].delay or 0.0):
        time.sleep(max(start + (experiments[i].delay or 0.0) - ctx.clock.now(), 0.0))
        experiments[i].act(roots[i])
        acted[i] = ctx.clock.now()


def run_round(ctx: Context, label: str, experiments: list[Experiment]) -> list[list[Trial]]:
    """Run ``experiments`` once (a collective); for each, one Trial per observer (every rank
    gets them all)."""
    base = ctx.session.fresh(label)
    roots = [ctx.session.path(base, str(i)) for i in range(len(experiments))]
    looked: dict[int, float] = {}
    acted: dict[int, float] = {}
    seen: dict[int, float] = {}
    first: dict[int, bool] = {}
    try:
        if ctx.actor:
            os.mkdir(ctx.session.path(base))
            for e, root in zip(experiments, roots):
                os.mkdir(root)
                e.prepare(root)
        ctx.comm.barrier()
        if ctx.observer:
            for i, (e, root) in enumerate(zip(experiments, roots)):
                e.look(root)
                looked[i] = ctx.clock.now()  # a cache's lifetime counts from the reply
        ctx.comm.barrier()
        if ctx.actor:
            for i, (e, root) in enumerate(zip(experiments, roots)):
                if e.delay is None:
                    e.act(root)
                    acted[i] = ctx.clock.now()
        ctx.comm.barrier()
        start = ctx.clock.now()
        if ctx.actor:
            _act_delayed(ctx, experiments, roots, start, acted)
        if ctx.observer:
            _poll(ctx, experiments, roots, start, seen, first)
    finally:
        for e in experiments:
            e.close()
    mine = (looked, acted, seen, first, [e.details for e in experiments])
    everyone = ctx.comm.all_gather_object(mine)
    actor_acted, actor_details = everyone[0][1], everyone[0][4]
    out: list[list[Trial]] = []
    for i in range(len(experiments)):
        trials = []
        for rank in ctx.observers:
            o_looked, _, o_seen, o_first, o_details = everyone[rank]
            trials.append(Trial(o_looked[i], actor_acted[i], o_seen.get(i), o_first.get(i, False),
                                {**actor_details[i], **o_details[i]}))
        out.append(trials)
    return out
