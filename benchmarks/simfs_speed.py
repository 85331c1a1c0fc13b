"""simfs speed: the simfs rows of the performance table in DESIGN.md.

  python benchmarks/simfs_speed.py [--repeats 5] [--record]

Measures, as medians of several runs: simulated filesystem operations per wall second (one
core), the 1024-rank job and how its time grows when ranks double, virtual/wall time in a
lag-dominated job, and sequential write throughput; real local-disk figures alongside. The peak
memory of a rewrite is rewrite_rss.py's."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import simfs
from common import add_record_flag, median_of, table, timed, write_report

STAT_OPS = 40_000
# the simulation engine's own speed, on greenlet ranks (its targets are theirs); carrier_bench.py
# compares the carriers side by side
CARRIER = "greenlet"
WRITE_MB = 256


def stat_loop(n: int) -> int:
    """Metadata operations on a warm cache (the simulator's per-operation overhead)."""
    if dist.get_rank() == 0:
        os.makedirs("/shared/d", exist_ok=True)
    dist.barrier()
    for _ in range(n):
        os.stat("/shared/d")
    return n


def mixed_ops(n: int) -> int:
    """Create, write, close, stat and list: each rank its own files."""
    rank = dist.get_rank()
    base = f"/shared/r{rank}"
    os.mkdir(base)
    for i in range(n):
        path = f"{base}/f{i % 16}"
        with open(path, "wb") as f:
            f.write(b"x" * 64)
        os.stat(path)
        if i % 16 == 0:
            os.listdir(base)
    return n


def fan_in() -> int | None:
    """DESIGN.md's scaling job: mkdir by rank 0, barrier, each rank writes a file, barrier, list."""
    rank = dist.get_rank()
    if rank == 0:
        os.makedirs("/shared/out")
    dist.barrier()
    with open(f"/shared/out/part-{rank}", "w") as f:
        f.write(str(rank))
    dist.barrier()
    return len(os.listdir("/shared/out")) if rank == 0 else None


def lagged_wait() -> float:
    """OLMo-style: rank 0 makes a directory; the others poll for it every second, and on NFS
    they see it only when their cached 'not found' expires (up to a minute)."""
    path = "/shared/ckpt/step100"
    if dist.get_rank() != 0:
        os.path.exists(path)  # caches a negative entry on other nodes
    dist.barrier()
    if dist.get_rank() == 0:
        os.makedirs(path)
    import time

    start = time.monotonic()
    while not os.path.exists(path):
        time.sleep(1.0)
    return time.monotonic() - start


def sequential_write(mb: int) -> int:
    chunk = b"\xab" * (1 << 20)
    with open("/shared/big.bin", "wb") as f:
        for _ in range(mb):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return mb


def empty_job() -> None:
    """Nothing: what a run costs by itself (the search runs thousands)."""


def barrier_job() -> None:
    dist.barrier()


# Run in a fresh interpreter: stat ops/s without the audit-hook backstop.
_NO_BACKSTOP = """
import os, time, simfs, simfs.rank.intercept.audit as audit
audit.install = lambda: None  # as simfs was before the audit hook
def job(n):
    os.makedirs("/shared/d", exist_ok=True)
    for _ in range(n):
        os.stat("/shared/d")
simfs.Cluster(carrier="greenlet", isolate=False).run(job, 10)
start = time.perf_counter()
result = simfs.Cluster(carrier="greenlet", isolate=False).run(job, {n})
print(result.ops / (time.perf_counter() - start))
"""


def in_fresh_python(code: str) -> float:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def sim_run(job, *args, nodes=1, rpn=1, profile="nfs", seed=0):
    cluster = simfs.Cluster(nodes=nodes, ranks_per_node=rpn, profile=profile, seed=seed, carrier=CARRIER)
    result = cluster.run(job, *args)
    if not result.ok:
        raise RuntimeError(result.summary())
    return result


def real_stat_ops(n: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        seconds, _ = timed(lambda: [os.stat(d) for _ in range(n)])
    return n / seconds


def real_write_mb_s(mb: int) -> float:
    chunk = b"\xab" * (1 << 20)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as d:
        def write() -> None:
            with open(os.path.join(d, "big.bin"), "wb") as f:
                for _ in range(mb):
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
        seconds, _ = timed(write)
    return mb / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_record_flag(parser)
    args = parser.parse_args()
    sim_run(stat_loop, 10)  # warm up: installs the interception once
    rows, data = [], {}

    def ops_per_s(job, n, nodes, rpn) -> float:
        seconds, result = timed(lambda: sim_run(job, n, nodes=nodes, rpn=rpn))
        return result.ops / seconds

    one, samples1 = median_of(args.repeats, lambda: ops_per_s(stat_loop, STAT_OPS, 1, 1))
    eight, samples8 = median_of(args.repeats, lambda: ops_per_s(mixed_ops, 400, 2, 4))
    real, _ = median_of(args.repeats, lambda: real_stat_ops(STAT_OPS))
    before, before_samples = median_of(args.repeats, lambda: in_fresh_python(_NO_BACKSTOP.format(n=STAT_OPS)))
    rows.append(["simulated stat per wall second, 1 rank (warm cache)", f"{one:,.0f}", ">= 100,000",
                 f"real os.stat: {real:,.0f}/s ({one / real:.2f}x); without the audit hook: {before:,.0f}/s"])
    rows.append(["simulated ops per wall second, 8 ranks on 2 nodes (mixed)", f"{eight:,.0f}", ">= 50,000", ""])
    data["ops_per_s"] = {"one_rank": samples1, "eight_ranks": samples8, "real_stat": real,
                         "one_rank_without_audit_hook": before_samples}

    cluster = simfs.Cluster(nodes=2, ranks_per_node=4, carrier=CARRIER)
    empty, empty_samples = median_of(max(args.repeats, 50), lambda: timed(lambda: cluster.run(empty_job))[0])
    rows.append(["empty 8-rank run (ms)", f"{empty * 1e3:.2f}", "<= 5", ""])
    start, start_samples = median_of(args.repeats, lambda: timed(lambda: sim_run(barrier_job, nodes=128, rpn=8))[0])
    rows.append(["1024 ranks: start, one barrier, exit (wall s)", f"{start:.3f}", "< 0.3", ""])
    data["run_overhead_s"] = {"empty_8_ranks": empty_samples, "start_to_barrier_1024": start_samples}

    scaling = {}
    for ranks in (256, 512, 1024, 2048):
        seconds, _ = median_of(args.repeats,
                               lambda n=ranks // 8: timed(lambda: sim_run(fan_in, nodes=n, rpn=8))[0])
        scaling[ranks] = seconds
    rows.append(["1024 ranks: mkdir, barrier, write, barrier, list (wall s)", f"{scaling[1024]:.2f}", "< 10", ""])
    rows.append(["same job, 2048 / 1024 ranks (time ratio)", f"{scaling[2048] / scaling[1024]:.2f}x", "<= 2.2x",
                 f"512/256: {scaling[512] / scaling[256]:.2f}x"])
    data["fan_in_seconds"] = scaling

    def lag_ratio() -> float:
        seconds, result = timed(lambda: sim_run(lagged_wait, nodes=4, rpn=2))
        return result.virtual_time / seconds

    lag, lag_samples = median_of(args.repeats, lag_ratio)
    rows.append(["virtual / wall time, lag-dominated job (8 ranks polling NFS)", f"{lag:,.0f}x", ">= 1000x", ""])
    data["lag_ratio"] = lag_samples

    def write_mb_s(profile: str) -> float:
        seconds, _ = timed(lambda: sim_run(sequential_write, WRITE_MB, profile=profile))
        return WRITE_MB / seconds

    nfs, nfs_samples = median_of(args.repeats, lambda: write_mb_s("nfs"))
    local, local_samples = median_of(args.repeats, lambda: write_mb_s("local"))
    disk, _ = median_of(3, lambda: real_write_mb_s(WRITE_MB))
    rows.append([f"simulated sequential write, {WRITE_MB} MiB (MB/s), nfs", f"{nfs:,.0f}", ">= 200",
                 f"real disk + fsync: {disk:,.0f}"])
    rows.append([f"simulated sequential write, {WRITE_MB} MiB (MB/s), local", f"{local:,.0f}", ">= 200", ""])
    data["write_mb_s"] = {"nfs": nfs_samples, "local": local_samples, "real_disk": disk}

    markdown = f"## simfs speed\n\nMedians of {args.repeats} runs.\n\n" + table(
        ["what", "measured", "target", "context"], rows)
    print(markdown)
    write_report("simfs_speed", f"python benchmarks/simfs_speed.py --repeats {args.repeats}", markdown, data,
                 record=args.record)


if __name__ == "__main__":
    main()
