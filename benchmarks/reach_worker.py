"""One rank of a real torchrun for benchmarks/reach.py: the drift family's scenario job, unmodified,
on gloo over loopback, in a directory of this machine's disk.

  python -m torch.distributed.run --standalone --nproc_per_node 4 benchmarks/reach_worker.py FUNCTION DIR

(FUNCTION: the job's name in scenarios/library/drift.py, which alone is imported: the library's
other modules import training stacks no rank here needs.)

Exits 0 when the job returned on this rank, 1 when it raised (torchrun then stops the others and
exits non-zero: the run hit the race)."""

from __future__ import annotations

import datetime
import os
import sys

import torch.distributed as dist

from scenarios.library import drift


def main() -> int:
    name, directory = sys.argv[1], sys.argv[2]
    job = getattr(drift, name)
    os.chdir(directory)  # the jobs' paths are relative, as under simfs (the shared mount is the cwd)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        job()
    except Exception as exc:  # noqa: BLE001 - the job's failure is what the run measures
        print(f"rank {dist.get_rank()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
