"""scenarios speed: how fast the search runs and how much sooner it finds the library's bugs than
a plain loop over seeds.

  python benchmarks/scenarios_bench.py [--repeats 3] [--examples 200] [--cap 1000] [--record]

Measures, as medians of several runs, for the scenarios registered in the built-in library
(``scenarios.registry.all_scenarios()``, whatever is registered when it runs):

1. examples per wall second of ``scenarios.explore`` on each scenario's passing profile (a pass
   runs every example), and the 8-rank makedirs scenario on 2 nodes x 4 ranks;
2. crash states enumerated per wall second by ``explore(..., crashes="exhaustive")``;
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
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, table, write_report
from scenarios import explore
from scenarios.registry import Scenario, all_scenarios
from scenarios.verdict import judge
from simfs.faults import CrashNode, CrashServer, Fault, PowerLoss

EXAMPLES = 200  # examples per throughput measurement
CAP = 1000  # seeds the plain loop tries before giving up
MAKEDIRS_TOPOLOGY = (2, 4)
MAKEDIRS_TARGET = 100.0  # examples per second, 8-rank makedirs scenario
STATES = re.compile(r"(\d+) distinct crash states")
INF = float("inf")


def median(values: list[float]) -> float:
    return statistics.median(values)


def pass_profile(s: Scenario) -> str | None:
    return next((p for p, v in s.expect.items() if v == "pass"), None)


def fail_profiles(s: Scenario) -> list[str]:
    return [p for p, v in s.expect.items() if v == "fail"]


def is_makedirs(s: Scenario) -> bool:
    return "makedirs" in s.family.lower() or "makedirs" in s.name.lower()


def throughput_crashes(s: Scenario) -> bool | str:
    """Throughput is measured with drawn crash points (an exhaustive walk is section 2)."""
    return bool(s.crashes)


# -- 1. examples per second ------------------------------------------------------------------------
@dataclass
class Throughput:
    name: str
    profile: str
    nodes: int
    ranks_per_node: int
    crashes: bool | str
    examples: list[int]
    walls: list[float]
    failed: bool  # a false alarm on a passing profile (or a naive scenario without a passing one)

    @property
    def rate(self) -> float:
        return median([e / w for e, w in zip(self.examples, self.walls)])


def throughput(s: Scenario, profile: str, nodes: int, rpn: int, examples: int, repeats: int) -> Throughput:
    out = Throughput(s.name, profile, nodes, rpn, throughput_crashes(s), [], [], False)
    for repeat in range(repeats):
        finding = explore(s.job, recover=s.recover, check=s.check, nodes=nodes, ranks_per_node=rpn, profile=profile,
                          faults=s.faults, crashes=out.crashes, max_examples=examples, seed=repeat, shrink_time=0)
        out.examples.append(finding.examples)
        out.walls.append(finding.wall_time)
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


def enumerate_states(s: Scenario, profile: str, repeats: int) -> Enumeration:
    walls, states, runs, failed, note = [], 0, 0, False, ""
    for _ in range(repeats):
        finding = explore(s.job, recover=s.recover, check=s.check, nodes=s.nodes, ranks_per_node=s.ranks_per_node,
                          profile=profile, faults=s.faults, crashes="exhaustive", max_examples=s.max_examples)
        walls.append(finding.wall_time)
        note = "; ".join(finding.notes)
        found = STATES.search(note)
        states = int(found.group(1)) if found else max(finding.examples - 1, 0)  # runs less the crash-free one
        runs, failed = finding.examples, finding.failed
    return Enumeration(s.name, profile, states, runs, walls, failed, note)


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
    the property explore checks?"""
    cluster = simfs.Cluster(nodes=s.nodes, ranks_per_node=s.ranks_per_node, profile=profile, seed=seed)
    faults: list[Fault] = []
    power_loss_after = False
    if ops is not None:
        crash = plain_crash(random.Random(seed), s, ops, has_server)
        power_loss_after = crash is None
        faults = [] if crash is None else [crash]
    first = cluster.run(s.job, faults=faults)
    if power_loss_after:
        cluster.power_loss()
    if not first.crashed and judge(first, s.check, run=0) is not None:
        return True
    if s.recover is None:
        return False
    return judge(cluster.run(s.recover, faults=[]), s.check, run=1) is not None


def plain_loop(s: Scenario, profile: str, start: int, cap: int, crashes: bool) -> tuple[int | None, float]:
    """Seeds ``start``, ``start + 1``... until a run fails: (how many runs, or None after
    ``cap``; wall seconds)."""
    began = time.perf_counter()
    ops: list[int] | None = None
    has_server = False
    if crashes:
        reference = simfs.Cluster(nodes=s.nodes, ranks_per_node=s.ranks_per_node, profile=profile, seed=start)
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
    crashes: bool | str
    budget: int
    found_at: list[int]  # 0: not found within the budget
    search_walls: list[float]
    plain_runs: list[int | None]  # None: not found within the cap
    plain_walls: list[float]


def race(s: Scenario, profile: str, repeats: int, cap: int) -> Race:
    out = Race(s.name, profile, s.crashes, s.max_examples, [], [], [], [])
    for repeat in range(repeats):
        finding = explore(s.job, recover=s.recover, check=s.check, nodes=s.nodes, ranks_per_node=s.ranks_per_node,
                          profile=profile, faults=s.faults, crashes=s.crashes, max_examples=s.max_examples,
                          seed=repeat, shrink_time=0)
        out.found_at.append(finding.found_at if finding.failed else 0)
        out.search_walls.append(finding.wall_time)
        runs, wall = plain_loop(s, profile, repeat * cap, cap, bool(s.crashes))
        out.plain_runs.append(runs)
        out.plain_walls.append(wall)
    return out


def median_or_inf(values: list[int | None] | list[int]) -> float:
    """The median of counts, where None or 0 (not found) counts as infinitely many."""
    return median([float(v) if v else INF for v in values])


def count_text(value: float, limit: int, words: str) -> str:
    return f"{words} {limit}" if value == INF else f"{value:g}"


def race_outcome(search: float, plain: float) -> str:
    if search == INF:
        return "neither found" if plain == INF else "plain loop ahead"
    if plain == INF or plain > search:
        return "search ahead"
    return "tie" if plain == search else "plain loop ahead"


# -- output ----------------------------------------------------------------------------------------
def show(title: str, headers: list[str], rows: list[list[Any]], right: tuple[int, ...] = ()) -> None:
    """A table on the console (rich when installed)."""
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
    def job() -> None:
        pass
    simfs.Cluster(nodes=2, ranks_per_node=2).run(job)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement (medians are reported)")
    parser.add_argument("--examples", type=int, default=EXAMPLES,
                        help="examples per throughput measurement (section 1)")
    parser.add_argument("--cap", type=int, default=CAP, help="seeds the plain loop tries before giving up")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only scenarios whose name contains TEXT (repeatable; not with --record)")
    add_record_flag(parser)
    args = parser.parse_args()
    for name in ("repeats", "examples", "cap"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.record and args.only:
        parser.error("--record measures the whole library: leave out --only")
    scenarios = selected(args.only)
    if not scenarios:
        parser.error("no scenarios registered" + (f" matching {args.only}" if args.only else ""))
    warm_up()
    began = time.perf_counter()
    data: dict[str, Any] = {"repeats": args.repeats, "examples": args.examples, "cap": args.cap,
                            "scenarios": len(scenarios)}

    def progress(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {text}", file=sys.stderr, flush=True)

    # 1. examples per second
    speeds: list[Throughput] = []
    for s in scenarios:
        profile = pass_profile(s) or s.profiles[0]
        progress(f"examples/s: {s.name} on {profile}")
        speeds.append(throughput(s, profile, s.nodes, s.ranks_per_node, args.examples, args.repeats))
    makedirs = [s for s in scenarios if is_makedirs(s) and pass_profile(s)]
    eight = next((s for s in makedirs if (s.nodes, s.ranks_per_node) == MAKEDIRS_TOPOLOGY), None)
    eight_row: Throughput | None = None
    if eight is not None:
        eight_row = next(t for t in speeds if t.name == eight.name)
    elif makedirs:
        # the family runs on another topology: the 8-rank figure runs its first passing scenario on 2 x 4
        first = makedirs[0]
        progress(f"examples/s: {first.name} on {MAKEDIRS_TOPOLOGY[0]} x {MAKEDIRS_TOPOLOGY[1]}")
        eight_row = throughput(first, pass_profile(first) or "", *MAKEDIRS_TOPOLOGY, args.examples, args.repeats)
        speeds.insert(next(i for i, t in enumerate(speeds) if t.name == first.name) + 1, eight_row)
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
        met = ("met" if t.rate >= MAKEDIRS_TARGET else "MISSED") if t is eight_row else ""
        rows1.append([t.name, t.profile, f"{t.nodes} x {t.ranks_per_node}", "drawn" if t.crashes else "no",
                      f"{median(t.examples):g}", f"{median(t.walls):.2f}", f"{t.rate:,.0f}",
                      f"{target} {met}".strip(), verdict])
    data["examples_per_s"] = [{"scenario": t.name, "profile": t.profile, "nodes": t.nodes,
                               "ranks_per_node": t.ranks_per_node, "crashes": t.crashes, "examples": t.examples,
                               "wall_s": t.walls, "examples_per_s": t.rate, "failed": t.failed,
                               "target": MAKEDIRS_TARGET if t is eight_row else None} for t in speeds]

    # 2. crash states per second
    enums: list[Enumeration] = []
    for s in scenarios:
        if not s.crashes or s.recover is None:
            continue
        profile = pass_profile(s) or s.profiles[0]
        progress(f"crash states/s: {s.name} on {profile}")
        enums.append(enumerate_states(s, profile, args.repeats))
    rows2 = [[e.name, e.profile, e.states, e.runs, f"{median(e.walls):.3f}", f"{e.rate:,.0f}",
              "failed (stopped at its first failing state)" if e.failed else "passed (all states)"] for e in enums]
    data["crash_states_per_s"] = [{"scenario": e.name, "profile": e.profile, "states": e.states, "runs": e.runs,
                                   "wall_s": e.walls, "states_per_s": e.rate, "failed": e.failed, "notes": e.note}
                                  for e in enums]

    # 3. examples to the first failure
    races: list[Race] = []
    for s in scenarios:
        for profile in fail_profiles(s):
            progress(f"first failure: {s.name} on {profile}")
            races.append(race(s, profile, args.repeats, args.cap))
    rows3, behind = [], []
    for r in races:
        search, plain = median_or_inf(r.found_at), median_or_inf(r.plain_runs)
        outcome = race_outcome(search, plain)
        if outcome != "search ahead":
            behind.append(f"{r.name} on {r.profile} ({outcome})")
        ratio = "" if search == INF else (f"> {args.cap / search:.0f}x" if plain == INF else f"{plain / search:.1f}x")
        rows3.append([r.name, r.profile, f"{sum(1 for f in r.found_at if f)}/{len(r.found_at)}",
                      count_text(search, r.budget, "not found in"), f"{median(r.search_walls):.2f}",
                      "seeds + seeded crash" if r.crashes else "seeds", count_text(plain, args.cap, ">"),
                      f"{median(r.plain_walls):.2f}", ratio, outcome])
    data["first_failure"] = [{"scenario": r.name, "profile": r.profile, "crashes": r.crashes, "budget": r.budget,
                              "explore_found_at": r.found_at, "explore_wall_s": r.search_walls,
                              "plain_loop": "seeds + seeded crash" if r.crashes else "seeds",
                              "plain_runs": r.plain_runs, "plain_wall_s": r.plain_walls,
                              "outcome": race_outcome(median_or_inf(r.found_at), median_or_inf(r.plain_runs))}
                             for r in races]
    data["search_not_ahead"] = behind
    data["total_wall_s"] = time.perf_counter() - began
    progress("done")

    headers1 = ["scenario", "profile", "topology", "crashes", "examples", "wall s", "examples/s", "target",
                "verdict"]
    headers2 = ["scenario", "profile", "states", "runs", "wall s", "states/s", "verdict"]
    headers3 = ["scenario", "profile", "explore found", "explore examples", "explore s", "plain loop", "plain seeds",
                "plain s", "plain / explore", "outcome"]
    show("Examples per second", headers1, rows1, (4, 5, 6))
    show("Crash states enumerated per second", headers2, rows2, (2, 3, 4, 5))
    show("Examples to the first failure: explore vs a plain loop over seeds", headers3, rows3, (3, 4, 6, 7, 8))
    verdict = (("Search not ahead of the plain loop: " + "; ".join(behind) + ".") if behind
               else "The search needed fewer runs than the plain loop on every naive scenario.")
    print(verdict)

    eight_text = (f"The 8-rank makedirs scenario ({eight_row.name} on {eight_row.profile}, 2 x 4): "
                  f"{eight_row.rate:,.0f} examples/s, target >= {MAKEDIRS_TARGET:g}."
                  if eight_row is not None else "No makedirs scenario is registered.")
    markdown = "\n\n".join([
        "## scenarios",
        f"Medians of {args.repeats} runs (explore seeds 0..{args.repeats - 1}; the plain loop's run r tries seeds "
        f"from r x {args.cap}) over the {len(scenarios)} registered scenarios. {eight_text}",
        f"### Examples per second\n\n`explore(..., max_examples={args.examples}, shrink_time=0)` on each "
        "scenario's passing profile, so that every example runs; crash scenarios draw crash points (an example "
        "that draws one runs twice, and both runs count).\n\n" + table(headers1, rows1),
        "### Crash states enumerated per second\n\n`explore(..., crashes=\"exhaustive\")`: every distinct crash "
        "state of the recorded run, the restarted job on each.\n\n"
        + (table(headers2, rows2) if rows2 else "No crash scenario is registered."),
        "### Examples to the first failure: explore vs a plain loop over seeds\n\n"
        "`explore` with the scenario's own budget, faults and crashes, shrinking off (`shrink_time=0`: its wall "
        "time is the time to the first failure; an example that drew a crash counts twice). The plain loop runs "
        "`simfs.Cluster(nodes, ranks_per_node, profile, seed=s).run(job)`, then `recover` on the same cluster, "
        f"for s = 0, 1..., judged by the same property, at most {args.cap} seeds. A plain loop crashes nothing, "
        "so for crash scenarios it is given a crash of a kind explore uses (node, server or power loss) at a "
        "seeded-random operation of the run (\"seeds + seeded crash\").\n\n"
        + (table(headers3, rows3) if rows3 else "No naive scenario is registered."),
        verdict,
    ])
    write_report("scenarios_bench", f"python benchmarks/scenarios_bench.py --repeats {args.repeats} "
                 f"--examples {args.examples} --cap {args.cap}", markdown, data, record=args.record)


if __name__ == "__main__":
    main()
