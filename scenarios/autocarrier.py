"""``carrier="auto"``: a search runs on greenlet ranks where the job cannot tell them from rank
processes, and every answer it gives is one that rank processes give.

Greenlet ranks share one interpreter; rank processes each have their own. A job can tell the two
apart only through per-process state, so the search watches for it: a job that imports a training
stack (its C++ keeps per-process state), or whose ranks change module-level or class-level state of
a module other than simfs's own during its second example or a sampled one (scenarios/statewatch.py),
is searched on rank processes. Otherwise it is searched on greenlet ranks, and the first example, the
first failing one, every SAMPLE_EVERY-th one and the reported one run again on rank processes with the
same draws: any
difference in trace, returns, errors, virtual time or verdict discards the greenlet search, which
runs again on rank processes, and the finding says so. A finding comes from its run on rank
processes, and its replay string replays there. Rank processes are never reused between examples:
a rank's leftover module state would change what later examples test."""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field, replace
from typing import Any

from simfs import carriers, plaindata

from . import statewatch
from .example import Example, Execution, execute
from .finding import Finding, finding_of
from .target import Target

SAMPLE_EVERY = 16  # besides the first, first failing and reported examples, one in this many is confirmed
# packages that keep per-process state in C++ or in caches of their own (process groups, CUDA
# contexts, accelerators' state, fingerprint caches): a job that imports one runs on rank processes
STACKS = ("torch.nn.parallel", "torch.distributed.fsdp", "torch.distributed.checkpoint", "torch.distributed.tensor",
          "transformers", "accelerate", "lightning", "pytorch_lightning", "datasets", "deepspeed")


class Ineligible(Exception):
    """The job can tell greenlet ranks from rank processes: why, in words."""


@dataclass(frozen=True)
class Sample:
    """An example the greenlet search ran, with what it did there."""

    index: int  # its number in the search (1: the first)
    example: Example
    outcome: dict[str, Any]


@dataclass
class Sampler:
    """Runs the greenlet search's examples (explore's ``run``), watching the state of the job's
    modules around the sampled ones, and keeps the samples to confirm on rank processes."""

    samples: list[Sample] = field(default_factory=list)
    count: int = 0
    failing: Example | None = None  # the last failing example (the search's reported one at its end)

    def run(self, target: Target, example: Example) -> Execution:
        self.count += 1
        sampled = self.count == 1 or self.count % SAMPLE_EVERY == 0
        # (the first example's run installs simfs's interception in this process: state is watched
        # from the second on)
        before = statewatch.snapshot() if self.count > 1 and (self.count == 2 or sampled) else None
        before_first = set(sys.modules) if self.count == 1 else set()
        execution = execute(target, example)
        if before is not None:
            moved = statewatch.changed(before, statewatch.snapshot())
            if moved:
                shown = ", ".join(moved[:5]) + (f" and {len(moved) - 5} more" if len(moved) > 5 else "")
                raise Ineligible(f"example {self.count} changed per-process state of the job's modules ({shown})")
        if self.count == 1:
            stacks = stacks_used(target, before_first)
            if stacks:
                raise Ineligible(f"the job uses {', '.join(stacks)}, which keep per-process state")
        first_failure = execution.failure is not None and self.failing is None
        if execution.failure is not None:
            self.failing = example
        if sampled or first_failure:
            self.samples.append(Sample(self.count, example, outcome(execution)))
        return execution


def stacks_used(target: Target, imported_before: set[str]) -> list[str]:
    """The STACKS the job uses: imported during its first example, or named in the module of its
    job, recover or check (a module, class or function of theirs bound there)."""
    found = {_stack_of(name) for name in set(sys.modules) - imported_before}
    for fn in (target.job, target.recover, target.check):
        space = getattr(fn, "__globals__", None)
        if type(space) is dict:
            found.update(_stack_of(_module_name(value)) for value in list(space.values()))
    return sorted(found - {""})


def _module_name(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return value.__name__
    if isinstance(value, (type, types.FunctionType)):
        name = value.__dict__.get("__module__") if isinstance(value, type) else value.__module__
        return name if isinstance(name, str) else ""
    return ""


def _stack_of(module: str) -> str:
    return next((stack for stack in STACKS if module == stack or module.startswith(stack + ".")), "")


def outcome(execution: Execution) -> dict[str, Any]:
    """What a run did that the carriers must agree on, as plain data: each run's returns, errors,
    crashed and hung ranks, virtual time and trace, and the verdict."""
    runs = [{"returns": plaindata.dumps(result.returns),
             "errors": {rank: (type(exc).__name__, str(exc)) for rank, exc in result.errors.items()},
             "crashed": sorted(result.crashed), "hung": sorted(result.hung),
             "virtual_time": result.virtual_time, "trace": [str(event) for event in result.trace]}
            for result in execution.results]
    failure = execution.failure
    return {"runs": runs, "verdict": None if failure is None else (failure.kind, failure.rank, failure.error)}


def difference(greenlet: dict[str, Any], process: dict[str, Any]) -> str:
    """What differs between two outcomes, in words ("" if nothing)."""
    if greenlet["verdict"] != process["verdict"]:
        return f"verdict {_verdict(greenlet)} on greenlet ranks, {_verdict(process)} on rank processes"
    if len(greenlet["runs"]) != len(process["runs"]):
        return "the restarted job ran on one carrier only"
    for run, (g, p) in enumerate(zip(greenlet["runs"], process["runs"])):
        for key in g:
            if g[key] != p[key]:
                return f"{key}" + (" of the restarted job" if run else "")
    return ""


def _verdict(out: dict[str, Any]) -> str:
    verdict = out["verdict"]
    return "pass" if verdict is None else f"{verdict[0]} ({verdict[2]})"


@dataclass(frozen=True)
class GreenletSearch:
    """What the greenlet search gave: its finding (None: it stopped, ``ineligible`` says why) and the
    examples to confirm."""

    finding: Finding | None
    ineligible: str
    samples: tuple[Sample, ...]
    best: Example | None  # the reported example (None: the search passed)


@dataclass(frozen=True)
class Confirmed:
    """The rank processes' answer: the finding from their run (None: ``mismatch`` says what
    differed)."""

    finding: Finding | None
    mismatch: str


def confirm(target: Target, searched: GreenletSearch) -> Confirmed:
    """Run the samples and the reported example on rank processes (``target``), as the greenlet
    search ran them; the finding from the process run of the reported one."""
    assert searched.finding is not None
    found = searched.finding
    start = time.perf_counter()
    ran: list[tuple[Example, Execution]] = []
    for sample in searched.samples:
        ran.append((sample.example, execute(target, sample.example)))
        differs = difference(sample.outcome, outcome(ran[-1][1]))
        if differs:
            return Confirmed(None, f"example {sample.index} ran differently on rank processes: {differs}")
    if searched.best is not None and searched.best != searched.samples[-1].example:
        ran.append((searched.best, execute(target, searched.best)))
    if searched.best is not None and ran[-1][1].failure is None:
        return Confirmed(None, "the reported example passes on rank processes")
    example, execution = ran[-1] if searched.best is not None else ran[0]  # (a pass: the first, simple example)
    note = (f"searched on greenlet ranks (the job showed no per-process state); {len(ran)} of its "
            f"{found.examples} examples ran again on rank processes, the same")
    wall = found.wall_time + time.perf_counter() - start
    confirmed = finding_of(target, example, execution, examples=found.examples, wall=wall, found_at=found.found_at,
                           notes=found.notes, coverage=found.coverage)
    return Confirmed(replace(confirmed, searched_carrier=carriers.GREENLET, carrier_note=note), "")


def greenlet_target(target: Target) -> Target:
    return replace(target, carrier=carriers.GREENLET)


plaindata.register(Sample, GreenletSearch, Confirmed)
