"""Reach: the races a real launcher hits, side by side with how soon the default search finds them.

  python benchmarks/reach.py [--runs 10] [--seeds 5] [--examples 200] [--carriers greenlet,process]
                             [--only NAME] [--record]

Each shape of the drift family (scenarios/library/drift.py), as users write it and fixed, runs
two ways in one run of this script:

- under a real torchrun (``python -m torch.distributed.run --standalone``, gloo over loopback),
  4 processes on this machine, in a fresh directory of its disk, ``--runs`` times: how many
  runs hit the race (a rank raised the job's error; a run that failed without one, the launcher's
  or gloo's, is neither, and is listed as a miss of the measurement);
- under ``scenarios.explore`` on its defaults (``faults="default"``, a local disk, 1 node x 4
  ranks, as the torchrun), from seeds 0..``--seeds``-1, on each carrier: the example that first
  failed (shrinking off: it is the search's speed to the bug that is measured), or none within
  ``--examples``;
- and the search before this model (``collectives="lockstep"``, the default kinds without
  ``drift``), on greenlet ranks, for the naive shapes.

The targets (issue 46): every shape a real launcher hits in at least 10% of its runs is found
within 20 examples at every seed; every shape within 200; no fixed shape is ever found."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, filesystem, table, write_report
from scenarios.explore import _search, make_target
from scenarios.mix import DEFAULT_KINDS
from scenarios.registry import get
from simfs.runtime.dist import LOCKSTEP

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reach_worker.py")
RANKS = 4
TOPOLOGY = (1, RANKS)  # one machine, as the torchrun
PROFILE = "local"
OFTEN = 0.10  # a shape the launcher hits this often must be found within FAST examples
FAST = 20


@dataclass(frozen=True)
class Shape:
    what: str
    naive: str  # scenario names (scenarios/library/drift.py)
    fixed: str


SHAPES = (
    Shape("check-then-act after a barrier", "drift-check-after-barrier", "drift-check-before-barrier"),
    Shape("check-then-act after a broadcast (root writes)", "drift-check-after-broadcast", "drift-check-then-barrier"),
    Shape("check before a broadcast (rank 3 checks late)", "drift-check-before-broadcast", "drift-check-then-barrier"),
    Shape("check-then-act after an all-reduce", "drift-check-after-allreduce", "drift-check-before-allreduce"),
    Shape("exists, create, then write by several ranks", "drift-version-file", "drift-version-file-atomic"),
    Shape("pointer removed and recreated between check and open", "drift-pointer-recreated",
          "drift-pointer-replaced"),
    Shape("lock released before the data is whole", "drift-lock-released-early", "drift-lock-held-to-the-end"),
)


@dataclass
class Launches:
    """What ``runs`` real torchrun runs of a job gave: the runs in which a rank raised the job's
    error (hit the race), the first such error lines, and the runs that failed without one (the
    launcher or gloo broke: counted as neither hit nor miss, and shown)."""

    hits: int = 0
    errors: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


def torchrun_hits(name: str, runs: int, out: str) -> Launches:
    """``runs`` real torchrun runs of the scenario's job (reach_worker.py prints ``rank N: ...``
    for the job's own error)."""
    function = get(name).job.__name__
    found = Launches()
    for _ in range(runs):
        directory = tempfile.mkdtemp(prefix="reach-", dir=out)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc_per_node={RANKS}", WORKER, function, directory],
                              capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        shutil.rmtree(directory, ignore_errors=True)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("rank ")]
        if lines:
            found.hits += 1
            found.errors.extend(lines[:1])
        elif proc.returncode:
            found.broken.append(f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return found


def first_failure(name: str, seed: int, examples: int, carrier: str, before: bool) -> int | None:
    """The example at which the default search (``before``: the one before this model) first
    failed the scenario's job, or None."""
    scenario = get(name)
    target = make_target(scenario.job, recover=None, check=None, nodes=TOPOLOGY[0], ranks_per_node=TOPOLOGY[1],
                         profile=PROFILE, carrier=carrier)
    kinds = DEFAULT_KINDS
    if before:
        target = type(target)(**{**target.__dict__, "collectives": LOCKSTEP})
        kinds = tuple(k for k in DEFAULT_KINDS if k != "drift")
    found = simfs.isolated(_search, target, kinds, False, examples, seed, 0.0, False, False, None, b"",
                           watchdog=60.0, processes=carrier == "process")
    return found.found_at if found.failed else None


def _cell(found: list[int | None], examples: int) -> str:
    return ", ".join(str(f) if f is not None else f">{examples}" for f in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="real torchrun runs of each shape and of its fix")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--examples", type=int, default=200, help="the search's budget per seed")
    parser.add_argument("--carriers", default="greenlet,process")
    parser.add_argument("--only", default="", help="the shapes whose naive scenario's name contains this")
    add_record_flag(parser)
    args = parser.parse_args()
    carriers = args.carriers.split(",")
    out = tempfile.mkdtemp(prefix="simfs-reach-")
    rows: list[list[Any]] = []
    data: list[dict[str, Any]] = []
    misses: list[str] = []
    try:
        for shape in [s for s in SHAPES if args.only in s.naive]:
            start = time.perf_counter()
            naive_runs = torchrun_hits(shape.naive, args.runs, out)
            fixed_runs = torchrun_hits(shape.fixed, args.runs, out)
            hits, fixed_hits = naive_runs.hits, fixed_runs.hits
            for which, launched in ((shape.naive, naive_runs), (shape.fixed, fixed_runs)):
                if launched.broken:
                    misses.append(f"{which}: {len(launched.broken)} torchrun runs broke without the job's error "
                                  f"(first: {launched.broken[0]})")
            seeds = range(args.seeds)
            before = [first_failure(shape.naive, s, args.examples, "greenlet", True) for s in seeds]
            after = {c: [first_failure(shape.naive, s, args.examples, c, False) for s in seeds] for c in carriers}
            fixed = {c: [first_failure(shape.fixed, s, args.examples, c, False) for s in seeds] for c in carriers}
            rate = hits / args.runs
            worst = [max((f or args.examples + 1) for f in found) for found in after.values()]
            budget = FAST if rate >= OFTEN else args.examples
            if any(w > budget for w in worst):
                misses.append(f"{shape.naive}: found at {after} (budget {budget}, torchrun {hits}/{args.runs})")
            if any(f is not None for found in fixed.values() for f in found) or fixed_hits:
                misses.append(f"{shape.fixed}: the fix failed (torchrun {fixed_hits}/{args.runs}, search {fixed})")
            rows.append([shape.what, f"{hits}/{args.runs}", _cell(before, args.examples),
                         *(_cell(after[c], args.examples) for c in carriers), f"{fixed_hits}/{args.runs}",
                         "none" if all(f is None for found in fixed.values() for f in found) else str(fixed)])
            data.append({"shape": shape.what, "naive": shape.naive, "fixed": shape.fixed, "torchrun_hits": hits,
                         "runs": args.runs, "torchrun_errors": naive_runs.errors[:3],
                         "torchrun_broken": naive_runs.broken + fixed_runs.broken, "before_lockstep": before,
                         "after": after, "fixed_torchrun_hits": fixed_hits, "fixed_search": fixed,
                         "seconds": round(time.perf_counter() - start, 1)})
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    headers = ["shape (naive / fixed)", f"torchrun: runs that hit ({RANKS} processes)",
               "explore before (lockstep, no drift; greenlet): first failing example per seed",
               *(f"explore now ({c}): first failing example per seed" for c in carriers),
               "fixed: torchrun runs that hit", "fixed: search failures"]
    verdict = "every target met" if not misses else "targets missed:\n" + "\n".join(f"- {m}" for m in misses)
    markdown = (f"### Reach: real torchrun against the default search\n\n{table(headers, rows)}\n\n"
                f"Real runs: gloo over loopback, {RANKS} processes, on {filesystem(tempfile.gettempdir())}. "
                f"Searches: `scenarios.explore` defaults on `{PROFILE}`, {TOPOLOGY[0]} node x {TOPOLOGY[1]} ranks, "
                f"seeds 0-{args.seeds - 1}, {args.examples} examples, shrinking off. {verdict}")
    print(markdown)
    write_report("reach", " ".join(["python", "benchmarks/reach.py", *sys.argv[1:]]), markdown,
                 {"shapes": data, "misses": misses}, record=args.record)


if __name__ == "__main__":
    main()
