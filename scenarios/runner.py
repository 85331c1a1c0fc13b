"""Running scenarios as tasks (one scenario on one profile, or a user's job), in this process or
in worker processes with a fixed PYTHONHASHSEED, so results and replays do not depend on the
number of workers or on how the tasks are sharded."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.context import BaseContext
from types import ModuleType
from typing import Any

import simfs
from simfs import carriers, hostrun
from simfs.runtime.carrier import preload

from . import database as examples_db
from . import importpath, replaying
from .budgets import SHRINK_TIME
from .importfailure import cannot_import
from .mix import fault_kinds
from .outcome import ScenarioOutcome
from .registry import Expectation, get

_PASS: Expectation = "pass"


@dataclass(frozen=True)
class Task:
    """A search to run: a registered scenario by name, or a job given as 'module:function'."""

    scenario: str  # a registered name, or the job spec
    profile: str  # a built-in profile's name, or a profile's TOML file (a job only)
    nodes: int | None = None  # None: the scenario's own topology
    ranks_per_node: int | None = None
    examples: int | None = None  # None: the scenario's own budget
    seed: int = 0
    watchdog: float = 60.0
    recover: str | None = None  # for a job spec: the restarted job, as a spec
    check: str | None = None
    crashes: bool | str = False
    faults: str = "default"
    carrier: str | None = None  # None: a scenario's own carrier; a job's the search's default (auto)
    database: str = ""  # the example database's directory ('': none)
    shrink_time: float = SHRINK_TIME  # wall seconds a failing search may shrink
    steer: bool = False  # explore(steer=True): Hypothesis's target phase on each example's rarity

    @property
    def is_job(self) -> bool:
        return ":" in self.scenario

    def budget(self) -> tuple[int, str]:
        """(examples, carrier): the task's own, else the scenario's (a job: 100, the search's default)."""
        if self.is_job:
            return self.examples or 100, self.carrier or carriers.SEARCH_DEFAULT
        sc = get(self.scenario)
        return self.examples or sc.max_examples, self.carrier or sc.carrier

    def space(self) -> tuple[int, int, Any, tuple[str, ...]]:
        """(nodes, ranks per node, crashes, fault kinds): the task's own, else the scenario's."""
        if self.is_job:
            return self.nodes or 2, self.ranks_per_node or 2, self.crashes, fault_kinds(self.faults.split(","))
        sc = get(self.scenario)
        return self.nodes or sc.nodes, self.ranks_per_node or sc.ranks_per_node, sc.crashes, fault_kinds(sc.faults)

    def database_key(self, profile: str | simfs.Profile) -> bytes:
        """The key its search keeps its examples under: a scenario's by its name, a job's by its specs
        (found without importing the job), with everything else that fixes the search's space."""
        nodes, ranks_per_node, crashes, kinds = self.space()
        job = self.scenario if self.is_job else f"scenario {self.scenario}"
        return examples_db.key(job, self.recover or "", self.check or "", nodes, ranks_per_node,
                               simfs.profiles.get(profile), kinds, crashes, self.budget()[1])

    def weight(self) -> int:
        """What the search should cost, relatively: its examples, seven times over when its ranks
        are processes (a rank process's start and requests cost ~7x a greenlet's: BENCHMARKS.md,
        carriers), twice over on auto (greenlet ranks, one example in 16 again on processes), or as
        many times as its scenario's example_cost says. Only an order for the workers, never a budget."""
        examples, carrier = self.budget()
        cost = {carriers.PROCESS: 7, carriers.AUTO: 2}.get(carrier, 1)
        if not self.is_job and self.carrier is None:
            cost = get(self.scenario).example_cost or cost
        return examples * cost

    def preloads(self) -> tuple[str, ...]:
        """The modules its rank processes start with besides torch: a scenario's preload (a training
        stack's), where its ranks may be processes."""
        if self.is_job or not self.forks_ranks():
            return ()
        return get(self.scenario).preload

    def forks_ranks(self) -> bool:
        """Whether its search may fork rank processes (on auto, to confirm or to search)."""
        return self.budget()[1] != carriers.GREENLET


def _target(spec: str) -> str:
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"job {spec!r} must look like 'module:function' or 'file.py:function'")
    return target


def readable_for(specs: list[str]) -> tuple[str, ...]:
    """Where the jobs ``specs`` name lie, found without running any of their code: what a confined
    child that imports them must read (simfs.confinement.readable: the import path is readable as
    it was before, the current directory only where a job lies there)."""
    importpath.for_jobs()
    out = []
    for spec in specs:
        target = _target(spec)
        if target.endswith(".py"):
            out.append(os.path.dirname(os.path.abspath(target)))
            continue
        found = importlib.util.find_spec(target.partition(".")[0])  # a top-level name: found, not run
        if found is not None and found.submodule_search_locations:
            out.extend(found.submodule_search_locations)
        elif found is not None and found.origin and os.path.isabs(found.origin):
            out.append(os.path.dirname(found.origin))
    return tuple(out)


def check_specs(specs: list[str]) -> None:
    """Import each job of ``specs`` in a confined child (simfs.isolated): ValueError naming the
    first that is not a function. Importing a job's module runs its code, never unconfined here."""
    simfs.isolated(_load_all, specs, readable=readable_for(specs), processes=False)


def _load_all(specs: list[str]) -> None:
    for spec in specs:
        load_callable(spec)


def load_callable(spec: str) -> Callable[..., Any]:
    """'package.module:function' or 'path/to/file.py:function' (the current directory is
    importable: scenarios.importpath.for_jobs). This runs the module's code: call it where rank code
    may run (a confined child). A module that does not compile or raises as it runs is bad input: a
    ValueError with its error and its file and line."""
    target = _target(spec)
    name = spec.rpartition(":")[2]
    importpath.for_jobs()
    if target.endswith(".py") and not os.path.isfile(target):
        raise ValueError(f"job file {target!r} does not exist")
    try:
        module = _job_module(target)
    except Exception as exc:  # noqa: BLE001 - whatever the job's module raised, told with its file and line
        raise cannot_import(spec, exc) from None
    job: object = getattr(module, name, None)
    if not callable(job):
        raise ValueError(f"{target!r} has no function {name!r}")
    if target.endswith(".py"):
        replaying.loaded_from_file(job, spec)
    return job


def _job_module(target: str) -> ModuleType:
    """A job file's module, run under the file's name, or a module found on the import path."""
    if not target.endswith(".py"):
        return importlib.import_module(target)
    module_spec = importlib.util.spec_from_file_location(os.path.basename(target)[:-3], target)
    assert module_spec is not None and module_spec.loader is not None  # a .py file's: a source loader
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    module_spec.loader.exec_module(module)
    return module


def load_profile(spec: str) -> str | simfs.Profile:
    """A built-in profile's name as it is, or the simfs.Profile in a TOML file ('*.toml', as
    `simfs probe --emit-profile` and Profile.save write them)."""
    if not spec.endswith(".toml"):
        return spec
    if not os.path.isfile(spec):
        raise ValueError(f"profile file {spec!r} does not exist")
    return simfs.Profile.load(spec)


def _search(task: Task, profile: str | simfs.Profile, held: examples_db.Entries | None,
            key: bytes) -> tuple[ScenarioOutcome, list[examples_db.Op]]:
    """The task's search in simfs.isolated's child, with a recorded copy of the database's entries
    (``held``; None: no database): its outcome and the changes for the worker to make to the database."""
    from .explore import explore

    start = time.perf_counter()
    examples, carrier = task.budget()
    nodes, rpn, crashes, kinds = task.space()
    if task.is_job:
        job = load_callable(task.scenario)
        recover = load_callable(task.recover) if task.recover else None
        check = load_callable(task.check) if task.check else None
        family, expected = "job", _PASS
        preload: tuple[str, ...] = ()
    else:
        sc = get(task.scenario)
        job, recover, check, preload = sc.job, sc.recover, sc.check, task.preloads()
        family, expected = sc.family, sc.expect.get(task.profile, _PASS)
    recorded = examples_db.Recorded(held) if held is not None else None
    finding = explore(job, recover=recover, check=check, nodes=nodes, ranks_per_node=rpn,
                      profile=profile, faults=kinds, crashes=crashes, max_examples=examples, seed=task.seed,
                      shrink_time=task.shrink_time, steer=task.steer, carrier=carrier,
                      preload=preload, database=recorded, database_key=key,
                      # (run_task runs this in simfs.isolated's child; auto's greenlet search and its
                      # confirmation run in children of this one, each confined as its ranks need)
                      isolate=carrier == carriers.AUTO)
    return ScenarioOutcome(
        scenario=task.scenario, profile=task.profile, family=family, expected=expected,
        verdict="fail" if finding.failed else "pass", examples=finding.examples,
        virtual_time=finding.virtual_time, wall_time=time.perf_counter() - start,
        finding=finding.record() if finding.failed else None, carrier=finding.searched_on,
        coverage=finding.coverage, carrier_note=finding.carrier_note), \
        recorded.ops if recorded is not None else []


def run_task(task: Task) -> ScenarioOutcome:
    """One task, supervised from outside (a rank stuck in C code holding the GIL is killed after
    the watchdog); a scenario that cannot run is an "error" outcome, not a crash of the run."""
    start = time.perf_counter()
    try:
        _ready_for(task)
        specs = [spec for spec in (task.scenario, task.recover, task.check) if spec] if task.is_job else []
        profile = load_profile(task.profile)
        database = examples_db.resolve(task.database or None, "--db")
        key = task.database_key(profile)
        held = examples_db.entries(database, key) if database is not None else None
        outcome: ScenarioOutcome
        ops: list[examples_db.Op]
        outcome, ops = simfs.isolated(_search, task, profile, held, key, watchdog=task.watchdog,
                                      readable=readable_for(specs), processes=task.forks_ranks())
        if database is not None:
            examples_db.apply(database, ops, key)
        return outcome
    except (simfs.Stalled, simfs.SimfsError, ValueError, TypeError, ImportError, OSError) as exc:
        return ScenarioOutcome(scenario=task.scenario, profile=task.profile, family="", expected="pass",
                               verdict="error", examples=0, virtual_time=0.0,
                               wall_time=time.perf_counter() - start, error=f"{type(exc).__name__}: {exc}")


def _ready_for(task: Task) -> None:
    """What every search's forked child starts with, made here once: the library (and torch), what
    rank processes start with (torch._dynamo, a training stack a scenario preloads...), Hypothesis's
    constants, the interception. A job's module is imported only in its search's confined child,
    so torch, which training jobs import, is imported here for its rank processes."""
    from .registry import load_library

    if not task.is_job:
        load_library()
    if task.forks_ranks():
        preload(("torch",) if task.is_job else task.preloads())
    _read_local_constants()
    hostrun.ready_to_fork()


def _read_local_constants() -> None:
    """Hypothesis reads the constants of the project's own modules once per process and caches them
    on disk; a search's child is confined (it cannot write that cache), so they are read here, once,
    and every forked child inherits them (else each search pays ~0.4 s rereading them)."""
    try:
        from hypothesis.internal.conjecture.providers import _get_local_constants
    except ImportError:  # a Hypothesis release without it: each search reads them itself
        return
    _get_local_constants()


def run_order(tasks: list[Task]) -> list[int]:
    """The indexes of ``tasks`` in the order the workers take them: the heaviest searches first
    (Task.weight), so that no long one starts last and runs alone, and those whose rank processes
    start with a training stack (Task.preloads) after all the others: a worker imports the stack
    once (~2 s for transformers' Trainer, which each search's child imported again), and every
    rank process it forks after is larger."""
    return sorted(range(len(tasks)), key=lambda index: (bool(tasks[index].preloads()), -tasks[index].weight()))


def run_tasks(tasks: list[Task], jobs: int) -> Iterator[tuple[int, ScenarioOutcome]]:
    """(index, outcome) of every task as it finishes; ``jobs`` worker processes (1: here), which
    take them in run_order. The workers start now, before the caller starts any thread (a progress
    display's)."""
    order = run_order(tasks)
    if jobs <= 1:
        return ((index, run_task(tasks[index])) for index in order)
    os.environ["PYTHONHASHSEED"] = "0"  # the workers hash str as every other run does
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_workers_context([tasks[index] for index in order]))
    futures = {pool.submit(run_task, tasks[index]): index for index in order}
    return _as_finished(pool, futures)


def _workers_context(tasks: list[Task]) -> BaseContext:
    """How the workers start: forked from this process where it hashes str as they must (it
    started with PYTHONHASHSEED=0, as the simfs command makes sure) and runs no other thread, after
    it imported and prepared what each worker would (the library, torch, the interception: ~4 s a
    worker on 2 cores: for the first of ``tasks`` on rank processes, in the order they run);
    spawned, each a fresh interpreter, otherwise."""
    if sys.flags.hash_randomization or threading.active_count() > 1:
        return get_context("spawn")
    _ready_for(next((task for task in tasks if task.forks_ranks()), tasks[0]))
    return get_context("fork")


def _as_finished(pool: ProcessPoolExecutor, futures: dict[Future[ScenarioOutcome], int]
                 ) -> Iterator[tuple[int, ScenarioOutcome]]:
    with pool:
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def shard(tasks: list[Task], spec: str | None) -> list[Task]:
    """The K-th of N shards ('K/N', 1-based): every N-th task, in a fixed order."""
    if spec is None:
        return tasks
    k_text, sep, n_text = spec.partition("/")
    try:
        k, n = int(k_text), int(n_text)
    except ValueError:
        k = n = 0
    if not sep or not 1 <= k <= n:
        raise ValueError(f"--shard must be K/N with 1 <= K <= N, got {spec!r}")
    return tasks[k - 1::n]
