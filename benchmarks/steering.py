"""Coverage steering: examples to the first failure of harder bugs, with and without it.

  python benchmarks/steering.py [--seeds 10] [--examples 300] [--record]

``scenarios.explore(steer=True)`` reports each example's rarity score (each kind of event it
reached counts 1 / (1 + the examples before it that reached it), scenarios/coverage.py) to
Hypothesis's target phase, which then mutates the rarest examples. Each bug below is held out of
the scenario library and needs more than one unlikely draw at once; each is searched from seeds
0..N-1 with a budget of ``--examples`` (shrinking off, greenlet ranks in this process), with and
without steering. A search that does not fail within its budget counts as the budget plus one.

- three-stale-clients: 4 NFS clients looked a name up and cached "not found"; rank 0 creates it,
  and 50 s after a barrier the job fails only if all three other clients still answer from that
  cache at once (each client's lifetime drawn within acdirmin..acdirmax, 30-60 s);
- late-rank-and-stale: rank 0 publishes parts, then a readiness marker, 2 s in; rank 3 checks at
  once and fails only if it starts late (after the publish) on a node that cached the marker's
  absence;
- crash-after-the-rare-truncate: rank 0 appends 30 fsynced log records around one in-place
  rewrite of a manifest (open with O_TRUNC, then write); only a crash between the two (one
  operation among ~100) leaves the restarted job an empty manifest."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_record_flag, table, write_report
from scenarios import explore

NAME = "/shared/ready"
LOG = "/shared/log"
MANIFEST = "/shared/manifest"


def three_stale_clients() -> None:
    """4 nodes x 1 rank on nfs: fails only when nodes 1-3 all answer the lookup from a stale cache."""
    os.path.exists(NAME)  # every client caches "not found"
    dist.barrier()
    if dist.get_rank() == 0:
        with open(NAME, "w") as f:
            f.write("ready")
    dist.barrier()
    time.sleep(50.0)  # most clients' cached "not found" (acdirmin..acdirmax: 30-60 s) has expired
    seen = [False] * dist.get_world_size()
    dist.all_gather_object(seen, os.path.exists(NAME))
    if not any(seen[1:]):
        raise RuntimeError(f"no other client sees {NAME} after the barrier: {seen}")


def late_rank_and_stale() -> None:
    """2 nodes x 2 ranks on nfs: rank 3 reads a marker without a barrier; only a late start of it
    (after the publish) on a node that cached the marker's absence fails."""
    rank = dist.get_rank()
    if rank == 2:
        os.path.exists(NAME)  # node 1 caches "not found" before the publish
    if rank == 0:
        time.sleep(2.0)
        for i in range(3):
            with open(f"/shared/part-{i}", "w") as f:
                f.write("x")
        with open(NAME, "w") as f:
            f.write("ready")
    # rank 3 at once: before the publish, unless it starts late
    if rank == 3 and os.path.exists("/shared/part-0") and not os.path.exists(NAME):
        raise RuntimeError("rank 3 saw the parts but not the marker written after them")
    dist.barrier()


def crash_after_the_rare_truncate() -> None:
    """2 nodes x 1 rank on local: rank 0's log of fsynced appends around one in-place rewrite."""
    if dist.get_rank() == 0:
        with open(MANIFEST, "w") as f:
            f.write("v1")
            f.flush()
            os.fsync(f.fileno())
        for i in range(30):
            _append(i)
            if i == 15:
                with open(MANIFEST, "w") as f:  # truncated here...
                    f.write("v2")  # ...and written here; a crash in between leaves it empty
                    f.flush()
                    os.fsync(f.fileno())
    dist.barrier()


def _append(i: int) -> None:
    with open(LOG, "a") as f:
        f.write(f"record {i}\n")
        f.flush()
        os.fsync(f.fileno())


def manifest_is_whole() -> None:
    """The restarted job: the manifest holds one of its versions."""
    if dist.get_rank() == 0 and os.path.exists(MANIFEST):
        with open(MANIFEST) as f:
            text = f.read()
        if text not in ("v1", "v2"):
            raise RuntimeError(f"the manifest holds {text!r}")


@dataclass(frozen=True)
class Bug:
    name: str
    job: Callable[[], Any]
    nodes: int
    ranks_per_node: int
    profile: str
    recover: Callable[[], Any] | None = None


BUGS = (Bug("three-stale-clients", three_stale_clients, 4, 1, "nfs"),
        Bug("late-rank-and-stale", late_rank_and_stale, 2, 2, "nfs"),
        Bug("crash-after-the-rare-truncate", crash_after_the_rare_truncate, 2, 1, "local",
            recover=manifest_is_whole))


def examples_to_failure(bug: Bug, seed: int, budget: int, steer: bool) -> int:
    """The example that first failed, or ``budget + 1`` when none did."""
    finding = explore(bug.job, recover=bug.recover, crashes=bug.recover is not None, nodes=bug.nodes,
                      ranks_per_node=bug.ranks_per_node, profile=bug.profile, max_examples=budget, seed=seed,
                      shrink_time=0.0, steer=steer, carrier="greenlet", isolate=False, database=None)
    return finding.found_at if finding.failed else budget + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--examples", type=int, default=300)
    add_record_flag(parser)
    args = parser.parse_args()
    rows: list[list[str]] = []
    data: dict[str, dict[str, list[int]]] = {}
    for bug in BUGS:
        counts = {}
        for steer in (False, True):
            counts[steer] = [examples_to_failure(bug, seed, args.examples, steer) for seed in range(args.seeds)]
            data.setdefault(bug.name, {})["steered" if steer else "plain"] = counts[steer]
        row = [bug.name]
        for steer in (False, True):
            found = [n for n in counts[steer] if n <= args.examples]
            row += [f"{len(found)} of {args.seeds}", f"{statistics.median(counts[steer]):g}"]
        rows.append(row)
        print(" | ".join(row), flush=True)
    headers = ["bug", "found, plain", "median examples, plain", "found, steered", "median examples, steered"]
    markdown = ("## coverage steering: examples to the first failure\n\n"
                f"Each held-out bug searched from seeds 0..{args.seeds - 1}, budget {args.examples} examples, "
                "shrinking off, greenlet ranks; a search that never failed counts as the budget plus one. "
                "Steered: `explore(steer=True)`, each example's rarity score given to Hypothesis's target "
                "phase.\n\n" + table(headers, rows))
    print(markdown)
    command = "python benchmarks/steering.py" + (f" --seeds {args.seeds}" if args.seeds != 10 else "") + (
        f" --examples {args.examples}" if args.examples != 300 else "")
    write_report("steering", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
