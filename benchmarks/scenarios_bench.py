"""scenarios speed: how fast the search runs and how much sooner it finds the library's bugs than
a plain loop over seeds.

  python benchmarks/scenarios_bench.py [--repeats 3] [--examples 200] [--cap 1000] [--record]

Measures, as medians of several runs, for the scenarios registered in the built-in library
(``scenarios.registry.all_scenarios()``, whatever is registered when it runs):

1. examples per wall second of ``scenarios.explore`` on each scenario's passing profile (a pass
   runs every example), and the 8-rank makedirs scenario on 2 nodes x 4 ranks;
2. crash states enumerated per wall second by ``explore(..., crashes="exhaustive")`` (the job run
   once, the disks copied at each cut, a state whose disks answer like an earlier restart's not
   run again) next to the same walk with every restart run, and to the method it replaced, kept
   here as the reference: a rerun of the job up to each cut for every state; also for an 8-rank
   ``checkpoint.save`` over an existing checkpoint on local (ext4) and local-posix;
3. for each naive scenario on each profile where it fails: the examples and wall seconds until
   ``explore`` first fails (its default budget, shrinking off) next to a plain loop over seeds
   (``simfs.Cluster(..., seed=s).run(job)``, the same property) counting seeds until a run
   fails. For crash scenarios a plain loop crashes nothing; the loop is given a crash of a kind
   explore uses (node, server or whole-cluster power loss) at a seeded-random operation of the
   job's run, and the restarted job (``recover``) runs after it."""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, table, write_report
from scenarios import explore
from scenarios.example import STATE_LIMIT, Crash, Example, execute, finish, start
from scenarios.exhaustive import CrashWalk
from scenarios.library.sharded import checkpoint_overwrite, overwrite_recover
from scenarios.registry import Crashes, Scenario, all_scenarios
from scenarios.target import Target
from scenarios.verdict import judge
from simfs import hostrun
from simfs.faults import CrashNode, CrashServer, Fault, PowerLoss

EXAMPLES = 50  # examples per throughput measurement of each scenario
TARGET_EXAMPLES = 200  # ... and of the 8-rank makedirs scenario, measured against its target
CAP = 1000  # seeds the plain loop tries before giving up
CRASHLESS_CAP = 100  # ... on a crash scenario without crashing it (a bug it cannot reach)
MAKEDIRS_TOPOLOGY = (2, 4)
MAKEDIRS_TARGET = 100.0  # examples per second, 8-rank makedirs scenario
STATES = re.compile(r"(\d+) distinct crash states")
RAN = re.compile(r"the restarted job ran on (\d+)")
INF = float("inf")


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def pass_profile(s: Scenario) -> str | None:
    """A profile where the scenario passes (a shared mount before the local disk)."""
    passing = [p for p, v in s.expect.items() if v == "pass"]
    return next((p for p in passing if not simfs.profiles.get(p).on_node), passing[0] if passing else None)


def fail_profiles(s: Scenario) -> list[str]:
    return [p for p, v in s.expect.items() if v == "fail"]


def is_makedirs(s: Scenario) -> bool:
    return "makedirs" in s.family.lower() or "makedirs" in s.name.lower()


def throughput_crashes(s: Scenario) -> bool:
    """Throughput is measured with drawn crash points (an exhaustive walk is section 2)."""
    return bool(s.crashes)


# -- 1. examples per second ------------------------------------------------------------------------
@dataclass
class Throughput:
    name: str
    profile: str
    nodes: int
    ranks_per_node: int
    crashes: bool
    examples: list[int]
    walls: list[float]
    cpus: list[float]  # this process's CPU seconds: what the figure would be on an idle machine
    failed: bool  # a false alarm on a passing profile (or a naive scenario without a passing one)

    @property
    def rate(self) -> float:
        return median([e / w for e, w in zip(self.examples, self.walls)])

    @property
    def cpu_rate(self) -> float:
        return median([e / c for e, c in zip(self.examples, self.cpus)])


def throughput(s: Scenario, profile: str, nodes: int, rpn: int, examples: int, repeats: int) -> Throughput:
    out = Throughput(s.name, profile, nodes, rpn, throughput_crashes(s), [], [], [], False)
    for repeat in range(repeats):
        cpu = time.process_time()
        finding = explore(s.job, recover=s.recover, check=s.check, nodes=nodes, ranks_per_node=rpn, profile=profile,
                          faults=s.faults, crashes=out.crashes, max_examples=examples, seed=repeat, shrink_time=0,
                          carrier=s.carrier, isolate=False)  # the search in this process: its CPU time is measured here
        out.examples.append(finding.examples)
        out.walls.append(finding.wall_time)
        out.cpus.append(time.process_time() - cpu)
        out.failed |= finding.failed
    return out


# -- 2. crash states per second --------------------------------------------------------------------
@dataclass
class Enumeration:
    name: str
    profile: str
    states: int
    runs: int
    walls: list[float]
    failed: bool
    note: str

    @property
    def rate(self) -> float:
        return self.states / median(self.walls)


@dataclass(frozen=True)
class Walked:
    """A job whose crash states are enumerated: the library's scenario, or the 8-rank overwrite."""

    name: str
    job: Any
    recover: Any
    nodes: int
    ranks_per_node: int
    carrier: str = "greenlet"


def enumerate_states(w: Walked, profile: str, repeats: int) -> tuple[Enumeration, list[float], Enumeration]:
    """The exhaustive search (explore), its walk with every restart run, and the reference rerun
    walk, each ``repeats`` times."""
    walls, states, runs, failed, note = [], 0, 0, False, ""
    for _ in range(repeats):
        finding = explore(w.job, recover=w.recover, nodes=w.nodes, ranks_per_node=w.ranks_per_node,
                          profile=profile, crashes="exhaustive", carrier=w.carrier, isolate=False)
        walls.append(finding.wall_time)
        note = "; ".join(finding.notes)
        found = STATES.search(note)
        states = int(found.group(1)) if found else max(finding.examples - 1, 0)  # runs less the crash-free one
        runs, failed = finding.examples, finding.failed
    target = Target(w.job, w.nodes, w.ranks_per_node, simfs.profiles.get(profile), recover=w.recover,
                    carrier=w.carrier)
    every = [every_restart_run(target) for _ in range(repeats)]
    reruns = [rerun_walk(target) for _ in range(repeats)]
    return (Enumeration(w.name, profile, states, runs, walls, failed, note), every,
            Enumeration(w.name, profile, reruns[0][0], reruns[0][1], [wall for *_, wall in reruns], failed, ""))


def every_restart_run(target: Target) -> float:
    """The exhaustive walk with the restarted job run on every state (none known by its answers),
    to its first failure; wall seconds."""
    started = time.perf_counter()
    with hostrun.series():
        walk = CrashWalk(target, 1000, alike=False)
        if walk.simple.failure is None:
            next((cut for cut, failure in walk.restarts() if failure is not None), None)
    return time.perf_counter() - started


def _restarts_run(note: str) -> str:
    found = RAN.search(note)
    return found.group(1) if found else ""


def rerun_walk(target: Target) -> tuple[int, int, float]:
    """The walk exhaustive search made before it copied disks: for every cut and every state,
    run the job again up to a power loss there, then the restarted job (distinct disks only).
    Returns (distinct states, runs of the restarted job, wall seconds)."""
    started = time.perf_counter()
    simple = execute(target, Example())
    total, seen, runs = sum(simple.job.node_ops), set(), 1
    for cut in range(total + 1):
        index, offered = 0, 1
        while index < offered:
            crash = Crash(PowerLoss(after_ops=cut) if cut < total else None, pick=index, exact=True)
            counts: list[int] = []
            cluster, execution = start(target, Example(crash=crash), crash.picker(counts))
            offered, index = max(counts, default=1), index + 1
            disks = tuple(m.server.digest() for m in cluster.fs.disks())
            if disks not in seen:
                seen.add(disks)
                runs += 1
                if finish(cluster, target, Example(crash=crash), execution).failure is not None:
                    return len(seen), runs, time.perf_counter() - started
    return len(seen), runs, time.perf_counter() - started


# -- 3. time to the first failure: explore vs a plain loop over seeds ------------------------------
def plain_crash(rng: random.Random, s: Scenario, ops: list[int], has_server: bool) -> Fault | None:
    """A crash as a plain loop would add one: a kind explore uses, at a seeded-random operation
    of the job's run (None: a power loss right after the job ended)."""
    kinds = ["power"] + (["node"] if s.nodes > 1 else []) + (["server"] if has_server else [])
    kind = rng.choice(kinds)
    node = rng.randrange(s.nodes) if kind == "node" else None
    count = ops[node] if node is not None else sum(ops)
    point = rng.randint(0, count)
    if point == count:
        return None
    if node is not None:
        return CrashNode(node, after_ops=point)
    return CrashServer(after_ops=point) if kind == "server" else PowerLoss(after_ops=point)


def plain_run_fails(s: Scenario, profile: str, seed: int, ops: list[int] | None, has_server: bool) -> bool:
    """One run of a plain seed loop (then ``recover`` on the restarted cluster): does it fail
    the property explore checks? ``ops``: crash the run at a seeded-random operation. Greenlet
    ranks run in this process (isolate=False), as in a search's child: the library's own code."""
    cluster = simfs.Cluster(nodes=s.nodes, ranks_per_node=s.ranks_per_node, profile=profile, seed=seed,
                            carrier=s.carrier, isolate=False)
    faults: list[Fault] = []
    crash: Fault | None = None
    if ops is not None:
        rng = random.Random(seed)
        crash = plain_crash(rng, s, ops, has_server)
        faults = [] if crash is None else [crash]
        # the crash state each disk keeps, drawn uniformly from the distinct ones (as explore
        # draws it); Cluster.power_loss() between runs also needs it: without a picker it asserts
        # "a draw outside a run" when a disk holds unsynced data
        cluster.fs.crash_picker = lambda mount, server: rng.choice(server.crash_states(STATE_LIMIT))
    first = cluster.run(s.job, faults=faults)
    if ops is not None and crash is None:
        cluster.power_loss()
    if not first.crashed and judge(first, s.check, run=0) is not None:
        return True
    if s.recover is None:
        return False
    return judge(cluster.run(s.recover, faults=[]), s.check, run=1) is not None


def plain_loop(s: Scenario, profile: str, start: int, cap: int, crashes: bool) -> tuple[int | None, float]:
    """Seeds ``start``, ``start + 1``... until a run fails: (how many runs, or None after
    ``cap``; wall seconds). ``crashes``: each run crashes at a seeded-random operation of the
    job's crash-free run at seed ``start``."""
    began = time.perf_counter()
    ops: list[int] | None = None
    has_server = False
    if crashes:
        reference = simfs.Cluster(nodes=s.nodes, ranks_per_node=s.ranks_per_node, profile=profile, seed=start,
                                  carrier=s.carrier, isolate=False)
        has_server = any(m.host is None for m in reference.fs.shared)
        ops = list(reference.run(s.job).node_ops)
    for n in range(cap):
        if plain_run_fails(s, profile, start + n, ops, has_server):
            return n + 1, time.perf_counter() - began
    return None, time.perf_counter() - began


@dataclass
class Race:
    name: str
    profile: str
    crashes: Crashes
    budget: int
    found_at: list[int]  # explore: 0 when not found within the budget
    search_walls: list[float]
    plain_runs: list[int | None]  # the plain loop with default faults; None: not found within its cap
    plain_walls: list[float]
    plain_cap: int
    crash_runs: list[int | None]  # crash scenarios: the plain loop given a seeded crash
    crash_walls: list[float]


def race(s: Scenario, profile: str, repeats: int, cap: int, crashless_cap: int) -> Race:
    """explore (seed r) against the plain loop (seeds from r x cap), ``repeats`` times. For a
    crash scenario the plain loop with default faults crashes nothing: it runs once, over
    ``crashless_cap`` seeds, and the loop given a seeded crash is repeated instead."""
    crash_loop = bool(s.crashes)
    out = Race(s.name, profile, s.crashes, s.max_examples, [], [], [], [], min(cap, crashless_cap) if crash_loop
               else cap, [], [])
    for repeat in range(repeats):
        finding = explore(s.job, recover=s.recover, check=s.check, nodes=s.nodes, ranks_per_node=s.ranks_per_node,
                          profile=profile, faults=s.faults, crashes=s.crashes, max_examples=s.max_examples,
                          seed=repeat, shrink_time=0)
        out.found_at.append(finding.found_at if finding.failed else 0)
        out.search_walls.append(finding.wall_time)
        if not crash_loop or repeat == 0:
            runs, wall = plain_loop(s, profile, repeat * cap, out.plain_cap, False)
            out.plain_runs.append(runs)
            out.plain_walls.append(wall)
        if crash_loop:
            runs, wall = plain_loop(s, profile, repeat * cap, cap, True)
            out.crash_runs.append(runs)
            out.crash_walls.append(wall)
    return out


def median_or_inf(values: list[int | None] | list[int]) -> float:
    """The median of counts, where None or 0 (not found) counts as infinitely many."""
    return median([float(v) if v else INF for v in values])


def count_text(value: float, limit: int, words: str) -> str:
    return f"{words} {limit}" if value == INF else f"{value:g}"


def ratio_text(search: float, plain: float, cap: int) -> str:
    if search == INF:
        return ""
    return f"> {cap / search:.0f}x" if plain == INF else f"{plain / search:.1f}x"


def race_outcome(search: float, plain: float) -> str:
    if search == INF:
        return "neither found" if plain == INF else "plain loop ahead"
    if plain == INF or plain > search:
        return "search ahead"
    return "tie" if plain == search else "plain loop ahead"


# -- output ----------------------------------------------------------------------------------------
def show(title: str, headers: list[str], rows: list[list[Any]], right: tuple[int, ...] = ()) -> None:
    """A table on the console (rich when installed)."""
    if not rows:
        return
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(f"\n{title}\n\n{table(headers, rows)}")
        return
    out = Table(title=title, title_justify="left")
    for index, header in enumerate(headers):
        out.add_column(header, justify="right" if index in right else "left")
    for row in rows:
        out.add_row(*(str(c) for c in row))
    Console(width=None if sys.stdout.isatty() else 220).print(out)


# -- main ------------------------------------------------------------------------------------------
def selected(only: list[str]) -> list[Scenario]:
    return [s for s in all_scenarios() if not only or any(o in s.name for o in only)]


def warm_up() -> None:
    """The first run installs the interception and the first search imports Hypothesis's engine:
    neither is any scenario's cost."""
    def job() -> None:
        pass
    explore(job, nodes=2, ranks_per_node=2, profile="nfs", max_examples=10, isolate=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement (medians are reported)")
    parser.add_argument("--examples", type=int, default=EXAMPLES,
                        help="examples per throughput measurement of each scenario (section 1)")
    parser.add_argument("--target-examples", type=int, default=TARGET_EXAMPLES,
                        help="examples per throughput measurement of the 8-rank makedirs scenario (its target row)")
    parser.add_argument("--crash-scenario", action="append", default=[], metavar="NAME",
                        help="enumerate the crash states of NAME (repeatable; default: the first crash scenario "
                             "that passes everywhere; 'all': every crash scenario, which takes many minutes)")
    parser.add_argument("--sections", default="123", help="which sections to run: 1 examples/s, 2 crash states/s, "
                        "3 first failure vs plain loop")
    parser.add_argument("--cap", type=int, default=CAP, help="seeds the plain loop tries before giving up")
    parser.add_argument("--crashless-cap", type=int, default=CRASHLESS_CAP,
                        help="seeds the plain loop without crashes tries on a crash scenario (once, not repeated)")
    parser.add_argument("--all-profiles", action="store_true",
                        help="time the first failure on every profile where a naive scenario fails, not only its first")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only scenarios whose name contains TEXT (repeatable; not with --record)")
    add_record_flag(parser)
    args = parser.parse_args()
    for name in ("repeats", "examples", "target_examples", "cap", "crashless_cap"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.record and (args.only or args.sections != "123"):
        parser.error("--record measures the whole library: leave out --only and --sections")
    scenarios = selected(args.only)
    if not scenarios:
        parser.error("no scenarios registered" + (f" matching {args.only}" if args.only else ""))
    load_start = list(os.getloadavg())
    warm_up()
    began = time.perf_counter()
    data: dict[str, Any] = {"repeats": args.repeats, "examples": args.examples, "cap": args.cap,
                            "all_profiles": args.all_profiles,
                            "scenarios": len(scenarios)}

    def progress(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {text}", file=sys.stderr, flush=True)

    # 1. examples per second
    speeds: list[Throughput] = []
    eight_row: Throughput | None = None
    if "1" in args.sections:
        for s in scenarios:
            profile = pass_profile(s) or s.profiles[0]
            progress(f"examples/s: {s.name} on {profile}")
            speeds.append(throughput(s, profile, s.nodes, s.ranks_per_node, args.examples, args.repeats))
        # the 8-rank makedirs scenario: the family's first with a passing profile (every rank makes the
        # directory, the Lingua pattern), on 2 x 4 and with more examples, against its target
        first = next((s for s in scenarios if is_makedirs(s) and pass_profile(s)), None)
        if first is not None:
            nodes, rpn = MAKEDIRS_TOPOLOGY
            progress(f"examples/s: {first.name} on {nodes} x {rpn}, {args.target_examples} examples (target row)")
            eight_row = throughput(first, pass_profile(first) or "", nodes, rpn, args.target_examples, args.repeats)
            speeds.insert(next(i for i, t in enumerate(speeds) if t.name == first.name), eight_row)
    rows1 = []
    for t in speeds:
        expected = dict(next(s.expect for s in scenarios if s.name == t.name))[t.profile]
        if not t.failed:
            verdict = "passed"
        elif expected == "pass":
            verdict = "FAILED: a false alarm"
        else:
            verdict = "failed (no passing profile: stops at its first failure)"
        target = f">= {MAKEDIRS_TARGET:g}" if t is eight_row else ""
        met = ""
        if t is eight_row:
            met = "met" if t.rate >= MAKEDIRS_TARGET else \
                "missed (met per CPU s)" if t.cpu_rate >= MAKEDIRS_TARGET else "MISSED"
        rows1.append([t.name, t.profile, f"{t.nodes} x {t.ranks_per_node}", "drawn" if t.crashes else "no",
                      f"{median(t.examples):g}", f"{median(t.walls):.2f}", f"{t.rate:,.0f}", f"{t.cpu_rate:,.0f}",
                      f"{target} {met}".strip(), verdict])
    data["examples_per_s"] = [{"scenario": t.name, "profile": t.profile, "nodes": t.nodes,
                               "ranks_per_node": t.ranks_per_node, "crashes": t.crashes, "examples": t.examples,
                               "wall_s": t.walls, "cpu_s": t.cpus, "examples_per_s": t.rate,
                               "examples_per_cpu_s": t.cpu_rate, "failed": t.failed,
                               "target": MAKEDIRS_TARGET if t is eight_row else None} for t in speeds]

    # 2. crash states per second
    crashing = [s for s in scenarios if s.crashes and s.recover is not None]
    if "all" not in args.crash_scenario:
        named = [s for s in crashing if s.name in args.crash_scenario]
        # default: the first fixed crash scenario of greenlet ranks (it fails nowhere, so every state is
        # tried; latest-atomic in the library)
        fixed = [s for s in crashing if pass_profile(s) and not fail_profiles(s) and s.carrier == "greenlet"] or \
            [s for s in crashing if pass_profile(s)]
        crashing = named if args.crash_scenario else fixed[:1]
    walked = [(Walked(s.name, s.job, s.recover, s.nodes, s.ranks_per_node, s.carrier), pass_profile(s) or s.profiles[0])
              for s in crashing]
    overwrite8 = Walked("checkpoint.save over a checkpoint, 2 x 4 ranks", checkpoint_overwrite, overwrite_recover, 2, 4)
    walked += [(overwrite8, "local"), (overwrite8, "local-posix")]
    pairs: list[tuple[Enumeration, list[float], Enumeration]] = []
    for w, profile in walked if "2" in args.sections else []:
        progress(f"crash states/s: {w.name} on {profile}")
        pairs.append(enumerate_states(w, profile, args.repeats))
    rows2 = [[e.name, e.profile, e.states, _restarts_run(e.note), f"{median(e.walls):.3f}", f"{e.rate:,.0f}",
              f"{median(every):.3f}", f"{e.states / median(every):,.0f}", f"{median(r.walls):.3f}",
              f"{r.rate:,.0f}", f"{median(r.walls) / median(e.walls):.1f}x",
              "failed (stopped at its first failing state)" if e.failed else "passed (all states)"]
             for e, every, r in pairs]
    data["crash_states_per_s"] = [{"scenario": e.name, "profile": e.profile, "states": e.states, "runs": e.runs,
                                   "wall_s": e.walls, "states_per_s": e.rate, "every_restart_wall_s": every,
                                   "every_restart_states_per_s": e.states / median(every), "rerun_wall_s": r.walls,
                                   "rerun_states_per_s": r.rate, "failed": e.failed, "notes": e.note}
                                  for e, every, r in pairs]

    # 3. examples to the first failure
    races: list[Race] = []
    for s in scenarios if "3" in args.sections else []:
        for profile in fail_profiles(s)[:None if args.all_profiles else 1]:
            progress(f"first failure: {s.name} on {profile}")
            races.append(race(s, profile, args.repeats, args.cap, args.crashless_cap))
    rows3, behind, crash_ahead = [], [], []
    for r in races:
        search, plain = median_or_inf(r.found_at), median_or_inf(r.plain_runs)
        outcome = race_outcome(search, plain)
        if outcome != "search ahead":
            behind.append(f"{r.name} on {r.profile} ({outcome}: {count_text(search, r.budget, 'not found in')} vs "
                          f"{count_text(plain, r.plain_cap, '>')})")
        crashed = median_or_inf(r.crash_runs) if r.crash_runs else None
        crash_cells = ["", "", ""]
        if crashed is not None:
            crash_cells = [count_text(crashed, args.cap, ">"), f"{median(r.crash_walls):.2f}",
                           ratio_text(search, crashed, args.cap)]
            if race_outcome(search, crashed) != "search ahead":
                crash_ahead.append(f"{r.name} on {r.profile} ({count_text(search, r.budget, 'not found in')} "
                                   f"vs {count_text(crashed, args.cap, '>')})")
        rows3.append([r.name, r.profile, "drawn" if r.crashes is True else str(r.crashes or "no"),
                      f"{sum(1 for f in r.found_at if f)}/{len(r.found_at)}",
                      count_text(search, r.budget, "not found in"), f"{median(r.search_walls):.2f}",
                      count_text(plain, r.plain_cap, ">"), f"{median(r.plain_walls):.2f}",
                      ratio_text(search, plain, r.plain_cap), outcome, *crash_cells])
    data["first_failure"] = [{"scenario": r.name, "profile": r.profile, "crashes": r.crashes, "budget": r.budget,
                              "explore_found_at": r.found_at, "explore_wall_s": r.search_walls,
                              "plain_cap": r.plain_cap, "plain_runs": r.plain_runs, "plain_wall_s": r.plain_walls,
                              "plain_seeded_crash_runs": r.crash_runs, "plain_seeded_crash_wall_s": r.crash_walls,
                              "outcome": race_outcome(median_or_inf(r.found_at), median_or_inf(r.plain_runs))}
                             for r in races]
    data["search_not_ahead"] = behind
    data["seeded_crash_loop_not_behind"] = crash_ahead
    data["total_wall_s"] = time.perf_counter() - began
    progress("done")

    headers1 = ["scenario", "profile", "topology", "crashes", "examples", "wall s", "examples/s", "per CPU s",
                "target", "verdict"]
    headers2 = ["job", "profile", "states", "restarts run", "wall s", "states/s", "every restart run s",
                "its states/s", "rerun wall s", "rerun states/s", "speed-up over rerun", "verdict"]
    headers3 = ["scenario", "profile", "crashes", "explore found", "explore examples", "explore s", "plain seeds",
                "plain s", "plain / explore", "outcome", "plain + seeded crash", "its s", "its / explore"]
    show("Examples per second", headers1, rows1, (4, 5, 6, 7))
    show("Crash states enumerated per second", headers2, rows2, (2, 3, 4, 5, 6, 7, 8, 9, 10))
    show("Examples to the first failure: explore vs a plain loop over seeds", headers3, rows3,
         (4, 5, 6, 7, 8, 10, 11, 12))
    verdict = (("Search not ahead of the plain loop (default faults): " + "; ".join(behind) + ".") if behind
               else "The search needed fewer runs than the plain loop on every naive scenario.")
    if crash_ahead:
        verdict += ("\n\nThe plain loop given a seeded crash in every run needed no more runs than the search on: "
                    + "; ".join(crash_ahead) + ".")
    if rows3:
        print(verdict)

    eight_text = (f"The 8-rank makedirs scenario ({eight_row.name} on {eight_row.profile}, 2 x 4, "
                  f"{args.target_examples} examples): {eight_row.rate:,.0f} examples per wall second "
                  f"({eight_row.cpu_rate:,.0f} per CPU second), target >= {MAKEDIRS_TARGET:g}."
                  if eight_row is not None else "")
    load = os.getloadavg()
    data["load_average"] = {"start": load_start, "end": list(load)}
    load_text = (f"Load average {load_start[0]:.1f} when it started, {load[0]:.1f} when it ended, on "
                 f"{os.cpu_count()} cores: with other work running, wall-clock rates fall below the per-CPU-second "
                 "ones (this process's CPU time).")
    sections = ["## scenarios", (
        f"Medians of {args.repeats} runs over the {len(scenarios)} registered scenarios (explore with seeds "
        f"0..{args.repeats - 1}; the plain loop's run r tries seeds from r x {args.cap}). {eight_text} "
        f"{load_text}")]
    if rows1:
        sections.append(
            f"### Examples per second\n\n`explore(..., max_examples={args.examples}, shrink_time=0)` on each "
            "scenario's passing profile (a shared mount before `local`), so that every example runs; examples "
            "are the runs made (job and `recover`), so an example that drew a crash counts twice.\n\n"
            + table(headers1, rows1))
    if rows2:
        sections.append(
            "### Crash states enumerated per second\n\n`explore(..., crashes=\"exhaustive\")`: every distinct "
            "crash state of the recorded run (each cut, each state the persistence model allows there, identical "
            "disks once), the restarted job on each. The job runs once and the disks are copied at each cut; a "
            "state whose disks answer every request of an earlier restart as they answered it gets that "
            "restart's verdict without a run (`restarts run`: the rest were known). `every restart run` is the "
            "same walk with the restarted job run on every state; `rerun` is the method the copies replaced (the "
            "job run again up to each cut for every state). All three are measured in the same run.\n\n"
            + table(headers2, rows2))
    if rows3:
        sections.append(
            "### Examples to the first failure: explore vs a plain loop over seeds\n\n"
            "Each naive scenario on " + ("every profile where it fails" if args.all_profiles
                                         else "the first profile where it fails") + ". `explore` with the "
            "scenario's own budget, faults and crashes and shrinking off (`shrink_time=0`: its wall time is the "
            "time to the first failure). The plain loop runs `simfs.Cluster(nodes, ranks_per_node, profile, "
            "seed=s).run(job)` with default faults, then `recover` on the same cluster, for s = 0, 1..., judged "
            f"by the same property, at most {args.cap} seeds. It crashes nothing, so on a crash scenario it runs "
            f"once, over {min(args.cap, args.crashless_cap)} seeds; there a second plain loop is given a crash in "
            "every run, of a kind explore draws (node, server or whole-cluster power loss) at a seeded-random "
            "operation of the job's crash-free run, each disk keeping a uniformly drawn crash state "
            "(\"plain + seeded crash\").\n\n" + table(headers3, rows3) + "\n\n" + verdict)
    write_report("scenarios_bench", " ".join([
        f"python benchmarks/scenarios_bench.py --repeats {args.repeats} --examples {args.examples}",
        f"--target-examples {args.target_examples} --cap {args.cap} --crashless-cap {args.crashless_cap}",
        *(["--all-profiles"] if args.all_profiles else []),
        *(f"--crash-scenario {name}" for name in args.crash_scenario)]),
        "\n\n".join(sections), data, record=args.record)


if __name__ == "__main__":
    main()
