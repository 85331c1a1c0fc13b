"""The main job's wall time, whole and `--quick`, and examples per second of each scenario in it.

  python benchmarks/main_job.py [--before TREE] [--jobs 2] [--record]

Runs `simfs run` (every scenario on every profile) and `simfs run --quick` as a user does, each in
a fresh interpreter with no example database (`--db ''`: every search from nothing) and the report
in a temporary directory, and reads the report: the run's wall time, how many verdicts were as
expected, and per scenario its examples per wall second over its profiles (examples are what the
search ran, shrinking included). It also runs the whole job without the stacks family, as README's
first command runs it (that install has no trainers: their scenarios are left out). ``--before
TREE`` also runs the whole job on another checkout of simfs (its directory on PYTHONPATH), for a
before/after row."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_record_flag, table, write_report

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {"whole": 180.0, "whole, no stacks": 180.0, "quick": 60.0}  # seconds on 2 cores (issue 32)
STACKS = "stacks"  # the family README's first command leaves out (its libraries are an extra)


def run_main_job(tree: str, jobs: int, *flags: str) -> dict[str, Any]:
    """`simfs run` with ``flags`` on the simfs in ``tree``: its report, with the wall time measured here."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": tree}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "simfs", "run", "--jobs", str(jobs), "--report", out,
                               "--db", "", *flags], capture_output=True, text=True, env=env, cwd=tree)
        wall = time.perf_counter() - start
        if done.returncode not in (0, 1):
            raise SystemExit(f"simfs run {' '.join(flags)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        with open(os.path.join(out, "report.json")) as f:
            report: dict[str, Any] = json.load(f)
    report["measured_wall"] = wall
    return report


def summary(name: str, report: dict[str, Any], target: float | None) -> list[str]:
    outcomes = report["outcomes"]
    expected = sum(o["verdict"] == o["expected"] for o in outcomes)
    examples = sum(o["examples"] for o in outcomes)
    wall = report["measured_wall"]
    met = "" if target is None else ("yes" if wall <= target else "no")
    return [name, str(len(outcomes)), f"{expected} of {len(outcomes)}", str(examples), f"{wall:.0f}",
            "" if target is None else f"<= {target:.0f}", met]


def per_scenario(report: dict[str, Any]) -> list[list[str]]:
    """Per scenario: its carrier, searches, examples, search wall seconds, examples per second."""
    acc: dict[str, list[Any]] = defaultdict(lambda: ["", 0, 0, 0.0])
    for o in report["outcomes"]:
        row = acc[o["scenario"]]
        row[0] = o["carrier"]
        row[1] += 1
        row[2] += o["examples"]
        row[3] += o["wall_time"]
    rows = sorted(acc.items(), key=lambda item: -item[1][3])
    return [[name, carrier, str(searches), str(examples), f"{wall:.1f}", f"{examples / wall:.1f}" if wall else ""]
            for name, (carrier, searches, examples, wall) in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="TREE", help="another checkout of simfs to run the whole job on too")
    parser.add_argument("--jobs", type=int, default=2, help="simfs run --jobs (default 2: CI's cores)")
    add_record_flag(parser)
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    if args.before:
        runs["whole, before"] = run_main_job(args.before, args.jobs)
    runs["whole"] = run_main_job(HERE, args.jobs)
    others = sorted({o["family"] for o in runs["whole"]["outcomes"]} - {STACKS})
    runs["whole, no stacks"] = run_main_job(HERE, args.jobs, *(flag for f in others for flag in ("--family", f)))
    runs["quick"] = run_main_job(HERE, args.jobs, "--quick")
    rows = [summary(name, report, None if name.endswith("before") else TARGETS[name]) for name, report in runs.items()]
    headers = ["run", "searches", "verdicts as expected", "examples", "wall s", "target s", "met"]
    scenario_headers = ["scenario", "carrier", "searches", "examples", "search wall s", "examples/s"]
    before_note = f" Before: the simfs at `{args.before}`." if args.before else ""
    markdown = (f"## the main job\n\n`simfs run --jobs {args.jobs}` (every scenario on every profile), the same "
                "without the stacks family (`--family` of every other: what README's first command runs, its "
                "install having no trainers) and `simfs run --quick` (one profile per verdict a scenario expects), "
                f"each once, with no example database.{before_note}\n\n" + table(headers, rows) +
                "\n\nPer scenario in the whole run (its searches over every profile; wall seconds of the "
                "searches, two at a time, shrinking included):\n\n" +
                table(scenario_headers, per_scenario(runs["whole"])))
    print(markdown)
    data = {name: {"wall": r["measured_wall"], "outcomes": [{k: o[k] for k in ("scenario", "profile", "verdict",
                                                                               "expected", "examples", "wall_time",
                                                                               "carrier")}
                                                            for o in r["outcomes"]]}
            for name, r in runs.items()}
    command = "python benchmarks/main_job.py" + (f" --before {args.before}" if args.before else "") + (
        f" --jobs {args.jobs}" if args.jobs != 2 else "")
    write_report("main_job", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
