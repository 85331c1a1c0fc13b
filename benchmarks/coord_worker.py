"""One rank of the coord benchmark (launched by coord_bench.py through torchrun).

argv: <scratch dir> <result json>. Rank 0 writes the measurements."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import statistics
import sys
import time

import torch.distributed as dist

import coord

REPEATS = int(os.environ.get("COORD_BENCH_REPEATS", "5"))
BIG_FILES, BIG_SIZE = 4, 256 << 20  # 1 GiB in a few files
SMALL_FILES, SMALL_SIZE = 10_000, 4096


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_time(fn, repeats: int = REPEATS) -> float:
    return statistics.median(timed(fn) for _ in range(repeats))


def make_tree(root: str, files: int, size: int) -> None:
    os.makedirs(root, exist_ok=True)
    block = os.urandom(min(size, 1 << 20))
    for i in range(files):
        sub = os.path.join(root, f"d{i // 1000:03d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i:06d}.bin"), "wb") as f:
            f.write(i.to_bytes(8, "little"))
            written = 8
            while written < size:
                chunk = block[:size - written]
                f.write(chunk)
                written += len(chunk)


def main() -> None:
    scratch, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    comm = coord.get_comm()
    results: dict[str, float] = {}
    shared = os.path.join(scratch, "shared")
    node_local = os.path.join(scratch, f"node{comm.node}")

    # makedirs_once vs. rank 0 makedirs + barrier
    counter = iter(range(10**6))
    results["makedirs_once_s"] = median_time(
        lambda: coord.makedirs_once(os.path.join(shared, "dirs", str(next(counter))), comm=comm), 20)

    def plain() -> None:
        path = os.path.join(shared, "plain", str(next(counter)))
        if comm.rank == 0:
            os.makedirs(path)
        comm.barrier()
    results["makedirs_plain_s"] = median_time(plain, 20)

    # FileLock: uncontended acquire + release, and under contention from every rank
    lock_path = os.path.join(shared, "lock")
    comm.barrier()
    if comm.rank == 0:
        lock = coord.FileLock(lock_path, renew=False)
        results["filelock_uncontended_s"] = median_time(lambda: (lock.acquire(), lock.release()), 50)
        with open(lock_path + ".flock", "w") as f:
            results["flock_uncontended_s"] = median_time(
                lambda: (fcntl.flock(f, fcntl.LOCK_EX), fcntl.flock(f, fcntl.LOCK_UN)), 50)
    comm.barrier()
    rounds = 20

    def contended() -> None:
        for _ in range(rounds):
            with coord.FileLock(lock_path + ".c", timeout=120, renew=False):
                pass
        comm.barrier()
    results["filelock_contended_per_acquire_s"] = timed(contended) / rounds

    # sync_files: 1 GiB in a few files, 10k small files, incremental after changing 1%
    src_big, src_small = os.path.join(scratch, "src", "big"), os.path.join(scratch, "src", "small")
    if comm.rank == 0:
        make_tree(src_big, BIG_FILES, BIG_SIZE)
        make_tree(src_small, SMALL_FILES, SMALL_SIZE)
        copy_to = os.path.join(scratch, "copy")
        results["raw_copy_big_s"] = timed(lambda: shutil.copytree(src_big, os.path.join(copy_to, "big")))
        results["raw_copy_small_s"] = timed(lambda: shutil.copytree(src_small, os.path.join(copy_to, "small")))
        shutil.rmtree(copy_to)
    comm.barrier()
    dest = os.path.join(node_local, "dst")
    report = {}

    def sync(source: str, key: str) -> None:
        report[key] = coord.sync_files(source, dest, comm=comm)
    results["sync_big_s"] = timed(lambda: sync(src_big, "big"))
    results["sync_small_s"] = timed(lambda: sync(src_small, "small"))
    results["sync_small_noop_s"] = timed(lambda: sync(src_small, "noop"))
    if comm.rank == 0:
        changed = 0
        for top, _, names in sorted(os.walk(src_small)):
            for name in sorted(names)[::100]:
                with open(os.path.join(top, name), "r+b") as f:
                    f.write(b"changed!")
                changed += 1
        results["changed_files"] = changed
    comm.barrier()
    results["sync_incremental_s"] = timed(lambda: sync(src_small, "incremental"))
    for key, rep in report.items():
        results[f"{key}_bytes_sent"] = rep.bytes_sent
        results[f"{key}_files_sent"] = rep.sent
    results["small_total_bytes"] = SMALL_FILES * SMALL_SIZE
    results["big_total_bytes"] = BIG_FILES * BIG_SIZE
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
