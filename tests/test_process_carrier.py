"""The process carrier (Cluster(carrier="process")): every rank a real OS process confined by the
kernel. Each escape test runs the host in a subprocess and checks it from outside afterwards:
its exit status, canary files, a listening canary socket."""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import missing

import simfs
from simfs.confinement import landlock
from simfs.errors import RankError
from simfs.runtime import run as run_module
from simfs.runtime.carrier.zygote import MAX_START

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _needs_landlock() -> None:
    if not landlock.abi():
        missing("landlock", "the process carrier's escape tests need a kernel with Landlock (Linux 5.13+)")


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    return tmp_path / "canary"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    sock.settimeout(0.5)
    yield sock
    sock.close()


def host(job: str, canary: Path, *, port: int = 0, ranks: int = 2, watchdog: float = 60.0,
         env: dict[str, str] | None = None, then: str = "", carrier: str = "process") -> dict[str, Any]:
    """Run ``_carrier_jobs.<job>`` on a 1-node cluster of process ranks (or greenlet ranks, in
    their confined child) in a fresh Python: the host's exit status, and what it printed of the
    result (JSON), checked after it exited."""
    script = textwrap.dedent(f"""
        import json, sys
        import simfs, _carrier_jobs
        result = simfs.Cluster(1, {ranks}, carrier={carrier!r}, watchdog={watchdog}).run(_carrier_jobs.{job})
        errors = {{r: [type(e).__name__, str(e)] for r, e in result.errors.items()}}
        out = {{"returns": result.returns, "errors": errors, "tracebacks": result.tracebacks}}
        {then}
        print(json.dumps(out, default=repr))
    """)
    environment = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   "SIMFS_TEST_CANARY": str(canary), "SIMFS_TEST_PORT": str(port), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


def test_a_segfault_is_a_dead_rank_with_its_stack(canary: Path) -> None:
    out = host("segfault", canary)
    assert out["returns"] == {"0": "survived"}
    kind, message = out["errors"]["1"]
    assert kind == "RankDied" and "SIGSEGV" in message
    assert "in segfault" in out["tracebacks"]["1"]  # faulthandler's Python stack of the rank


def test_an_abort_is_a_dead_rank_with_its_stack(canary: Path) -> None:
    out = host("abort", canary)
    assert out["returns"] == {"1": "survived"}
    kind, message = out["errors"]["0"]
    assert kind == "RankDied" and "SIGABRT" in message and "in abort" in message


def test_the_kernel_refuses_what_python_routing_misses(canary: Path, listener: socket.socket) -> None:
    out = host("escape_attempts", canary, port=listener.getsockname()[1])
    attempts = out["returns"]["0"]
    fd, err = attempts["libc_open"]
    assert fd == -1 and err in (1, 13)  # EPERM or EACCES: Landlock
    sock, err = attempts["libc_socket"]
    assert sock == -1 and err == 13  # EACCES: the seccomp filter
    assert attempts["jit_saved_in_simulation"] is True
    assert attempts["sqlite_attach"] == "unable to open database: " + f"{canary}.db"
    assert attempts["tcp"] in ("BypassError", "PermissionError")
    assert not canary.exists() and not Path(f"{canary}.pt").exists() and not Path(f"{canary}.db").exists()
    with pytest.raises(TimeoutError):
        listener.accept()


def test_greenlet_ranks_run_in_a_confined_child(canary: Path) -> None:
    """Greenlet ranks (isolate=True, the default) run in a forked child that confines itself: C code
    that opens a real path past every Python-level hook (SQLite's ATTACH) is refused by the kernel,
    and the job's exception class arrives as a RankError, as from rank processes."""
    out = host("native_write", canary, ranks=1, carrier="greenlet")
    assert out["returns"] == {"0": f"unable to open database: {canary}.db"}
    assert not Path(f"{canary}.db").exists()


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_what_a_rank_leaves_behind_is_gone_with_its_process(canary: Path, carrier: str) -> None:
    then = """
        import os.path, gc, atexit
        out["host"] = [os.path.join("a", "b"), sys.modules.get("json") is json, len(gc.callbacks),
                       "_simfs_test_holder" in sys.modules]
        gc.collect()
    """
    out = host("leave_things_behind", canary, then=textwrap.indent(textwrap.dedent(then), "        ").strip(),
               carrier=carrier)
    assert out["returns"] == {"0": "left", "1": "left"}
    assert out["host"][:2] == ["a/b", True] and out["host"][3] is False
    assert not canary.exists()


def test_a_ranks_seed_changes_no_other_generator() -> None:
    import numpy as np
    import torch

    def draws(seed_rank0: bool) -> dict[int, Any]:
        os.environ["SEED_RANK0"] = "1" if seed_rank0 else "0"
        try:
            result = simfs.Cluster(1, 2, carrier="process", seed=3).run(_jobs().generators)
        finally:
            del os.environ["SEED_RANK0"]
        assert not result.errors, result.tracebacks
        return result.returns

    host_state = (torch.get_rng_state().clone(), np.random.get_state()[1].copy())
    quiet, seeded = draws(False), draws(True)
    assert seeded[1] == quiet[1]  # rank 1's generators did not see rank 0's seeds
    assert seeded[0] != quiet[0]
    assert seeded[0][0] == pytest.approx(torch.Generator().manual_seed(123).initial_seed() and
                                         torch.rand(1, generator=torch.Generator().manual_seed(123)).item())
    assert torch.equal(torch.get_rng_state(), host_state[0])
    assert (np.random.get_state()[1] == host_state[1]).all()
    assert quiet[0] != quiet[1]  # each rank's generators are its own
    assert draws(False) == quiet  # and a function of the seed


def test_every_clock_a_rank_reads_is_virtual() -> None:
    result = simfs.Cluster(1, 1, carrier="process").run(_jobs().clocks)
    assert not result.errors, result.tracebacks
    read = result.returns[0]
    epoch = 1_767_225_600.0  # what time.time() reads at virtual 0 (simfs.runtime.machine.WALL_EPOCH)
    for name in ("time", "realtime", "now"):
        assert read[name] == pytest.approx(epoch + 5, abs=0.5), name
    assert read["monotonic"] == pytest.approx(read["boottime"], abs=0.5)
    assert read["process_time"] == pytest.approx(5, abs=0.5)


@pytest.mark.parametrize("job", ["gil_loop", "swallowing_loop"])
def test_a_rank_that_never_yields_is_killed_by_the_watchdog(job: str, canary: Path) -> None:
    out = host(job, canary, watchdog=2.0)
    assert out["returns"] == {"1": "done"}
    kind, message = out["errors"]["0"]
    assert kind == "OutsideSimulation" and "watchdog" in message and f"in {job}" in message


@pytest.mark.parametrize("carrier", ["process", "greenlet"])
def test_a_loop_of_requests_that_take_no_virtual_time_is_ended_by_the_watchdog(carrier: str, canary: Path) -> None:
    """Each request is answered, but virtual time never moves: no real machine stays still."""
    out = host("zero_time_spin", canary, watchdog=2.0, carrier=carrier, then='out["notes"] = result.notes')
    assert out["returns"] == {"1": "done"}
    kind, message = out["errors"]["0"]
    said = "\n".join([message, out["tracebacks"]["0"], *out["notes"]])
    assert kind == "OutsideSimulation" and "virtual time did not move" in said, said
    assert "in zero_time_spin" in said, said


def test_trace_notes_a_rank_forges_are_kept_cut_to_what_a_note_says() -> None:
    result = simfs.Cluster(1, 1, carrier="process").run(_jobs().forged_notes, 64, 100_000, 1 << 20)
    assert result.returns == {0: 64}, result.summary()
    notes = [e for e in result.trace if e.op == "sleep"]
    assert len(notes) == 64
    assert all(len(e.path) < 4200 and len(e.outcome) < 300 for e in notes)


def test_a_ranks_trace_notes_are_kept_up_to_their_budget_then_counted_out() -> None:
    from simfs.runtime.carrier.requests import NOTES_KEPT

    result = simfs.Cluster(1, 1, carrier="process").run(_jobs().forged_notes, 5000, 4000, 250)
    assert result.returns == {0: 5000}, result.summary()
    kept = [e for e in result.trace if e.rank == 0 and e.op == "sleep"]
    assert 0 < len(kept) < 5000
    assert sum(len(e.op) + len(e.path) + len(e.outcome) for e in kept) <= NOTES_KEPT
    assert [e.outcome for e in result.trace if e.op == "notes"] == [
        f"rank 0's further trace notes left out (more than {NOTES_KEPT:,} characters)"]


def test_a_rank_process_holds_no_landlock_ruleset_it_could_add_rules_to() -> None:
    """The zygote's ruleset, which every rank forked after enforces, is closed in each rank before
    its code runs: a rule a rank added would widen what the next run's ranks may open."""
    cluster = simfs.Cluster(1, 1, carrier="process")
    for _ in range(2):  # the first run's zygote, then the same zygote kept
        result = cluster.run(_jobs().real_descriptors)
        assert result.ok, result.summary()
        assert not [name for name in result.returns[0] if "landlock" in name], result.returns[0]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="ioprio_set's number is x86_64's")
def test_a_rank_cannot_renice_or_idle_the_callers_process_group_or_user() -> None:
    """The host runs in a session of its own here, so what the rank does reaches no other test."""
    script = textwrap.dedent("""
        import ctypes, json, os
        import simfs, _carrier_jobs
        result = simfs.Cluster(1, 1, carrier="process").run(_carrier_jobs.renice_the_group)
        libc = ctypes.CDLL(None)
        print(json.dumps([result.returns.get(0), os.getpriority(os.PRIO_PROCESS, 0),
                          libc.syscall(_carrier_jobs.IOPRIO_GET, 1, 0)]))
    """)
    environment = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                          timeout=300, start_new_session=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    answers, nice, ioprio = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers == [-1, -1, -1, -1], answers
    assert nice == 0 and ioprio >> 13 != 3, (nice, ioprio)


def test_a_rank_reaches_no_unix_socket_of_the_machine_and_watches_no_directory(tmp_path: Path) -> None:
    """A socket pair's datagram socket is the only kind a rank makes: it may not be pointed at a
    real socket by path or bound to an abstract name an unconfined process could send to."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "real.sock"))
    listener.setblocking(False)
    try:
        result = simfs.Cluster(1, 1, carrier="process").run(_jobs().reach_unix_sockets, str(tmp_path / "real.sock"))
        assert result.returns == {0: [-1, -1, -1, -1]}, result.summary()
        with pytest.raises(BlockingIOError):
            listener.recv(64)
    finally:
        listener.close()


def test_a_receive_takes_what_its_own_tensor_holds_not_what_the_sender_chose() -> None:
    result = simfs.Cluster(1, 2, carrier="process").run(_jobs().send_more_than_received)
    assert result.returns[1] == "sent", result.summary()
    assert result.returns[0].startswith("refused: simfs: ") and "more than the 29 its receiver takes" in \
        result.returns[0], result.returns[0]


def test_rank_memory_bounds_what_a_rank_can_pin_shared_memory_included() -> None:
    """RLIMIT_DATA counts private memory only: a rank process may map no shared anonymous memory
    and make no memory file, and an anonymous mmap.mmap is private, so counted."""
    result = simfs.Cluster(1, 1, carrier="process", rank_memory=128 << 20).run(_jobs().pin_shared_memory, 256 << 20)
    assert result.returns == {0: [False, -1, "ENOMEM"]}, result.summary()


def test_the_same_seed_gives_the_same_run_and_replay() -> None:
    runs = [simfs.Cluster(2, 2, carrier="process", seed=11).run(_jobs().files) for _ in range(2)]
    assert runs[0].carrier == "process" and "4 ranks as processes" in runs[0].summary()
    assert runs[0].returns == runs[1].returns == {r: ["0", "1", "2", "3"] for r in range(4)}
    assert [str(e) for e in runs[0].trace] == [str(e) for e in runs[1].trace]
    again = simfs.replay(runs[0].replay)
    assert [str(e) for e in again.trace] == [str(e) for e in runs[0].trace]


def test_exceptions_come_back_as_their_type_or_described() -> None:
    result = simfs.Cluster(1, 2, carrier="process").run(_jobs().raises)
    assert isinstance(result.errors[0], FileExistsError)
    assert isinstance(result.errors[1], RankError) and result.errors[1].type_name == "_carrier_jobs.Custom"
    assert "raise Custom" in result.tracebacks[1]


def test_a_returned_object_of_the_jobs_own_class_arrives_as_its_name_and_repr() -> None:
    result = simfs.Cluster(1, 1, carrier="process").run(_jobs().returns_object)
    assert result.ok and isinstance(result.returns[0], simfs.Foreign), result.summary()
    assert result.returns[0].type_name == "_carrier_jobs.Payload" and "Payload object" in result.returns[0].text


def test_a_forged_pickle_runs_nothing_in_the_host(canary: Path) -> None:
    out = host("forges_its_answer", canary, ranks=1)
    kind, message = out["errors"]["0"]
    assert kind == "SimfsError" and "does not load" in message and "never runs in the host" in message
    assert not canary.exists()


def test_a_node_crash_kills_its_processes() -> None:
    cluster = simfs.Cluster(2, 1, carrier="process", faults=[simfs.CrashNode(node=1, at_time=1.0)])
    result = cluster.run(_jobs().record_real_pid)
    assert set(result.crashed) == {1} and set(result.returns) == {0}
    assert "in record_real_pid" in result.crashed[1].where
    pids = cluster.run(_jobs().real_pids, faults=[]).returns[0]
    assert len(pids) == 2 and os.getpid() not in pids
    for pid in pids:  # killed and reaped: none outlives its run
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_errors_name_the_carrier() -> None:
    with pytest.raises(simfs.ConfigError, match="carrier"):
        simfs.Cluster(carrier="thread")


def _jobs() -> Any:
    import importlib

    sys.path.insert(0, str(TESTS))
    return importlib.import_module("_carrier_jobs")



def test_threads_of_a_rank_process_are_scheduled_like_ranks() -> None:
    cluster = simfs.Cluster(1, 2, carrier="process", seed=5)
    result = cluster.run(_jobs().threads)
    assert not result.errors and not result.thread_errors, result.tracebacks
    for rank in (0, 1):
        squares, done, late = result.returns[rank]
        assert squares == [0, 1, 4, 9, 16] and sorted(done) == [0, 1, 2, 3, 4] and late == "late"
    # (no trace comparison here: ThreadPoolExecutor.shutdown joins a set of threads, in the order of
    # their addresses, on either carrier: docs/limits.md)
    runs = [simfs.Cluster(1, 2, carrier="process", seed=5).run(_jobs().joined_threads) for _ in range(2)]
    assert runs[0].returns == runs[1].returns and not runs[0].errors, runs[0].tracebacks
    assert [str(e) for e in runs[0].trace] == [str(e) for e in runs[1].trace]


def test_a_process_exits_after_its_non_daemon_threads() -> None:
    cluster = simfs.Cluster(1, 1, carrier="process")
    assert cluster.run(_jobs().outlived_by_a_thread).returns == {0: "main returned"}
    assert cluster.run(os.path.exists, "/shared/written-after-main").returns == {0: True}


def test_collectives_meet_in_the_hosts_scheduler() -> None:
    on = {carrier: simfs.Cluster(2, 2, seed=1, carrier=carrier).run(_jobs().collectives)
          for carrier in ("greenlet", "process")}
    assert not on["process"].errors, on["process"].tracebacks
    assert on["process"].returns == on["greenlet"].returns
    assert on["process"].returns[1][3] == [1.0, 1.0] and on["process"].returns[2][3] is None


def test_a_collective_that_never_completes_is_a_hang_naming_the_missing_rank() -> None:
    result = simfs.Cluster(2, 2, carrier="process", collective_timeout=60).run(_jobs().one_rank_skips_the_barrier)
    assert set(result.hung) == {0, 2, 3} and all(h.waiting_for == [1] for h in result.hung.values())
    assert all("in one_rank_skips_the_barrier" in h.where for h in result.hung.values())
    assert type(result.errors[0]).__name__ == "DistBackendError"


def test_a_crash_a_ranks_own_operation_triggers_kills_the_processes_of_its_node() -> None:
    cluster = simfs.Cluster(2, 1, carrier="process", faults=[simfs.CrashNode(node=0, on="open")])
    result = cluster.run(_jobs().record_real_pid)
    assert set(result.crashed) == {0} and not result.errors, result.tracebacks


def test_no_rank_process_outlives_a_killed_host(tmp_path: Path) -> None:
    """The host is killed while its rank swallows every exception: the zygote and the rank, its
    descendants (found through /proc: what a rank prints stays in its capture), end with it."""
    script = "import simfs, _carrier_jobs\nsimfs.Cluster(1, 1, carrier='process').run(_carrier_jobs.outlive_the_host)\n"
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    host = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 120
        while len(descendants := _descendants(host.pid)) < 2:  # the zygote and the rank
            assert time.monotonic() < deadline and host.poll() is None, "the rank process never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the rank in its loop
    finally:
        host.kill()
        host.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(pid) for pid in descendants):
        time.sleep(0.05)
    assert not any(_running(pid) for pid in descendants)


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, as /proc lists each thread's children."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in threads:
        try:
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def _state(pid: int) -> str:
    """The process's state letter (R running, S sleeping, Z zombie...), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return ""


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an exited process its new parent has not reaped)."""
    return _state(pid) not in ("", "Z")


def test_signals_between_rank_processes_run_the_receivers_handlers() -> None:
    result = simfs.Cluster(1, 2, carrier="process").run(_jobs().signals)
    assert not result.errors, result.tracebacks
    assert result.returns == {0: "sent", 1: ([signal.SIGUSR1], "interrupted")}


def test_a_system_calls_answer_is_never_mistaken_for_the_hosts_own_words() -> None:
    def job() -> tuple[str, list[str]]:
        os.symlink("local", "/shared/link")
        os.mkdir("/shared/local")
        return os.readlink("/shared/link"), sorted(os.listdir("/shared"))

    result = simfs.Cluster(1, 1, carrier="process").run(job)
    assert result.returns == {0: ("local", ["link", "local"])}, result.tracebacks


def test_ctrl_c_stops_a_run_whose_rank_never_yields() -> None:
    script = textwrap.dedent("""
        import simfs, _carrier_jobs
        try:
            simfs.Cluster(1, 1, carrier="process").run(_carrier_jobs.spin_forever)
        except simfs.Interrupted as interrupted:
            print("interrupted:", sorted(interrupted.result.errors), flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        # the rank spins: the zygote's child (found[0] is the zygote, which may run while it forks)
        while not (len(found := _descendants(host.pid)) > 1 and _state(rank := found[-1]) == "R"):
            assert time.monotonic() < deadline and host.poll() is None, "the rank process never spun"
            time.sleep(0.05)
        host.send_signal(signal.SIGINT)
        out, _ = host.communicate(timeout=30)
    finally:
        host.kill()
    assert host.returncode == 0 and out.strip() == "interrupted: [0]"
    assert not _running(rank)


def _ran() -> str:
    return "ran"


@pytest.mark.parametrize("carrier", ["process", "greenlet"])
def test_ctrl_c_as_the_simulation_starts_reports_no_rank_as_returned_that_never_ran(
        carrier: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT landing while the simulation thread starts: the run still ends every rank (a rank
    either ran to its return or was killed), and no thread of it runs on past run()."""
    class StartsUnderCtrlC(threading.Thread):
        def start(self) -> None:
            signal.raise_signal(signal.SIGINT)
            super().start()

    # the run's own threads only (simfs's interception owns threading.Thread.start in the host)
    monkeypatch.setattr(run_module, "threading", types.SimpleNamespace(Thread=StartsUnderCtrlC, Event=threading.Event))
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own (an xdist worker ignores it)
    try:
        with pytest.raises(simfs.Interrupted) as interrupted:
            simfs.Cluster(1, 2, carrier=carrier).run(_ran)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, handler)
    result = interrupted.value.result
    assert sorted([*result.returns, *result.errors]) == [0, 1], result.summary()
    assert set(result.returns.values()) <= {"ran"}, result.returns
    assert all("interrupted (Ctrl-C)" in str(error) for error in result.errors.values()), result.tracebacks
    assert not [t for t in threading.enumerate() if t.name == "simfs-run"]


def test_a_rank_refused_at_its_start_leaves_no_process_of_the_ranks_started_before_it() -> None:
    """Rank 10's start is 2 bytes larger than rank 0-9's (RANK=10, LOCAL_RANK=10): with an
    environment that makes theirs exactly the most a rank starts from, ten rank processes and the
    zygote are started before rank 10 is refused, and the refusal ends them all."""
    before = set(_descendants(os.getpid()))  # (an earlier test's, in this pytest worker)
    with pytest.raises(simfs.ConfigError, match="rank 0's process") as too_large:
        simfs.Cluster(1, 11, env={"SIMFS_TEST_LARGE": "x" * 300_000}).run(_environment_size)
    size = re.search(r"would start from ([0-9,]+) bytes", str(too_large.value))
    assert size is not None, too_large.value
    excess = int(size[1].replace(",", "")) - MAX_START
    with pytest.raises(simfs.ConfigError, match="rank 10's process"):
        simfs.Cluster(1, 11, env={"SIMFS_TEST_LARGE": "x" * (300_000 - excess)}).run(_environment_size)
    assert set(_descendants(os.getpid())) <= before


def large_copy() -> int:
    import torch

    target = torch.zeros(1_000_000, dtype=torch.uint8)
    target.copy_(torch.ones(1_000_000, dtype=torch.uint8))  # large enough for torch to split it over threads
    return int(target.sum())


def test_a_parallel_torch_op_in_a_rank_after_the_host_used_its_thread_pool() -> None:
    """The host's OpenMP pool does not survive the fork: a rank process computes on one thread (as
    torchrun's OMP_NUM_THREADS=1), instead of waiting forever for the pool's threads."""
    import torch

    assert float((torch.ones(4_000_000) * 2).sum()) == 8_000_000.0  # the host's pool is running
    result = simfs.Cluster(nodes=1, ranks_per_node=2, watchdog=10).run(large_copy)
    assert result.returns == {0: 1_000_000, 1: 1_000_000}, result.summary()


def _prints_and_returns() -> int:
    print("printed by the rank")
    return 7


def test_a_host_holding_more_than_1023_descriptors_serves_its_ranks(capfd: pytest.CaptureFixture[str]) -> None:
    """The host waits on its ranks with poll(2), not select(2), whose sets end at descriptor 1023:
    a host with many open files (or a run of hundreds of ranks) still hears its ranks."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        result = simfs.Cluster(1, 2).run(_prints_and_returns)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.ok and result.returns == {0: 7, 1: 7}, result.summary()
    assert [out.stdout for out in result.output.values()] == ["printed by the rank\n"] * 2
    assert "printed by the rank" not in capfd.readouterr().out  # kept with the result, not on the console


def _nulled_descriptors() -> int:
    """How many of this process's real descriptors above 2 point at /dev/null (what a rank
    process makes of each descriptor it inherited and does not keep)."""
    import stat

    from simfs import _real

    count = 0
    for fd in range(3, 4096):
        try:
            status = _real.fstat(fd)
        except OSError:
            continue
        count += stat.S_ISCHR(status.st_mode) and status.st_rdev == os.makedev(1, 3)
    return count


def test_a_rank_process_inherits_nothing_the_host_holds_for_the_other_ranks() -> None:
    """Rank processes are forked from the run's zygote, not from the host: before, rank r
    inherited (and nulled) the five descriptors the host held for each rank before it, 24 + 5r
    for 16 ranks, N² in all."""
    result = simfs.Cluster(2, 8, carrier="process").run(_nulled_descriptors)
    assert result.ok, result.summary()
    assert len(set(result.returns.values())) == 1, result.returns


def _environment_size() -> int:
    return len(os.environ["SIMFS_TEST_LARGE"])


def test_a_large_environment_crosses_whole_and_one_too_large_is_refused_by_name() -> None:
    result = simfs.Cluster(1, 1, env={"SIMFS_TEST_LARGE": "x" * 100_000}).run(_environment_size)
    assert result.ok and result.returns[0] == 100_000, result.summary()
    with pytest.raises(simfs.ConfigError, match="its environment is"):
        simfs.Cluster(1, 1, env={"SIMFS_TEST_LARGE": "x" * 300_000}).run(_environment_size)


def _joins_a_thread_of_a_long_odd_name() -> str:
    import threading

    name = "worker-" + "x" * 400 + b"\xe9".decode("utf-8", "surrogateescape")
    thread = threading.Thread(target=time.sleep, args=(5.0,), name=name)
    thread.start()
    thread.join()
    return thread.name[:7]


def test_a_wait_on_a_thread_of_any_name_crosses() -> None:
    """Its wait queue is named after the thread (the job's text: longer than a name field, not
    UTF-8); the request carried it as a bounded name, and the host refused it as forged."""
    result = simfs.Cluster(1, 1).run(_joins_a_thread_of_a_long_odd_name)
    assert result.ok and result.returns[0] == "worker-", result.summary()


def _imported_at() -> float:
    import _preloaded

    return _preloaded.IMPORTED_AT


def test_a_preloaded_module_is_imported_once_before_the_ranks_start() -> None:
    sys.modules.pop("_preloaded", None)
    try:
        alone = simfs.Cluster(nodes=1, ranks_per_node=2).run(_imported_at)
        assert alone.ok and abs(alone.returns[0] - time.time()) > 3600  # each rank imported it, in virtual time
        preloaded = simfs.Cluster(nodes=1, ranks_per_node=2, preload=["_preloaded"]).run(_imported_at)
        assert preloaded.ok, preloaded.summary()
        assert preloaded.returns[0] == preloaded.returns[1] == sys.modules["_preloaded"].IMPORTED_AT
        assert abs(preloaded.returns[0] - time.time()) < 600  # by the host, on its real clock
    finally:
        sys.modules.pop("_preloaded", None)


def _walked_by_collections() -> bool:
    import gc

    import _preloaded

    return any(o is _preloaded.tracked for o in gc.get_objects())


def test_a_preloaded_modules_objects_are_frozen_in_the_ranks() -> None:
    """A module the cluster preloads is imported before the host freezes its heap for the run, so
    the zygote's ranks leave its objects out of their cycle collections (in the permanent
    generation: no walk, no page copied for it); imported inside the run, each rank walked them."""
    sys.modules.pop("_preloaded", None)
    try:
        result = simfs.Cluster(nodes=1, ranks_per_node=2, preload=["_preloaded"]).run(_walked_by_collections)
        assert result.ok, result.summary()
        assert result.returns == {0: False, 1: False}
    finally:
        sys.modules.pop("_preloaded", None)


_LOOKS_WHERE = """
import simfs
from simfs.confinement import readable
from simfs.confinement.confine import confined_here

looks = []  # per look through the modules for what ranks may read: whether it was in a confined rank
looked = readable._module_directories
readable._module_directories = lambda known: looks.append(confined_here()) or looked(known)
result = simfs.Cluster(nodes=1, ranks_per_node=2).run(lambda: looks.count(True))
print(result.ok, sorted(result.returns.values()), looks.count(False) > 0)
"""


def test_a_rank_confines_itself_with_what_it_may_read_found_before_its_fork() -> None:
    """What a rank may read is found before the ranks are forked, in a fresh process too: a rank
    that looked through every module again as it confined itself spent ~17 ms and copied ~3,400
    pages doing it (every rank did, whenever the host had imported a module since the run's
    preparation: a process's first run did)."""
    done = subprocess.run([sys.executable, "-c", _LOOKS_WHERE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "[0,", "0]", "True"], done.stdout


_SCANS_WHERE = """
import simfs
from simfs.confinement.confine import confined_here
from simfs.rank.c10d import install

scans = []  # per module looked through for c10d's names: whether it was in a confined rank


class Counted(dict):
    def __setitem__(self, key, value):
        scans.append(confined_here())
        super().__setitem__(key, value)


install._scanned = Counted(install._scanned)
result = simfs.Cluster(nodes=1, ranks_per_node=2).run(lambda: scans.count(True))
print(result.ok, sorted(result.returns.values()), scans.count(False) > 0)
"""


def test_a_rank_installs_c10d_with_where_its_names_are_found_before_its_fork() -> None:
    """Where modules hold c10d's names is found again just before the zygote's fork: the
    interception's install imports modules after the run's preparation found them, and every rank
    then looked through every module again as it installed c10d (3-8 ms a rank, its pages copied:
    a no-op run of 4 ranks took 101-107 ms, now 70-73)."""
    done = subprocess.run([sys.executable, "-c", _SCANS_WHERE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "[0,", "0]", "True"], done.stdout


def test_a_rank_finds_what_every_rank_installs_of_c10d_made_in_its_zygote() -> None:
    """torch.distributed's own functions back, the functional collectives' kernels, the "simfs"
    backend and the replaced names are alike in every rank whose world is torch's: the zygote
    makes them once before its forks (each rank spent ~2 ms and ~500 copied pages on them), and
    each rank's collectives still meet; a run of simfs's own torch.distributed keeps its zygote's
    stand-ins."""
    done = subprocess.run([sys.executable, "-c", _UNINSTALLS_WHERE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "[(0,", "1,", "2.0),", "(0,", "1,", "2.0)]", "True", "[0,", "0]"], \
        done.stdout


_UNINSTALLS_WHERE = """
import torch
import torch.distributed as dist
import simfs
from simfs.confinement.confine import confined_here
from simfs.rank.intercept import torchdist

uninstalls = []  # per uninstall of simfs's torch.distributed stand-ins: whether it was in a confined rank
real_uninstall = torchdist.uninstall


def counted():
    uninstalls.append(confined_here())
    real_uninstall()


torchdist.uninstall = counted


def job():
    total = torch.ones(1)
    dist.all_reduce(total)
    return uninstalls.count(True), len(uninstalls), float(total[0])


def patched_job():
    return len(uninstalls)


native = simfs.Cluster(nodes=1, ranks_per_node=2).run(job)
print(native.ok, sorted(native.returns.values()))
patched = simfs.Cluster(nodes=1, ranks_per_node=2, torch_distributed="patched").run(patched_job)
print(patched.ok, sorted(patched.returns.values()))
"""


def test_a_rank_repoints_the_console_handlers_its_zygote_found() -> None:
    """The logging handlers on the console are found in the zygote before its forks: each rank
    looked through every logger (~0.9 ms and ~320 copied pages with torch imported); it still
    repoints them (test_a_log_handler_made_on_the_hosts_console_writes_to_the_ranks)."""
    done = subprocess.run([sys.executable, "-c", _WALKS_LOGGERS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True", "True"], done.stdout


_WALKS_LOGGERS = """
import logging
import os
import simfs

walkers = []  # the pid of each process that looked through every logger (a rank's own is simulated in its job)


class Recorded(dict):
    def values(self):
        walkers.append(os.getpid())
        return super().values()


logging.Logger.manager.loggerDict = Recorded(logging.Logger.manager.loggerDict)
result = simfs.Cluster(nodes=1, ranks_per_node=2).run(lambda: walkers[-1])
last = set(result.returns.values())  # the zygote's alone; each rank's own when every rank looked
print(result.ok, len(last) == 1, last != {os.getpid()})
"""


def _logs_a_warning() -> bool:
    import logging

    logging.getLogger("simfs-test-library").warning("a warning from the rank")
    return True


def test_a_log_handler_made_on_the_hosts_console_writes_to_the_ranks(capfd: pytest.CaptureFixture[str]) -> None:
    """A library adds its handler on sys.stderr at import (transformers does): imported before the
    ranks start (Cluster's preload), each rank's records reach its own console, as under torchrun,
    which the result keeps (nothing reaches the host's)."""
    import logging

    logger = logging.getLogger("simfs-test-library")
    handler = logging.StreamHandler(sys.stderr)  # pytest's capture of the host's console
    logger.addHandler(handler)
    try:
        result = simfs.Cluster(nodes=1, ranks_per_node=2).run(_logs_a_warning)
    finally:
        logger.removeHandler(handler)
    assert result.ok, result.summary()
    assert [out.stderr.count("a warning from the rank") for out in result.output.values()] == [1, 1]
    assert "a warning from the rank" not in capfd.readouterr().err
