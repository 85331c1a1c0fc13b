"""Carriers side by side: ranks as greenlets of one process ("greenlet": measured in this process,
isolate=False, as a search's confined child runs them) and ranks as forked, kernel-confined OS
processes ("process"), in one run.

  python benchmarks/carrier_bench.py [--repeats 5] [--record]

Measures, as medians of several runs: what starting a rank costs (an empty job on 8 ranks, per
rank), simulated operations per wall second with 8 ranks on 2 nodes, and examples per wall second
of the 8-rank makedirs search (the built-in makedirs-every-rank scenario on nfs, 2 nodes x 4 ranks,
where it passes: every example runs; searched in this process, as simfs run's workers do)."""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, median_of, table, timed, write_report
from scenarios import explore
from scenarios.registry import get

CARRIERS = ("greenlet", "process")
OPS = 4000  # simulated operations per rank per run (create, write, close, stat, list)
EXAMPLES = 30  # examples per makedirs search
TOPOLOGY = (2, 4)
MAKEDIRS = "makedirs-every-rank"  # passes on nfs (scenarios/library/makedirs.py)


def empty() -> None:
    """Nothing: the run's cost is starting and ending its ranks."""


def mixed_ops(n: int) -> int:
    """Create, write, close, stat and list: each rank its own files."""
    base = f"/shared/r{os.environ['RANK']}"
    os.makedirs(base, exist_ok=True)
    done = 0
    while done < n:
        path = f"{base}/f{done % 16}"
        with open(path, "w") as f:
            f.write("x")
        os.stat(path)
        os.listdir(base)
        done += 5  # makedirs-free loop: open, write, close, stat, listdir
    return done


def start_cost(carrier: str) -> float:
    """Milliseconds per rank of an empty 8-rank run (a fresh cluster each time)."""
    cluster = simfs.Cluster(*TOPOLOGY, carrier=carrier, isolate=False)
    cluster.run(empty)  # warm: the first process run imports torch for its ranks
    seconds, result = timed(lambda: cluster.run(empty))
    assert not result.errors, result.tracebacks
    return seconds * 1000 / (TOPOLOGY[0] * TOPOLOGY[1])


def ops_per_second(carrier: str) -> float:
    cluster = simfs.Cluster(*TOPOLOGY, carrier=carrier, isolate=False)
    seconds, result = timed(lambda: cluster.run(mixed_ops, OPS))
    assert not result.errors, result.tracebacks
    return result.ops / seconds


def makedirs_examples_per_second(carrier: str) -> float:
    scenario = get(MAKEDIRS)
    seconds, finding = timed(lambda: explore(scenario.job, nodes=TOPOLOGY[0], ranks_per_node=TOPOLOGY[1],
                                             profile="nfs", max_examples=EXAMPLES, isolate=False, carrier=carrier))
    assert not finding.failed, finding
    return finding.examples / seconds


MEASURES = (
    ("rank start, empty 8-rank run (ms per rank)", start_cost, "{:.2f}"),
    ("simulated ops per wall second, 8 ranks on 2 nodes (mixed)", ops_per_second, "{:,.0f}"),
    ("8-rank makedirs search, examples per wall second (nfs)", makedirs_examples_per_second, "{:.1f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_record_flag(parser)
    args = parser.parse_args()
    rows, data = [], {}
    for what, measure, shown in MEASURES:
        medians = {carrier: median_of(args.repeats, lambda c=carrier, m=measure: m(c))[0] for carrier in CARRIERS}
        ratio = medians["process"] / medians["greenlet"]
        rows.append([what, *(shown.format(medians[c]) for c in CARRIERS), f"{ratio:.2f}x"])
        data[what] = medians
    markdown = "## carriers\n\nMedians of " + str(args.repeats) + " runs each, both carriers in one process.\n\n" + \
        table(["what", "greenlet", "process", "process / greenlet"], rows)
    print(markdown)
    write_report("carriers", f"python benchmarks/carrier_bench.py --repeats {args.repeats}", markdown, data,
                 record=args.record)


if __name__ == "__main__":
    main()
