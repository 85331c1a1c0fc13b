"""Jobs for tests/test_conformance.py: together they make every kind of request a rank makes of
the simulated kernel (files, directories, locks, clocks, sleeps, threads, signals, collectives,
stores, a crash), each deterministic given the run's seed."""

from __future__ import annotations

import datetime
import fcntl
import os
import signal
import threading
import time
from typing import Any


def rank() -> int:
    return int(os.environ["RANK"])


def files() -> Any:
    """Create, write, append, read, seek, stat, rename, truncate, fsync, unlink."""
    me = rank()
    path = f"/shared/f{me}"
    with open(path, "wb") as f:
        f.write(b"a" * 1000)
        f.flush()
        os.fsync(f.fileno())
    with open(path, "ab") as f:
        f.write(b"b" * 10)
    with open(path, "r+b") as f:
        f.seek(995)
        tail = f.read()
        f.truncate(500)
    os.rename(path, f"{path}.done")
    fd = os.open(f"{path}.done", os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.close(fd)
    os.unlink(f"{path}.done")
    return tail, size, os.path.exists(path)


def directories() -> Any:
    """makedirs on a shared path from every rank, listings, rmdir, a symlink."""
    me = rank()
    os.makedirs("/shared/run/ckpt", exist_ok=True)
    os.mkdir(f"/shared/run/ckpt/r{me}")
    os.symlink(f"/shared/run/ckpt/r{me}", f"/shared/run/link{me}")
    time.sleep(5)
    seen = sorted(os.listdir("/shared/run/ckpt"))
    entries = sorted((e.name, e.is_dir()) for e in os.scandir("/shared/run"))
    os.rmdir(f"/shared/run/ckpt/r{me}")
    return seen, entries, os.readlink(f"/shared/run/link{me}")


def locks() -> Any:
    """flock and lockf on one shared file: the holders, in the order they got it."""
    order = []
    with open("/shared/lockfile", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        order.append(("flock", rank(), time.time()))
        time.sleep(1)
        fcntl.flock(f, fcntl.LOCK_UN)
    with open("/shared/lockfile", "a") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        with open("/shared/log", "a") as log:
            log.write(f"{rank()}\n")
        time.sleep(0.5)
        fcntl.lockf(f, fcntl.LOCK_UN)
    return order


def clocks_and_sleeps() -> Any:
    """Every clock, across sleeps of several kinds."""
    start = (time.time(), time.monotonic(), time.perf_counter(), datetime.datetime.now().timestamp())
    time.sleep(1.5 * (rank() + 1))
    event = threading.Event()
    event.wait(timeout=2.0)
    end = (time.time(), time.monotonic(), time.perf_counter(), time.time_ns())
    return [round(b - a, 6) for a, b in zip(start[:3], end[:3])], end[3] // 10**6 - int(start[0] * 1000)


def threads() -> Any:
    """Threads that sleep, share a lock and a condition, and are joined."""
    lock = threading.Lock()
    done: list[int] = []
    cond = threading.Condition()

    def work(i: int) -> None:
        time.sleep(0.1 * (3 - i))
        with lock:
            done.append(i)
        with cond:
            cond.notify_all()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in workers:
        t.start()
    with cond:
        cond.wait_for(lambda: len(done) == 3, timeout=10)
    for t in workers:
        t.join()
    return done


def signals() -> Any:
    """Rank 1 handles SIGUSR1 sent by rank 0; rank 0 also sends itself SIGUSR2 (ignored)."""
    got: list[int] = []
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if rank() == 1:
        signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
        time.sleep(2)
        return got
    time.sleep(0.5)
    os.kill(os.getpid() + 1, signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGUSR2)
    return "sent"


def collectives() -> Any:
    """Barrier, all-reduce, broadcast of objects, all-gather, a subgroup."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    me = dist.get_rank()
    dist.barrier()
    summed = torch.tensor([float(me), 1.0])
    dist.all_reduce(summed)
    config = [{"step": 3}] if me == 0 else [None]
    dist.broadcast_object_list(config, src=0)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, me * 10)
    pair = dist.new_group([0, 1])
    ones = torch.ones(2) * me
    if me in (0, 1):
        dist.all_reduce(ones, group=pair)
    dist.destroy_process_group()
    return summed.tolist(), config, gathered, ones.tolist()


def stores() -> Any:
    """torch's TCPStore: set, get, add and wait between ranks (served by rank 0's node)."""
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"]),
                          rank() == 0, timeout=timedelta(seconds=30))
    store.set(f"k{rank()}", str(rank()))
    total = store.add("count", 1)
    store.wait([f"k{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
    values = sorted(store.get(f"k{r}").decode() for r in range(int(os.environ["WORLD_SIZE"])))
    with open(f"/shared/s{rank()}", "w") as f:  # what it learned, where the trace shows it
        f.write(",".join(values))
    return total > 0, values


def crash() -> Any:
    """Node 1 crashes (the test's fault) while its rank writes; node 0's rank keeps going."""
    for i in range(20):
        with open(f"/shared/n{rank()}-{i}", "w") as f:
            f.write("x" * 100)
        time.sleep(0.5)
    return sorted(os.listdir("/shared"))[:3]


def exits() -> Any:
    """The ways a rank ends: a clean sys.exit, os._exit with a code, an exception, a return."""
    import sys

    me = rank()
    with open(f"/shared/e{me}", "w") as f:
        f.write("x")
    time.sleep(0.1 * me)
    if me == 0:
        sys.exit(0)
    if me == 1:
        os._exit(3)
    if me == 2:
        raise ValueError(f"rank {me} gives up")
    return sorted(os.listdir("/shared"))
