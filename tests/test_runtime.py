"""The simulated runtime: determinism, virtual time, per-rank process state, threads inside
ranks, hang detection, the watchdog and how rank exceptions are reported."""

from __future__ import annotations

import concurrent.futures
import datetime
import os
import queue
import random
import socket
import tempfile
import threading
import time
import uuid

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

THIS_FILE = os.path.abspath(__file__)
SIMFS_DIR = os.path.dirname(os.path.abspath(simfs.__file__)) + os.sep


def _line_of(marker: str) -> int:
    """The line number of the (unique) line of this file that contains ``marker``."""
    with open(THIS_FILE) as f:
        hits = [i for i, line in enumerate(f, 1) if marker in line and f'"{marker}"' not in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def _where_ok(where: str, marker: str) -> bool:
    return f"{os.path.basename(THIS_FILE)}:{_line_of(marker)}" in where


# -- determinism ------------------------------------------------------------------------------------

def racy_job() -> dict:
    """Ranks race to create, append to and list files in one shared directory."""
    rank = dist.get_rank()
    os.makedirs("/shared/race", exist_ok=True)
    for i in range(3):
        with open(f"/shared/race/r{rank}-{i}", "w") as f:
            f.write(str(rank) * (i + 1))
        with open("/shared/race/log", "a") as f:
            f.write(f"{rank}:{i}\n")
    dist.barrier()
    with open("/shared/race/log") as f:
        log = f.read()
    return {
        "log": log,
        "listing": sorted(os.listdir("/shared/race")),
        "random": random.random(),
        "urandom": os.urandom(8),
        "uuid": str(uuid.uuid4()),
        "temp": tempfile.mktemp(),
        "now": time.time(),
    }


def _run_racy(seed: int) -> simfs.Result:
    return simfs.Cluster(nodes=2, ranks_per_node=2, profile="nfs", seed=seed).run(racy_job)


def _order(result: simfs.Result) -> list[tuple[int, str, str]]:
    return [(e.rank, e.op, e.path) for e in result.trace]


@given(seed=st.integers(min_value=0, max_value=2**63 - 1))
@settings(max_examples=20)
def test_same_seed_same_run(seed: int) -> None:
    first, second = _run_racy(seed), _run_racy(seed)
    assert first.ok and second.ok, (first.summary(), second.summary())
    assert first.trace, "the run traced no operation"
    assert all(isinstance(e, simfs.TraceEvent) for e in first.trace)
    assert first.trace == second.trace
    assert first.returns == second.returns
    assert first.virtual_time == second.virtual_time


def test_different_seeds_explore_different_interleavings() -> None:
    results = [_run_racy(seed) for seed in range(20)]
    orders = {tuple(_order(result)) for result in results}
    assert len(orders) >= 2
    logs = {result.returns[0]["log"] for result in results}
    assert len(logs) >= 2, "the append order never changed across 20 seeds"


def test_trace_events_name_rank_node_op_path() -> None:
    result = _run_racy(5)
    assert result.ok, result.summary()
    opens = [e for e in result.trace if e.op == "open" and e.path.startswith("/shared/race/r")]
    assert {e.rank for e in opens} == {0, 1, 2, 3}
    for e in opens:
        assert e.node == e.rank // 2
        assert e.outcome == "ok"
        assert e.path.startswith(f"/shared/race/r{e.rank}-")
    times = [e.time for e in result.trace if e.rank >= 0]
    assert min(times) >= 0 and max(times) <= result.virtual_time


# -- virtual time -----------------------------------------------------------------------------------

def sleepy_job(seconds: float) -> dict:
    t0, m0, p0, d0 = time.time(), time.monotonic(), time.perf_counter(), datetime.datetime.now()
    n0 = time.monotonic_ns()
    time.sleep(seconds)
    return {
        "time": time.time() - t0,
        "monotonic": time.monotonic() - m0,
        "perf_counter": time.perf_counter() - p0,
        "datetime": (datetime.datetime.now() - d0).total_seconds(),
        "monotonic_ns": time.monotonic_ns() - n0,
    }


def test_long_sleep_costs_no_wall_time() -> None:
    real0 = time.time()
    wall0 = time.perf_counter()
    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=0).run(sleepy_job, 3600.0)
    wall = time.perf_counter() - wall0
    assert result.ok, result.summary()
    assert wall < 1.0
    assert result.virtual_time >= 3600.0
    for rank, got in result.returns.items():
        for clock in ("time", "monotonic", "perf_counter", "datetime"):
            assert got[clock] == pytest.approx(3600.0, abs=1e-3), (rank, clock, got)
        assert got["monotonic_ns"] == pytest.approx(3600e9, rel=1e-6)
    # the real clock outside ranks did not jump by an hour
    assert time.time() - real0 < 60
    assert abs(datetime.datetime.now().timestamp() - time.time()) < 5


@given(seconds=st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False))
@settings(max_examples=15)
def test_clocks_advance_by_the_slept_amount(seconds: float) -> None:
    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=1).run(sleepy_job, seconds)
    assert result.ok, result.summary()
    assert result.virtual_time >= seconds
    for got in result.returns.values():
        for clock in ("time", "monotonic", "perf_counter", "datetime"):
            assert got[clock] == pytest.approx(seconds, rel=1e-6, abs=1e-5), (clock, got)


def test_sequential_sleeps_add_up_and_ranks_sleep_in_parallel() -> None:
    def job() -> float:
        start = time.monotonic()
        for _ in range(10):
            time.sleep(60)
        return time.monotonic() - start

    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=3).run(job)
    assert result.ok, result.summary()
    assert all(v == pytest.approx(600.0) for v in result.returns.values())
    # four ranks sleeping 600 s each, concurrently: the run lasts 600 s, not 2400 s
    assert result.virtual_time == pytest.approx(600.0, abs=1.0)


def test_real_clock_and_sleep_outside_ranks_unaffected() -> None:
    real0, mono0 = time.time(), time.monotonic()
    result = simfs.Cluster(nodes=1, ranks_per_node=1, seed=0).run(sleepy_job, 10_000.0)
    assert result.virtual_time >= 10_000
    # outside ranks the clocks are the machine's: they moved by the run's wall time only
    assert 0 <= time.time() - real0 < 60
    assert 0 <= time.monotonic() - mono0 < 60
    assert abs(time.time() - datetime.datetime.now().timestamp()) < 5
    before = time.perf_counter()
    time.sleep(0.02)  # a real sleep
    assert time.perf_counter() - before >= 0.019


def test_invalid_sleep_raises_as_real_sleep() -> None:
    def job() -> str:
        try:
            time.sleep(-1)
        except ValueError:
            return "ValueError"
        return "no error"

    result = simfs.Cluster(seed=0).run(job)
    assert result.returns == {0: "ValueError"}


# -- per-rank process state -------------------------------------------------------------------------

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR")


def state_job() -> dict:
    return {
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
    }


def test_torchrun_environment_pid_hostname_cwd() -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=3, seed=0).run(state_job)
    assert result.ok, result.summary()
    for rank, got in result.returns.items():
        node, local = divmod(rank, 3)
        assert got["env"] == {"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "6",
                              "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": str(node), "MASTER_ADDR": "node0"}
        assert got["host"] == f"node{node}"
        assert got["cwd"] == "/shared"
    pids = {rank: got["pid"] for rank, got in result.returns.items()}
    # pids are distinct on a node and repeat across nodes (like containers)
    for node in range(2):
        on_node = [pids[node * 3 + i] for i in range(3)]
        assert len(set(on_node)) == 3
    assert [pids[i] for i in range(3)] == [pids[3 + i] for i in range(3)]
    # outside ranks the real process state is untouched
    if os.path.exists("/proc/self"):
        assert os.getpid() == int(os.readlink("/proc/self"))
    if os.path.exists("/proc/sys/kernel/hostname"):
        with open("/proc/sys/kernel/hostname") as f:
            assert socket.gethostname() == f.read().strip()


def test_proc_self_names_the_rank_and_lists_its_nodes_mounts() -> None:
    """/proc/self is a link to the calling process's pid (proc(5)), as filelock 4.3 checks before it
    trusts /proc/self/stat; /proc/self/mountinfo lists the node's mounts (filelock reads the boot id
    only when no mount sits on it)."""

    def job() -> tuple:
        with open("/proc/self/mountinfo") as f:
            mount_points = [line.split()[4] for line in f]
        return os.readlink("/proc/self"), os.readlink(b"/proc/self"), os.getpid(), mount_points

    result = simfs.Cluster(nodes=2, ranks_per_node=2, mounts={"/shared": "nfs", "/bucket": "objectstore"}).run(job)
    assert result.ok, result.summary()
    for link, link_bytes, pid, mount_points in result.returns.values():
        assert (link, link_bytes) == (str(pid), str(pid).encode())
        assert mount_points == ["/", "/shared", "/bucket", "/proc"]


def test_environ_changes_stay_in_their_rank() -> None:
    key = "SIMFS_TEST_RUNTIME_VAR"
    assert key not in os.environ

    def job() -> tuple:
        rank = dist.get_rank()
        if rank == 0:
            os.environ[key] = "set-by-rank0"
            os.environ["RANK"] = "changed"
        dist.barrier()
        return os.environ.get(key), os.environ["RANK"], os.getenv(key)

    result = simfs.Cluster(nodes=1, ranks_per_node=3, seed=0).run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == ("set-by-rank0", "changed", "set-by-rank0")
    assert result.returns[1] == (None, "1", None)
    assert result.returns[2] == (None, "2", None)
    assert key not in os.environ
    assert os.environ.get("RANK") != "changed"


def random_job() -> dict:
    unseeded = [random.random() for _ in range(3)]
    random.seed(0)
    seeded = [random.random() for _ in range(3)]
    return {
        "unseeded": unseeded,
        "seeded": seeded,
        "urandom": os.urandom(16),
        "uuid": uuid.uuid4(),
        "randint": random.randint(0, 10**9),
    }


def test_random_seed_same_in_every_rank_unseeded_differs() -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=7).run(random_job)
    assert result.ok, result.summary()
    got = list(result.returns.values())
    assert len({tuple(g["seeded"]) for g in got}) == 1
    reference = random.Random(0)
    assert got[0]["seeded"] == [reference.random() for _ in range(3)]
    assert len({tuple(g["unseeded"]) for g in got}) == 4
    assert len({g["urandom"] for g in got}) == 4
    assert len({g["uuid"] for g in got}) == 4


@given(seed=st.integers(min_value=0, max_value=2**32))
@settings(max_examples=10)
def test_urandom_uuid_random_are_deterministic_per_seed(seed: int) -> None:
    a = simfs.Cluster(nodes=1, ranks_per_node=2, seed=seed).run(random_job)
    b = simfs.Cluster(nodes=1, ranks_per_node=2, seed=seed).run(random_job)
    c = simfs.Cluster(nodes=1, ranks_per_node=2, seed=seed + 1).run(random_job)
    assert a.returns == b.returns
    assert a.returns[0]["urandom"] != c.returns[0]["urandom"]
    assert a.returns[0]["uuid"] != c.returns[0]["uuid"]
    assert a.returns[0]["unseeded"] != c.returns[0]["unseeded"]
    assert a.returns[0]["seeded"] == c.returns[0]["seeded"]


def tempfile_job() -> dict:
    fd, mk = tempfile.mkstemp(suffix=".x")
    os.close(fd)
    with tempfile.NamedTemporaryFile(dir="/shared", delete=False) as f:
        named = f.name
    d = tempfile.mkdtemp()
    return {"mkstemp": mk, "named": named, "mkdtemp": d, "gettempdir": tempfile.gettempdir(),
            "exists": [os.path.exists(p) for p in (mk, named, d)]}


def test_tempfile_names_deterministic_per_seed() -> None:
    a = simfs.Cluster(nodes=2, ranks_per_node=1, seed=11).run(tempfile_job)
    b = simfs.Cluster(nodes=2, ranks_per_node=1, seed=11).run(tempfile_job)
    c = simfs.Cluster(nodes=2, ranks_per_node=1, seed=12).run(tempfile_job)
    assert a.ok and b.ok and c.ok, (a.summary(), c.summary())
    assert a.returns == b.returns
    assert a.returns[0] != c.returns[0]
    for got in a.returns.values():
        assert got["gettempdir"] == "/tmp"
        assert got["mkstemp"].startswith("/tmp/") and got["mkstemp"].endswith(".x")
        assert got["named"].startswith("/shared/")
        assert got["exists"] == [True, True, True]
    # nothing was created on the real disk
    assert not os.path.exists(a.returns[0]["mkstemp"])
    assert not os.path.exists(a.returns[0]["mkdtemp"])


def test_tmp_is_per_node_shared_is_shared() -> None:
    def job() -> tuple:
        rank = dist.get_rank()
        if rank == 0:
            with open("/tmp/node-local", "w") as f:
                f.write("mine")
            with open("/shared/everyone", "w") as f:
                f.write("ours")
        dist.barrier()
        return os.path.exists("/tmp/node-local"), os.path.exists("/shared/everyone")

    result = simfs.Cluster(nodes=2, ranks_per_node=2, profile="local", seed=0).run(job)
    assert result.ok, result.summary()
    assert result.returns == {0: (True, True), 1: (True, True), 2: (False, True), 3: (False, True)}
    assert not os.path.exists("/tmp/node-local")
    assert not os.path.exists("/shared/everyone")


def test_relative_paths_resolve_against_shared_cwd() -> None:
    def job() -> tuple:
        if dist.get_rank() == 0:
            with open("relative.txt", "w") as f:
                f.write("hello")
        dist.barrier()
        with open("/shared/relative.txt") as f:
            return f.read(), os.path.abspath("x")

    result = simfs.Cluster(nodes=1, ranks_per_node=2, profile="local", seed=0).run(job)
    assert result.ok, result.summary()
    assert result.returns == {0: ("hello", "/shared/x"), 1: ("hello", "/shared/x")}


def test_chdir_is_per_rank() -> None:
    def job() -> str:
        rank = dist.get_rank()
        os.makedirs(f"/shared/d{rank}", exist_ok=True)
        os.chdir(f"/shared/d{rank}")
        dist.barrier()
        return os.getcwd()

    result = simfs.Cluster(nodes=1, ranks_per_node=3, profile="local", seed=0).run(job)
    assert result.ok, result.summary()
    assert result.returns == {r: f"/shared/d{r}" for r in range(3)}


# -- threads inside ranks ---------------------------------------------------------------------------

def thread_job() -> dict:
    rank = dist.get_rank()
    lock = threading.Lock()
    seen: list[int] = []
    done = queue.Queue()
    start = time.monotonic()

    def worker(i: int) -> None:
        time.sleep(10 * (3 - i))
        with open(f"/shared/t{rank}-{i}", "w") as f:
            f.write(str(i))
        with lock:
            seen.append(i)
        done.put(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    joined_at = time.monotonic() - start
    alive = [t.is_alive() for t in threads]
    from_queue = [done.get(timeout=1) for _ in range(3)]
    with open(f"/shared/t{rank}-0") as f:
        content = f.read()
    return {"seen": seen, "queue": from_queue, "joined_at": joined_at, "alive": alive, "content": content}


def test_threads_do_io_and_sleep_concurrently() -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile="local", seed=0).run(thread_job)
    assert result.ok, result.summary()
    for got in result.returns.values():
        assert got["seen"] == [2, 1, 0]          # the shortest sleeper finishes first
        assert got["queue"] == [2, 1, 0]
        assert got["alive"] == [False, False, False]
        assert got["content"] == "0"
        # three threads sleeping 10/20/30 s concurrently: join returns after ~30 s, not 60 s
        assert got["joined_at"] == pytest.approx(30.0, abs=0.5)
    thread_ops = [e for e in result.trace if e.op == "open" and e.path.startswith("/shared/t")]
    assert {(e.rank, e.path) for e in thread_ops} >= {(r, f"/shared/t{r}-{i}") for r in range(2) for i in range(3)}


def test_event_condition_executor_inside_rank() -> None:
    def job() -> dict:
        ev = threading.Event()
        cond = threading.Condition()
        items: list[int] = []

        def setter() -> None:
            time.sleep(5)
            ev.set()

        def producer() -> None:
            for i in range(3):
                time.sleep(1)
                with cond:
                    items.append(i)
                    cond.notify_all()

        threading.Thread(target=setter, daemon=True).start()
        early = ev.wait(timeout=1)
        late = ev.wait(timeout=10)
        threading.Thread(target=producer).start()
        with cond:
            got_all = cond.wait_for(lambda: len(items) == 3, timeout=100)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            squares = list(pool.map(lambda x: (time.sleep(2), x * x)[1], range(6)))
            fut = pool.submit(lambda: os.listdir("/shared"))
            listing = fut.result(timeout=60)
        return {"early": early, "late": late, "items": list(items), "got_all": got_all,
                "squares": squares, "listing": listing, "elapsed": time.monotonic()}

    result = simfs.Cluster(nodes=1, ranks_per_node=2, profile="local", seed=4).run(job)
    assert result.ok, result.summary()
    for got in result.returns.values():
        assert got["early"] is False and got["late"] is True
        assert got["items"] == [0, 1, 2] and got["got_all"] is True
        assert got["squares"] == [0, 1, 4, 9, 16, 25]
        assert isinstance(got["listing"], list)
    # 6 tasks of 2 s on 2 workers take 6 s: the pool ran its workers concurrently
    assert result.virtual_time == pytest.approx(5 + 3 + 6, abs=0.5)


def test_threading_identity_inside_rank() -> None:
    def job() -> tuple:
        main = threading.current_thread()
        other: list = []
        t = threading.Thread(target=lambda: other.append((threading.current_thread(), threading.get_ident())),
                             name="helper")
        t.start()
        t.join()
        return main is threading.main_thread(), other[0][0] is t, other[0][1] != threading.get_ident(), t.name

    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(job)
    assert result.ok, result.summary()
    assert all(v == (True, True, True, "helper") for v in result.returns.values())


def test_exception_in_rank_thread_is_reported() -> None:
    def job() -> int:
        def bad() -> None:
            time.sleep(1)
            raise RuntimeError("boom in a rank thread")

        t = threading.Thread(target=bad, name="failing-worker")
        t.start()
        t.join()
        return 1

    result = simfs.Cluster(nodes=1, ranks_per_node=1, seed=0).run(job)
    assert result.returns == {0: 1}
    # a real process prints it through threading.excepthook; simfs must not swallow it
    [failure] = result.thread_errors[0]
    assert failure.thread == "failing-worker"
    assert isinstance(failure.error, RuntimeError) and "boom in a rank thread" in failure.traceback
    assert not result.ok, "an uncaught exception in a rank's thread fails the run"
    assert "failing-worker" in result.summary()


def test_exception_in_rank_thread_calls_the_ranks_excepthook() -> None:
    """The rank's own threading.excepthook sees the exception; the host's hook does not."""
    host_calls: list[str] = []
    host_hook = threading.excepthook
    threading.excepthook = lambda args: host_calls.append(str(args.exc_value))
    try:
        def job() -> list[str]:
            seen: list[str] = []
            threading.excepthook = lambda args: seen.append(f"{args.thread.name}: {args.exc_value}")

            def bad() -> None:
                raise ValueError("from the worker")

            t = threading.Thread(target=bad, name="w")
            t.start()
            t.join()
            return seen

        result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(job)
    finally:
        threading.excepthook = host_hook
    assert result.returns == {0: ["w: from the worker"], 1: ["w: from the worker"]}
    assert host_calls == []
    assert len(result.thread_errors) == 2 and not result.ok


def test_threads_of_a_finished_run_can_be_joined_from_outside() -> None:
    # concurrent.futures joins every executor thread at interpreter exit (from outside any rank)
    def job() -> threading.Thread:
        t = threading.Thread(target=lambda: time.sleep(1))
        t.start()
        t.join()
        return t

    result = simfs.Cluster(seed=0, carrier="greenlet", isolate=False).run(job)  # the thread object is here
    thread = result.returns[0]
    assert not thread.is_alive()
    thread.join(timeout=1)  # must return at once, like joining any finished thread


def test_process_waits_for_non_daemon_threads() -> None:
    def job() -> int:
        def late_writer() -> None:
            time.sleep(100)
            with open("/shared/late", "w") as f:
                f.write("written after main returned")

        threading.Thread(target=late_writer).start()
        return 1

    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile="local", seed=0)
    result = cluster.run(job)
    assert result.ok and result.returns == {0: 1}, result.summary()

    def check() -> bool:
        return os.path.exists("/shared/late")

    # a Python process exits only after its non-daemon threads end
    assert cluster.run(check).returns == {0: True}


# -- hangs ------------------------------------------------------------------------------------------

def event_deadlock_job() -> int:
    ev = threading.Event()
    ev.wait()  # HANG-EVENT
    return 1


def test_event_deadlock_is_reported_with_where() -> None:
    wall0 = time.perf_counter()
    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(event_deadlock_job)
    assert time.perf_counter() - wall0 < 5
    assert not result.ok
    assert set(result.hung) == {0, 1}
    assert result.returns == {}
    for rank, info in result.hung.items():
        assert isinstance(info, simfs.HangInfo)
        assert info.rank == rank
        assert _where_ok(info.where, "# HANG-EVENT"), info.where
        assert "hung" in result.summary()


_SHARED_EVENTS: dict[int, threading.Event] = {}


def cross_event_job() -> int:
    rank = dist.get_rank()
    _SHARED_EVENTS[rank] = threading.Event()
    dist.barrier()
    other = _SHARED_EVENTS[1 - rank]
    time.sleep(rank)
    other.wait()  # HANG-CROSS
    _SHARED_EVENTS[rank].set()
    return rank


def test_two_ranks_waiting_on_each_others_events() -> None:
    _SHARED_EVENTS.clear()
    # the two ranks share module-level events: greenlet ranks of one process
    result = simfs.Cluster(nodes=2, ranks_per_node=1, seed=0, carrier="greenlet").run(cross_event_job)
    _SHARED_EVENTS.clear()
    assert set(result.hung) == {0, 1}
    for info in result.hung.values():
        assert _where_ok(info.where, "# HANG-CROSS"), info.where
    assert not result.errors and not result.returns


def test_lock_order_deadlock_between_threads() -> None:
    def job() -> int:
        a, b = threading.Lock(), threading.Lock()

        def other() -> None:
            with b:
                time.sleep(1)
                with a:
                    pass

        threading.Thread(target=other).start()
        with a:
            time.sleep(1)
            with b:  # HANG-ABBA
                pass
        return 1

    result = simfs.Cluster(seed=0).run(job)
    assert set(result.hung) == {0}
    assert _where_ok(result.hung[0].where, "# HANG-ABBA"), result.hung[0].where


def lone_barrier_job() -> int:
    if dist.get_rank() == 0:
        dist.barrier()  # HANG-BARRIER
    return dist.get_rank()


def test_collective_only_one_rank_calls_times_out_with_where() -> None:
    wall0 = time.perf_counter()
    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(lone_barrier_job)
    assert time.perf_counter() - wall0 < 5
    assert result.returns == {1: 1}
    assert isinstance(result.errors[0], dist.DistBackendError)
    assert result.virtual_time >= 1800
    info = result.hung[0]
    assert info.waiting_for == [1]
    assert "barrier" in info.what
    assert info.waited == pytest.approx(1800.0)
    assert _where_ok(info.where, "# HANG-BARRIER"), f"HangInfo.where is {info.where!r}"


# -- watchdog ---------------------------------------------------------------------------------------

def busy_job() -> int:
    if dist.get_rank() == 1:
        x = 0
        while True:  # pure Python, no simulated operation
            x += 1
    return dist.get_rank()


def test_watchdog_interrupts_busy_loop() -> None:
    wall0 = time.perf_counter()
    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0, watchdog=1.0).run(busy_job)
    wall = time.perf_counter() - wall0
    assert wall < 10
    assert result.returns == {0: 0}
    assert isinstance(result.errors[1], simfs.OutsideSimulation)
    assert any("rank 1" in note for note in result.notes), result.notes
    assert os.path.basename(THIS_FILE) in result.tracebacks[1]
    assert not result.ok


def test_watchdog_leaves_long_simulated_runs_alone() -> None:
    def job() -> int:
        for _ in range(2000):
            time.sleep(1)
        return 1

    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0, watchdog=1.0).run(job)
    assert result.ok and result.notes == [], result.summary()


# -- rank exceptions --------------------------------------------------------------------------------

class JobFailure(Exception):
    pass


def _helper_that_raises(rank: int) -> None:
    raise JobFailure(f"rank {rank} failed")  # RAISE-HERE


def failing_job() -> int:
    rank = dist.get_rank()
    if rank == 1:
        _helper_that_raises(rank)  # CALL-HERE
    if rank == 2:
        open("/shared/missing/file")  # OPEN-HERE
    return rank


@pytest.mark.parametrize(("carrier", "isolate"), [("process", True), ("greenlet", True), ("greenlet", False)])
def test_rank_exception_and_user_traceback(carrier: str, isolate: bool) -> None:
    result = simfs.Cluster(nodes=1, ranks_per_node=3, seed=0, carrier=carrier, isolate=isolate).run(failing_job)
    assert not result.ok
    assert result.returns == {0: 0}
    assert set(result.errors) == {1, 2}
    if not isolate:  # greenlet ranks in this process: the job's own exception
        assert isinstance(result.errors[1], JobFailure) and str(result.errors[1]) == "rank 1 failed"
    else:  # the host does not load a class of the job's own
        error = result.errors[1]
        assert isinstance(error, simfs.RankError) and (error.type_name, error.message) == (
            "test_runtime.JobFailure", "rank 1 failed")
    assert isinstance(result.errors[2], FileNotFoundError)
    assert result.errors[2].filename == "/shared/missing/file"
    tb1 = result.tracebacks[1]
    assert f'"{THIS_FILE}", line {_line_of("# RAISE-HERE")}' in tb1
    assert f'"{THIS_FILE}", line {_line_of("# CALL-HERE")}' in tb1
    assert "JobFailure: rank 1 failed" in tb1
    tb2 = result.tracebacks[2]
    assert f'"{THIS_FILE}", line {_line_of("# OPEN-HERE")}' in tb2
    for tb in (tb1, tb2):
        assert SIMFS_DIR not in tb, tb
    assert "JobFailure" in result.summary()


def test_sys_exit_in_rank() -> None:
    def job() -> int:
        import sys

        if dist.get_rank() == 0:
            sys.exit(0)
        if dist.get_rank() == 1:
            sys.exit(3)
        return 2

    result = simfs.Cluster(nodes=1, ranks_per_node=3, seed=0).run(job)
    assert result.returns == {0: None, 2: 2}
    assert isinstance(result.errors[1], SystemExit) and result.errors[1].code == 3


def test_job_arguments_are_passed() -> None:
    def job(a: int, b: str, *, c: float) -> tuple:
        return a, b, c, dist.get_rank()

    result = simfs.Cluster(nodes=1, ranks_per_node=2, seed=0).run(job, 1, "x", c=2.5)
    assert result.returns == {0: (1, "x", 2.5, 0), 1: (1, "x", 2.5, 1)}


def test_a_quiet_logger_made_in_a_rank_stays_quiet_after_the_run(capsys) -> None:
    """A library first imported inside a rank often gives its logger a NullHandler and
    propagate=False (torch.distributed.checkpoint does); after the run that logger must not fall
    back to logging.lastResort and print to the host's stderr."""
    import logging

    name = "simfs-test-quiet-library"

    def job() -> None:
        quiet = logging.getLogger(name)
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False

    assert simfs.Cluster(nodes=1, ranks_per_node=1).run(job).ok
    capsys.readouterr()
    logging.getLogger(name).error("must not reach the host's stderr")
    assert "must not reach" not in capsys.readouterr().err
