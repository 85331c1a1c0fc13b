"""Jobs for tests/test_process_carrier.py, run by a host in a subprocess: each tries something a
greenlet rank could do to the host, or checks what a rank process owns."""

from __future__ import annotations

import ctypes
import datetime
import errno
import gc
import json
import mmap
import os
import random
import socket
import struct
import sys
import time
import weakref
from typing import Any

CANARY = os.environ.get("SIMFS_TEST_CANARY", "/nonexistent/canary")
PORT = int(os.environ.get("SIMFS_TEST_PORT", "0"))


def rank() -> int:
    return int(os.environ["RANK"])


def segfault() -> str:
    if rank() == 1:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    time.sleep(1)
    return "survived"


def abort() -> str:
    if rank() == 0:
        ctypes.CDLL(None).abort()
    return "survived"


def native_write() -> str:
    """SQLite opens an attached database in C, past every Python-level hook."""
    import sqlite3

    try:
        sqlite3.connect(":memory:").execute(f"ATTACH DATABASE '{CANARY}.db' AS escaped").execute(
            "CREATE TABLE escaped.t (x)")
    except sqlite3.Error as exc:
        return str(exc)
    return "attached"


def escape_attempts() -> dict[str, Any]:
    """Reach the real machine past simfs's Python-level routing: libc through ctypes, a raw
    socket through libc, and torch's C++ archive writer to a real path."""
    libc = ctypes.CDLL(None, use_errno=True)
    out: dict[str, Any] = {}
    fd = libc.open(CANARY.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    out["libc_open"] = (fd, ctypes.get_errno())
    sock = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    out["libc_socket"] = (sock, ctypes.get_errno())
    import sqlite3

    import torch

    try:  # SQLite opens the attached file in C, past every Python-level hook
        sqlite3.connect(":memory:").execute(f"ATTACH DATABASE '{CANARY}.db' AS escaped").execute(
            "CREATE TABLE escaped.t (x)")
        out["sqlite_attach"] = "attached"
    except sqlite3.Error as exc:
        out["sqlite_attach"] = str(exc)
    os.makedirs(os.path.dirname(CANARY), exist_ok=True)  # on the simulated machine
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), CANARY + ".pt")
    out["jit_saved_in_simulation"] = os.path.exists(CANARY + ".pt")
    try:
        import socket

        socket.create_connection(("127.0.0.1", PORT), timeout=1)
        out["tcp"] = "connected"
    except BaseException as exc:  # noqa: BLE001 - what happened is the result
        out["tcp"] = type(exc).__name__
    return out


def leave_things_behind() -> str:
    """What a rank leaves in its interpreter: a patched stdlib function, a planted module, a gc
    callback, a finalizer, an atexit handler and a daemon thread that would write the canary."""
    def write_canary(*args: Any) -> None:
        with open(CANARY, "w") as f:
            f.write("escaped")

    os.path.join = lambda *parts: "/patched"  # type: ignore[assignment]
    sys.modules["json"] = None  # type: ignore[assignment]
    gc.callbacks.append(write_canary)

    class Holder:
        pass

    holder = Holder()
    weakref.finalize(holder, write_canary)
    sys.modules["_simfs_test_holder"] = holder  # type: ignore[assignment]
    import atexit
    import threading

    atexit.register(write_canary)
    threading.Thread(target=lambda: (time.sleep(3600), write_canary()), daemon=True).start()
    return "left"


def generators() -> tuple[float, float, float]:
    import numpy as np
    import torch

    if rank() == 0 and os.environ.get("SEED_RANK0") == "1":
        torch.manual_seed(123)
        np.random.seed(5)
        random.seed(7)
    time.sleep(1)  # rank 0 seeds before rank 1 draws
    return torch.rand(1).item(), float(np.random.rand()), random.random()


def clocks() -> dict[str, float]:
    time.sleep(5)
    return {
        "time": time.time(), "monotonic": time.monotonic(), "perf_counter": time.perf_counter(),
        "realtime": time.clock_gettime(time.CLOCK_REALTIME), "boottime": time.clock_gettime(time.CLOCK_BOOTTIME),
        "now": datetime.datetime.now(datetime.timezone.utc).timestamp(), "process_time": time.process_time(),
    }


def gil_loop() -> str:
    if rank() == 0:
        while True:  # never calls anything simfs sees, never releases the GIL for long
            pass
    return "done"


def swallowing_loop() -> str:
    """Swallows every exception raised into it (Ctrl-C, simfs's OutsideSimulation)."""
    if rank() == 0:
        while True:
            try:
                sum(range(1000))
            except BaseException:  # noqa: BLE001 - the point: it swallows everything
                continue
    return "done"


def zero_time_spin() -> str:
    """Rank 0 asks the host, over and over, a question that takes no virtual time."""
    if rank() == 0:
        while True:
            os.kill(os.getpid(), 0)
    return "done"


def forged_notes(count: int, path: int, outcome: int) -> int:
    """The rank sends the host ``count`` trace notes of the sizes given, as its client would."""
    from simfs.port import schema
    from simfs.tasks.task import current_task

    ask = current_task().context.sys._ask
    for _ in range(count):
        ask(schema.Note("sleep", "/" + "p" * path, "x" * outcome))
    return count


def real_descriptors() -> list[str]:
    """What the rank process's real descriptors name, read through libc (readlink(2) of /proc/self/fd)."""
    libc = ctypes.CDLL(None)
    buffer = ctypes.create_string_buffer(4096)
    named = []
    for fd in range(1024):
        length = libc.readlink(f"/proc/self/fd/{fd}".encode(), buffer, len(buffer))
        if length > 0:
            named.append(buffer.raw[:length].decode(errors="replace"))
    return named


IOPRIO_SET, IOPRIO_GET = 251, 252  # x86_64 (arch/x86/entry/syscalls/syscall_64.tbl)
IDLE = 3 << 13  # IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT (include/uapi/linux/ioprio.h)


def renice_the_group() -> list[int]:
    """Through libc, lowers the priority and idles the I/O of the rank's process group and user."""
    libc = ctypes.CDLL(None, use_errno=True)
    return [libc.setpriority(1, 0, 19), libc.setpriority(2, 0, 19),  # PRIO_PGRP, PRIO_USER
            libc.syscall(IOPRIO_SET, 2, 0, IDLE), libc.syscall(IOPRIO_SET, 3, 0, IDLE)]  # IOPRIO_WHO_PGRP, _USER


def reach_unix_sockets(path: str) -> list[int]:
    """Through libc: a datagram socket pair's socket sends to and connects to the real Unix socket
    at ``path``, binds an abstract name, and an inotify instance is made (each -1 when refused)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pair = (ctypes.c_int * 2)()
    assert libc.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM, 0, pair) == 0
    named = struct.pack("H", socket.AF_UNIX) + path.encode() + b"\0"
    abstract = struct.pack("H", socket.AF_UNIX) + b"\0simfs-test-abstract-name"
    return [libc.sendto(pair[0], b"escaped", 7, 0, named, len(named)), libc.connect(pair[0], named, len(named)),
            libc.bind(pair[1], abstract, len(abstract)), libc.inotify_init1(0)]


def send_more_than_received() -> str:
    """Rank 1 sends 16 MiB to rank 0, which receives into a tensor of 3 floats."""
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        dist.send(torch.zeros(4 << 20), 0)
        return "sent"
    try:
        dist.recv(torch.empty(3), 1)
    except ValueError as exc:
        return f"refused: {exc}"
    return "received"


def pin_shared_memory(size: int) -> list[object]:
    """Through libc: ``size`` bytes of shared anonymous memory, touched, and a memory file; then
    Python's anonymous mmap.mmap of ``size`` bytes."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, size, 3, 0x01 | 0x20, -1, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS
    shared = address not in (None, ctypes.c_void_p(-1).value)
    if shared:
        ctypes.memset(address, 1, size)
    memfd = libc.memfd_create(b"pinned", 0)
    try:
        anonymous = mmap.mmap(-1, size)
        for start in range(0, size, 1 << 20):
            anonymous[start:start + (1 << 20)] = b"\1" * (1 << 20)
        python = "mapped"
    except OSError as exc:
        python = errno.errorcode.get(exc.errno or 0, "?")
    return [shared, memfd, python]


def files() -> list[str]:
    os.makedirs("/shared/out", exist_ok=True)
    with open(f"/shared/out/{rank()}", "w") as f:
        f.write(json.dumps({"rank": rank()}))
    time.sleep(0.5)
    return sorted(os.listdir("/shared/out"))


class Custom(Exception):
    pass


def raises() -> None:
    if rank() == 0:
        os.mkdir("/shared")  # exists: FileExistsError
    raise Custom("a class of the job's own")


class Payload:
    pass


def returns_object() -> Payload:
    return Payload()


def forges_its_answer() -> str:
    """Sends the host, on the rank's own socket, a pickle that would run a command there."""
    import pickle

    from simfs.port import framing as wire
    from simfs.rank import main as rank_side

    link = next(o for o in gc.get_objects() if isinstance(o, rank_side.Link))

    class Evil:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return os.system, (f"touch {CANARY}",)

    from simfs.tasks.task import current_task

    task = current_task()
    assert task is not None
    wire.send(link.fd, pickle.dumps(("done", task.tid, pickle.dumps(Evil()))))
    time.sleep(60)
    return "unreached"


def threads() -> tuple[list[int], list[int], str]:
    """A pool, a joined thread, a lock, a queue fed by a daemon thread: OS threads of the rank
    process, scheduled one at a time by the host."""
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    done: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        time.sleep(0.1 * (5 - i))
        with lock:
            done.append(i)
        return i * i

    with ThreadPoolExecutor(3) as pool:
        squares = list(pool.map(work, range(5)))
    late: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: (time.sleep(1), late.put("late")), daemon=True).start()
    return squares, done, late.get()


def joined_threads() -> list[int]:
    """Threads that race for a lock and a shared file, joined in a fixed order."""
    import threading

    order: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        time.sleep(0.1 * (i % 3))
        with lock:
            order.append(i)
            with open(f"/shared/log-{rank()}", "a") as f:
                f.write(f"{i}\n")

    workers = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return order


def outlived_by_a_thread() -> str:
    def write() -> None:
        time.sleep(2)
        with open("/shared/written-after-main", "w") as f:
            f.write("x")

    import threading

    threading.Thread(target=write).start()
    return "main returned"


def collectives() -> tuple[Any, ...]:
    """Barrier, tensor and object collectives, a subgroup: simfs's simulated torch.distributed."""
    import torch
    import torch.distributed as dist

    me = dist.get_rank()
    if me == 0:
        os.makedirs("/shared/run")
    dist.barrier()
    with open(f"/shared/run/part-{me}", "w") as f:
        f.write(str(me))
    summed = torch.tensor([float(me), 1.0], dtype=torch.bfloat16)
    dist.all_reduce(summed)
    config = [{"step": 3}] if me == 0 else [None]
    dist.broadcast_object_list(config, src=0)
    pair = dist.new_group([0, 1])
    in_pair = None
    if me in (0, 1):
        ones = torch.ones(2) * me
        dist.all_reduce(ones, group=pair)
        in_pair = ones.tolist()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, me * 10)
    return sorted(os.listdir("/shared/run")), summed.tolist(), config, in_pair, gathered


def one_rank_skips_the_barrier() -> str:
    import torch.distributed as dist

    if dist.get_rank() != 1:
        dist.barrier()
    return "done"


def record_real_pid() -> None:
    """Writes the process's real pid (libc's getpid; os.getpid is the simulated one), then waits."""
    with open(f"/shared/pid-{rank()}", "w") as f:
        f.write(str(ctypes.CDLL(None).getpid()))
    time.sleep(5)


def real_pids() -> list[int]:
    return [int(open(f"/shared/{name}").read()) for name in sorted(os.listdir("/shared"))
            if name.startswith("pid-")]


def outlive_the_host() -> None:
    """Sleeps in a loop that swallows every exception."""
    while True:
        try:
            time.sleep(0.01)
        except BaseException:  # noqa: BLE001 - the point: it swallows everything
            continue


def signals() -> Any:
    """Rank 1 handles SIGUSR1; rank 0 sends it SIGUSR1, then SIGINT (Python's default handler:
    KeyboardInterrupt in rank 1)."""
    import signal

    if rank() == 1:
        got: list[int] = []
        signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
        time.sleep(1)
        try:
            time.sleep(1)
        except KeyboardInterrupt:
            return got, "interrupted"
        return got, "not interrupted"
    time.sleep(0.5)
    peer = os.getpid() + 1  # local ranks' simulated pids are consecutive
    os.kill(peer, signal.SIGUSR1)
    time.sleep(1)
    os.kill(peer, signal.SIGINT)
    return "sent"


def spin_forever() -> None:
    """Holds the GIL in a loop that swallows every exception."""
    while True:
        try:
            sum(range(1000))
        except BaseException:  # noqa: BLE001 - the point: it swallows everything
            continue
