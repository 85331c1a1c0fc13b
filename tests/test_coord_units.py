"""coord in one process, without torch.distributed: the LocalComm fallback, wait_for's backoff
and timeouts, atomic_write, fsync_dir, FileLock (leases, takeover, renewal, generations),
rank0_decides / makedirs_once on one rank, and sync_files / build_manifest on a local disk."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib
import json
import multiprocessing
import os
import random
import socket
import stat
import tempfile
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coord

wait_mod = importlib.import_module("coord.wait")
sync_mod = importlib.import_module("coord.sync")
atomic_mod = importlib.import_module("coord.atomic")


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


# -- get_comm and LocalComm ------------------------------------------------------------------------

def test_get_comm_falls_back_to_local_comm_when_not_initialized() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    comm = coord.get_comm()
    assert isinstance(comm, coord.LocalComm)
    assert isinstance(comm, coord.Comm)  # the runtime-checkable protocol
    assert (comm.rank, comm.world_size, comm.local_rank, comm.local_world_size, comm.node, comm.num_nodes) == \
        (0, 1, 0, 1, 0, 1)
    assert coord.get_comm(comm) is comm  # a Comm passes through unchanged
    with pytest.raises(ValueError, match="not initialized"):
        coord.get_comm(object())  # a process group without torch.distributed


@given(obj=st.recursive(st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=8),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                  max_size=3), max_leaves=8))
@settings(max_examples=25)
def test_local_comm_collectives_are_the_identity(obj) -> None:
    comm = coord.get_comm()
    assert comm.barrier() is None and comm.barrier(timeout=1.0) is None
    assert comm.broadcast_object(obj) == obj
    assert comm.all_gather_object(obj) == [obj]
    assert comm.gather_object(obj) == [obj]
    assert comm.scatter_object([obj]) == obj


def test_local_comm_bytes_subgroup_and_bad_arguments() -> None:
    comm = coord.LocalComm()
    out = comm.broadcast_bytes(bytearray(b"abc"))
    assert out == b"abc" and type(out) is bytes
    assert comm.broadcast_bytes(b"") == b""
    with pytest.raises(ValueError, match="source must pass the bytes"):
        comm.broadcast_bytes(None)
    with pytest.raises(ValueError, match="one object per rank"):
        comm.scatter_object(None)
    with pytest.raises(ValueError, match="one object per rank"):
        comm.scatter_object([])
    assert comm.subgroup([0]) is comm and comm.subgroup([0, 3]) is comm
    assert comm.subgroup([1, 2]) is None
    assert "LocalComm" in repr(comm)


# -- wait_for: backoff, jitter, timeouts -------------------------------------------------------------

class FakeTime:
    """Stands in for the ``time`` module inside coord.wait: sleeps advance a virtual clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


@contextlib.contextmanager
def fake_clock():
    clock = FakeTime()
    real = wait_mod.time
    wait_mod.time = clock
    try:
        yield clock
    finally:
        wait_mod.time = real


def _check_backoff(sleeps: list[float], interval: float, max_interval: float, deadline: float | None) -> None:
    """Each sleep is the nominal delay (interval doubling up to max_interval) times a jitter in
    [0.5, 1.5]; only a sleep that ends exactly at the deadline may be shorter."""
    elapsed = 0.0
    nominal = interval
    for k, s in enumerate(sleeps):
        if k:
            nominal = min(nominal * 2, max_interval)
        elapsed += s
        assert s <= 1.5 * nominal + 1e-12, (k, s, nominal)
        if s < 0.5 * nominal - 1e-12:
            assert deadline is not None and abs(elapsed - deadline) < 1e-9, (k, s, nominal, elapsed, deadline)


@given(interval=st.floats(0.001, 1.0), factor=st.floats(1.0, 64.0), timeout=st.floats(0.0, 30.0))
@settings(max_examples=60)
def test_wait_for_backoff_and_timeout(interval: float, factor: float, timeout: float) -> None:
    max_interval = interval * factor
    calls = []
    with fake_clock() as clock:
        with pytest.raises(coord.WaitTimeout) as info:
            coord.wait_for(lambda: calls.append(clock.now), timeout=timeout, what="the thing",
                           interval=interval, max_interval=max_interval)
    exc = info.value
    assert isinstance(exc, TimeoutError)
    assert exc.tries == len(calls) == len(clock.sleeps) + 1
    assert calls[0] == 0.0  # the first try is immediate
    assert exc.waited >= timeout - 1e-9
    assert abs(exc.waited - sum(clock.sleeps)) < 1e-9  # never sleeps past the deadline
    _check_backoff(clock.sleeps, interval, max_interval, timeout)
    # tries: the doubling phase, then at least one try per max_interval/2 of the rest (plus the
    # last try at the deadline and one for rounding at the deadline)
    doubling, nominal = 0, interval
    while nominal < max_interval:
        doubling, nominal = doubling + 1, nominal * 2
    assert exc.tries <= doubling + timeout / (0.5 * max_interval) + 3


@given(succeed_at=st.integers(1, 12), interval=st.floats(0.001, 0.5), factor=st.floats(1.0, 16.0))
@settings(max_examples=40)
def test_wait_for_returns_the_truthy_value(succeed_at: int, interval: float, factor: float) -> None:
    calls = []

    def predicate():
        calls.append(1)
        return {"found": len(calls)} if len(calls) == succeed_at else 0

    with fake_clock() as clock:
        value = coord.wait_for(predicate, timeout=1e6, what="x", interval=interval, max_interval=interval * factor)
    assert value == {"found": succeed_at}
    assert len(calls) == succeed_at and len(clock.sleeps) == succeed_at - 1
    _check_backoff(clock.sleeps, interval, interval * factor, None)


def test_wait_for_real_clock() -> None:
    start = time.monotonic()
    ready = start + 0.15
    assert coord.wait_for(lambda: time.monotonic() >= ready, timeout=5, what="x", interval=0.01,
                          max_interval=0.04) is True
    took = time.monotonic() - start
    assert 0.15 <= took < 0.15 + 1.5 * 0.04 + 0.5
    start = time.monotonic()
    with pytest.raises(coord.WaitTimeout):
        coord.wait_for(lambda: False, timeout=0.2, what="x", interval=0.01, max_interval=0.05)
    assert 0.2 <= time.monotonic() - start < 0.2 + 0.5


def test_wait_for_does_not_touch_the_global_random_state() -> None:
    random.seed(0)
    state = random.getstate()
    runs = []
    for _ in range(2):
        random.seed(0)  # every rank seeds alike in real training code
        with fake_clock() as clock:
            with pytest.raises(coord.WaitTimeout):
                coord.wait_for(lambda: False, timeout=10, what="x", interval=0.1, max_interval=1.0)
        assert random.getstate() == state
        runs.append(clock.sleeps)
    assert runs[0] != runs[1]  # jitter is not derived from the seeded global generator


def _seeded_child(directory: str) -> dict:
    """In a fresh process: what a rank sees after random.seed(0)."""
    random.seed(0)
    naive = [random.random() for _ in range(4)]
    with fake_clock() as clock:
        try:
            coord.wait_for(lambda: False, timeout=5, what="x", interval=0.1, max_interval=1.0)
        except coord.WaitTimeout:
            pass
    random.seed(0)
    target = os.path.join(directory, "shared.bin")
    with coord.atomic_write(target) as f:
        temp = sorted(set(os.listdir(directory)) - {"shared.bin"})
        f.write(b"x")
    return {"naive": naive, "jitter": clock.sleeps, "temp": temp, "pid": os.getpid()}


def test_jitter_and_temp_names_differ_between_processes_seeded_alike(tmp_path) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = []
    for _ in range(2):  # one pool each: a shared pool may run both calls in one process
        with ctx.Pool(1) as pool:
            results.append(pool.apply(_seeded_child, (str(tmp_path),)))
    a, b = results
    assert a["pid"] != b["pid"]
    assert a["naive"] == b["naive"]  # the naive source: identical in every process
    assert a["jitter"] != b["jitter"]
    assert len(a["temp"]) == len(b["temp"]) == 1 and a["temp"] != b["temp"]


def test_wait_timeout_message() -> None:
    with fake_clock():
        with pytest.raises(coord.WaitTimeout) as info:
            coord.wait_for(lambda: None, timeout=3.0, what="checkpoint step 7", interval=0.5, max_interval=1.0)
    exc = info.value
    assert isinstance(exc, TimeoutError)
    msg = str(exc)
    assert "checkpoint step 7" in msg and f"{exc.tries} tries" in msg and "timed out after 3.0s" in msg
    assert exc.what == "checkpoint step 7" and exc.waited == pytest.approx(3.0)
    assert "acdirmax" in msg  # the default hint names the usual cause
    with fake_clock():
        with pytest.raises(coord.WaitTimeout) as info:
            coord.wait_for(lambda: 0, timeout=0, what="w", hint="")
    assert str(info.value) == "timed out after 0.0s and 1 tries waiting for w"
    with fake_clock():
        with pytest.raises(coord.WaitTimeout, match=r"waiting for w\. look elsewhere$"):
            coord.wait_for(lambda: 0, timeout=0.1, what="w", hint="look elsewhere")
    assert issubclass(coord.WaitTimeout, TimeoutError) and issubclass(coord.LockTimeout, TimeoutError)
    assert issubclass(coord.LockLost, coord.CoordError) and issubclass(coord.CoordError, RuntimeError)


@pytest.mark.parametrize("kwargs", [dict(timeout=-1), dict(interval=0), dict(interval=-0.1),
                                    dict(interval=1.0, max_interval=0.5)])
def test_wait_for_rejects_bad_arguments(kwargs) -> None:
    args = dict(timeout=1.0, interval=0.05, max_interval=2.0) | kwargs
    called = []
    with pytest.raises(ValueError, match="'my wait'"):
        coord.wait_for(lambda: called.append(1), what="my wait", **args)
    assert not called


def test_wait_for_timeout_zero_tries_once() -> None:
    with fake_clock() as clock:
        assert coord.wait_for(lambda: "yes", timeout=0, what="x") == "yes"
        with pytest.raises(coord.WaitTimeout) as info:
            coord.wait_for(lambda: "", timeout=0, what="x")
    assert info.value.tries == 1 and clock.sleeps == []


def test_wait_visible(tmp_path) -> None:
    path = tmp_path / "later" / "deep"
    timer = threading.Timer(0.1, lambda: os.makedirs(path))
    timer.start()
    try:
        coord.wait_visible(path, timeout=5, is_dir=True, interval=0.01, max_interval=0.05)
    finally:
        timer.join()
    assert path.is_dir()
    (tmp_path / "file").write_text("x")
    coord.wait_visible(str(tmp_path / "file"), timeout=0, is_dir=False)
    coord.wait_visible(tmp_path / "file", timeout=0)
    with pytest.raises(coord.WaitTimeout, match="file"):
        coord.wait_visible(tmp_path / "file", timeout=0.1, is_dir=True, interval=0.02)
    with pytest.raises(coord.WaitTimeout, match="later"):
        coord.wait_visible(tmp_path / "later", timeout=0.1, is_dir=False, interval=0.02)
    with pytest.raises(coord.WaitTimeout, match="my marker"):
        coord.wait_visible(tmp_path / "missing" / "x", timeout=0.1, what="my marker", interval=0.02)
    coord.revalidate(str(tmp_path / "missing" / "x" / "y"))  # missing ancestors: no error


# -- atomic_write and fsync_dir --------------------------------------------------------------------

def test_atomic_write_replaces_and_keeps_mode(tmp_path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with coord.atomic_write(target) as f:
        f.write(b"new ")
        f.write(b"content")
        assert target.read_bytes() == b"old"  # nothing visible before the block ends
        temp = [n for n in os.listdir(tmp_path) if n != "f.bin"]
        assert len(temp) == 1 and temp[0].startswith(".f.bin.tmp.")  # next to the target
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert os.listdir(tmp_path) == ["f.bin"]

    fresh = tmp_path / "fresh"
    with coord.atomic_write(str(fresh), durable=False) as f:
        f.write(b"1")
    assert fresh.read_bytes() == b"1"
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~_umask()


def test_atomic_write_text_modes(tmp_path) -> None:
    target = tmp_path / "t.txt"
    with coord.atomic_write(target, "w", encoding="utf-16") as f:
        f.write("héllo\n")
    assert target.read_bytes().decode("utf-16") == "héllo\n"
    with coord.atomic_write(target, "wt", encoding="utf-8", newline="\r\n") as f:
        f.write("a\nb\n")
    assert target.read_bytes() == b"a\r\nb\r\n"


def test_atomic_write_error_keeps_old_content_and_no_temp(tmp_path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(ZeroDivisionError):
        with coord.atomic_write(target) as f:
            f.write(b"half of the new")
            1 / 0
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]
    with pytest.raises(KeyboardInterrupt):  # BaseException too
        with coord.atomic_write(tmp_path / "g", "w") as f:
            f.write("x")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["f"]


@pytest.mark.parametrize("mode", ["a", "ab", "r", "rb", "w+", "wb+", "x", "", "W"])
def test_atomic_write_bad_mode(tmp_path, mode) -> None:
    with pytest.raises(ValueError, match="mode"):
        with coord.atomic_write(tmp_path / "f", mode):
            pass
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kwargs", [dict(encoding="no-such-codec"), dict(newline="x")])
def test_atomic_write_bad_text_options_leave_no_temp_file(tmp_path, kwargs) -> None:
    """A failure while opening the temporary file must not leave it behind either."""
    (tmp_path / "f").write_text("old")
    with pytest.raises((LookupError, ValueError)):
        with coord.atomic_write(tmp_path / "f", "w", **kwargs) as f:
            f.write("new")
    assert (tmp_path / "f").read_text() == "old"
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_write_temp_names_unique_and_not_from_random(tmp_path, monkeypatch) -> None:
    names = []
    for _ in range(3):
        random.seed(0)
        with coord.atomic_write(tmp_path / "f") as f:
            names += [n for n in os.listdir(tmp_path) if n != "f"]
            f.write(b"x")
    assert len(names) == 3 and len(set(names)) == 3
    assert all(f".{os.getpid()}." in n and socket.gethostname() in n for n in names)
    monkeypatch.setattr(atomic_mod.os, "urandom", lambda n: b"\xab" * n)  # the randomness is os.urandom's
    with coord.atomic_write(tmp_path / "f") as f:
        names = [n for n in os.listdir(tmp_path) if n != "f"]
        f.write(b"x")
    assert names == [f".f.tmp.{socket.gethostname()}.{os.getpid()}.{'ab' * 6}"]


@given(chunks=st.lists(st.binary(max_size=200), max_size=5))
@settings(max_examples=20)
def test_atomic_write_content_roundtrip(chunks) -> None:
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "f")
        with coord.atomic_write(target) as f:
            for c in chunks:
                f.write(c)
        with open(target, "rb") as f:
            assert f.read() == b"".join(chunks)
        assert os.listdir(d) == ["f"]


def test_fsync_dir(tmp_path, monkeypatch) -> None:
    coord.fsync_dir(tmp_path)
    coord.fsync_dir(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        coord.fsync_dir(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        coord.fsync_dir(tmp_path / "file")
    fds_before = len(os.listdir("/proc/self/fd"))

    def failing(code):
        def fsync(fd):
            raise OSError(code, os.strerror(code))
        return fsync

    monkeypatch.setattr(atomic_mod.os, "fsync", failing(errno.EINVAL))
    coord.fsync_dir(tmp_path)  # a filesystem that cannot fsync directories
    monkeypatch.setattr(atomic_mod.os, "fsync", failing(errno.EIO))
    with pytest.raises(OSError) as info:
        coord.fsync_dir(tmp_path)
    assert info.value.errno == errno.EIO
    assert len(os.listdir("/proc/self/fd")) == fds_before  # the directory fd is closed either way


# -- FileLock --------------------------------------------------------------------------------------

def _gen_files(directory, name: str = "lock") -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(name + ".") and n[len(name) + 1:].isdigit())


def _record(directory, gen: int, name: str = "lock") -> dict:
    with open(os.path.join(directory, f"{name}.{gen:012d}")) as f:
        return json.load(f)


def test_filelock_acquire_release_and_records(tmp_path) -> None:
    lock = coord.FileLock(tmp_path / "lock", lease=30)
    assert not lock.held and "not held" in repr(lock)
    before = time.time()
    lock.acquire()
    try:
        assert lock.held and "generation 0" in repr(lock)
        assert _gen_files(tmp_path) == ["lock.000000000000"]
        rec = _record(tmp_path, 0)
        assert rec["pid"] == os.getpid() and rec["host"] == os.uname().nodename and rec["released"] is False
        assert before + 30 <= rec["expires"] <= time.time() + 30
        lock.check()
        with pytest.raises(RuntimeError, match="already held"):
            lock.acquire()
        assert lock.held  # the failed second acquire changed nothing
    finally:
        lock.release()
    assert not lock.held and _record(tmp_path, 0)["released"] is True
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()
    with pytest.raises(coord.LockLost, match="not held"):
        lock.check()
    with lock as same:  # context manager; the object is reusable
        assert same is lock and lock.held
        # generation 0 stays (it must never be re-created); the others are cleaned up
        assert _gen_files(tmp_path) == ["lock.000000000000", "lock.000000000001"]
    assert not lock.held and _record(tmp_path, 1)["released"] is True


def test_filelock_generations_cleaned_up(tmp_path) -> None:
    """Only generation 0 (never removed, so never re-created) and the newest one remain."""
    for i in range(6):
        with coord.FileLock(tmp_path / "lock"):
            assert _gen_files(tmp_path) == sorted({"lock.000000000000", f"lock.{i:012d}"})
    assert _gen_files(tmp_path) == ["lock.000000000000", "lock.000000000005"]
    # no temp files of the records either
    assert sorted(os.listdir(tmp_path)) == ["lock.000000000000", "lock.000000000005"]


def test_filelock_a_stale_generation_its_maker_paused_on_is_not_an_error_once_cleaned_up(tmp_path) -> None:
    """A process makes generation 1, finds it superseded, and pauses before removing it; the
    new holder's cleanup removes it first (simfs found it: a rank paused 65 ms there)."""
    with coord.FileLock(tmp_path / "lock"):  # generation 0
        pass
    late = coord.FileLock(tmp_path / "lock")
    winner = coord.FileLock(tmp_path / "lock")

    def superseded_meanwhile(gen: int) -> bool:
        winner._try_take(gen + 1)  # another process took the next generation
        winner._cleanup([gen])  # and cleaned up the older ones, this process's new file too
        return True

    late._superseded = superseded_meanwhile  # type: ignore[method-assign]
    assert late._try_take(1) is False  # not FileNotFoundError
    assert _gen_files(tmp_path) == ["lock.000000000000", "lock.000000000002"]


def test_filelock_timeout_names_the_holder(tmp_path) -> None:
    holder = coord.FileLock(tmp_path / "lock", lease=30)
    holder.acquire()
    try:
        other = coord.FileLock(tmp_path / "lock", timeout=0.3)
        start = time.monotonic()
        with pytest.raises(coord.LockTimeout) as info:
            other.acquire()
        took = time.monotonic() - start
        assert 0.3 <= took < 1.3
        assert f"pid {os.getpid()}" in str(info.value) and os.uname().nodename in str(info.value)
        assert "within 0.3s" in str(info.value)
        assert not other.held
        with pytest.raises(coord.LockTimeout):
            other.acquire(timeout=0)
        assert holder.held
    finally:
        holder.release()
    other.acquire(timeout=0)  # free now
    other.release()


def test_filelock_expired_lease_is_taken_over(tmp_path) -> None:
    first = coord.FileLock(tmp_path / "lock", lease=0.6, renew=False)
    first.acquire()
    second = coord.FileLock(tmp_path / "lock", timeout=0.1, lease=30)
    with pytest.raises(coord.LockTimeout, match="held by"):
        second.acquire()  # the lease still runs
    time.sleep(0.7)
    second.acquire(timeout=2)
    assert second.held and _gen_files(tmp_path) == ["lock.000000000000", "lock.000000000001"]
    with pytest.raises(coord.LockLost, match="newer generation"):
        first.check()
    with pytest.raises(coord.LockLost, match="before releasing"):
        first.release()
    assert not first.held
    assert _record(tmp_path, 1)["released"] is False  # the old holder did not release the new one
    second.release()
    assert _record(tmp_path, 1)["released"] is True


def test_filelock_expired_without_successor_is_lost(tmp_path) -> None:
    lock = coord.FileLock(tmp_path / "lock", lease=0.2, renew=False)
    lock.acquire()
    time.sleep(0.3)
    with pytest.raises(coord.LockLost, match="expired"):
        lock.check()
    with pytest.raises(coord.LockLost):
        lock.release()


def test_filelock_renewal_keeps_it_alive(tmp_path) -> None:
    lock = coord.FileLock(tmp_path / "lock", lease=0.9)  # renewed every 0.3 s
    lock.acquire()
    try:
        time.sleep(2.0)  # more than two leases
        with pytest.raises(coord.LockTimeout, match="held by"):
            coord.FileLock(tmp_path / "lock", timeout=0.2).acquire()
        lock.check()
        assert lock.held
        assert _record(tmp_path, 0)["expires"] > time.time()
    finally:
        lock.release()
    assert not any(t.name.startswith("FileLock-renew") and t.is_alive() for t in threading.enumerate())


def test_filelock_crashed_writer_blocks_for_a_lease_only(tmp_path) -> None:
    """An empty generation (created, then its writer died) is judged on the waiter's own clock
    (mtimes are coarse on NFS and clocks differ): free once the waiter has seen it unreadable
    for a whole lease, not before."""
    gen0 = tmp_path / "lock.000000000000"
    gen0.write_bytes(b"")  # created with O_EXCL, then the process died before writing its record
    waiter = coord.FileLock(tmp_path / "lock", timeout=0.2, lease=0.6)
    with pytest.raises(coord.LockTimeout, match="unreadable"):
        waiter.acquire()
    start = time.monotonic()
    waiter.acquire(timeout=3)
    try:
        assert waiter.held and _gen_files(tmp_path) == ["lock.000000000000", "lock.000000000001"]
        assert 0.2 <= time.monotonic() - start < 2.5  # about one lease after it first looked
    finally:
        waiter.release()


def test_filelock_stalled_contender_cannot_take_a_recycled_generation(tmp_path) -> None:
    """Mutual exclusion with a contender that stalls between reading the newest generation (N,
    released) and creating N+1, while two others lock in turn (N+1, then N+2, whose cleanup removes
    N+1). Its O_EXCL create of N+1 then succeeds although the lock is held (generation N+2): the
    stall is reproduced deterministically by running the other two acquisitions inside it."""
    path = tmp_path / "lock"
    with coord.FileLock(path):
        pass  # generation 0, released
    stalled = coord.FileLock(path, timeout=0.5)
    take = stalled._try_take
    others: list[coord.FileLock] = []

    def descheduled_here(gen: int) -> bool:
        if not others:
            with coord.FileLock(path):  # generation 1
                pass
            holder = coord.FileLock(path, lease=30)
            holder.acquire()  # generation 2; removes generations 0 and 1
            others.append(holder)
        return take(gen)

    stalled._try_take = descheduled_here
    try:
        try:
            stalled.acquire()
        except coord.LockTimeout:
            pass
        assert others and others[0].held
        assert not stalled.held, (f"two holders at once: {stalled!r} and {others[0]!r}; "
                                  f"generations on disk {_gen_files(tmp_path)}")
    finally:
        for lock in [stalled, *others]:
            if lock._gen is not None:
                with contextlib.suppress(coord.LockLost):
                    lock.release()


@pytest.mark.parametrize("kwargs", [dict(lease=0), dict(lease=-1), dict(poll=0), dict(timeout=-1)])
def test_filelock_bad_arguments(tmp_path, kwargs) -> None:
    with pytest.raises(ValueError):
        coord.FileLock(tmp_path / "lock", **kwargs)


# -- rank0_decides and makedirs_once with one rank --------------------------------------------------

def test_rank0_decides_local() -> None:
    calls = []

    def decide():
        calls.append(1)
        return {"resume_from": 7}

    assert coord.rank0_decides(decide) == {"resume_from": 7}
    assert coord.rank0_decides(decide, comm=coord.LocalComm()) == {"resume_from": 7}
    assert len(calls) == 2
    error = KeyError("no checkpoint")

    def fails():
        raise error

    with pytest.raises(KeyError) as info:
        coord.rank0_decides(fails)
    assert info.value is error  # the deciding rank re-raises the original exception


def test_makedirs_once_local(tmp_path) -> None:
    target = tmp_path / "a" / "b" / "c"
    coord.makedirs_once(target)
    assert target.is_dir()
    coord.makedirs_once(str(target), comm=coord.LocalComm(), scope="node")  # exists already: fine
    (tmp_path / "file").write_text("x")
    with pytest.raises(coord.CoordError, match="rank 0 could not create it"):
        coord.makedirs_once(tmp_path / "file" / "sub", timeout=1)
    with pytest.raises(ValueError, match="scope"):
        coord.makedirs_once(tmp_path / "z", scope="cluster")
    assert not (tmp_path / "z").exists()


# -- sync_files and build_manifest in one process ------------------------------------------------------

def _write(path, data: bytes, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _tree(root) -> dict[str, tuple[bytes, int]]:
    out = {}
    for top, _, names in os.walk(root):
        for name in names:
            p = os.path.join(top, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root).replace(os.sep, "/")] = (f.read(), stat.S_IMODE(os.lstat(p).st_mode))
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_sync_files_directory_incremental_and_stale(tmp_path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = {"a.txt": (b"alpha", 0o644), "sub/b.bin": (os.urandom(3000), 0o600), "sub/deep/c": (b"", 0o755),
             ".hidden": (b"h", 0o644)}
    for rel, (data, mode) in files.items():
        _write(src / rel, data, mode)
    report = coord.sync_files(src, dst, chunk_size=1000)
    total = sum(len(d) for d, _ in files.values())
    assert report == coord.SyncReport(files=4, sent=4, unchanged=0, removed=0, bytes_sent=total, nodes_updated=1)
    assert _tree(dst) == {f"src/{rel}": v for rel, v in files.items()}  # a directory keeps its own name

    again = coord.sync_files(str(src), str(dst))
    assert again == coord.SyncReport(files=4, sent=0, unchanged=4, removed=0, bytes_sent=0, nodes_updated=0)

    _write(src / "sub/b.bin", b"changed", 0o600)
    os.chmod(dst / "src/a.txt", 0o600)  # a mode-only difference is fixed in place, not sent
    _write(dst / "src/stale.txt", b"old")
    _write(dst / "src/gone/x", b"old")
    third = coord.sync_files(src, dst)
    assert third == coord.SyncReport(files=4, sent=1, unchanged=3, removed=2, bytes_sent=7, nodes_updated=1)
    assert _tree(dst) == {f"src/{rel}": v for rel, v in _tree(src).items()}
    assert not (dst / "src/gone").exists()

    _write(dst / "src/keep.txt", b"mine")
    kept = coord.sync_files(src, dst, delete=False)
    assert kept.removed == 0 and (dst / "src/keep.txt").exists()
    assert not [n for n in os.listdir(dst / "src") if ".sync." in n]  # no temporary files left


def test_sync_files_globs_and_several_sources(tmp_path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    for rel in ("a.txt", "b.txt", "c.bin", "sub/d.txt", "sub/e.bin"):
        _write(src / rel, rel.encode())
    report = coord.sync_files(f"{src}/*.txt", dst)
    assert report.files == 2 and sorted(_tree(dst)) == ["a.txt", "b.txt"]
    assert sorted(e.path for e in coord.build_manifest([f"{src}/**/*.txt"])) == ["a.txt", "b.txt", "sub/d.txt"]
    assert [e.path for e in coord.build_manifest([f"{src}/su*/e.bin"])] == ["sub/e.bin"]
    report = coord.sync_files([src / "c.bin", f"{src}/sub/*.bin", src / "c.bin"], dst)
    assert report.files == 2 and report.removed == 2  # the .txt files of the previous sync are stale
    assert sorted(_tree(dst)) == ["c.bin", "e.bin"]
    with pytest.raises(coord.CoordError, match="matches no file"):
        coord.sync_files(f"{src}/*.none", dst)
    with pytest.raises(coord.CoordError, match="does not exist"):
        coord.sync_files(src / "missing", dst)
    _write(tmp_path / "other" / "c.bin", b"different")
    with pytest.raises(coord.CoordError, match=r"different files for 'c\.bin'"):
        coord.sync_files([src / "c.bin", tmp_path / "other" / "c.bin"], dst)
    assert sorted(_tree(dst)) == ["c.bin", "e.bin"]  # a failed sync touched nothing


def test_sync_files_symlinks(tmp_path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _write(src / "real", b"data")
    os.symlink("real", src / "inside")
    report = coord.sync_files(src, dst)
    assert report.files == 2 and (dst / "src/inside").read_bytes() == b"data"
    assert not (dst / "src/inside").is_symlink()
    _write(tmp_path / "secret", b"outside")
    os.symlink(tmp_path / "secret", src / "escape")
    with pytest.raises(ValueError, match="outside"):
        coord.build_manifest([src])
    with pytest.raises(coord.CoordError, match="outside"):
        coord.sync_files(src, dst)
    assert not (dst / "src/escape").exists()


@pytest.mark.parametrize("kind", ["dangling", "socket"])
def test_sync_files_unreadable_source(tmp_path, kind) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _write(src / "ok", b"ok")
    if kind == "dangling":
        os.symlink("nowhere", src / "bad")
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(src / "bad"))
    try:
        with pytest.raises((OSError, ValueError), match=r"cannot read source|not a regular file"):
            coord.build_manifest([src])
        with pytest.raises(coord.CoordError, match="bad"):
            coord.sync_files(src, dst)
    finally:
        if kind == "socket":
            sock.close()
    assert not dst.exists() or _tree(dst) == {}


def test_sync_files_fifo_in_source_is_refused_not_read(tmp_path) -> None:
    """A named pipe in the source tree is not a regular file: build_manifest must say so at once
    (opening it to hash it blocks until some writer appears)."""
    src = tmp_path / "src"
    _write(src / "ok", b"ok")
    fifo = src / "pipe"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def scan():
        try:
            outcome.append(coord.build_manifest([src]))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    thread.join(3.0)
    hung = thread.is_alive()
    if hung:  # unblock the reader so that the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(5.0)
    assert not hung, "build_manifest blocked opening a FIFO in the source tree"
    assert isinstance(outcome[0], ValueError) and "not a regular file" in str(outcome[0])


def test_sync_files_relative_names_stay_inside_dest(tmp_path, monkeypatch) -> None:
    src, dst = tmp_path / "x" / "src", tmp_path / "dst"
    for n in ("..a", "...", "a..", "d/..e"):
        _write(src / n, n.encode())
    (tmp_path / "x" / "y").mkdir()
    before = sorted(os.listdir(tmp_path) + ["dst"]), sorted(os.listdir(tmp_path / "x"))
    monkeypatch.chdir(tmp_path / "x" / "y")
    report = coord.sync_files(["../y/../src"], "../../dst")  # relative, with '..' components
    assert report.files == 4
    assert _tree(dst) == {f"src/{n}": (n.encode(), 0o644) for n in ("..a", "...", "a..", "d/..e")}
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "x"))) == before
    report = coord.sync_files("../src/*", dst)
    assert sorted(_tree(dst)) == ["a.."]  # glob: no dotfiles (names starting with "."), no directories


@given(rel=st.lists(st.sampled_from(["..", ".", "a", "b", "", "..x"]), min_size=1, max_size=6).map("/".join))
@settings(max_examples=60)
def test_sync_local_path_never_escapes(rel: str) -> None:
    dest = "/tmp/dest-root"
    resolved = os.path.normpath(os.path.join(dest, *rel.split("/")))
    inside = resolved == dest or resolved.startswith(dest + "/")
    if inside:
        assert sync_mod._local_path(dest, rel) == resolved
    else:
        with pytest.raises(ValueError, match="escape"):
            sync_mod._local_path(dest, rel)


def test_sync_local_path_rejects_escapes() -> None:
    for rel in ("..", "../x", "a/../../x", "a/b/../../../x"):
        with pytest.raises(ValueError, match="escape"):
            sync_mod._local_path("/tmp/dest-root", rel)
    assert sync_mod._local_path("/tmp/dest-root", "/etc/passwd") == "/tmp/dest-root/etc/passwd"


NAMES = st.sampled_from(["a", "b", "c.d", "_e", "F"])
MODES = st.sampled_from([0o600, 0o644, 0o755, 0o444, 0o640])


def _trees():
    def prune(d: dict) -> dict:
        # no file may also be a directory: drop keys that are proper prefixes of other keys
        return {k: v for k, v in d.items() if not any(o[:len(k)] == k and o != k for o in d)}

    return st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map(tuple),
                           st.tuples(st.binary(max_size=300), MODES), min_size=0, max_size=8).map(prune)


@given(tree=_trees())
@settings(max_examples=30)
def test_build_manifest_content(tree) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "model")
        os.makedirs(src)
        for parts, (data, mode) in tree.items():
            _write(os.path.join(src, *parts), data, mode)
        manifest = coord.build_manifest([src])
        expected = sorted(coord.Entry("model/" + "/".join(parts), len(data), mode, _sha(data))
                          for parts, (data, mode) in tree.items())
        assert manifest == expected
        assert [e.path for e in manifest] == sorted(e.path for e in manifest)
        assert all(isinstance(e, coord.Entry) for e in manifest)
        # a single file is named by its own name
        if tree:
            parts, (data, mode) = next(iter(tree.items()))
            assert coord.build_manifest([os.path.join(src, *parts)]) == [
                coord.Entry(parts[-1], len(data), mode, _sha(data))]


@given(tree=_trees(), changes=st.data(), chunk=st.integers(1, 400))
@settings(max_examples=20)
def test_sync_files_roundtrip_and_incremental(tree, changes, chunk: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "src"), os.path.join(d, "dst")
        os.makedirs(src)
        for parts, (data, mode) in tree.items():
            _write(os.path.join(src, *parts), data, mode)
        first = coord.sync_files(src, dst, chunk_size=chunk)
        assert first.sent == len(tree) and first.bytes_sent == sum(len(v[0]) for v in tree.values())
        assert _tree(os.path.join(dst, "src")) == _tree(src)
        second = coord.sync_files(src, dst, chunk_size=chunk)
        assert (second.sent, second.bytes_sent, second.unchanged, second.removed) == (0, 0, len(tree), 0)
        changed = 0
        changed_bytes = 0
        for parts, (data, mode) in tree.items():
            if changes.draw(st.booleans()):
                new = data + b"+"
                _write(os.path.join(src, *parts), new, mode)
                changed += 1
                changed_bytes += len(new)
        third = coord.sync_files(src, dst, chunk_size=chunk)
        assert (third.sent, third.bytes_sent, third.unchanged) == (changed, changed_bytes, len(tree) - changed)
        assert _tree(os.path.join(dst, "src")) == _tree(src)
        assert not [n for _, _, ns in os.walk(dst) for n in ns if ".sync." in n]
