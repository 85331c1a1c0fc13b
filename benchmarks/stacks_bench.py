"""Unmodified torch.distributed jobs in simfs next to the same jobs under torchrun with gloo on this
machine, in one run (stacks_worker.py holds the jobs):

  python benchmarks/stacks_bench.py [--repeats 3] [--record]

- whole-process wall of the DDP job (an MLP, 20 steps), of the FSDP2 job, of transformers' Trainer
  (a one-layer GPT-2, 20 steps, checkpoints rotated) and of Lightning's Trainer (DDP on 2 nodes,
  ModelCheckpoint with top-k and last): ``python stacks_worker.py --simfs JOB`` (2 nodes x 2 rank
  processes, fresh interpreter, imports included, the stack preloaded) against ``torchrun
  --nproc-per-node 4 stacks_worker.py JOB`` (checkpoints in a temporary directory);
- one all-reduce of 1 MiB on 4 ranks: simfs's wall per call (a run of 50 minus a run of none, as
  measured from the host: time inside a rank is virtual) against gloo's over loopback TCP.
Medians of ``--repeats`` runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stacks_worker

import simfs
from common import add_record_flag, median_of, table, timed, write_report

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks_worker.py")
NPROC = 4


def _output(command: list[str], tries: int = 3) -> dict[str, float]:
    """The job's JSON line. A run that fails is tried again (up to ``tries`` in all), noted on
    stderr: torch's gloo now and then aborts a worker at exit ("terminate called without an
    active exception") after the job finished."""
    for attempt in range(1, tries + 1):
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
        if not done.returncode:
            result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
            return result
        print(f"run {attempt} of {' '.join(command)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}",
              file=sys.stderr)
    raise SystemExit(f"{' '.join(command)} failed {tries} times")


def torchrun(job: str, root: str = "") -> list[str]:
    """torchrun's command for ``job``; a stack's job writes its checkpoints under ``root``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC),
            "--master-port", "29517", WORKER, *(["--root", root] if root else []), job]


def _torchrun_seconds(job: str) -> float:
    """Wall seconds of ``job`` under torchrun; a stack's job writes into a temporary directory,
    removed after."""
    with tempfile.TemporaryDirectory(prefix="stacks-bench-") as root:
        seconds, _ = timed(lambda: _output(torchrun(job, root if job in stacks_worker.STACKS else "")))
    return seconds


def in_simfs(job: str) -> list[str]:
    return [sys.executable, WORKER, "--simfs", job]


def simfs_allreduce_seconds() -> float:
    """Wall seconds per 1 MiB all-reduce on 4 simulated ranks, from the host."""
    cluster = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False)
    count = stacks_worker.ALLREDUCES
    with_calls, run = timed(lambda: cluster.run(stacks_worker.allreduce, count))
    without, empty = timed(lambda: cluster.run(stacks_worker.allreduce, 0))
    assert run.ok and empty.ok, run.summary() + empty.summary()
    return (with_calls - without) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    add_record_flag(parser)
    args = parser.parse_args()
    rows, data = [], {}
    for job in ("ddp", "fsdp", *stacks_worker.STACKS):
        ours, _ = median_of(args.repeats, lambda job=job: timed(lambda: _output(in_simfs(job)))[0])
        theirs, _ = median_of(args.repeats, lambda job=job: _torchrun_seconds(job))
        rows.append([f"{job} job, whole process (s)", f"{ours:.2f}", f"{theirs:.2f}", f"{ours / theirs:.2f}x"])
        data[job] = {"simfs_s": ours, "torchrun_gloo_s": theirs}
    ours, _ = median_of(args.repeats, simfs_allreduce_seconds)
    theirs, _ = median_of(args.repeats, lambda: _output(torchrun("allreduce"))["seconds_each"])
    rows.append(["all-reduce of 1 MiB, 4 ranks (ms)", f"{ours * 1000:.2f}", f"{theirs * 1000:.2f}",
                 f"{ours / theirs:.2f}x"])
    data["allreduce_1mib"] = {"simfs_s": ours, "gloo_s": theirs}
    markdown = ("## torch.distributed jobs and trainers: simfs vs torchrun + gloo\n\n"
                f"Medians of {args.repeats}; simfs: 2 nodes x 2 rank processes (the trainers' libraries "
                f"preloaded), torchrun: --nproc-per-node {NPROC}, gloo over loopback.\n\n"
                + table(["measure", "simfs", "torchrun + gloo", "simfs / torchrun"], rows))
    print(markdown)
    write_report("stacks_bench", f"python benchmarks/stacks_bench.py --repeats {args.repeats}", markdown,
                 data, record=args.record)


if __name__ == "__main__":
    main()
