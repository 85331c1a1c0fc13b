"""checkpoint vs torch.distributed.checkpoint (DCP) vs a raw write: save and load wall time,
peak memory and resharded-load bytes, on 2 real gloo ranks, same state dict, same disk.

  python benchmarks/checkpoint_vs_dcp.py [--repeats 3] [--cases a,b,c] [--scratch DIR] [--record]

Cases: (a) 1 GiB in 64 float32 tensors (2048x2048, split by rows over the ranks); (b) 20k tensors
of 1 KiB (10k per rank); (c) a mix: 16 split tensors of 8 MiB, 16 replicated of 4 MiB, 500
replicated of 4 KiB, a scalar. Checksums are on (they always are). The scratch directory is a
temp dir under reports/runs/ (the repo's disk, not tmpfs); its filesystem is reported. Loads are
cold: each rank drops the files' cached pages (posix_fadvise) before loading. The GPU rows
(async_save's blocking time per GB of CUDA tensors) are checkpoint_gpu.py's, a section of their own:
a GPU machine is rarely the machine these rows are measured on."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import RUNS, add_record_flag, filesystem, table, write_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint_worker.py")
WORLD = 2
MIB = 1 << 20
CASES = {"a": "(a) 1 GiB in 64 tensors", "b": "(b) 20k tensors of 1 KiB", "c": "(c) replicated + sharded mix"}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(scratch: str, repeats: int, cases: list[str]) -> list[dict]:
    """Both ranks' results (one process each, started directly with torchrun's environment)."""
    out = os.path.join(scratch, "result.json")
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(WORLD),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, WORKER, scratch, out, str(repeats), ",".join(cases)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(WORLD)]
    codes = [p.wait(timeout=3600) for p in procs]
    if any(codes):
        raise RuntimeError(f"benchmark ranks failed with exit codes {codes}")
    with open(out) as f:
        return json.load(f)


def summarize(ranks: list[dict], case: str) -> dict:
    """Medians over repeats (times are rank 0's barrier-to-barrier), RSS the max over ranks."""
    first = ranks[0][case]
    med = {}
    for method, samples in first["samples"].items():
        for what in ("save_s", "load_s"):
            med[f"{method}_{what}"] = statistics.median(samples[what])
        for what in ("save_rss", "load_rss"):
            med[f"{method}_{what}"] = max(statistics.median(r[case]["samples"][method][what]) for r in ranks)
    med["bytes"] = sum(r[case]["raw_bytes"] for r in ranks)
    med["files_bytes"] = first["files_bytes"]
    return med


def rows_for(case: str, med: dict) -> list[list[str]]:
    gb = med["bytes"] / 1e9

    def cell(method: str, what: str) -> str:
        seconds = med[f"{method}_{what}_s"]
        return f"{seconds:.3f} s ({gb / seconds:.2f} GB/s)"

    rows = []
    for what in ("save", "load"):
        rows.append([f"{CASES[case]}: {what}", cell("ours", what), cell("dcp", what), cell("raw", what),
                     f"{med[f'dcp_{what}_s'] / med[f'ours_{what}_s']:.2f}x",
                     f"{med[f'raw_{what}_s'] / med[f'ours_{what}_s']:.0%}",
                     f"{med[f'ours_{what}_rss'] / MIB:.0f} / {med[f'dcp_{what}_rss'] / MIB:.0f}"])
    return rows


def reshard_rows(reshard: dict) -> list[list[str]]:
    rows = []
    for fmt, label in (("ours", "checkpoint"), ("dcp", "DCP format (whole chunks)")):
        for layout, what in (("columns", "rows split -> columns split, 2 ranks"), ("whole", "2 ranks -> 1 process")):
            stats = reshard[f"{fmt}_{layout}"]
            read, needed = sum(s["bytes_read"] for s in stats), sum(s["bytes_needed"] for s in stats)
            rows.append([f"(a) {what}: {label}", f"{read / MIB:.0f} MiB", f"{needed / MIB:.0f} MiB",
                         f"{read / needed:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="a,b,c", help="comma-separated subset of a,b,c")
    parser.add_argument("--scratch", default=None, help="directory for the checkpoints (default: under reports/runs/)")
    add_record_flag(parser)
    args = parser.parse_args()
    cases = args.cases.split(",")
    os.makedirs(RUNS, exist_ok=True)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="checkpoint_vs_dcp-", dir=args.scratch or RUNS) as scratch:
        where = filesystem(scratch)
        ranks = run(scratch, args.repeats, cases)
    load_end = os.getloadavg()[0]
    medians = {case: summarize(ranks, case) for case in cases}
    rows = [row for case in cases for row in rows_for(case, medians[case])]
    markdown = (f"## checkpoint vs torch.distributed.checkpoint\n\nMedians of {args.repeats} repeats; 2 gloo ranks "
                f"(one process each, OMP_NUM_THREADS=1); disk: {where}; saves fsync, loads are cold (pages dropped). "
                "Times are barrier to barrier; GB/s counts the payload once. Checksums on. Raw: each rank writes "
                "its share (its shards, every other replica) to one file from one thread, then fsyncs (dd-like); "
                "checkpoint writes up to 4 files per rank from threads, hence over 100% of it. Raw loads read "
                "only that share, while both libraries load every replica on every rank. Load average "
                f"{load_start:.1f} when it started, {load_end:.1f} when it ended, on {os.cpu_count()} cores: other "
                "work on the machine moves these times by tens of percent between runs.\n\n"
                + table(["what", "checkpoint", "DCP", "raw write/read", "vs DCP", "% of raw bandwidth",
                         "peak extra RSS/rank MiB (ours / DCP)"], rows))
    if "a" in cases:
        reshard = ranks[0]["a"]["reshard"]
        markdown += ("\n\nResharded loads of (a) (bit-exact: " + str(reshard["bit_exact"]) + "); read = whole "
                     "checksummed tiles for checkpoint, whole chunks for DCP's format:\n\n"
                     + table(["load", "read", "needed", "read / needed"], reshard_rows(reshard))
                     + "\n\nEach rank's 1024 x 2048 float32 chunk is stored as 512 x 512 tiles (1 MiB, each with "
                     "its own checksum), so a load by columns reads and verifies only the tiles of its half of "
                     "the columns; DCP's format must read whole chunks.")
    print(markdown)
    command = f"python benchmarks/checkpoint_vs_dcp.py --repeats {args.repeats}" + (
        f" --cases {args.cases}" if args.cases != "a,b,c" else "")
    write_report("checkpoint_vs_dcp", command, markdown, {"filesystem": where, "medians": medians, "ranks": ranks},
                 record=args.record)


if __name__ == "__main__":
    main()
