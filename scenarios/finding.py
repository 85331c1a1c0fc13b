"""What a search found: pass or the minimal failing example, told in words (which rank was
late, which cache answered stale, where the crash hit, who raised where), with its replay
string and trace."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from simfs import Result, plaindata
from simfs.capture import distinct_warnings
from simfs.faults import CrashNode, CrashServer, Fault, InjectErrno, Pause, PowerLoss, SlowOps, SlowRank
from simfs.visible import framed, visible

from . import replaying
from .coverage import crash_hit
from .example import Crash, Example, Execution
from .outcome import Event, Failure, FindingRecord, RankOutput, Warned
from .reporting._common import replay_command
from .reporting.coverage import coverage_words
from .reporting.output import output_text
from .target import Target


def _fault_words(fault: Fault, ranks_per_node: int) -> str:
    if isinstance(fault, SlowRank):
        return f"rank {fault.rank} started {fault.delay:g} s late"
    if isinstance(fault, SlowOps):
        ranks = list(fault.ranks or ())
        who = f"node {ranks[0] // ranks_per_node}" if ranks else "every node"
        return f"{who}'s filesystem operations each took {fault.delay:g} s longer"
    if isinstance(fault, InjectErrno):
        ranks = list(fault.ranks or ())
        return f"rank {ranks[0] if ranks else '*'}'s first {fault.op} failed with {fault.name}"
    return repr(fault)


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _pause_words(pause: Pause, job: Result) -> str:
    """The pause as it happened: before which operation, on which path, where in the rank's code."""
    for e in job.trace:
        if e.op == "pause" and e.rank == pause.rank and e.outcome.startswith(f"{pause.seconds:g}s before "):
            op, _, where = e.outcome.removeprefix(f"{pause.seconds:g}s before ").partition(" at ")
            return f"rank {pause.rank} paused {_duration(pause.seconds)} before its {op} {e.path}" + \
                (f" at {where}" if where else "")
    return (f"rank {pause.rank} would have paused {_duration(pause.seconds)} before its operation "
            f"{pause.before_op + 1}, which it never reached")


def _crash_words(crash: Crash, execution: Execution) -> str:
    fault = crash.fault
    if fault is None:
        where = "the whole cluster lost power right after the job ended"
    elif isinstance(fault, PowerLoss):
        where = f"the whole cluster lost power before operation {(fault.after_ops or 0) + 1}"
    elif isinstance(fault, CrashNode):
        where = f"node {fault.node} lost power before its operation {(fault.after_ops or 0) + 1}"
    elif isinstance(fault, CrashServer):
        where = f"the {fault.mount} server restarted before operation {(fault.after_ops or 0) + 1}"
    else:
        where = repr(fault)
    hit = [e for e in execution.job.trace if e.rank < 0 and e.op in ("crash", "server-crash", "disk-crash")]
    kept = [f"{e.path}: {e.outcome.split(' (')[0]}" for e in hit if e.op != "crash"] + execution.notes
    e = crash_hit(execution) if fault is not None else None
    if e is not None:
        where += f", after rank {e.rank}'s {e.op} {e.path}"
    if crash.down_until is not None:
        where += f"; the cluster stayed down until {crash.down_until:.6g} s of virtual time"
    return where + "".join(f"\n      kept: {k}" for k in kept)


def _stale_lines(result: Result, run: int) -> list[str]:
    lines = []
    for e in result.trace:
        if e.stale:
            lines.append(f"{'restart: ' if run else ''}rank {e.rank}'s {e.op} {e.path} -> {e.outcome} "
                         f"at {e.time:.3f}s: {e.stale}")
    return lines


def describe(target: Target, example: Example, execution: Execution) -> str:
    """The counterexample in words, root cause first."""
    f = execution.failure
    lines = []
    if f is not None:
        who = f"rank {f.rank} (node {f.rank // target.ranks_per_node})" if f.rank is not None else "the check"
        run = " of the restarted job (recover)" if f.run == 1 else ""
        lines.append(f"root cause: {who}{run} {'raised' if f.kind == 'raised' else f.kind + ':'} "
                     f"{framed(f.error, '  ')}")
        if f.where:
            lines.append(f"  at {f.where}")
    lines.append(f"target: {target.describe()}")
    what = [_pause_words(fault, execution.job) if isinstance(fault, Pause)
            else _fault_words(fault, target.ranks_per_node) for fault in example.faults]
    if example.crash is not None and execution.crash_fired:
        what.append("crash: " + _crash_words(example.crash, execution))
    stale = []
    for index, result in enumerate(execution.results):
        stale.extend(_stale_lines(result, index))
    what.extend(f"stale cache: {line}" for line in stale[:8])
    if len(stale) > 8:
        what.append(f"stale cache: ... {len(stale) - 8} more stale answers in the trace")
    drawn = [name for name, buf in (("interleaving", example.schedule), ("cache lifetimes", example.lifetimes),
                                    ("wake-ups", example.timing)) if buf is not None and any(buf)]
    what.append(("drawn: " + " and ".join(drawn)) if drawn else "schedule: the simple order (first ready rank), "
                                                              "shortest cache lifetimes, every rank waking at once")
    lines.append("the counterexample:")
    lines.extend(f"  - {w}" for w in what)
    for index, result in enumerate(execution.results):
        others = [f"rank {r} {type(e).__name__}" for r, e in sorted(result.errors.items())
                  if f is None or (f.run, f.rank) != (index, r)]
        hung = sorted(result.hung)
        if others or hung:
            tag = "restarted job" if index else "job"
            lines.append(f"then in the {tag}: " + ", ".join(others + ([f"ranks {hung} hung"] if hung else [])))
    return "\n".join(lines)


def rank_outputs(results: list[Result]) -> tuple[list[RankOutput], list[Warned]]:
    """What the ranks of each run wrote, and each distinct warning of a run once with its count."""
    outputs: list[RankOutput] = []
    warned: list[Warned] = []
    for run, result in enumerate(results):
        for rank, out in sorted(result.output.items()):
            if out.stdout or out.stderr or out.warnings_left_out:
                outputs.append(RankOutput(run, rank, out.stdout, out.stderr, out.stdout_left_out, out.stderr_left_out,
                                          out.warnings_left_out))
        warned.extend(Warned(run, w.category, w.message, w.filename, w.lineno, w.count, ranks)
                      for w, ranks in distinct_warnings(result.output))
    return outputs, warned


def events(execution: Execution) -> list[Event]:
    return [Event(index, e.time, e.rank, e.node, e.op, e.path,
                  f"{e.outcome} (stale: {e.stale})" if e.stale else e.outcome)
            for index, result in enumerate(execution.results) for e in result.trace]


@dataclass
class Finding:
    """The result of ``scenarios.explore``. ``failed``: a counterexample was found (and shrunk);
    ``replay`` reruns it exactly with ``scenarios.replay``."""

    failed: bool
    target: Target
    examples: int
    wall_time: float
    description: str = ""
    replay: str = ""
    failure: Failure | None = None
    trace: list[Event] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    found_at: int = 0  # the example that first failed (1-based; 0: none did)
    notes: list[str] = field(default_factory=list)
    coverage: dict[str, int] = field(default_factory=dict)  # kinds of event reached -> examples (coverage.py)
    # carrier="auto": the carrier whose ranks ran the search's examples ("": the target's, which gave
    # the finding) and why, in words
    searched_carrier: str = ""
    carrier_note: str = ""

    @property
    def searched_on(self) -> str:
        """The carrier whose ranks ran the search's examples."""
        return self.searched_carrier or self.target.carrier

    @property
    def virtual_time(self) -> float:
        return sum(r.virtual_time for r in self.results)

    def record(self) -> FindingRecord:
        """As reports hold it; the ranks' output is the failing example's (none for a pass), and the
        options of its replay command those of this process (shell_options: where the job came from)."""
        output, warned = rank_outputs(self.results) if self.failed else ([], [])
        return FindingRecord(self.failed, self.description, self.replay, self.examples, self.wall_time,
                             self.virtual_time, self.failure, list(self.trace), output, warned,
                             self.found_at, dict(self.coverage), replaying.shell_options(self.target))

    def __str__(self) -> str:
        reached = coverage_words(self.coverage, self.examples)
        if not self.failed:
            return (f"no failure: {self.target.describe()} held over {self.examples} examples "
                    f"in {self.wall_time:.1f}s\n{reached}")
        head = (f"FAILED: {self.target.describe()}: found at example {self.found_at}, "
                f"{self.examples} examples in {self.wall_time:.1f}s (shrunk)")
        notes = "".join(f"\nnote: {n}" for n in [*self.notes, self.carrier_note] if n) + f"\n{reached}"
        output = output_text(*rank_outputs(self.results))  # (not record(): its whole trace copied)
        output = f"\n{output}" if output else ""
        return f"{head}\n{visible(self.description + notes + output)}\nreplay: scenarios.replay({self.replay!r})" \
               f"\n    or: {replay_command(self.replay, replaying.shell_options(self.target))}"


def finding_of(target: Target, example: Example, execution: Execution, *, examples: int, wall: float,
               found_at: int, notes: Iterable[str] = (), coverage: dict[str, int] | None = None) -> Finding:
    failed = execution.failure is not None
    return Finding(failed=failed, target=target, examples=examples, wall_time=wall,
                   description=describe(target, example, execution) if failed else "",
                   replay=replaying.encode(target, example), failure=execution.failure,
                   trace=events(execution), results=execution.results, found_at=found_at if failed else 0,
                   notes=list(notes), coverage=dict(coverage or {}))


plaindata.register(Finding)
