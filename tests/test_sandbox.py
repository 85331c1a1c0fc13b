"""The sandbox holds at the process boundary (issue 29): each class of escape the held-out attempts
found, tried again by rank code with ctypes, raw system calls, simfs's own modules and the
descriptors it holds (tests/_sandbox_jobs.py), through Cluster.run, greenlet ranks, explore and
simfs run. The host runs in a subprocess of its own, checked after it exited: its terminal's
input queue, its limits, its files and descriptors, the processes and kernel objects left
behind, its stdout."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import pty
import resource
import socket
import stat
import subprocess
import sys
import termios
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import simfs
from simfs.confinement import landlock, seccomp

TESTS = os.path.dirname(os.path.abspath(__file__))

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's (Landlock, seccomp)"),
    pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter is written for this machine"),
]


def _needs_landlock() -> None:
    if not landlock.abi():
        from conftest import missing

        missing("landlock", "this kernel has no Landlock (Linux 5.13+, enabled at boot: lsm=...,landlock)")


def host(body: str, tmp_path: Path, *, stdin: Any = subprocess.DEVNULL, stdout: Any = None,
         env: dict[str, str] | None = None, timeout: float = 240) -> tuple[dict[str, Any], subprocess.CompletedProcess]:
    """Run ``body`` (Python, with ``simfs`` and ``jobs`` imported) in a fresh interpreter, the host;
    what it stores in ``out`` comes back as JSON, with how the process ended."""
    result_file = tmp_path / "host-result.json"
    script = "import json, os, sys, resource\nimport simfs, scenarios\nimport _sandbox_jobs as jobs\nout = {}\n" + \
        textwrap.dedent(body) + \
        f"\nopen({str(result_file)!r}, 'w').write(json.dumps(out, default=repr))\n"
    environment = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   "SIMFS_TEST_CANARY": str(tmp_path / "canary"), **(env or {})}
    cwd = tmp_path / "host"  # on the host's import path ("" is its directory), so readable by ranks
    cwd.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", script], stdin=stdin,
                          stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                          env=environment, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, (proc.stderr or b"")[-3000:]
    return json.loads(result_file.read_text()), proc


RESULT = ("result = {run}\n"
          "out['returns'] = result.returns\n"
          "out['errors'] = {{r: [type(e).__name__, str(e)] for r, e in result.errors.items()}}\n"
          "out['trace'] = [list(e) for e in result.trace]\n")


def _run(job: str, *args: Any, ranks: int = 1, carrier: str = "process") -> str:
    call = f"simfs.Cluster(1, {ranks}, carrier={carrier!r}).run(jobs.{job}, *{args!r})"
    return RESULT.format(run=call)


# -- class 1: code of the rank's choosing in the host -------------------------------------------------
@pytest.mark.parametrize("job", ["returns_an_object_array", "forges_an_object_array_in_msgpack"])
def test_an_object_array_from_a_rank_is_refused_and_ends_only_that_rank(tmp_path: Path, job: str) -> None:
    out, _ = host(_run(job) + "out['repr'] = repr(result.returns) + result.summary()", tmp_path)
    assert out["returns"] == {}
    kind, message = out["errors"]["0"]
    assert kind == "SimfsError" and "never runs in the host" in message, message
    assert not (tmp_path / "canary").exists()


# -- class 2: simfs run's worker pool -------------------------------------------------------------------
def test_a_greenlet_rank_cannot_reach_simfs_runs_worker_pool(tmp_path: Path) -> None:
    (tmp_path / "attack.py").write_text(textwrap.dedent("""
        import pickle, os
        from simfs import _real

        class Touch:
            def __reduce__(self):
                return os.system, ("touch " + os.environ["SIMFS_TEST_CANARY"],)

        def job():
            forged = pickle.dumps(Touch())
            for fd in range(3, 256):
                try:
                    _real.write(fd, len(forged).to_bytes(4, "big") + forged)
                except OSError:
                    pass
    """))
    proc = subprocess.run([sys.executable, "-m", "simfs", "run", "attack.py:job", "--carrier", "greenlet",
                           "--examples", "3", "--jobs", "2", "--report", ""], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "SIMFS_TEST_CANARY": str(tmp_path / "canary")})
    # greenlet ranks share the child's process: what they write reaches only its own channel, which
    # the worker refuses (an error verdict), never simfs run's worker pool (a pickle it would load)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "canary").exists()


# -- class 3: other processes' limits ---------------------------------------------------------------------
def test_a_rank_sets_no_limit_but_its_own(tmp_path: Path) -> None:
    body = _run("limits_others", ranks=2) + textwrap.dedent("""
        out['limits'] = [resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NOFILE)]
        f = scenarios.explore(jobs.limits_others, nodes=1, ranks_per_node=2, profile='local', max_examples=2)
        out['explore'] = f.failed
        out['after explore'] = [resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NOFILE)]
    """)
    before = [list(resource.getrlimit(resource.RLIMIT_CPU)), list(resource.getrlimit(resource.RLIMIT_NOFILE))]
    out, _ = host(body, tmp_path)
    assert out["errors"] == {}, out["errors"]
    assert out["returns"]["0"] == {"host cpu": "EPERM", "host files": "EPERM", "sibling memory": "EPERM", "own": 0}
    assert out["returns"]["1"]["own memory"] == resource.getrlimit(resource.RLIMIT_AS)[0] & (2**64 - 1)
    assert out["limits"] == out["after explore"] == before and out["explore"] is False


# -- class 4: the console ------------------------------------------------------------------------------------
def test_a_rank_cannot_type_into_the_users_terminal(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        body = "os.setsid(); fcntl_ = __import__('fcntl'); fcntl_.ioctl(0, __import__('termios').TIOCSCTTY, 0)\n" + \
            _run("types_into_the_terminal", ranks=1)
        out, _ = host(body, tmp_path, stdin=terminal, stdout=terminal)
        assert out["returns"]["0"] == ["ENOTTY", "ENOTTY", "ENOTTY"] or all(
            r in ("EPERM", "ENOTTY", "EIO") for r in out["returns"]["0"]), out
        pending = fcntl.ioctl(terminal, termios.FIONREAD, b"\0\0\0\0")
        assert int.from_bytes(pending, sys.byteorder) == 0  # nothing waits in the terminal's input queue
    finally:
        os.close(controller)
        os.close(terminal)


def test_a_rank_cannot_rewrite_what_the_host_printed_to_a_file(tmp_path: Path) -> None:
    printed = tmp_path / "stdout.txt"
    with printed.open("w") as stdout:
        body = "print('the host printed this first', flush=True)\n" + _run("rewrites_the_hosts_stdout")
        out, _ = host(body, tmp_path, stdout=stdout)
    assert printed.read_text().startswith("the host printed this first\n")
    assert out["returns"]["0"] == ["ESPIPE", "EINVAL"]


def test_a_rank_reads_devnull_not_the_hosts_stdin(tmp_path: Path) -> None:
    (tmp_path / "stdin.txt").write_text("the user's secret\n")
    body = _run("reads_the_hosts_stdin") + "out['host read'] = sys.stdin.read()"
    with (tmp_path / "stdin.txt").open() as stdin:
        out, _ = host(body, tmp_path, stdin=stdin)
    assert out["returns"]["0"] == "read returned 0" and out["host read"] == "the user's secret\n"


def test_simfs_run_shows_a_ranks_escape_sequences_as_text(tmp_path: Path) -> None:
    """On a terminal (a pty), where rich passes what it prints through."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "simfs", "run", "_sandbox_jobs:raises_escape_sequences",
                                 "--examples", "2", "--report", ""], stdout=terminal, stderr=terminal,
                                stdin=subprocess.DEVNULL, cwd=tmp_path,
                                env={**os.environ, "TERM": "xterm", "COLUMNS": "200",
                                     "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
        shown = _read_until_exit(proc, controller, timeout=300)
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 1, shown[-3000:]
    for sequence in (b"\x1b]0;pwned", b"\x07", b"\x1b[2J", b"\x1b]52;"):
        assert sequence not in shown, shown[-3000:]
    assert b"\\x1b]0;pwned\\x07" in shown and b"[bold]markup[/bold]" in shown


def _read_until_exit(proc: subprocess.Popen[bytes], fd: int, timeout: float) -> bytes:
    """What ``proc`` writes to the terminal whose controller is ``fd``, read as it comes (a full
    terminal would stop it) until it exits."""
    os.set_blocking(fd, False)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except (BlockingIOError, OSError):
                break
            chunks.append(chunk)
        if exited:
            return b"".join(chunks)
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"simfs run did not end in {timeout:g} s: {b''.join(chunks)[-3000:]!r}")


def test_what_a_rank_prints_is_kept_and_shown_made_visible(tmp_path: Path) -> None:
    """A rank process's stdout reaches its run's capture, not the host's stdout; where it is
    shown (a failed run's summary), its control sequences are made visible."""
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "printer.py").write_text(
        "def job():\n    print('from the rank \\x1b[2J')\n    raise ValueError('after printing')\n")
    body = "sys.path.insert(0, os.getcwd())\nimport printer\n" + RESULT.format(
        run="simfs.Cluster(1, 2).run(printer.job)") + (
        "out['kept'] = {r: o.stdout for r, o in result.output.items()}\nout['summary'] = result.summary()\n")
    out, proc = host(body, tmp_path)
    assert out["kept"] == {"0": "from the rank \x1b[2J\n", "1": "from the rank \x1b[2J\n"}  # (JSON keys)
    assert b"from the rank" not in proc.stdout
    assert out["summary"].count("from the rank \\x1b[2J") == 2 and "\x1b" not in out["summary"]


# -- class 5: the greenlet child's descriptors --------------------------------------------------------------
def test_greenlet_ranks_reach_none_of_the_callers_descriptors(tmp_path: Path, listener: socket.socket) -> None:
    log = tmp_path / "log.txt"
    body = textwrap.dedent(f"""
        import socket
        log = open({str(log)!r}, 'a')
        log.write('the caller logged this\\n'); log.flush()
        peer = socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}))
        try:
            simfs.Cluster(1, 2, carrier='greenlet').run(jobs.writes_inherited_descriptors)
        except simfs.ChildFailed as exc:  # the ranks wrote over their child's own channel too
            out['failed'] = str(exc)
        log.close(); peer.close()
    """)
    out, _ = host(body, tmp_path)
    server, _ = listener.accept()  # the caller's connection, waiting in the backlog
    server.settimeout(5)
    assert server.recv(1024) == b""  # the caller's connection carried nothing
    assert log.read_text() == "the caller logged this\n"
    assert "does not load" in out["failed"]


@pytest.fixture
def listener() -> Any:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server
    server.close()


# -- class 6: kernel objects --------------------------------------------------------------------------------
def _ipc() -> dict[str, int]:
    return {kind: len(Path(f"/proc/sysvipc/{kind}").read_text().splitlines()) for kind in ("shm", "msg", "sem")}


def _keys() -> list[str]:
    """The keys of the test's name the kernel holds (their lines of /proc/keys)."""
    return [line for line in Path("/proc/keys").read_text().splitlines() if "simfs-sandbox-test" in line]


def test_a_rank_makes_no_kernel_object_and_locks_no_real_file(tmp_path: Path) -> None:
    _needs_landlock()
    target = Path(TESTS) / "_sandbox_jobs.py"  # readable by ranks: on the import path
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # holds it open, with bytes a reader could drain
    os.write(writer, b"the caller's data")
    before = _ipc(), _keys()
    try:
        out, _ = host(_run("makes_kernel_objects", str(target), str(fifo)), tmp_path)
        assert out["returns"]["0"] == {"key": "EPERM", "shm": "EPERM", "msg": "EPERM", "sem": "EPERM", "mq": "EPERM",
                                       "fifo": "EACCES", "open": out["returns"]["0"]["open"], "flock": "EPERM"}
        assert isinstance(out["returns"]["0"]["open"], int)
        assert (_ipc(), _keys()) == before
        assert os.read(writer, 64) == b"the caller's data"  # nothing drained it
        with target.open() as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free
    finally:
        os.close(writer)


# -- class 7: peers' outboxes -----------------------------------------------------------------------------
def test_a_rank_cannot_write_its_peers_outboxes(tmp_path: Path) -> None:
    out, _ = host(_run("tampers_with_outboxes", 3, ranks=3), tmp_path)
    assert out["errors"] == {}, out["errors"]
    for rank in ("0", "1", "2"):
        assert out["returns"][rank]["sums"] == [[3.0]] * 3
    assert out["returns"]["2"]["tampering"] == [["truncate", "EPERM"], ["write", "EPERM"]]


# -- class 7: nothing survives a run ---------------------------------------------------------------------
@pytest.mark.parametrize("carrier", ["process", "greenlet"])
def test_a_rank_cannot_write_the_callers_shared_memory_or_a_file_it_mapped(tmp_path: Path, carrier: str) -> None:
    mapped = tmp_path / "mapped.bin"
    mapped.write_bytes(b"onfile" + bytes(4090))
    body = textwrap.dedent(f"""
        import mmap
        anonymous = mmap.mmap(-1, 4096)
        anonymous[:6] = b"inhost"
        with open({str(mapped)!r}, "r+b") as file:
            on_file = mmap.mmap(file.fileno(), 4096)
        jobs.HOST_MAPS[:] = [anonymous, on_file]
    """) + _run("writes_the_callers_shared_memory", ranks=2, carrier=carrier) + \
        "out['after'] = [bytes(anonymous[:6]).decode(), bytes(on_file[:6]).decode()]\n"
    out, _ = host(body, tmp_path)
    assert out["errors"] == {}, out["errors"]
    assert out["returns"]["0"] == ["b'inhost'", "b'onfile'"]  # the rank read the caller's bytes, and wrote
    assert out["after"] == ["inhost", "onfile"]
    assert mapped.read_bytes()[:6] == b"onfile"


def test_a_kept_zygotes_ranks_leave_the_next_run_what_the_first_got(tmp_path: Path) -> None:
    body = textwrap.dedent("""
        import mmap
        anonymous = mmap.mmap(-1, 4096)
        anonymous[:6] = b"inhost"
        jobs.HOST_MAPS[:] = [anonymous]
        with simfs.zygote_kept(jobs.writes_the_callers_shared_memory):
            runs = [simfs.Cluster(1, 2).run(jobs.writes_the_callers_shared_memory) for _ in range(2)]
        out['returns'] = [result.returns for result in runs]
    """)
    out, _ = host(body, tmp_path)
    assert out["returns"] == [{"0": ["b'inhost'"], "1": ["b'inhost'"]}] * 2


def test_a_rank_process_leads_a_session_and_group_of_its_own(tmp_path: Path) -> None:
    """From the caller's own process, and from simfs.isolated's confined child (a search's)."""
    body = _run("its_session_and_group", ranks=2) + "out['host'] = [os.getsid(0), os.getpgid(0)]\n" + \
        textwrap.dedent("""
            def in_child():
                result = simfs.Cluster(1, 2).run(jobs.its_session_and_group)
                return result.returns, {r: str(e) for r, e in result.errors.items()}
            out['isolated'], out['isolated_errors'] = simfs.isolated(in_child)
        """)
    out, _ = host(body, tmp_path)
    assert out["errors"] == out["isolated_errors"] == {}, out
    for ids in [*out["returns"].values(), *out["isolated"].values()]:
        assert ids["sid"] == ids["pgid"] == ids["pid"], ids
        assert ids["sid"] not in out["host"]


# -- class 8: descendants ---------------------------------------------------------------------------------
def _marked(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_rank_starts_no_process_that_outlives_its_run(tmp_path: Path) -> None:
    mark = f"SIMFS_SANDBOX_MARK={uuid.uuid4()}"
    body = _run("forks_sleepers", 20, ranks=2) + \
        "f = scenarios.explore(lambda: jobs.forks_sleepers(5), nodes=1, ranks_per_node=2, profile='local', " \
        "max_examples=2)\n"
    out, _ = host(body, tmp_path, env={mark.split("=")[0]: mark.split("=")[1]})
    assert out["returns"] == {"0": ["EPERM"] * 20, "1": ["EPERM"] * 20}
    assert _marked(mark) == []


def test_a_ranks_memory_is_bounded_by_its_cluster(tmp_path: Path) -> None:
    body = "result = simfs.Cluster(1, 2, rank_memory=512 << 20).run(jobs.takes_memory, 2048)\n" + \
        "out['errors'] = {r: [type(e).__name__, isinstance(e, MemoryError), str(e)]\n" + \
        "                 for r, e in result.errors.items()}\n" + \
        "out['returns'] = result.returns\n" + \
        "out['after'] = simfs.Cluster(1, 2).run(jobs.takes_memory, 128).returns\n"
    out, _ = host(body, tmp_path)
    assert out["returns"] == {"0": 1}
    kind, is_memory_error, message = out["errors"]["1"]
    assert kind == "RankOutOfMemory" and is_memory_error and "0.5 GiB" in message
    assert out["after"] == {"0": 1, "1": 2}  # the host and the next run are as before


def test_a_rank_that_cuts_its_socket_ends_its_run_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    out, _ = host(_run("runs_another_program", ranks=2), tmp_path)
    assert time.monotonic() - started < 25  # /bin/sleep 30 would have held the run
    assert out["errors"]["0"][0] == "OutsideSimulation" and "closed its channel" in out["errors"]["0"][1]


# -- class 9: forged requests -------------------------------------------------------------------------------
def test_a_rank_forges_no_request(tmp_path: Path) -> None:
    out, _ = host(_run("forges_requests", ranks=2), tmp_path)
    forged = out["returns"]["1"]
    assert forged["note"] == "None"
    assert forged["elapse nan"] == forged["elapse inf"] == forged["block nan"] == "ValueError"
    notes = [(rank, op) for _, rank, _, op, *_ in out["trace"] if op in ("forged", "noted")]
    assert notes == [(0, "noted"), (1, "noted")]


def test_a_note_in_another_ranks_name_ends_the_rank_that_forged_it(tmp_path: Path) -> None:
    out, _ = host(_run("forges_a_note_as_rank_0", ranks=2), tmp_path)
    assert out["errors"]["1"][0] == "SimfsError" and "does not load" in out["errors"]["1"][1], out["errors"]
    assert not [line for line in out["trace"] if line[3] == "forged"]


def test_a_sparse_stacks_file_costs_the_host_nothing(tmp_path: Path) -> None:
    body = "simfs.Cluster(1, 1).run(jobs.forges_requests)\n" + \
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n" + \
        _run("grows_its_stacks_file_and_dies") + \
        "out['grew'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
    out, _ = host(body, tmp_path)
    assert out["errors"]["0"][0] == "RankDied" and "SIGSEGV" in out["errors"]["0"][1]
    assert out["grew"] < 64 << 10  # KiB: 256 MiB read whole would show


# -- class 10: simfs run's own process imports no job ---------------------------------------------------------
def test_simfs_run_imports_a_job_file_only_confined(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import logging, os
        os.makedirs("made-at-import", exist_ok=True)
        logging.basicConfig(filename="logged-at-import.log")
        logging.warning("imported")

        def job():
            pass
    """))
    proc = subprocess.run([sys.executable, "-m", "simfs", "run", "job.py:job", "--examples", "2", "--report", ""],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    # the import's first real write is refused, and the command says so as a usage error
    assert proc.returncode == 2 and "Permission denied: 'made-at-import'" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "made-at-import").exists() and not (tmp_path / "logged-at-import.log").exists()




def _devnull_in_every_mode() -> list[str]:
    """What dill does at import (dill/_dill.py, get_file_type): /dev/null opened in each mode,
    the type of what open returned; then a seek and a read of the read-write one."""
    opened = [open(os.devnull, mode, buffering=buffering)
              for mode, buffering in (("rb", 0), ("r", -1), ("r+b", -1), ("rb", -1), ("wb", -1), ("r+", -1))]
    kinds = ["raw" if isinstance(f, io.RawIOBase) else type(f).__name__ for f in opened]
    kinds += [type(f.buffer).__name__ for f in opened if isinstance(f, io.TextIOWrapper)]
    with open(os.devnull, "r+b") as both:
        both.write(b"gone")
        kinds.append(f"{both.seek(10)} {both.tell()} {both.read()!r}")
    return kinds


def _devnull_through_descriptors() -> list[object]:
    """/dev/null through descriptors (os.open; _pyio.open, as dill's import does): what each call
    gives, and the errno of each that fails."""
    import _pyio

    out: list[object] = []
    fd = os.open(os.devnull, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    out += [os.write(fd, b"gone"), os.read(fd, 10), os.lseek(fd, 100, os.SEEK_SET), os.lseek(fd, 5, os.SEEK_END)]
    st = os.fstat(fd)
    out += [stat.S_ISCHR(st.st_mode), oct(stat.S_IMODE(st.st_mode)), st.st_size, st.st_rdev == os.makedev(1, 3),
            os.stat(os.devnull).st_rdev == st.st_rdev, os.access(os.devnull, os.W_OK)]
    for call in (lambda: os.fsync(fd), lambda: os.write(os.open(os.devnull, os.O_RDONLY), b"x"),
                 lambda: os.open(os.devnull, os.O_RDONLY | os.O_DIRECTORY)):
        try:
            call()
            out.append("no error")
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
    os.close(fd)
    for mode in ("r", "rb", "r+b", "wb"):
        with _pyio.open(os.devnull, mode) as f:
            out.append(type(f).__name__)
    return out


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_devnull_through_descriptors_is_a_real_ones(carrier: str) -> None:
    """os.open of /dev/null gives a simulated null device (drivers/char/mem.c: reads at their end,
    writes taken whole, seeks at 0, no fsync): before, it was "no such file", so _pyio.open of it
    failed, and with it dill's import, which torch makes where dill is installed: a rank that
    imported torch itself failed."""
    result = simfs.Cluster(1, 1, carrier=carrier).run(_devnull_through_descriptors)
    assert result.ok, result.summary()
    assert result.returns[0] == _devnull_through_descriptors()


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_devnull_opens_in_every_mode_a_real_one_does(carrier: str) -> None:
    """/dev/null is seekable on Linux (a seek lands at 0), so Python opens it for reading and
    writing; before, "r+b" raised UnsupportedOperation in a rank, and a job whose ranks import
    torch first (torch imports dill when installed) failed at the import."""
    result = simfs.Cluster(1, 1, carrier=carrier).run(_devnull_in_every_mode)
    assert result.ok, result.summary()
    assert result.returns[0] == _devnull_in_every_mode()
