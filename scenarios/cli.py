"""The ``simfs`` command: run the built-in scenario library or your own job as a search, list
scenarios, replay a finding, show profiles. ``simfs --help`` imports neither torch nor the
library; they load when a command needs them."""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import simfs
from simfs.carriers import SEARCHES
from simfs.fs import persistence
from simfs.visible import visible

from . import importpath
from .budgets import EXPECTED_FAILURE_SHRINK_TIME, SHRINK_TIME, SWEEP_SHRINK_TIME
from .exitcodes import EXIT_INTERRUPTED, EXIT_STALLED, EXIT_UNEXPECTED, EXIT_USAGE
from .helpformat import OneDefault
from .mix import fault_kinds
from .outcome import SCHEMA, Report, ScenarioOutcome
from .reporting.coverage import coverage_of
from .reporting.output import output_text
from .runner import Task, check_specs, load_callable, load_profile, run_tasks, shard

if TYPE_CHECKING:
    from .registry import Scenario


def _version() -> str:
    try:
        return version("simfs")
    except PackageNotFoundError:
        return "unknown"


def _count(text: str) -> int:
    """An argument that counts something: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _in_seconds(text: str, *, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (value >= 0 if zero else value > 0) or value > 86400:
        raise argparse.ArgumentTypeError(f"must be in {'[' if zero else '('}0, 86400] seconds, got {value:g}")
    return value


def _seconds(text: str) -> float:
    return _in_seconds(text, zero=False)


def _shrink_seconds(text: str) -> float:
    return _in_seconds(text, zero=True)


def _tasks(args: argparse.Namespace) -> tuple[list[Task], str]:
    """The searches to run, and a note on the scenarios left out (their libraries not installed)."""
    common: dict[str, Any] = {"nodes": args.nodes, "ranks_per_node": args.ranks_per_node,
                              "examples": args.examples, "seed": args.seed, "watchdog": args.watchdog,
                              "carrier": args.carrier, "database": args.db, "shrink_time": _shrink_time(args),
                              "steer": args.steer}
    jobs = [name for name in args.names if ":" in name]
    if jobs:
        if len(jobs) != len(args.names):
            raise ValueError("give either scenario names or one job ('module:function'), not both")
        check_specs([jobs[0], *(spec for spec in (args.recover, args.check) if spec)])  # a usage error now
        fault_kinds(args.faults.split(","))
        profile = args.profile or "nfs"
        simfs.profiles.get(load_profile(profile))
        crashes: bool | str = "exhaustive" if args.crashes == "exhaustive" else args.crashes == "on"
        return [Task(job, profile, recover=args.recover, check=args.check, crashes=crashes, faults=args.faults,
                     **common) for job in jobs], "\n".join(shadow.note() for shadow in importpath.shadows())
    from .registry import all_scenarios, get

    chosen = [get(name) for name in args.names] if args.names else all_scenarios()
    if args.family:
        families = {sc.family for sc in all_scenarios()}
        unknown = [family for family in args.family if family not in families]
        if unknown:
            raise ValueError(f"--family {unknown[0]}: no such family (the families: {', '.join(sorted(families))})")
        chosen = [sc for sc in chosen if sc.family in args.family]
    chosen, note = _installed(chosen, asked=bool(args.names or args.family))
    if args.profile and args.profile.endswith(".toml"):
        raise ValueError(f"--profile {args.profile}: a profile file runs a job ('module:function'); the built-in "
                         f"scenarios declare their expected verdicts per built-in profile")
    if args.profile:
        simfs.profiles.get(args.profile)
    if args.quick and args.profile:
        raise ValueError("--quick picks each scenario's profiles; give --quick or --profile, not both")
    quick = args.quick and not args.examples  # --quick's share of each scenario's examples, unless told
    tasks = [Task(sc.name, profile, **{**common, "examples": sc.quick_examples() if quick else args.examples,
                                       "shrink_time": _shrink_time(args, sc.expect.get(profile))})
             for sc in chosen for profile in (sc.quick_profiles() if args.quick else sc.profiles)
             if args.profile in (None, profile)]
    if not tasks:
        raise ValueError(f"no scenario runs on profile {args.profile!r}; `simfs list` shows each one's profiles")
    return tasks, note


def _shrink_time(args: argparse.Namespace, expected: str | None = None) -> float:
    """--shrink-time, else a search on its own's budget for named scenarios or a job, a sweep's
    for a run of the library or of a family (shorter where the scenario expects the profile to
    fail: budgets.py)."""
    if args.shrink_time is not None:
        return float(args.shrink_time)
    if args.names:
        return SHRINK_TIME
    return EXPECTED_FAILURE_SHRINK_TIME if expected == "fail" else SWEEP_SHRINK_TIME


def _installed(chosen: list[Scenario], *, asked: bool) -> tuple[list[Scenario], str]:
    """The scenarios whose libraries are installed, and a note on the others; a scenario asked for
    by name or family whose library is missing is a usage error."""
    missing = {name: needs for name, needs in ((sc.name, sc.missing()) for sc in chosen) if needs}
    if not missing:
        return chosen, ""
    libraries = sorted({name for names in missing.values() for name in names})
    install = f"pip install -e '.[stacks]' (after torch==2.13.0) installs {', '.join(libraries)}"
    if asked:
        name, needs = next(iter(missing.items()))
        raise ValueError(f"scenario {name} needs {', '.join(needs)}, not installed here: {install}")
    return ([sc for sc in chosen if sc.name not in missing],
            f"left out {len(missing)} scenario{'' if len(missing) == 1 else 's'} whose libraries are not installed: "
            f"{install}")


def _table(outcomes: list[ScenarioOutcome]) -> Any:
    from rich.table import Table

    table = Table(title="simfs scenarios")
    for column in ("scenario", "profile", "expected", "verdict", "", "examples", "reached", "virtual s", "wall s"):
        table.add_column(column, justify="right" if column.endswith(("s", "examples")) else "left")
    for o in outcomes:
        mark = "[green]as expected[/]" if o.as_expected else "[red]UNEXPECTED[/]"
        table.add_row(o.scenario, o.profile, o.expected, o.verdict, mark, str(o.examples),
                      f"{len(coverage_of(o))} kinds", f"{o.virtual_time:.1f}", f"{o.wall_time:.2f}")
    return table


def _report(args: argparse.Namespace, outcomes: list[ScenarioOutcome], started: float, when: str,
            interrupted: bool) -> None:
    if not args.report:
        return
    from .reporting import write_all

    report = Report(schema=SCHEMA, simfs_version=_version(), command=shlex.join(["simfs", *args.argv]),
                    seed=args.seed, started=when, wall_time=time.perf_counter() - started,
                    interrupted=interrupted, outcomes=outcomes, shard=args.shard or "")
    paths = write_all(report, args.report)
    print(f"report: {paths['html']} (also {paths['json']}, {paths['junit']})")


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .reporting.console import searching, show_failures

    planned, note = _tasks(args)
    tasks = shard(planned, args.shard)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    if note:
        console.print(note, markup=False)
    started, when = time.perf_counter(), datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    done: dict[int, ScenarioOutcome] = {}
    interrupted = False
    try:
        finished = run_tasks(tasks, args.jobs)  # (its workers start before the progress display's thread)
        with searching(console, len(tasks)) as told:
            for index, outcome in finished:
                done[index] = outcome
                told(outcome)
    except KeyboardInterrupt:
        interrupted = True
    outcomes = [done[i] for i in sorted(done)]
    console.print(_table(outcomes))
    show_failures(console, outcomes, every=args.verbose)
    _report(args, outcomes, started, when, interrupted)
    if interrupted:
        console.print(f"interrupted: {len(outcomes)} of {len(tasks)} searches finished")
        return EXIT_INTERRUPTED
    unexpected = [o for o in outcomes if not o.as_expected]
    console.print(f"{len(outcomes) - len(unexpected)} of {len(outcomes)} results as expected"
                  + (f"; {len(unexpected)} NOT" if unexpected else ""))
    return EXIT_UNEXPECTED if unexpected else 0


def cmd_report_merge(args: argparse.Namespace) -> int:
    """One report of the shards' reports; exits as `simfs run` would have: 1 when a verdict differs
    from its expectation, 130 when a shard was interrupted."""
    from .merge import load, merge
    from .reporting import write_all

    merged = merge(load(args.reports), shlex.join(["simfs", *args.argv]))
    paths = write_all(merged, args.report)
    unexpected = [o for o in merged.outcomes if not o.as_expected]
    print(f"{len(merged.outcomes) - len(unexpected)} of {len(merged.outcomes)} results as expected"
          + (f"; {len(unexpected)} NOT" if unexpected else "") + f" ({len(args.reports)} reports merged)")
    print(f"report: {paths['html']} (also {paths['json']}, {paths['junit']})")
    if merged.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_UNEXPECTED if unexpected else 0


def cmd_list(args: argparse.Namespace) -> int:
    from .listing import lines
    from .registry import all_scenarios

    print("\n".join(lines(all_scenarios())))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    importpath.for_jobs()  # a job the replay string names is found as `simfs run` found it
    job = load_callable(args.job) if args.job else None
    if args.replay.startswith("simfs1:"):
        result = simfs.replay(args.replay, job)
        print(result.summary())
        if args.trace:
            print(visible("\n".join(str(e) for e in result.trace)))
        return 0 if result.ok else 1
    from .explore import replay
    from .finding import rank_outputs

    finding = replay(args.replay, job, recover=load_callable(args.recover) if args.recover else None,
                     check=load_callable(args.check) if args.check else None)
    print(visible(finding.description) if finding.failed else f"no failure: {finding.target.describe()}")
    output = output_text(*rank_outputs(finding.results))
    if output:
        print(visible(output))
    if args.trace:
        print(visible("\n".join(f"{'restart ' if e.run else ''}{e.time:12.6f}s rank {e.rank:>3} {e.op:<10} {e.path} "
                                f"-> {e.outcome}" for e in finding.trace)))
    return 1 if finding.failed else 0


def cmd_profiles(args: argparse.Namespace) -> int:
    if args.name is None:
        for name in simfs.profiles.names():
            print(f"{name:12} {simfs.profiles.get(name).notes}")
        return 0
    profile = simfs.profiles.get(args.name)
    for key, value in profile.to_dict().items():
        print(f"{key} = {value!r}")
        if key in ("name", "notes"):
            continue
        source = profile.source(key)
        if source is not None:
            print(f"    source: {source}")
        else:
            print(f"    source: none documented; the simfs default ({simfs.profiles.describe(key)})")
        if key == "persistence":
            for rule, why in persistence.get(value).rules:
                print(f"    rule: {rule}\n        source: {why}")
    if args.save:
        profile.save(args.save)
        print(f"saved: {args.save}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    importpath.require_own(("coord",), "simfs probe")  # whatever lies in the directory torchrun starts in
    from .probe.command import run

    return run(args)


def parser() -> argparse.ArgumentParser:
    fmt = OneDefault
    top = argparse.ArgumentParser(prog="simfs", formatter_class=fmt,
                                  description="Search simulated clusters with NFS-like shared filesystems for the "
                                              "races, timeouts and crash bugs of training jobs.")
    top.add_argument("--version", action="version", version=f"simfs {_version()}")
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", formatter_class=fmt,
                         help="search the built-in scenarios (default: all of them, each on its profiles) or a job")
    run.add_argument("names", nargs="*", metavar="NAME",
                     help="scenario names (`simfs list`), or one job 'module:function' / 'file.py:function'")
    run.add_argument("--family", action="append", metavar="FAMILY",
                     help="run only the scenarios of this family (repeatable; `simfs list` shows them)")
    run.add_argument("--profile", help="run only on this profile (a job: its profile, a built-in name or a TOML file "
                                       "such as `simfs probe --emit-profile` writes; default nfs)")
    run.add_argument("--nodes", type=_count, help="nodes (default: each scenario's own; a job: 2)")
    run.add_argument("--ranks-per-node", type=_count, help="ranks per node (default: each scenario's own; a job: 2)")
    run.add_argument("--examples", type=_count, help="examples per search (default: each scenario's own; a job: 100)")
    run.add_argument("--seed", type=int, default=0, help="seed of every search (the same seed finds the same thing)")
    run.add_argument("--report", default=os.path.join("reports", "runs"),
                     help="directory for report.json, report.xml (JUnit) and report.html ('' for none)")
    run.add_argument("--quick", action="store_true",
                     help="each scenario on one profile per verdict it expects (a shared filesystem where it can), "
                          "with a third of its examples (at least 5)")
    run.add_argument("--db", metavar="DIR", default=os.environ.get("SIMFS_DB", os.path.join(".hypothesis", "examples")),
                     help="the example database: failures found are kept here and replayed first by the next run "
                          "('' for none; default $SIMFS_DB, else Hypothesis's own directory)")
    run.add_argument("--shrink-time", type=_shrink_seconds, metavar="SECONDS",
                     help=f"wall seconds each failing search may spend shrinking its counterexample (0: none; "
                          f"default {SHRINK_TIME:g} for named scenarios or a job, {SWEEP_SHRINK_TIME:g} for each "
                          f"search of a run of the library or of a family, {EXPECTED_FAILURE_SHRINK_TIME:g} where "
                          f"that scenario expects the profile to fail)")
    run.add_argument("--steer", action="store_true",
                     help="steer each search towards examples that reach rarer events (Hypothesis's target phase; "
                          "off by default: reports/BENCHMARKS.md measures it)")
    run.add_argument("--jobs", type=_count, default=min(os.cpu_count() or 1, 8),
                     help="searches in parallel worker processes (default: one per CPU, at most 8)")
    run.add_argument("--shard", metavar="K/N", help="run only the K-th of N equal shares of the searches")
    run.add_argument("--carrier", choices=SEARCHES, default=None,
                     help="how ranks are carried: 'auto' (a job's default), greenlet ranks where the job shows no "
                          "per-process state, their findings confirmed on rank processes, else rank processes; "
                          "'process', each rank an OS process confined by the kernel (its own modules, generators "
                          "and C++ state); 'greenlet', all ranks greenlets of the search's confined process, "
                          "sharing them (each scenario's own carrier otherwise)")
    run.add_argument("--watchdog", type=_seconds, default=60.0,
                     help="real seconds a search may go without progress before it is killed (even in C code)")
    run.add_argument("--recover", metavar="SPEC", help="a job's restarted job after a crash, 'module:function'")
    run.add_argument("--check", metavar="SPEC", help="a job's property, 'module:function' taking a simfs.Result")
    run.add_argument("--crashes", choices=("off", "on", "exhaustive"), default="off",
                     help="a job: crash nodes/servers at uniform points (on) or walk every crash state (exhaustive)")
    run.add_argument("--faults", default="default",
                     help="a job: fault kinds: all, none, a comma list, or default (interleave,cache,skew,drift; "
                          "the default)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="after the table, show the counterexample of every failure, also those the scenarios "
                          "expect (by default only the unexpected ones)")
    run.set_defaults(func=cmd_run)

    report = sub.add_parser("report", formatter_class=fmt, help="work with reports `simfs run` wrote")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    merge = report_sub.add_parser("merge", formatter_class=fmt,
                                  help="merge the reports of every shard of a run (--shard K/N on N machines) into one")
    merge.add_argument("reports", nargs="+", metavar="DIR",
                       help="each shard's report directory (or its report.json)")
    merge.add_argument("--report", default=os.path.join("reports", "runs"),
                       help="directory for the merged report.json, report.xml (JUnit) and report.html")
    merge.set_defaults(func=cmd_report_merge)

    lst = sub.add_parser("list", formatter_class=fmt, help="list the built-in scenarios")
    lst.set_defaults(func=cmd_list)

    rep = sub.add_parser("replay", formatter_class=fmt, help="reproduce a finding (or a run) from its replay string")
    rep.add_argument("replay")
    rep.add_argument("--job", help="the job, if it was not importable when recorded ('module:function')")
    rep.add_argument("--recover", help="the restarted job, if it was not importable")
    rep.add_argument("--check", help="the property, if it was not importable")
    rep.add_argument("--trace", action="store_true", help="print every simulated operation")
    rep.set_defaults(func=cmd_replay)

    prof = sub.add_parser("profiles", formatter_class=fmt, help="list the built-in profiles, or show one")
    prof.add_argument("name", nargs="?")
    prof.add_argument("--save", help="write the profile as TOML")
    prof.set_defaults(func=cmd_profiles)

    probe = sub.add_parser("probe", formatter_class=fmt,
                           help="measure a real shared filesystem from every rank (one process, or under torchrun) "
                                "and calibrate a simfs profile from it")
    probe.add_argument("path", help="the shared directory to probe (the probe works in a new directory under it "
                                    "and removes it)")
    probe.add_argument("--paths", metavar="P0,P1,...", type=lambda text: text.split(","),
                       help="rank i's own mount point of the same directory (several clients on one machine)")
    probe.add_argument("--quick", action="store_true", help="2 trials, 3 s timeout, small rates: under 20 s")
    probe.add_argument("--trials", type=_count, help="rounds of each lag measurement (default 5; --quick 2)")
    probe.add_argument("--timeout", type=_seconds,
                       help="seconds to wait for each change before it counts as not seen (default 10; --quick 3)")
    probe.add_argument("--report", default=os.path.join("reports", "probe"),
                       help="directory for probe.json ('' for none)")
    probe.add_argument("--emit-profile", metavar="FILE.toml", help="write the calibrated simfs profile here")
    probe.set_defaults(func=cmd_probe)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    args.argv = argv
    try:
        code: int = args.func(args)  # the chosen command's
        return code
    except (ValueError, TypeError, OSError) as exc:
        print(f"simfs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except simfs.Stalled as exc:
        print(f"simfs: the job stopped making progress and was killed: {exc}", file=sys.stderr)
        return EXIT_STALLED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _started_as() -> list[str]:
    """This process's command line, to start it again: the console script's own path where it ran
    (its directory starts sys.path, not the current one, so that no module there passes for one
    of simfs's: scenarios.importpath), else ``-m`` and the module run."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None and os.path.isfile(sys.argv[0]):
        return [sys.executable, sys.argv[0], *sys.argv[1:]]
    return [sys.executable, "-m", spec.name if spec is not None else "scenarios.cli", *sys.argv[1:]]


def console() -> None:
    """The console script: str hashing fixed (PYTHONHASHSEED=0) so that a search finds the same
    thing in every process; a closed pipe (``simfs list | head``) is not an error."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, _started_as())
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":
    console()
