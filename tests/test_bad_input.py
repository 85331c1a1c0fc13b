"""Bad arguments, rank exceptions, calls that would bypass the simulation, and the guarantee
that nothing a rank does reaches the real machine (while the host process is left alone)."""

from __future__ import annotations

import datetime
import errno
import fcntl
import gzip
import logging
import mmap
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

import simfs


def _unpatched(cls: type, module: str, name: str) -> type:
    """What ``from <module> import <name>`` gave a module imported before simfs patched it."""
    return next(c for c in cls.__mro__ if c.__module__ == module and c.__name__ == name)


# Rank code in a module imported before the first run holds these by name (``from subprocess
# import Popen``), whether or not another test has installed the patches already.
Popen = _unpatched(subprocess.Popen, "subprocess", "Popen")
imported_mmap = _unpatched(mmap.mmap, "mmap", "mmap")


def noop():
    return dist.get_rank()


@pytest.fixture(scope="module", autouse=True)
def _installed():
    """Run once so that every patch is installed before the checks outside ranks."""
    assert simfs.Cluster().run(noop).ok


# -- constructor and run() arguments --------------------------------------------------------------

def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError) as info:
        simfs.Cluster(profile="nope")
    message = str(info.value)
    assert "nope" in message
    for name in simfs.profiles.names():
        assert name in message


def test_unknown_profile_in_mounts_and_local_profile():
    with pytest.raises(ValueError, match="lustre"):
        simfs.Cluster(mounts={"/shared": "nfs", "/bucket": "s3"})
    with pytest.raises(ValueError, match="lustre"):
        simfs.Cluster(local_profile="ssd")


@pytest.mark.parametrize("name", ["nodes", "ranks_per_node"])
@given(bad=st.one_of(st.integers(max_value=0), st.booleans(), st.floats(), st.text(), st.none()))
def test_bad_sizes_are_refused_naming_the_parameter(name, bad):
    with pytest.raises((ValueError, TypeError)) as info:
        simfs.Cluster(**{name: bad})
    assert name in str(info.value)


def test_documented_bad_sizes():
    with pytest.raises(ValueError, match="nodes"):
        simfs.Cluster(nodes=0)
    with pytest.raises(ValueError, match="ranks_per_node"):
        simfs.Cluster(ranks_per_node=-1)


@given(bad=st.one_of(st.text(), st.floats(), st.none(), st.lists(st.integers(), max_size=2)))
def test_non_integer_seed_is_refused(bad):
    with pytest.raises(TypeError, match="seed"):
        simfs.Cluster(seed=bad)


@pytest.mark.parametrize("mount", ["shared", "./shared", "", "/", "/shared/", "shared/data", "//"])
def test_bad_mount_points(mount):
    with pytest.raises(ValueError) as info:
        simfs.Cluster(mounts={mount: "nfs"})
    assert "mount" in str(info.value)


def test_non_string_mount_point_and_no_mounts():
    with pytest.raises(ValueError):
        simfs.Cluster(mounts={b"/shared": "nfs"})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        simfs.Cluster(mounts={})


@given(st.text().filter(lambda s: not s.startswith("/")))
def test_any_relative_mount_point_is_refused(mount):
    with pytest.raises(ValueError):
        simfs.Cluster(mounts={mount: "nfs"})


@pytest.mark.parametrize("job", [None, 42, "tests.jobs:noop", [noop]])
def test_run_needs_a_callable(job):
    cluster = simfs.Cluster()
    with pytest.raises(TypeError, match="callable"):
        cluster.run(job)
    assert cluster.run(noop).ok  # the cluster is still usable


@pytest.mark.parametrize("bad", ["CrashNode", simfs.CrashNode, {"type": "CrashNode", "node": 0, "after_ops": 1},
                                 object(), 3])
def test_faults_of_the_wrong_type(bad):
    with pytest.raises(TypeError, match="fault"):
        simfs.Cluster(faults=[bad]).run(noop)
    with pytest.raises(TypeError, match="fault"):
        simfs.Cluster().run(noop, faults=[simfs.SlowRank(rank=0, delay=1.0), bad])


def test_faults_naming_missing_nodes_or_ranks():
    with pytest.raises(ValueError, match="node 2"):
        simfs.Cluster(nodes=2, faults=[simfs.CrashNode(node=2, after_ops=1)])
    with pytest.raises(ValueError, match=r"rank.*\b4\b"):
        simfs.Cluster(nodes=2, ranks_per_node=2, faults=[simfs.SlowRank(rank=4, delay=1.0)])
    with pytest.raises(ValueError, match=r"rank.*\b9\b"):
        simfs.Cluster(nodes=2, ranks_per_node=2).run(noop, faults=[simfs.InjectErrno("EIO", ranks=(0, 9))])


# -- exceptions in ranks ----------------------------------------------------------------------------

def _helper_that_raises(rank):
    raise KeyError(f"missing shard {rank}")  # distinctive source line


def raising_job():
    rank = dist.get_rank()
    if rank == 1:
        _helper_that_raises(rank)
    if rank == 2:
        open("/shared/does/not/exist")  # source line of an OSError from the simulation
    return rank


def test_rank_exceptions_come_back_with_tracebacks():
    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=0).run(raising_job)
    assert not result.ok
    assert result.returns == {0: 0, 3: 3}
    assert set(result.errors) == {1, 2}
    assert isinstance(result.errors[1], KeyError)
    assert isinstance(result.errors[2], FileNotFoundError)
    assert set(result.tracebacks) == {1, 2}
    tb1 = result.tracebacks[1]
    assert 'raise KeyError(f"missing shard {rank}")  # distinctive source line' in tb1
    assert "_helper_that_raises(rank)" in tb1 and "raising_job" in tb1
    assert "KeyError: 'missing shard 1'" in tb1
    tb2 = result.tracebacks[2]
    assert 'open("/shared/does/not/exist")' in tb2
    assert "FileNotFoundError" in tb2
    simfs_dir = os.path.dirname(simfs.__file__) + os.sep
    assert simfs_dir not in tb1 and simfs_dir not in tb2  # simfs's own frames are left out
    assert "rank 1 raised KeyError" in result.summary()


# -- calls that bypass the simulation ----------------------------------------------------------------

def _real_files(canary: str) -> list[str]:
    folder, prefix = os.path.split(canary)
    return [name for name in os.listdir(folder) if name.startswith(prefix)]


def _sim_fd():
    fd = os.open("/shared/data.bin", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"\0" * 8192)
    return fd


def _bypass_subprocess_run(canary):
    subprocess.run(["touch", canary])


def _bypass_check_output(canary):
    subprocess.check_output(["touch", canary])


def _bypass_imported_popen(canary):
    Popen(["touch", canary]).wait()


def _bypass_os_system(canary):
    os.system(f"touch {canary}")


def _bypass_os_popen(canary):
    os.popen(f"touch {canary}").read()


def _bypass_posix_spawn(canary):
    os.waitpid(os.posix_spawn("/usr/bin/touch", ["touch", canary], dict(os.environ)), 0)


def _bypass_fork(canary):
    if os.fork() == 0:  # pragma: no cover - a real child must never exist
        open(canary, "w").close()
        os._exit(0)


def _bypass_mmap(canary):
    mmap.mmap(_sim_fd(), 8192)


def _bypass_imported_mmap(canary):
    imported_mmap(_sim_fd(), 8192)


def _bypass_fcntl_setlk(canary):
    fcntl.fcntl(_sim_fd(), fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))


def _bypass_torch_mmap(canary):
    torch.save(torch.arange(4), "/shared/t.pt")
    torch.from_file("/shared/t.pt", shared=True, size=4)  # a shared map would write back to the file


BYPASSES = [
    (_bypass_subprocess_run, "subprocess"),
    (_bypass_check_output, "subprocess"),
    (_bypass_imported_popen, "subprocess"),
    (_bypass_os_system, "os.system"),
    (_bypass_os_popen, "os.popen"),
    (_bypass_posix_spawn, "os.posix_spawn"),
    (_bypass_fork, "os.fork"),
    (_bypass_mmap, "mmap"),
    (_bypass_imported_mmap, "mmap"),
    (_bypass_fcntl_setlk, "fcntl.fcntl"),
    (_bypass_torch_mmap, "torch"),
]


def _attempt(call, canary):
    try:
        call(canary)
    except simfs.BypassError as exc:
        return ("bypass", exc.call, str(exc))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        return ("other", type(exc).__name__, str(exc))
    return ("ran", "", "")


@pytest.mark.parametrize("call, name", BYPASSES, ids=[c.__name__ for c, _ in BYPASSES])
def test_bypassing_calls_raise_bypass_error_naming_the_call(tmp_path, call, name):
    canary = str(tmp_path / f"simfs-canary-{uuid.uuid4().hex}")
    result = simfs.Cluster(nodes=1, ranks_per_node=1).run(_attempt, call, canary)
    assert result.ok, result.summary()
    kind, called, message = result.returns[0]
    assert kind == "bypass", f"{call.__name__}: {kind} {called} {message}"
    assert name in called and name in message
    assert _real_files(canary) == []  # no real process ran, nothing reached the real disk


def test_bypass_error_is_reported_when_uncaught():
    def job():
        os.system("true")

    result = simfs.Cluster().run(job)
    assert isinstance(result.errors[0], simfs.BypassError)
    assert isinstance(result.errors[0], simfs.SimfsError)
    assert 'os.system("true")' in result.tracebacks[0]


def test_a_hosts_real_descriptors_are_out_of_a_ranks_reach(tmp_path):
    """The host's descriptors are not the rank's: fcntl on one is refused, os.read/os.close of
    one fail with EBADF, and the host's descriptor still works afterwards."""
    real = tmp_path / "real.txt"
    real.write_text("x")
    fd = os.open(real, os.O_RDONLY)
    try:
        def job(fd):
            out = []
            try:
                fcntl.fcntl(fd, fcntl.F_GETFD)
            except simfs.BypassError as exc:
                out.append("fcntl.fcntl" in str(exc))
            for call in (lambda: os.read(fd, 1), lambda: os.close(fd)):
                try:
                    call()
                except OSError as exc:
                    out.append(exc.errno == errno.EBADF)
            return out
        result = simfs.Cluster().run(job, fd)
        assert os.read(fd, 1) == b"x"
    finally:
        os.close(fd)
    assert result.returns == {0: [True, True, True]}, result.summary()


# -- the real Python installation --------------------------------------------------------------------

def _write_into_prefix(path):
    try:
        with open(path, "w") as f:
            f.write("escaped")
    except OSError as exc:
        return exc.errno
    return None


@pytest.mark.parametrize("where", ["prefix", "stdlib", "purelib"])
def test_writing_into_the_python_installation_is_erofs(where):
    import errno
    import sysconfig

    folder = sys.prefix if where == "prefix" else sysconfig.get_paths()[where]
    path = os.path.join(folder, f"simfs-canary-{uuid.uuid4().hex}")
    result = simfs.Cluster().run(_write_into_prefix, path)
    assert result.returns == {0: errno.EROFS}, result.summary()
    assert not os.path.exists(path)


def test_other_writes_into_the_installation_are_erofs():
    import errno

    target = os.path.join(sys.prefix, "simfs-canary-dir")

    def job():
        out = {}
        for name, call in [("mkdir", lambda: os.mkdir(target)),
                           ("os.open", lambda: os.open(target, os.O_WRONLY | os.O_CREAT)),
                           ("unlink", lambda: os.unlink(os.__file__)),
                           ("rename", lambda: os.rename(os.__file__, os.__file__ + ".bak")),
                           ("append", lambda: open(os.__file__, "a"))]:
            try:
                call()
                out[name] = None
            except OSError as exc:
                out[name] = exc.errno
        return out

    result = simfs.Cluster().run(job)
    assert result.ok, result.summary()
    assert set(result.returns[0].values()) == {errno.EROFS}, result.returns
    assert not os.path.exists(target)
    assert os.path.exists(os.__file__)


def test_reading_the_installation_and_importing_work():
    fresh = "colorsys"
    saved = sys.modules.pop(fresh, None)

    def job():
        import email.mime.text
        import importlib
        import json

        colorsys = importlib.import_module(fresh)
        with open(os.__file__) as f:
            source = f.read()
        return (json.dumps({"a": 1}), email.mime.text.MIMEText("hi").get_payload(),
                colorsys.rgb_to_hsv(1.0, 0.0, 0.0), "def makedirs" in source,
                "os.py" in os.listdir(os.path.dirname(os.__file__)), os.path.isfile(os.__file__))

    try:
        result = simfs.Cluster(nodes=2, ranks_per_node=1).run(job)
    finally:
        if saved is not None:
            sys.modules[fresh] = saved
    assert result.ok, result.summary()
    assert result.returns[0] == ('{"a": 1}', "hi", (0.0, 1.0, 1.0), True, True, True)
    assert result.returns[1] == result.returns[0]


# -- nothing reaches the real disk ---------------------------------------------------------------------

def _write_everywhere(names):
    import numpy as np

    rank = dist.get_rank()  # ranks of one node share /tmp, all ranks share /shared
    names = {key: f"{value}-r{rank}" for key, value in names.items()}
    written = []

    def note(path):
        written.append(os.path.abspath(path))

    with open(names["tmp"], "w") as f:
        f.write("canary")
    note(names["tmp"])
    with open(names["shared"], "wb") as f:
        f.write(b"canary")
    note(names["shared"])
    with open(names["relative"], "w") as f:  # relative to the rank's cwd
        f.write("canary")
    note(names["relative"])
    fd = os.open(names["tmp"] + ".osopen", os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"canary")
    os.close(fd)
    note(names["tmp"] + ".osopen")
    Path(names["tmp"] + ".pathlib").write_text("canary")
    note(names["tmp"] + ".pathlib")
    Path(names["tmp"] + ".touch").touch()
    note(names["tmp"] + ".touch")
    os.makedirs(names["tmp"] + ".dir/sub")
    note(names["tmp"] + ".dir")
    shutil.copy(names["tmp"], names["tmp"] + ".copy")
    os.rename(names["tmp"] + ".copy", names["tmp"] + ".renamed")
    note(names["tmp"] + ".renamed")
    with gzip.open(names["tmp"] + ".gz", "wt") as f:
        f.write("canary")
    note(names["tmp"] + ".gz")
    np.save(names["tmp"] + ".npy", np.arange(3))
    note(names["tmp"] + ".npy")
    torch.save({"x": torch.ones(2)}, names["shared"] + ".pt")
    note(names["shared"] + ".pt")
    with tempfile.NamedTemporaryFile("w", prefix=os.path.basename(names["tmp"]), delete=False) as f:
        f.write("canary")
    note(f.name)
    fd, path = tempfile.mkstemp(prefix=os.path.basename(names["tmp"]))
    os.close(fd)
    note(path)
    note(tempfile.mkdtemp(prefix=os.path.basename(names["tmp"])))
    handler = logging.FileHandler(names["tmp"] + ".log")
    handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "canary", None, None))
    handler.close()
    note(names["tmp"] + ".log")
    # everything was really written, in the simulation
    assert all(os.path.exists(p) for p in written), [p for p in written if not os.path.exists(p)]
    return written


def test_nothing_a_rank_writes_reaches_the_real_disk(tmp_path):
    token = uuid.uuid4().hex
    names = {"tmp": f"/tmp/simfs-canary-{token}", "shared": f"/shared/simfs-canary-{token}",
             "relative": f"simfs-canary-{token}.rel"}
    real_cwd = os.getcwd()
    shared_existed = os.path.exists("/shared")
    result = simfs.Cluster(nodes=2, ranks_per_node=2, seed=1).run(_write_everywhere, names)
    assert result.ok, result.summary()
    written = [path for rank in range(4) for path in result.returns[rank]]
    assert any(p.startswith("/tmp/") for p in written) and any(p.startswith("/shared/") for p in written)
    for path in written:
        assert not os.path.exists(path), path
    assert [n for n in os.listdir("/tmp") if token in n] == []
    assert not os.path.exists(os.path.join(real_cwd, names["relative"]))
    assert os.path.exists("/shared") == shared_existed


def test_environment_outside_ranks_is_untouched():
    before = dict(os.environ)
    key = f"SIMFS_TEST_{uuid.uuid4().hex[:8].upper()}"
    some_existing = next(iter(before))

    def job():
        seen = (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ.get(some_existing) is not None)
        os.environ[key] = "set-in-rank"
        os.environ.pop(some_existing, None)
        os.putenv(key, "putenv-in-rank")
        os.environ.update({"MASTER_PORT": "1"})
        return seen + (os.environ[key], os.getenv(key))

    result = simfs.Cluster(nodes=2, ranks_per_node=2).run(job)
    assert result.ok, result.summary()
    assert result.returns[3] == ("3", "4", True, "set-in-rank", "set-in-rank")
    assert dict(os.environ) == before
    assert key not in os.environ and os.getenv(key) is None
    assert "RANK" not in before or os.environ["RANK"] == before["RANK"]
    # a real child process sees the real environment too
    out = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({key!r}))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "None"


def test_patched_functions_behave_normally_outside_ranks(tmp_path):
    real = tmp_path / "real.txt"
    with open(real, "w") as f:
        f.write("hello")
    with open(real) as f:
        assert f.read() == "hello"
    with open(real, "ab") as f:
        f.write(b" world")
    assert os.stat(real).st_size == len("hello world")
    assert os.path.getsize(real) == 11
    assert sorted(os.listdir(tmp_path)) == ["real.txt"]
    fd = os.open(tmp_path / "fd.bin", os.O_RDWR | os.O_CREAT)
    try:
        assert os.write(fd, b"abc") == 3
        os.lseek(fd, 0, os.SEEK_SET)
        assert os.read(fd, 10) == b"abc"
        fcntl.flock(fd, fcntl.LOCK_EX)
        fcntl.flock(fd, fcntl.LOCK_UN)
        with mmap.mmap(fd, 3) as m:
            assert m[:] == b"abc"
    finally:
        os.close(fd)
    os.makedirs(tmp_path / "a" / "b")
    shutil.rmtree(tmp_path / "a")
    assert not (tmp_path / "a").exists()
    with tempfile.TemporaryDirectory() as d:
        assert os.path.isdir(d) and d.startswith(tempfile.gettempdir())

    # time: real, not virtual
    assert abs(time.time() - os.stat(real).st_mtime) < 60
    assert abs(datetime.datetime.now().timestamp() - time.time()) < 5
    assert datetime.datetime.now().year >= 2024
    t0 = time.monotonic()
    p0 = time.perf_counter()
    time.sleep(0.02)
    assert time.monotonic() - t0 >= 0.015 and time.perf_counter() - p0 >= 0.015

    # per-process state: the real process
    assert os.getpid() == int(os.readlink("/proc/self"))
    with open("/proc/sys/kernel/hostname") as f:
        assert socket.gethostname() == f.read().strip()
    random.seed(1234)
    assert random.random() == random.Random(1234).random()
    assert len(os.urandom(8)) == 8 and os.urandom(16) != os.urandom(16)
    assert subprocess.run(["true"]).returncode == 0
    assert os.system("true") == 0


def test_torch_distributed_names_its_choices_and_c10d_needs_rank_processes():
    with pytest.raises(ValueError, match=r"torch_distributed.*'patched', 'c10d'"):
        simfs.Cluster(torch_distributed="nccl")
    with pytest.raises(simfs.ConfigError, match=r"torch_distributed='c10d' needs carrier='process'"):
        simfs.Cluster(carrier="greenlet", torch_distributed="c10d")
    assert simfs.Cluster(carrier="greenlet").settings.torch_distributed == "patched"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rank_memory": 1 << 20}, r"rank_memory must be an int in \[67108864"),
    ({"rank_memory": 1.5e9}, r"rank_memory must be an int"),
    ({"rank_memory": 1 << 30, "carrier": "greenlet"}, r"rank_memory needs carrier='process'"),
])
def test_a_ranks_memory_limit_is_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(simfs.ConfigError, match=match):
        simfs.Cluster(**kwargs)
    assert simfs.Cluster().settings.torch_distributed == "c10d"


@pytest.mark.parametrize(("preload", "match"), [
    ("json", r"preload must be a list of module names"),
    (["json", 3], r"preload entry must be a module name.*got 3"),
    (["no_such_module_here"], r"preload entry must be an installed module.*no_such_module_here"),
    (["json.no_such_submodule"], r"preload entry must be an installed module"),
    (["no_such_package.sub"], r"preload entry must be an installed module"),
])
def test_preloaded_modules_are_checked(preload: object, match: str) -> None:
    with pytest.raises(simfs.ConfigError, match=match):
        simfs.Cluster(preload=preload)  # type: ignore[arg-type]
    with pytest.raises(simfs.ConfigError, match=r"preload needs carrier='process'"):
        simfs.Cluster(carrier="greenlet", preload=["json"])
    assert simfs.Cluster(preload=["json", "json"]).settings.preload == ("json",)
