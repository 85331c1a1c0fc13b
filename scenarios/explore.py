"""``scenarios.explore``: a Hypothesis search over everything the simulation decides --
interleavings, cache lifetimes within the profile's ranges, start skew, wake-ups and pauses,
slow operations, errno injections, crash points and crash states -- for a run that breaks the
property, shrunk to a minimal example that replays exactly."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis import target as hypothesis_target
from hypothesis.database import ExampleDatabase
from hypothesis.errors import HypothesisException
from hypothesis.strategies import DataObject

import simfs
from simfs import carriers, checks, plaindata
from simfs.runtime.heap import frozen_heap

from . import autocarrier, coverage, replaying
from . import database as examples_db
from .budgets import SHRINK_TIME
from .example import Example, Execution, execute
from .finding import Finding, finding_of
from .mix import Space, buffer_size, draw_crash, draw_example, draw_recover, fault_kinds
from .registry import Crashes
from .target import Check, Target

# a crash in three examples of four (swarm: some examples run the job and its restart with no
# crash at all); shrinking goes towards a crash, whose description says where it hit
_CRASH_OR_NOT = st.sampled_from((True, True, True, False))


Run = Callable[[Target, Example], Execution]  # how the search runs one example (example.execute)


class _Failed(Exception):
    """Raised in Hypothesis's test body when an example fails (one origin: one bug to shrink)."""


class _Search:
    """The state of one search across Hypothesis's calls of its test body."""

    def __init__(self, target: Target, space: Space, crashes: bool, shrink_time: float, steer: bool,
                 run: Run = execute) -> None:
        self.target = target
        self.run = run
        self.space = space
        self.crashes = crashes
        self.shrink_time = shrink_time
        # a server that restarts and loses what it had not made durable; not an object store's,
        # whose uploads are whole objects committed before they are acknowledged (gcsfuse stages
        # an open file on the client, so there is no server state of it to lose)
        self.has_server = not target.profile.on_node and target.profile.upload != "whole"
        self.examples = 0
        self.found_at = 0
        self.first_failure: float | None = None
        self.best: tuple[Example, Execution] | None = None
        self.internal: BaseException | None = None
        self.reached: list[frozenset[str]] = []  # the kinds of event each example reached
        self.rarity = coverage.Rarity() if steer else None  # the score Hypothesis's target phase climbs

    def out_of_time(self) -> bool:
        return self.first_failure is not None and time.perf_counter() - self.first_failure > self.shrink_time

    def body(self, data: DataObject) -> None:
        if self.internal is not None or self.out_of_time():
            return
        try:
            self._example(data)
        except (simfs.SimfsError, ValueError, TypeError, autocarrier.Ineligible) as exc:
            self.internal = exc  # the simulation or its configuration is broken (or the carrier the wrong one): stop

    def _example(self, data: DataObject) -> None:
        example = draw_example(data, self.space)
        if self.target.recover is not None:
            example = draw_recover(data, self.space, example)
        if self.crashes and data.draw(_CRASH_OR_NOT):
            example = replace(example, crash=draw_crash(data, self.space, self.has_server))
        self.examples += 1  # (an example whose draws Hypothesis cut short never ran)
        execution = self.run(self.target, example)
        kinds = coverage.reached(example, execution)
        self.reached.append(kinds)
        if self.rarity is not None:
            hypothesis_target(self.rarity.score(kinds), label=coverage.RARITY)
        if execution.failure is not None:
            self.found(example, execution)
            raise _Failed

    def found(self, example: Example, execution: Execution) -> None:
        if self.first_failure is None:
            self.first_failure = time.perf_counter()
            self.found_at = self.examples
        self.best = (example, execution)


def _space(target: Target, kinds: tuple[str, ...], simple: Execution) -> Space:
    ops = sorted({e.op for e in simple.job.trace if e.rank >= 0 and e.path.startswith("/")})
    return Space(kinds, target.nodes, target.ranks_per_node, buffer_size(simple.job.switches), tuple(ops),
                 tuple(simple.job.node_ops), tuple(simple.job.rank_ops))


def _check_args(nodes: int, ranks_per_node: int, max_examples: int, seed: int, shrink_time: float) -> None:
    for name, value, lo in (("nodes", nodes, 1), ("ranks_per_node", ranks_per_node, 1),
                            ("max_examples", max_examples, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < lo:
            raise ValueError(f"explore: {name} must be an int >= {lo}, got {value!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"explore: seed must be an int, got {seed!r}")
    if not isinstance(shrink_time, (int, float)) or shrink_time < 0:
        raise ValueError(f"explore: shrink_time must be a number of seconds >= 0, got {shrink_time!r}")


def make_target(job: Callable[[], Any], *, recover: Callable[[], Any] | None, check: Check | None, nodes: int,
                ranks_per_node: int, profile: str | simfs.Profile, carrier: str = carriers.DEFAULT,
                watchdog: float = 60.0, preload: Iterable[str] = ()) -> Target:
    for name, fn in (("job", job), ("recover", recover), ("check", check)):
        if fn is not None and not callable(fn):
            raise ValueError(f"explore: {name} must be callable, got {fn!r}")
    if carrier not in carriers.SEARCHES:
        raise ValueError(f"explore: carrier must be one of {', '.join(map(repr, carriers.SEARCHES))}, got {carrier!r}")
    carrier = carriers.PROCESS if carrier == carriers.AUTO else carrier  # (auto: its answers are the processes')
    return Target(job, nodes, ranks_per_node, simfs.profiles.get(profile), recover=recover, check=check,
                  carrier=carrier, watchdog=watchdog, preload=checks.preload("explore", preload, carrier))


def explore(job: Callable[[], Any], *, recover: Callable[[], Any] | None = None, check: Check | None = None,
            nodes: int, ranks_per_node: int, profile: str | simfs.Profile, faults: str | Iterable[str] = "default",
            crashes: Crashes = False, max_examples: int = 100, seed: int = 0, shrink_time: float = SHRINK_TIME,
            explain: bool = False, steer: bool = False, isolate: bool = True, watchdog: float = 60.0,
            carrier: str = carriers.SEARCH_DEFAULT, preload: Iterable[str] = (),
            database: examples_db.DatabaseSpec = examples_db.DEFAULT, database_key: bytes | None = None) -> Finding:
    """Search for a run of ``job`` (then ``recover`` on the restarted cluster) where a rank
    raises, hangs, or ``check(result)`` fails; return the minimal one found, or a pass.

    ``faults``: "default" (interleavings, cache lifetimes, start skew, drift: the ranks'
    wake-ups as they leave collectives and pauses between operations), "all" (also slow
    operations and errno injection), "none", or kinds from ``scenarios.mix.KINDS``; each
    example enables a random subset. ``crashes=True`` adds node, server and whole-cluster
    crashes at uniformly drawn operations; ``"exhaustive"`` walks every crash state of the
    recorded run instead. Deterministic for a given ``seed``.

    ``isolate=True`` searches in a forked child confined by the kernel (``simfs.isolated``, as
    ``simfs run`` does): what rank code does past simfs's Python layer is refused, a search that
    makes no progress for ``watchdog`` real seconds (C code holding the GIL) raises
    ``simfs.Stalled``, and nothing the ranks or ``check`` do stays in this process; the finding
    (the ranks' return values and errors included) comes back as plain data (simfs.plaindata: a
    value of the job's own class as a simfs.Foreign). The same seed finds the same thing either
    way. A rank process that runs ``watchdog`` real seconds without a request is killed and its
    example fails (simfs.OutsideSimulation, with its stack).

    ``carrier``: how ranks are carried. "auto" (the default): on greenlet ranks where the job
    shows no per-process state, with the first, first failing, reported and one in 16 examples run
    again on rank processes, whose run gives the finding; on rank processes where it does or where
    they differ (scenarios/autocarrier.py; the finding's searched_on and carrier_note say which
    and why). "process": each rank an OS process of its own, confined by the kernel, with its own
    modules, generators and C++ state, as on a real cluster. "greenlet": every rank a greenlet of
    the search's one process (confined too, with ``isolate``), many times faster per example, for
    jobs that keep no per-process state: its ranks share every module's globals, the generators of
    numpy and torch, and torch's C++ state.

    ``steer=True``: each example's rarity (scenarios/coverage.py ``Rarity``: the events it reached
    that few examples before it did) is given to Hypothesis's target phase, which mutates the rarest
    examples in the second half of the budget (off by default: reports/BENCHMARKS.md measures it).

    ``database``: where the search remembers the failures it found (Hypothesis's example database),
    replaying them first on the next search of the same thing: "default" follows the current
    Hypothesis settings (under pytest, the project's profile; else `.hypothesis/examples`), a
    directory, any ``hypothesis.database.ExampleDatabase`` (``MultiplexedDatabase``,
    ``ReadOnlyDatabase``, ``GitHubArtifactDatabase``...), or None. ``database_key``: the key its
    examples are kept under (default: a digest of the job's, recover's and check's names, the
    topology, profile, fault kinds, crashes and carrier; not the seed or the budget)."""
    _check_args(nodes, ranks_per_node, max_examples, seed, shrink_time)
    if crashes not in (False, True, "exhaustive"):
        raise ValueError(f"explore: crashes must be False, True or 'exhaustive', got {crashes!r}")
    if crashes and recover is None:
        raise ValueError("explore: crashes need recover=, the restarted job that must cope with the crash")
    target = make_target(job, recover=recover, check=check, nodes=nodes, ranks_per_node=ranks_per_node,
                         profile=profile, carrier=carrier, watchdog=watchdog, preload=preload)
    search = _Order(kinds=fault_kinds(faults), crashes=crashes, max_examples=max_examples, seed=seed,
                    shrink_time=shrink_time, explain=explain, steer=steer, isolate=isolate, watchdog=watchdog,
                    database=examples_db.resolve(database), database_key=examples_db.checked_key(database_key))
    if isolate:
        replaying.remember(target)
    if carrier == carriers.AUTO:
        return _auto(target, search)
    return _searched(target, search)


@dataclass(frozen=True)
class _Order:
    """How explore was asked to search, whatever the target."""

    kinds: tuple[str, ...]
    crashes: Crashes
    max_examples: int
    seed: int
    shrink_time: float
    explain: bool
    steer: bool
    isolate: bool
    watchdog: float
    database: ExampleDatabase | None
    database_key: bytes | None

    def key(self, target: Target) -> bytes:
        return self.database_key or examples_db.key_of(target, self.kinds, self.crashes)


def _searched(target: Target, order: _Order) -> Finding:
    """The search of ``target`` on its carrier, where ``order.isolate`` puts it."""
    o, db, key = order, order.database, order.key(target)
    if not o.isolate:
        return _search(target, o.kinds, o.crashes, o.max_examples, o.seed, o.shrink_time, o.explain, o.steer, db, key)
    held = examples_db.entries(db, key) if db is not None else None
    found: Finding
    ops: list[examples_db.Op]
    found, ops = simfs.isolated(_detached_search, target, o.kinds, o.crashes, o.max_examples, o.seed, o.shrink_time,
                                o.explain, o.steer, held, key, watchdog=o.watchdog,
                                processes=target.carrier == carriers.PROCESS)
    return replace(_database_changed(found, db, ops, key), target=target)


def _database_changed(found: Finding, db: ExampleDatabase | None, ops: list[examples_db.Op], key: bytes) -> Finding:
    """Make the changes a search's child asked of the database; the finding says which it refused."""
    refused = examples_db.apply(db, ops, key) if db is not None else 0
    if refused:
        found = replace(found, notes=[*found.notes, f"the search's child asked for {refused} changes of the "
                                      "example database outside its key or its bounds: not made"])
    return found


def _auto(target: Target, order: _Order) -> Finding:
    """carrier="auto" (scenarios/autocarrier.py): on greenlet ranks, confirmed on rank processes
    (``target``'s carrier), unless the job can tell them apart; then on rank processes."""
    if target.preload:
        why = "its rank processes start with preloaded modules"
    elif order.crashes == "exhaustive":
        why = "an exhaustive walk of crash states runs on rank processes"
    else:
        try:
            searched = _greenlet_search(autocarrier.greenlet_target(target), order)
        except simfs.Stalled as exc:  # (C code holding the GIL stops every greenlet rank: a rank process alone)
            searched = autocarrier.GreenletSearch(None, f"the search on greenlet ranks stalled ({exc})", (), None)
        if searched.finding is None:
            why = searched.ineligible
        else:
            confirmed: autocarrier.Confirmed = simfs.isolated(_confirmed, target, searched, True,
                                                              watchdog=order.watchdog) \
                if order.isolate else _confirmed(target, searched, False)
            if confirmed.finding is not None:
                return replace(confirmed.finding, target=target)
            why = f"the search on greenlet ranks was set aside: {confirmed.mismatch}"
    found = _searched(target, order)
    return replace(found, carrier_note=f"searched on rank processes: {why}")


def _greenlet_search(target: Target, order: _Order) -> autocarrier.GreenletSearch:
    o, db, key = order, order.database, order.key(target)
    if not o.isolate:
        return _sampled_search(target, o.kinds, o.crashes, o.max_examples, o.seed, o.shrink_time, o.explain, o.steer,
                               db, key)
    held = examples_db.entries(db, key) if db is not None else None
    searched: autocarrier.GreenletSearch
    searched, ops = simfs.isolated(_detached_sampled_search, target, o.kinds, o.crashes, o.max_examples, o.seed,
                                   o.shrink_time, o.explain, o.steer, held, key, watchdog=o.watchdog, processes=False)
    if searched.finding is None:
        if db is not None:
            examples_db.apply(db, ops, key)
        return searched
    return replace(searched, finding=_database_changed(searched.finding, db, ops, key))


def _sampled_search(target: Target, kinds: tuple[str, ...], crashes: Crashes, max_examples: int, seed: int,
                    shrink_time: float, explain: bool, steer: bool, database: ExampleDatabase | None,
                    key: bytes) -> autocarrier.GreenletSearch:
    """The search on greenlet ranks, its examples watched and sampled (autocarrier.Sampler)."""
    sampler = autocarrier.Sampler()
    try:
        found = _search(target, kinds, crashes, max_examples, seed, shrink_time, explain, steer, database, key,
                        sampler.run)
    except autocarrier.Ineligible as exc:
        return autocarrier.GreenletSearch(None, str(exc), (), None)
    return autocarrier.GreenletSearch(found, "", tuple(sampler.samples), sampler.failing if found.failed else None)


def _detached_sampled_search(target: Target, kinds: tuple[str, ...], crashes: Crashes, max_examples: int, seed: int,
                             shrink_time: float, explain: bool, steer: bool, held: examples_db.Entries | None,
                             key: bytes) -> tuple[autocarrier.GreenletSearch, list[examples_db.Op]]:
    recorded = examples_db.Recorded(held) if held is not None else None
    searched = _sampled_search(target, kinds, crashes, max_examples, seed, shrink_time, explain, steer, recorded, key)
    if searched.finding is not None:
        searched = replace(searched, finding=_without_callables(searched.finding))
    return searched, recorded.ops if recorded is not None else []


def _confirmed(target: Target, searched: autocarrier.GreenletSearch, detached: bool) -> autocarrier.Confirmed:
    """The greenlet search's samples and reported example on rank processes (``detached``: in
    simfs.isolated's child), every run's ranks forked from one zygote."""
    jobs = [job for job in (target.job, target.recover) if job is not None]
    with simfs.zygote_kept(*jobs), frozen_heap():
        confirmed = autocarrier.confirm(target, searched)
    if confirmed.finding is not None and detached:
        confirmed = replace(confirmed, finding=_without_callables(confirmed.finding))
    return confirmed


def _detached_search(target: Target, kinds: tuple[str, ...], crashes: Crashes, max_examples: int, seed: int,
                     shrink_time: float, explain: bool, steer: bool, held: examples_db.Entries | None,
                     key: bytes) -> tuple[Finding, list[examples_db.Op]]:
    """The search in simfs.isolated's child, with a recorded copy of the database's entries (the
    child writes no file): the finding and the changes for the caller to make to the database."""
    recorded = examples_db.Recorded(held) if held is not None else None
    found = _search(target, kinds, crashes, max_examples, seed, shrink_time, explain, steer, recorded, key)
    return _without_callables(found), recorded.ops if recorded is not None else []


def _without_callables(found: Finding) -> Finding:
    """A finding on its way back from simfs.isolated's child: its target without the job, recover
    and check (closures do not pickle; the caller puts its own target back)."""
    return replace(found, target=replace(found.target, job=_detached, recover=None, check=None))


def _detached() -> None:
    """Stands for the job in a finding on its way back from the search's child."""


plaindata.register(_detached)


def _search(target: Target, kinds: tuple[str, ...], crashes: Crashes, max_examples: int, seed: int,
            shrink_time: float, explain: bool, steer: bool = False, database: ExampleDatabase | None = None,
            key: bytes = b"", run: Run = execute) -> Finding:
    start = time.perf_counter()
    jobs = [job for job in (target.job, target.recover) if job is not None]
    with simfs.zygote_kept(*jobs):  # every run's ranks forked from one zygote
        if crashes == "exhaustive":
            from .exhaustive import exhaust

            return exhaust(target, limit=max(max_examples, 1000), started=start)
        return _search_kept(target, kinds, crashes, max_examples, seed, shrink_time, explain, steer, database, key,
                            start, run)


def _search_kept(target: Target, kinds: tuple[str, ...], crashes: Crashes, max_examples: int, seed: int,
                 shrink_time: float, explain: bool, steer: bool, database: ExampleDatabase | None, key: bytes,
                 start: float, run: Run) -> Finding:
    simple = run(target, Example())
    if simple.failure is not None:
        return finding_of(target, Example(), simple, examples=1, wall=time.perf_counter() - start, found_at=1,
                          coverage=coverage.tally([coverage.reached(Example(), simple)]))
    search = _Search(target, _space(target, kinds, simple), bool(crashes), shrink_time, steer, run)
    search.examples = 1
    search.reached.append(coverage.reached(Example(), simple))
    _hypothesis(search, max_examples, seed, explain, database, key)
    if search.internal is not None:
        raise search.internal
    wall = time.perf_counter() - start
    reached = coverage.tally(search.reached)
    if search.best is None:
        return finding_of(target, Example(), simple, examples=search.examples, wall=wall, found_at=0,
                          coverage=reached)
    example, execution = search.best
    notes = ["shrinking stopped at its time limit"] if search.out_of_time() else []
    return finding_of(target, example, execution, examples=search.examples, wall=wall, found_at=search.found_at,
                      notes=notes, coverage=reached)


def _hypothesis(search: _Search, max_examples: int, seed: int, explain: bool, database: ExampleDatabase | None,
                key: bytes) -> None:
    phases = [Phase.reuse, Phase.generate, *([Phase.target] if search.rarity is not None else []), Phase.shrink,
              *([Phase.explain] if explain else [])]

    # (settings outside seed: hypothesis.seed alone would turn the database off)
    @settings(database=database, max_examples=max_examples, deadline=None, phases=phases,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False)
    @hypothesis_seed(seed)
    @given(st.data())
    def body(data: DataObject) -> None:
        search.body(data)

    body._hypothesis_internal_database_key = key  # type: ignore[attr-defined]  # (the key Hypothesis reads)

    try:
        with frozen_heap():  # collections between examples walk only what the search made
            body()
    except _Failed:
        pass
    except HypothesisException:
        if search.best is None and search.internal is None:  # (a stopped search's draws end early)
            raise


def replay(text: str, job: Callable[[], Any] | None = None, *, recover: Callable[[], Any] | None = None,
           check: Check | None = None) -> Finding:
    """Run a finding's example again: the same failure and the same trace. Greenlet ranks replay in
    a confined child (simfs.isolated), as their search ran; rank processes confine themselves."""
    target, example, mismatch = replaying.decode(text, job, recover, check)
    if target.carrier == "greenlet":
        found: Finding = simfs.isolated(_detached_replay, target, example, mismatch, watchdog=target.watchdog,
                                        processes=False)
        return replace(found, target=target)
    return _replay(target, example, mismatch)


def _replay(target: Target, example: Example, mismatch: str) -> Finding:
    start = time.perf_counter()
    execution = execute(target, example)
    return finding_of(target, example, execution, examples=1, wall=time.perf_counter() - start, found_at=1,
                      notes=[mismatch] if mismatch else [])


def _detached_replay(target: Target, example: Example, mismatch: str) -> Finding:
    """The replay in simfs.isolated's child."""
    return _without_callables(_replay(target, example, mismatch))
