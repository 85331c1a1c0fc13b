"""coord benchmark: makedirs_once and FileLock latency, sync_files throughput (1 GiB in a few
files, 10k small files) and bytes sent by an incremental sync, over 2 real gloo ranks.

  python benchmarks/coord_bench.py [--repeats 3] [--scratch DIR] [--record]

The two ranks are two torchrun "nodes" of one process each on this machine, so each has its
own node-local destination; the shared directory and the sources are on the local disk."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_record_flag, table, write_report

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coord_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(scratch: str) -> dict[str, float]:
    """Two torchrun nodes of one rank each; returns rank 0's measurements."""
    out = os.path.join(scratch, "result.json")
    port = free_port()
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
               WORKER, scratch, out]
        procs.append(subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    codes = [p.wait(timeout=1800) for p in procs]
    if any(codes):
        raise RuntimeError(f"benchmark ranks failed with exit codes {codes}")
    with open(out) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scratch", default=None, help="directory for the data (default: a temp dir)")
    add_record_flag(parser)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
            runs.append(one_run(scratch))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    mib = 1 << 20
    rows = [
        ["makedirs_once latency, 2 ranks (ms)", f"{med['makedirs_once_s'] * 1e3:.2f}",
         f"rank 0 makedirs + barrier: {med['makedirs_plain_s'] * 1e3:.2f}"],
        ["FileLock acquire+release, uncontended (ms)", f"{med['filelock_uncontended_s'] * 1e3:.2f}",
         f"fcntl.flock: {med['flock_uncontended_s'] * 1e3:.3f}"],
        ["FileLock acquire+release, 2 ranks contending (ms per acquire)",
         f"{med['filelock_contended_per_acquire_s'] * 1e3:.1f}", ""],
        ["sync_files, 1 GiB in 4 files (MB/s)", f"{med['big_total_bytes'] / med['sync_big_s'] / mib:.0f}",
         f"raw local copy: {med['big_total_bytes'] / med['raw_copy_big_s'] / mib:.0f}"],
        ["sync_files, 10k files of 4 KiB (files/s)", f"{10_000 / med['sync_small_s']:.0f}",
         f"raw local copy: {10_000 / med['raw_copy_small_s']:.0f}"],
        ["sync_files again, nothing changed (bytes sent / s)",
         f"{med['noop_bytes_sent']:.0f} / {med['sync_small_noop_s']:.2f}", ""],
        ["incremental sync after changing 1% of 10k files (bytes sent)",
         f"{med['incremental_bytes_sent']:.0f} ({med['incremental_files_sent']:.0f} files)",
         f"of {med['small_total_bytes']:.0f} ({100 * med['incremental_bytes_sent'] / med['small_total_bytes']:.1f}%)"],
    ]
    markdown = (f"## coord\n\nMedians of {args.repeats} runs; 2 gloo ranks as 2 torchrun nodes on one machine, "
                "local disk.\n\n" + table(["what", "measured", "alongside"], rows))
    print(markdown)
    write_report("coord_bench", f"python benchmarks/coord_bench.py --repeats {args.repeats}", markdown,
                 {"runs": runs, "medians": med}, record=args.record)


if __name__ == "__main__":
    main()
