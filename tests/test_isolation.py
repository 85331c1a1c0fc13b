"""Adversarial attempts to escape the simulation. The promise under test: code running inside a
rank cannot change the real machine or the host process; every such call is simulated (it acts
on the simulated machine only) or refused with a BypassError naming it, and after run() returns
the host process is as it was.

Each attempt runs on a small cluster inside ``Env.run``, which snapshots the host process
(tests/_host_state.py: cwd, umask, environment, descriptors, signals, timers, limits, streams,
hooks, interpreter settings, a real sentinel directory tree...) before and after the run, reports
every change, puts the host back, and checks that the cluster's following runs are still
intercepted. Attempts that could kill or hang the host run in a child interpreter instead.

An attempt that fails today is listed in ESCAPES with what happens and marked
``xfail(strict=True)``: when a fix makes it pass, strict mode turns the XPASS into a failure, and
the fixer deletes its ESCAPES entry."""

from __future__ import annotations

import _io
import _posixsubprocess
import _thread
import atexit
import base64
import builtins
import concurrent.futures
import contextlib
import ctypes
import datetime
import errno
import fcntl
import gc
import hashlib
import importlib
import importlib.util
import io
import json
import logging
import math
import mmap
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.shared_memory
import os
import pathlib
import pickle
import posix
import random
import resource
import select
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import types
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.utils.data
from _host_state import Host

import simfs

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROBE = "/shared/simfs-isolation-probe"
CANARY = "SIMFS_ISOLATION_CANARY"  # in the host environment while this module runs
CREATE = os.O_CREAT | os.O_WRONLY
TOUCH = "/usr/bin/touch"
REAL_FILES = {"keep.txt": "real keep\n", "victim.txt": "real victim\n", "sub/inner.txt": "real inner\n",
              "held.txt": "real held\n", "held2.txt": "real held2\n"}
SIM_FILES = {name: text.replace("real", "sim") for name, text in REAL_FILES.items()}
REAL_DIRS = ("sub", "empty", "log")
EBADF, ENOENT, ESRCH = frozenset({errno.EBADF}), frozenset({errno.ENOENT}), frozenset({errno.ESRCH})


# -- what fails today (each entry becomes a strict xfail of the test with that id) ------------------

ESCAPES: dict[str, str] = {
}


def marks(test_id: str) -> list[Any]:
    why = ESCAPES.get(test_id)
    return [pytest.mark.xfail(strict=True, reason=why)] if why else []


def escapes(test_id: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The strict xfail of a single test, when ESCAPES lists it."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        for m in marks(test_id):
            fn = m(fn)
        return fn
    return mark


# -- what a rank gets: the real sentinel paths and the host's real resources ------------------------

@dataclass(frozen=True)
class Ctx:
    """Handed to every attempt. ``dir`` is a real directory (``mirror`` builds the same names
    inside the simulation); the other fields are real things the host holds."""

    dir: str
    mods: str  # a real directory holding the importable module ``module``
    module: str
    tag: str  # unique per test
    host_pid: int
    fd: int  # a real descriptor of the host, O_RDWR on dir/held.txt
    fd2: int  # another one, on dir/held2.txt
    port: int  # a real TCP listener of the host on 127.0.0.1
    blob: bytes  # an object owned by the host

    def p(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)


def mirror(c: Ctx) -> None:
    """Inside a rank: the sentinel tree's names on the simulated disk (with other contents)."""
    for name in REAL_DIRS:
        os.makedirs(c.p(name), exist_ok=True)
    for name, text in SIM_FILES.items():
        with open(c.p(name), "w") as f:
            f.write(text)


def _probe_write(path: str) -> bool:
    with open(path, "w") as f:
        f.write("probe")
    return os.path.exists(path)


def _probe_read(path: str) -> bool:
    return os.path.exists(path)


def _following_run(cluster: simfs.Cluster) -> list[str]:
    """Interception must still work on the cluster's next runs, with a finite clock."""
    try:
        first = cluster.run(_probe_write, PROBE)
        second = cluster.run(_probe_read, PROBE)
    except Exception as exc:  # noqa: BLE001 - reported as the finding
        return [f"a following run of the same cluster raised {exc!r}"]
    problems = []
    if first.returns.get(0) is not True or second.returns.get(0) is not True:
        problems.append(f"a following run no longer simulates {PROBE}: written -> {first.returns or first.errors}, "
                        f"next run sees it -> {second.returns or second.errors}")
    if not (math.isfinite(first.virtual_time) and math.isfinite(second.virtual_time)):
        problems.append(f"the cluster's clock is poisoned: following runs took {first.virtual_time} and "
                        f"{second.virtual_time} virtual seconds")
    if os.path.lexists(PROBE):
        problems.append(f"a following run wrote {PROBE} on the real disk")
    return problems


@dataclass
class Env:
    host: Host
    ctx: Ctx

    def run(self, job: Callable[..., Any], *args: Any, rpn: int = 1,
            carrier: str = "greenlet") -> tuple[simfs.Result | None, list[str]]:
        """``job(*args)`` on a fresh one-node cluster with the host watched, then the following runs.
        Greenlet ranks run in this process (isolate=False): what is checked is simfs's Python-level
        routing, which their confined child (the default) relies on for what it simulates."""
        cluster = simfs.Cluster(nodes=1, ranks_per_node=rpn, seed=0, watchdog=5, carrier=carrier, isolate=False)
        result = None
        with self.host.watch() as problems:
            try:
                result = cluster.run(job, *args)
            except Exception as exc:  # noqa: BLE001 - reported as the finding
                problems.append(f"run() raised {exc!r}")
        if result is not None:
            problems += _following_run(cluster)
        return result, problems


@pytest.fixture(scope="module", autouse=True)
def _module_host() -> Iterator[None]:
    """Patches installed (by a first run) before any snapshot; a canary in the host environment."""
    assert simfs.Cluster().run(_probe_read, PROBE).ok
    os.environ[CANARY] = "1"
    yield
    os.environ.pop(CANARY, None)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A real sentinel tree, a helper module, two real descriptors, a listener and a host-owned
    object; the host watched (signal recorders installed) for the test."""
    root, mods = tmp_path / "sentinel", tmp_path / "mods"
    for name in REAL_DIRS:
        (root / name).mkdir(parents=True)
    for name, text in REAL_FILES.items():
        (root / name).write_text(text)
    mods.mkdir()
    tag = hashlib.sha1(str(tmp_path).encode()).hexdigest()[:12]
    module = f"simfs_isolation_helper_{tag}"
    (mods / f"{module}.py").write_text("VALUE = 'imported'\n")
    fd, fd2 = (os.open(root / name, os.O_RDWR) for name in ("held.txt", "held2.txt"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    blob = bytes(bytearray(b"host-owned bytes"))
    host = Host([root, mods], blob, listener, (fd, fd2))
    try:
        yield Env(host, Ctx(str(root), str(mods), module, tag, os.getpid(), fd, fd2, listener.getsockname()[1],
                            blob))
    finally:
        host.close()
        listener.close()
        for held, name in ((fd, "held.txt"), (fd2, "held2.txt")):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{held}") == str(root / name):
                    os.close(held)


# -- one attempt: what it does, what counts as simulated, what a refusal must name ---------------

ANY = "<any value>"  # expect: returning at all counts as simulated (the host checks do the rest)
ANY_CALL = "<any call>"  # names: a library entry point; its refusal may name whichever call it made first
REFUSE_ONLY = "<refusal only>"  # expect: nothing can simulate this; only a refusal is acceptable
# torch's own class, out of reach of the by-name replacement that gives simfs's TCPStore its names in ranks
_CPP = {"TCPStore": torch._C._distributed_c10d.TCPStore}


@dataclass(frozen=True)
class Attempt:
    """``act(ctx)`` runs inside rank 0 after ``mirror``. REFUSED (acceptable when ``names`` is
    not empty): it raises a BypassError naming one of ``names``. SIMULATED: it returns ``expect``
    (an observation made inside the simulation; ANY: whatever it returns) or raises one of
    ``raises`` / an OSError with one of ``errnos``, as on the simulated machine, or (``dies``: a
    signal's name) the rank's process is reported killed by that signal. ``host`` sets the host
    up around the run; ``after`` makes extra host-side checks (and cleans up)."""

    id: str
    act: Callable[[Ctx], Any]
    names: tuple[str, ...] = ()
    expect: Any = ANY
    errnos: frozenset[int] = frozenset()
    raises: tuple[type[BaseException], ...] = ()
    host: Callable[[Ctx], AbstractContextManager[Any]] | None = None
    after: Callable[[Ctx], list[str]] | None = None
    dies: str | None = None
    needs: str | None = None  # a module that must be installed

    def param(self) -> Any:
        skip = []
        if self.needs and importlib.util.find_spec(self.needs) is None:
            skip = [pytest.mark.skip(reason=f"{self.needs} is not installed")]
        return pytest.param(self, id=self.id, marks=marks(self.id) + skip)


def A(id: str, act: Callable[[Ctx], Any], *names: str, **kw: Any) -> Attempt:
    return Attempt(id, act, names, **kw)


def params(attempts: list[Attempt]) -> list[Any]:
    return [a.param() for a in attempts]


def _in_rank(a: Attempt, c: Ctx) -> tuple:
    mirror(c)
    try:
        return ("done", a.act(c))
    except simfs.BypassError as exc:
        return ("refused", str(exc))
    except Exception as exc:  # noqa: BLE001 - judged against the attempt's acceptable outcomes
        return ("raised", exc)


def judge(a: Attempt, result: simfs.Result | None) -> list[str]:
    """Whether rank 0's outcome is one of the attempt's acceptable ones."""
    if result is None:
        return []
    outcome = result.returns.get(0)
    if not isinstance(outcome, tuple):
        if a.dies and a.dies in str(result.errors.get(0, "")):
            return []
        return [f"the rank did not return: {result.tracebacks.get(0) or result.crashed or result.hung}"]
    kind, value = outcome
    if kind == "refused":
        if not a.names:
            return [f"refused, but this call must work inside a rank: {value}"]
        if ANY_CALL not in a.names and not any(name in value for name in a.names):
            return [f"refused without naming {' or '.join(a.names)}: {value}"]
        return []
    if kind == "raised":
        if isinstance(value, a.raises) or (isinstance(value, OSError) and value.errno in a.errnos):
            return []
        return [f"neither simulated nor refused: raised {type(value).__name__}: {value}"]
    if a.expect is REFUSE_ONLY:
        return [f"ran (returned {value!r}); nothing simulates it, so it must be refused naming {a.names}"]
    if a.expect is not ANY and value != a.expect:
        return [f"not simulated: inside the simulation it gave {value!r}, a real process would give {a.expect!r}"]
    return []


def check(env: Env, a: Attempt) -> None:
    with a.host(env.ctx) if a.host else contextlib.nullcontext():
        result, problems = env.run(_in_rank, a, env.ctx)
    problems = judge(a, result) + problems
    if a.after is not None:
        problems += a.after(env.ctx)
    assert not problems, f"{a.id}:\n" + "\n".join(problems)


# -- small pieces used by attempts ---------------------------------------------------------------------

def then(*values: Any) -> Any:
    """The last value: ``then(effect(), observation)`` in a one-line attempt."""
    return values[-1]


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _new_file_mode(c: Ctx) -> int:
    with open(c.p("after-umask"), "w"):
        pass
    return _mode(c.p("after-umask"))


def _noop(*args: Any) -> None:
    return None


def _guarded_fork(fork: Callable[[], int]) -> Callable[[Ctx], int]:
    def act(c: Ctx) -> int:
        pid = fork()
        if pid == 0:
            posix._exit(0)  # a real child leaves at once
        return _reaped(pid)
    return act


def _reaped(pid: int) -> int:
    posix.waitpid(pid, 0)
    return pid


def _fork_exec(c: Ctx) -> int:
    """What subprocess does underneath (the host's two descriptors stand in for its error pipe)."""
    return _reaped(_posixsubprocess.fork_exec(
        [TOUCH.encode(), os.fsencode(c.p("forked"))], [TOUCH.encode()], True, (c.fd,), None, None,
        -1, -1, -1, -1, -1, -1, c.fd2, c.fd, True, False, -1, None, None, None, -1, None, True))


def _spawned(argv: Callable[[Ctx], list[str]], spawn: Callable[..., int]) -> Callable[[Ctx], int]:
    return lambda c: _reaped(spawn(TOUCH, argv(c), {}))


def _touch_argv(c: Ctx) -> list[str]:
    return [TOUCH, c.p("touched")]


def _mp_process(method: str) -> Callable[[Ctx], bool]:
    def act(c: Ctx) -> bool:
        target = pathlib.Path(c.p(f"mp-{method}"))
        proc = multiprocessing.get_context(method).Process(target=pathlib.Path.touch, args=(target,))
        proc.start()
        proc.join(30)
        return target.exists()
    return act


def _process_pool(c: Ctx) -> bool:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        pool.submit(pathlib.Path.touch, pathlib.Path(c.p("pool"))).result(timeout=30)
    return os.path.exists(c.p("pool"))


def _thread_pool(c: Ctx) -> bool:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pool.submit(pathlib.Path(c.p("from-pool")).write_text, "pool").result()
    return os.path.exists(c.p("from-pool"))


def _dataloader(c: Ctx) -> list:
    return [batch.tolist() for batch in torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=1)]


def _shared_memory(c: Ctx) -> bytes:
    shm = multiprocessing.shared_memory.SharedMemory(name=f"simfs_iso_{c.tag}", create=True, size=16)
    shm.buf[:4] = b"data"
    data = bytes(shm.buf[:4])
    shm.close()
    return data


def _stop_mp_helpers(c: Ctx) -> list[str]:
    """Cleanup after an escape: the forkserver and resource tracker processes it started (the
    host's restore closed their descriptors)."""
    for helper, fd, pid in ((multiprocessing.forkserver._forkserver, "_forkserver_alive_fd", "_forkserver_pid"),
                            (multiprocessing.resource_tracker._resource_tracker, "_fd", "_pid")):
        if getattr(helper, pid, None) is not None:
            with contextlib.suppress(OSError):
                os.kill(getattr(helper, pid), signal.SIGKILL)
                os.waitpid(getattr(helper, pid), 0)
            setattr(helper, fd, None)
            setattr(helper, pid, None)
    multiprocessing.forkserver._forkserver._forkserver_address = None
    return []


def _shared_memory_left(c: Ctx) -> list[str]:
    _stop_mp_helpers(c)
    path = f"/dev/shm/simfs_iso_{c.tag}"
    if os.path.exists(path):
        os.unlink(path)
        return [f"{path} is left on the real machine"]
    return []


def _real_thread(c: Ctx) -> bool:
    done: list[int] = []

    def work() -> None:
        with open(c.p("from-thread"), "w") as f:
            f.write("thread")
        done.append(1)

    _thread.start_new_thread(work, ())
    for _ in range(20_000):
        if done:
            break
        time.sleep(0.001)
    return os.path.exists(c.p("from-thread"))


def _flock_left(c: Ctx) -> list[str]:
    """Whether the host's file is locked now (by a lock taken through the host's descriptor)."""
    probe = os.open(c.p("held.txt"), os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return []
    except BlockingIOError:
        fcntl.flock(c.fd, fcntl.LOCK_UN)
        return ["the host's real file is locked through the host's descriptor"]
    finally:
        os.close(probe)


def _os_open_imported_in_rank(c: Ctx) -> bool:
    from os import close
    from os import open as o

    close(o(c.p("new.txt"), CREATE, 0o644))
    return os.path.exists(c.p("new.txt"))


def _wrapped_os_open(c: Ctx) -> bool:
    os.close(os.open.__wrapped__(c.p("new.txt"), CREATE, 0o644))
    return os.path.exists(c.p("new.txt"))


def _read_keep(c: Ctx) -> bytes:
    with io.open_code(c.p("keep.txt")) as f:
        return f.read()


def _create_with(opener: Callable[[str], Any]) -> Callable[[Ctx], bool]:
    def act(c: Ctx) -> bool:
        opener(c.p("new.txt")).close()
        return os.path.exists(c.p("new.txt"))
    return act


def _installation_file(c: Ctx) -> str:
    return os.path.join(sysconfig.get_paths()["purelib"], f"simfs_iso_{c.tag}.txt")


def _installation_write(c: Ctx) -> int:
    with open(_installation_file(c), "w") as f:
        return f.write("x")


def _installation_left(c: Ctx) -> list[str]:
    if os.path.exists(_installation_file(c)):
        os.unlink(_installation_file(c))
        return [f"{_installation_file(c)} was written in the real Python installation"]
    return []


def _original_mmap_on_host_fd(c: Ctx) -> None:
    original = next(k for k in type.mro(mmap.mmap) if k.__module__ == "mmap" and k.__name__ == "mmap")
    m = original(c.fd, 0)
    m[:1] = b"X"
    m.flush()
    m.close()


def _mmap_simulated_file(c: Ctx) -> bytes:
    with open(c.p("keep.txt"), "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        try:
            return m[:3]
        finally:
            m.close()


def _mmap_simulated_file_read_only(c: Ctx) -> bytes:
    with open(c.p("keep.txt"), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m[:3]


def _lower_nofile(c: Ctx) -> bool:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE) == (soft - 1, hard)


def _prlimit_host(c: Ctx) -> Any:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return resource.prlimit(c.host_pid, resource.RLIMIT_NOFILE, (soft - 1, hard))


def _sqlite_file(c: Ctx) -> bool:
    con = sqlite3.connect(c.p("db.sqlite"))
    con.execute("create table t (x)")
    con.commit()
    con.close()
    return os.path.exists(c.p("db.sqlite"))


def _sqlite_memory(c: Ctx) -> list:
    con = sqlite3.connect(":memory:")
    con.execute("create table t (x)")
    con.execute("insert into t values (1)")
    return con.execute("select x from t").fetchall()


def _tofile(c: Ctx) -> int:
    np.arange(4, dtype=np.uint8).tofile(c.p("array.bin"))
    return os.path.getsize(c.p("array.bin"))


def _torch_save(c: Ctx) -> list:
    torch.save(torch.tensor([1, 2, 3]), c.p("t.pt"))
    return torch.load(c.p("t.pt")).tolist()


def _safetensors_save(c: Ctx) -> list:
    from safetensors.torch import load_file, save_file

    save_file({"t": torch.zeros(2)}, c.p("t.safetensors"))
    return load_file(c.p("t.safetensors"))["t"].tolist()


def _memmove_into_host_object(c: Ctx) -> None:
    ctypes.memmove(id(c.blob) + bytes.__basicsize__ - 1, b"X", 1)


def _unix_bind(c: Ctx) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(c.p("sock"))
    return s


def _tcp_bind(c: Ctx) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def _set_stdout(c: Ctx) -> str:
    buf = io.StringIO()
    sys.stdout = buf
    print("from a rank")
    return buf.getvalue()


def _rank_log_handler(c: Ctx) -> bool:
    handler = logging.FileHandler(c.p("log", "rank.log"))
    logging.getLogger().addHandler(handler)
    logging.warning("from a rank")
    handler.flush()
    with open(c.p("log", "rank.log")) as f:
        return "from a rank" in f.read()


def _replace_os_module(c: Ctx) -> bool:
    fake = types.ModuleType("os")
    sys.modules["os"] = fake
    return sys.modules["os"] is fake


def _seed_global_generator(c: Ctx) -> bool:
    random._inst.seed(1)  # type: ignore[attr-defined]
    return random.random() == random.Random(1).random()


def _import_helper(c: Ctx) -> str:
    return importlib.import_module(c.module).VALUE


def _atexit_left(c: Ctx) -> list[str]:
    atexit.unregister(_noop)
    return []


# -- host set-ups around a run --------------------------------------------------------------------------

@contextlib.contextmanager
def _decoy_streams(c: Ctx) -> Iterator[None]:
    """The host's sys.stdout/stderr are decoys during the run (closing them cannot break pytest)."""
    old = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old


@contextlib.contextmanager
def _host_gc_off_and_frozen(c: Ctx) -> Iterator[None]:
    """The host has switched its collector off and frozen its objects (as servers do after start-up)."""
    was = gc.isenabled()
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


@contextlib.contextmanager
def _host_log_to(path: str | None) -> Iterator[None]:
    """During the run the host's root logger has no file handler but one on ``path`` (if any); the
    one pytest keeps on /dev/null is set aside so that each attempt tests one thing."""
    saved = logging.root.handlers[:]
    logging.root.handlers[:] = [h for h in saved if not isinstance(h, logging.FileHandler)]
    handler = logging.FileHandler(path) if path else None
    if handler is not None:
        logging.root.addHandler(handler)
    try:
        yield
    finally:
        logging.root.handlers[:] = saved
        if handler is not None:
            handler.close()


@contextlib.contextmanager
def _helper_importable(c: Ctx) -> Iterator[None]:
    """The real module directory on the host's sys.path, bytecode writing on (Python's default)."""
    old = sys.dont_write_bytecode
    sys.path.insert(0, c.mods)
    sys.dont_write_bytecode = False
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.dont_write_bytecode = old
        sys.path.remove(c.mods)
        sys.modules.pop(c.module, None)


# -- the attempts ----------------------------------------------------------------------------------------

BELOW_OS = [
    A("posix.open(O_CREAT|O_WRONLY)",
      lambda c: then(posix.close(posix.open(c.p("new.txt"), CREATE, 0o644)), os.path.exists(c.p("new.txt"))),
      "posix.open", "os.open", expect=True),
    A("posix.mkdir", lambda c: then(posix.mkdir(c.p("newdir")), os.path.isdir(c.p("newdir"))),
      "posix.mkdir", "os.mkdir", expect=True),
    A("posix.rename", lambda c: then(posix.rename(c.p("keep.txt"), c.p("moved.txt")),
                                     (os.path.exists(c.p("moved.txt")), os.path.exists(c.p("keep.txt")))),
      "posix.rename", "os.rename", expect=(True, False)),
    A("posix.unlink", lambda c: then(posix.unlink(c.p("victim.txt")), os.path.exists(c.p("victim.txt"))),
      "posix.unlink", "os.unlink", expect=False),
    A("posix.rmdir", lambda c: then(posix.rmdir(c.p("empty")), os.path.exists(c.p("empty"))),
      "posix.rmdir", "os.rmdir", expect=False),
    A("posix.chdir(subdir)", lambda c: then(posix.chdir(c.p("sub")), os.getcwd() == c.p("sub")), "posix.chdir",
      "os.chdir", expect=True),
    A("posix.chdir('/')", lambda c: then(posix.chdir("/"), os.getcwd()), "posix.chdir", "os.chdir", expect="/"),
    A("posix.chmod", lambda c: then(posix.chmod(c.p("victim.txt"), 0o600), _mode(c.p("victim.txt"))),
      "posix.chmod", "os.chmod", expect=0o600),
    A("posix.utime", lambda c: then(posix.utime(c.p("victim.txt"), (1, 1)), os.stat(c.p("victim.txt")).st_mtime),
      "posix.utime", "os.utime", expect=1),
    A("posix.symlink", lambda c: then(posix.symlink(c.p("keep.txt"), c.p("link")), os.path.islink(c.p("link"))),
      "posix.symlink", "os.symlink", expect=True),
    A("posix.link", lambda c: then(posix.link(c.p("keep.txt"), c.p("hard")), os.path.exists(c.p("hard"))),
      "posix.link", "os.link", expect=True),
    A("posix.truncate", lambda c: then(posix.truncate(c.p("victim.txt"), 0), os.path.getsize(c.p("victim.txt"))),
      "posix.truncate", "os.truncate", expect=0),
    A("posix.umask(0)", lambda c: then(posix.umask(0), _new_file_mode(c)), "posix.umask", "os.umask", expect=0o666),
    A("os.umask(0)", lambda c: then(os.umask(0), _new_file_mode(c)), "os.umask", expect=0o666),
    A("posix.stat", lambda c: posix.stat(c.p("keep.txt")).st_size, "posix.stat", "os.stat",
      expect=len(SIM_FILES["keep.txt"])),
    A("_io.FileIO(path,'w')", _create_with(lambda p: _io.FileIO(p, "w")), "FileIO", "open(", expect=True),
    A("_io.open(path,'w')", _create_with(lambda p: _io.open(p, "w")), "_io.open", "io.open", "open(", expect=True),
    A("io.open_code(simulated path)", _read_keep, "open_code", expect=SIM_FILES["keep.txt"].encode()),
    A("from os import open (inside the rank)", _os_open_imported_in_rank, "os.open", expect=True),
    A("os.open.__wrapped__", _wrapped_os_open, "os.open", "posix.open", "open(", expect=True,
      raises=(AttributeError,)),
    A("open(path,'w') (control)", _create_with(lambda p: open(p, "w")), expect=True),
    A("pathlib write_text (control)",
      lambda c: then(pathlib.Path(c.p("new.txt")).write_text("x"), pathlib.Path(c.p("new.txt")).read_text()),
      expect="x"),
    A("os.chdir('/') (control)", lambda c: then(os.chdir("/"), os.getcwd()), expect="/"),
    A("shutil.rmtree(sentinel dir) (control)", lambda c: then(shutil.rmtree(c.dir), os.path.exists(c.dir)),
      expect=False),
    A("open() for writing in the Python installation", _installation_write, "open", expect=REFUSE_ONLY,
      errnos=frozenset({errno.EROFS}), after=_installation_left),
    A("os.open('/proc/self/fd/<host fd>', O_TRUNC)",
      lambda c: os.close(os.open(f"/proc/self/fd/{c.fd}", os.O_WRONLY | os.O_TRUNC)), "os.open", errnos=ENOENT),
]

DESCRIPTORS = [
    A("posix.close(host fd)", lambda c: posix.close(c.fd), "posix.close", "os.close", errnos=EBADF),
    A("os.close(host fd)", lambda c: os.close(c.fd), "os.close", errnos=EBADF),
    A("os.close(1)", lambda c: os.close(1), "os.close", errnos=EBADF),
    A("posix.dup2(host fd, host fd)", lambda c: posix.dup2(c.fd, c.fd2), "posix.dup2", "os.dup2", errnos=EBADF),
    A("os.dup2(host fd, host fd)", lambda c: os.dup2(c.fd, c.fd2), "os.dup2", errnos=EBADF),
    A("posix.closerange(host fds)", lambda c: posix.closerange(min(c.fd, c.fd2), max(c.fd, c.fd2) + 1),
      "posix.closerange", "os.closerange"),
    A("os.closerange(host fds)", lambda c: os.closerange(min(c.fd, c.fd2), max(c.fd, c.fd2) + 1), "os.closerange"),
    A("os.write(host fd)", lambda c: os.write(c.fd, b"escaped"), "os.write", errnos=EBADF),
    A("os.ftruncate(host fd)", lambda c: os.ftruncate(c.fd, 0), "os.ftruncate", errnos=EBADF),
    A("os.fdopen(host fd, 'w')", lambda c: os.fdopen(c.fd, "w").write("escaped"), "os.fdopen", "open",
      errnos=EBADF),
    A("open(host fd, 'r+')", lambda c: open(c.fd, "r+").write("escaped"), "open", errnos=EBADF),
    A("os.read(host fd)", lambda c: os.read(c.fd, 4), "os.read", errnos=EBADF),
    A("os.lseek(host fd)", lambda c: os.lseek(c.fd, 5, os.SEEK_SET), "os.lseek", errnos=EBADF),
    A("os.set_blocking(host fd, False)", lambda c: os.set_blocking(c.fd, False), "os.set_blocking", errnos=EBADF),
    A("os.set_inheritable(host fd, True)", lambda c: os.set_inheritable(c.fd, True), "os.set_inheritable",
      errnos=EBADF),
    A("fcntl.fcntl(host fd, F_SETFL, O_APPEND)", lambda c: fcntl.fcntl(c.fd, fcntl.F_SETFL, os.O_APPEND), "fcntl",
      errnos=EBADF),
    A("fcntl.flock(host fd, LOCK_EX)", lambda c: fcntl.flock(c.fd, fcntl.LOCK_EX), "fcntl.flock", errnos=EBADF,
      after=_flock_left),
    A("os.pipe() left open", lambda c: then(os.pipe(), None), "os.pipe"),
    A("socket.socketpair() left open", lambda c: socket.socketpair(), "socket"),
    A("mmap class from before simfs, on a host fd", _original_mmap_on_host_fd, "mmap", expect=REFUSE_ONLY,
      errnos=EBADF),
    A("mmap.mmap of a simulated file", _mmap_simulated_file, "mmap", expect=b"sim"),
    A("mmap.mmap of a simulated file, read-only", _mmap_simulated_file_read_only, expect=b"sim"),
]


def _forged(name: str, *args: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
    """A system call sent to the host as the rank's own client sends it (on greenlet ranks: the
    host's handler called directly), naming what ``args`` give: a real descriptor the host holds."""
    def act(c: Ctx) -> Any:
        from simfs.port import schema
        from simfs.tasks.task import current_task

        calls = current_task().context.sys
        values = [arg(c) for arg in args]
        if hasattr(calls, "_ask"):  # a rank process's SyscallsClient
            return calls._ask(schema.SystemCall(name, values, {}))
        return getattr(calls, name)(*values)
    return act


def _host_fd(c: Ctx) -> int:
    return c.fd


# what a forged request names: a real descriptor of the host, or its console; only EBADF is right
FORGED = [
    A("forged write(host fd)", _forged("write", _host_fd, lambda c: b"escaped"), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged write(1)", _forged("write", lambda c: 1, lambda c: b"forged line\n"), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged read(host fd)", _forged("read", _host_fd, lambda c: 64), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged read(0)", _forged("read", lambda c: 0, lambda c: 64), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged close(host fd)", _forged("close", _host_fd), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged close(2)", _forged("close", lambda c: 2), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged fstat(host fd)", _forged("fstat", _host_fd), errnos=EBADF, expect=REFUSE_ONLY),
    A("forged isatty(host fd)", _forged("isatty", _host_fd), errnos=EBADF, expect=REFUSE_ONLY),
]

SIGNALS = [
    *[A(f"signal.raise_signal({name})", lambda c, name=name: signal.raise_signal(getattr(signal, name)),
        "raise_signal", dies=name) for name in ("SIGUSR1", "SIGTERM")],
    A("signal.signal(SIGTERM, handler)",
      lambda c: then(signal.signal(signal.SIGTERM, _noop), signal.getsignal(signal.SIGTERM) is _noop),
      "signal.signal", expect=True),
    A("signal.alarm(1000)", lambda c: signal.alarm(1000), "signal.alarm"),
    *[A(f"signal.setitimer({name}, 1000)", lambda c, name=name: signal.setitimer(getattr(signal, name), 1000),
        "signal.setitimer") for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")],
    A("os.kill(host pid, SIGUSR1)", lambda c: os.kill(c.host_pid, signal.SIGUSR1), "os.kill", errnos=ESRCH),
    A("os.kill(host pid, SIGTERM)", lambda c: os.kill(c.host_pid, signal.SIGTERM), "os.kill", errnos=ESRCH),
    A("posix.kill(host pid, SIGUSR1)", lambda c: posix.kill(c.host_pid, signal.SIGUSR1), "posix.kill", "os.kill",
      errnos=ESRCH),
    A("os.kill(os.getpid(), 0)", lambda c: os.kill(os.getpid(), 0), expect=None),
    A("resource.setrlimit(NOFILE, soft-1)", _lower_nofile, "resource.setrlimit", expect=True),
    A("resource.prlimit(host pid, NOFILE)", _prlimit_host, "resource.prlimit", "prlimit", errnos=ESRCH),
]

PROCESSES = [
    A("_posixsubprocess.fork_exec(touch)", _fork_exec, "fork_exec", expect=REFUSE_ONLY),
    A("subprocess.run(['touch'])", lambda c: subprocess.run(_touch_argv(c)), "subprocess", expect=REFUSE_ONLY),
    A("os.system", lambda c: os.system(" ".join(_touch_argv(c))), "os.system", expect=REFUSE_ONLY),
    A("os.popen", lambda c: os.popen(" ".join(_touch_argv(c))).close(), "os.popen", expect=REFUSE_ONLY),
    A("os.fork", _guarded_fork(lambda: os.fork()), "os.fork", expect=REFUSE_ONLY),
    A("os.posix_spawn", _spawned(_touch_argv, lambda *a: os.posix_spawn(*a)), "os.posix_spawn", expect=REFUSE_ONLY),
    A("os.spawnv(P_WAIT)", lambda c: os.spawnv(os.P_WAIT, TOUCH, _touch_argv(c)), "os.spawnv", expect=REFUSE_ONLY),
    A("posix.system", lambda c: posix.system(" ".join(_touch_argv(c))), "posix.system", "os.system",
      expect=REFUSE_ONLY),
    A("posix.posix_spawn", _spawned(_touch_argv, lambda *a: posix.posix_spawn(*a)), "posix.posix_spawn",
      "os.posix_spawn", expect=REFUSE_ONLY),
    A("posix.fork", _guarded_fork(lambda: posix.fork()), "posix.fork", "os.fork", expect=REFUSE_ONLY),
    *[A(f"multiprocessing {method!r} Process", _mp_process(method), ANY_CALL, expect=True, after=_stop_mp_helpers)
      for method in ("spawn", "fork", "forkserver")],
    A("concurrent.futures.ProcessPoolExecutor", _process_pool, ANY_CALL, expect=True, after=_stop_mp_helpers),
    A("torch DataLoader(num_workers=1)", _dataloader, ANY_CALL, expect=[[0, 1], [2, 3]], after=_stop_mp_helpers),
    A("SharedMemory(create=True)", _shared_memory, ANY_CALL, expect=b"data", after=_shared_memory_left),
    A("ThreadPoolExecutor writing a file (control)", _thread_pool, expect=True),
    A("_thread.start_new_thread writing a file", _real_thread, "start_new_thread", expect=True),
]

LIBRARIES = [
    A("ctypes.CDLL(None).mkdir", lambda c: ctypes.CDLL(None).mkdir(os.fsencode(c.p("ctypes-dir")), 0o755),
      "ctypes", expect=REFUSE_ONLY),
    A("ctypes.CDLL(None).getpid()", lambda c: ctypes.CDLL(None).getpid() == os.getpid(), "ctypes", expect=True),
    A("ctypes.memmove into a host-owned object", _memmove_into_host_object, "ctypes", expect=REFUSE_ONLY),
    A("sqlite3.connect(file)", _sqlite_file, "sqlite3.connect", expect=True),
    A("sqlite3.connect(':memory:')", _sqlite_memory, expect=[(1,)]),
    A("numpy.ndarray.tofile", _tofile, "tofile", expect=4),
    A("numpy.fromfile", lambda c: np.fromfile(c.p("keep.txt"), dtype=np.uint8).tobytes(), "fromfile",
      expect=SIM_FILES["keep.txt"].encode()),
    A("torch.save", _torch_save, "torch.save", expect=[1, 2, 3]),
    A("safetensors.torch.save_file", _safetensors_save, "safetensors", expect=[0.0, 0.0], needs="safetensors"),
    A("AF_UNIX socket bind(path)", _unix_bind, "socket", expect=REFUSE_ONLY),
    A("TCP bind(127.0.0.1:0)", _tcp_bind, "socket", expect=REFUSE_ONLY),
    A("TCP connect to the host's listener", lambda c: socket.create_connection(("127.0.0.1", c.port), timeout=5),
      "socket", expect=REFUSE_ONLY, errnos=frozenset({errno.ECONNREFUSED})),
    # torch's C++ opens paths and sockets itself, below Python's calls
    A("torch._C.PyTorchFileWriter(path)", lambda c: torch._C.PyTorchFileWriter(c.p("writer.pt")),
      "PyTorchFileWriter", expect=REFUSE_ONLY),
    A("torch.distributed.FileStore(path)", lambda c: then(dist.FileStore(c.p("store"), 1).set("k", b"v"),
                                                           os.path.getsize(c.p("store")) > 0), "FileStore",
      expect=True),
    A("torch.distributed.TCPStore to the host's listener",  # simulated: no server listens there in virtual time
      lambda c: dist.TCPStore("127.0.0.1", c.port, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=2)), "TCPStore", expect=REFUSE_ONLY,
      raises=(dist.DistStoreError,)),
    A("torch's C++ TCPStore class, named before the run",
      lambda c: _CPP["TCPStore"]("127.0.0.1", c.port, is_master=False, wait_for_workers=False,
                                 timeout=datetime.timedelta(seconds=2)), "TCPStore", expect=REFUSE_ONLY),
    A("select.select on no descriptor for 30 s", lambda c: select.select([], [], [], 30), expect=([], [], [])),
]


def _set_then_get(owner: Any, setter: str, getter: str, value: Any) -> Callable[[Ctx], Any]:
    """Set through ``owner.setter`` and read back through ``owner.getter``, both looked up in the rank."""
    return lambda c: then(getattr(owner, setter)(value), getattr(owner, getter)())


PROCESS_STATE = [
    A("os.environb[b'X'] = b'1'", lambda c: then(os.environb.__setitem__(b"SIMFS_ISO_B", b"1"),
                                                 os.environ.get("SIMFS_ISO_B")), "environb", expect="1"),
    A("os.environ['X'] = '1' (control)", lambda c: then(os.environ.__setitem__("SIMFS_ISO_E", "1"),
                                                        os.environ.get("SIMFS_ISO_E")), expect="1"),
    A("del os.environ[canary] (control)", lambda c: then(os.environ.pop(CANARY), CANARY in os.environ),
      expect=False),
    A("os.putenv", lambda c: os.putenv("SIMFS_ISO_P", "1"), "os.putenv"),
    A("os.unsetenv(canary)", lambda c: os.unsetenv(CANARY), "os.unsetenv"),
    A("posix.putenv", lambda c: posix.putenv(b"SIMFS_ISO_P", b"1"), "posix.putenv", "os.putenv"),
    A("posix.unsetenv(canary)", lambda c: posix.unsetenv(CANARY), "posix.unsetenv", "os.unsetenv"),
    A("sys.path.insert(0, '/x')", lambda c: then(sys.path.insert(0, "/x"), sys.path[0]), "sys.path", expect="/x"),
    A("sys.argv.append", lambda c: then(sys.argv.append("--rank-flag"), sys.argv[-1]), "sys.argv",
      expect="--rank-flag"),
    A("sys.setrecursionlimit", _set_then_get(sys, "setrecursionlimit", "getrecursionlimit", 4321),
      "sys.setrecursionlimit", expect=4321),
    A("sys.setswitchinterval", _set_then_get(sys, "setswitchinterval", "getswitchinterval", 0.25),
      "sys.setswitchinterval", expect=0.25),
    A("sys.set_int_max_str_digits", _set_then_get(sys, "set_int_max_str_digits", "get_int_max_str_digits", 5000),
      "sys.set_int_max_str_digits", expect=5000),
    A("sys.setdlopenflags", _set_then_get(sys, "setdlopenflags", "getdlopenflags", os.RTLD_NOW | os.RTLD_GLOBAL),
      "sys.setdlopenflags", expect=os.RTLD_NOW | os.RTLD_GLOBAL),
    *[A(f"{owner.__name__}.{hook} = ...", lambda c, o=owner, h=hook: then(setattr(o, h, _noop), getattr(o, h)),
        f"{owner.__name__}.{hook}", expect=_noop)
      for owner, hook in ((sys, "excepthook"), (sys, "unraisablehook"), (threading, "excepthook"))],
    A("threading.settrace", _set_then_get(threading, "settrace", "gettrace", _noop), "threading.settrace",
      expect=_noop),
    A("threading.stack_size", lambda c: then(threading.stack_size(1 << 20), threading.stack_size()), "stack_size",
      expect=1 << 20),
    A("sys.stdout = io.StringIO()", _set_stdout, "sys.stdout", expect="from a rank\n"),
    *[A(f"sys.{name}.close()", lambda c, name=name: getattr(sys, name).close(), f"sys.{name}", host=_decoy_streams)
      for name in ("stdout", "stderr")],
    A("builtins attribute assignment", lambda c: then(setattr(builtins, "simfs_iso_leak", 1),
                                                      hasattr(builtins, "simfs_iso_leak")), "builtins", expect=True),
    A("sys.modules['os'] = fake", _replace_os_module, "sys.modules", expect=True),
    A("warnings.simplefilter", lambda c: then(warnings.simplefilter("ignore"), warnings.filters[0][0]), "warnings",
      expect="ignore"),
    A("socket.setdefaulttimeout", _set_then_get(socket, "setdefaulttimeout", "getdefaulttimeout", 3.0),
      "setdefaulttimeout", expect=3.0),
    A("random._inst.seed", _seed_global_generator, "random", expect=True),
    A("atexit.register", lambda c: then(atexit.register(_noop), None), "atexit", after=_atexit_left),
    A("gc.disable()", lambda c: then(gc.disable(), gc.isenabled()), "gc", expect=False),
    A("gc.freeze()", lambda c: gc.freeze(), "gc"),
    A("gc.enable() while the host has gc off", lambda c: then(gc.enable(), gc.isenabled()), "gc", expect=True,
      host=_host_gc_off_and_frozen),
    A("gc.set_threshold", lambda c: then(gc.set_threshold(5000, 50, 50), gc.get_threshold()), "gc",
      expect=(5000, 50, 50)),
    A("a plain run while the host has gc off with frozen objects", lambda c: None, host=_host_gc_off_and_frozen),
    A("logging: a rank's FileHandler on the root logger", _rank_log_handler, "logging", expect=True,
      host=lambda c: _host_log_to(None)),
    A("logging.getLogger().setLevel", lambda c: then(logging.getLogger().setLevel(logging.DEBUG),
                                                     logging.getLogger().level), "logging", expect=logging.DEBUG),
    A("logging.disable", lambda c: then(logging.disable(logging.CRITICAL), logging.root.manager.disable),
      "logging", expect=logging.CRITICAL),
    A("logging.warning with a host FileHandler attached", lambda c: logging.warning("from a rank"), "logging",
      host=lambda c: _host_log_to(c.p("log", "real.log"))),
    A("logging.warning with a host FileHandler on /dev/null", lambda c: logging.warning("from a rank"), "logging",
      host=lambda c: _host_log_to(os.devnull)),
    A("import from a real directory on sys.path (no bytecode written there)", _import_helper, "import",
      expect="imported", host=_helper_importable),
]


@pytest.mark.parametrize("a", params(BELOW_OS))
def test_filesystem_calls_below_os(env: Env, a: Attempt) -> None:
    """posix.*, _io and io.open_code reach the C library without the patched os and open: they
    act on the simulated disk (or are refused), never on the real sentinel tree or the host."""
    check(env, a)


@pytest.mark.parametrize("a", params(DESCRIPTORS))
def test_descriptors(env: Env, a: Attempt) -> None:
    """Real descriptor numbers the host holds (1, a file it has open) are not the rank's: closing,
    duplicating, writing, seeking, flagging, locking or mapping them leaves the host's alone."""
    check(env, a)


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
@pytest.mark.parametrize("a", params(FORGED))
def test_a_request_naming_a_real_descriptor_of_the_host_gets_ebadf(env: Env, a: Attempt, carrier: str) -> None:
    """The host acts only on descriptors it opened for the rank: a request a rank forges that names
    one of the host's own (its console, a file it holds open) is answered EBADF and changes nothing."""
    result, problems = env.run(_in_rank, a, env.ctx, carrier=carrier)
    problems = judge(a, result) + problems
    assert not problems, f"{a.id}:\n" + "\n".join(problems)


@pytest.mark.parametrize("a", params(SIGNALS))
def test_signals_and_limits(env: Env, a: Attempt) -> None:
    """Signals, timers and resource limits belong to the rank's simulated process: the host gets no
    signal, no armed timer, no changed handler or limit."""
    check(env, a)


@pytest.mark.parametrize("a", params(PROCESSES))
def test_processes(env: Env, a: Attempt) -> None:
    """Nothing inside a rank starts a real process or thread outside the simulation (it would read
    and write the real disk), or leaves the real descriptors of one in the host."""
    check(env, a)


@pytest.mark.parametrize("a", params(LIBRARIES))
def test_c_libraries_and_sockets(env: Env, a: Attempt) -> None:
    """C libraries that open paths or sockets themselves, and ctypes: simulated or refused by name.
    sqlite3 on ':memory:' touches nothing and must work."""
    check(env, a)


@pytest.mark.parametrize("a", params(PROCESS_STATE))
def test_interpreter_state(env: Env, a: Attempt) -> None:
    """Per-process state a rank changes (environment, sys settings, hooks, streams, gc, logging,
    imports) stays in the rank: the host's is the same after the run."""
    check(env, a)


@pytest.mark.parametrize("a", params(BELOW_OS + DESCRIPTORS + SIGNALS + PROCESSES + LIBRARIES + PROCESS_STATE))
def test_the_host_is_as_before_after_a_rank_process_tries(env: Env, a: Attempt) -> None:
    """Every attempt above, from a rank process (Cluster(carrier="process")): whatever it achieves
    inside its own process, which the kernel confines, the host is as before the run (its state,
    the real sentinel tree, its descriptors, signals and limits) and the cluster's next runs work."""
    with a.host(env.ctx) if a.host else contextlib.nullcontext():
        _, problems = env.run(_in_rank, a, env.ctx, carrier="process")
    if a.after is not None:
        problems += a.after(env.ctx)
    assert not problems, f"{a.id}:\n" + "\n".join(problems)


# -- per-thread state must not leak from one rank to another ---------------------------------------

@dataclass(frozen=True)
class Leak:
    id: str
    change: Callable[[], Any]
    read: Callable[[], bool]
    names: tuple[str, ...]


def _leak_job(leak: Leak) -> tuple[str, Any]:
    """(what rank 0's change did, what this rank reads after it)."""
    changed = "-"
    if dist.get_rank() == 0:
        try:
            leak.change()
            changed = "changed"
        except simfs.BypassError as exc:
            changed = f"refused: {exc}"
    dist.barrier()
    try:
        return changed, leak.read()
    except simfs.BypassError:
        return changed, "refused"


LEAKS = [
    Leak("signal.pthread_sigmask", lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2]),
         lambda: signal.SIGUSR2 in signal.pthread_sigmask(signal.SIG_BLOCK, []), ("pthread_sigmask",)),
    Leak("sys.settrace", lambda: sys.settrace(_noop), lambda: sys.gettrace() is _noop, ("sys.settrace",)),
    Leak("sys.setprofile", lambda: sys.setprofile(_noop), lambda: sys.getprofile() is _noop, ("sys.setprofile",)),
]


@pytest.mark.parametrize("leak", [pytest.param(leak, id=leak.id, marks=marks(leak.id)) for leak in LEAKS])
def test_thread_state_stays_in_its_rank(env: Env, leak: Leak) -> None:
    """Rank 0 changes real per-thread state the host never sees (it lives on the simulation thread):
    rank 1, another process, must not see it, while rank 0 does (or the change is refused)."""
    result, problems = env.run(_leak_job, leak, rpn=2)
    assert result is not None and result.ok, (result and result.tracebacks, problems)
    (changed, own), (_, other) = result.returns[0], result.returns[1]
    if changed.startswith("refused"):
        assert any(n in changed for n in leak.names), changed
    elif own is not True:
        problems.append(f"rank 0 does not see its own change: {own}")
    if other is True:
        problems.append("rank 1 (another process) sees rank 0's change")
    assert not problems, "\n".join(problems)


# -- replay strings are data, not code ---------------------------------------------------------------

def replayable_job() -> int:
    return 1


def _forge(replay: str, job: str, args: list) -> str:
    """A hand-made replay string: a genuine one with its job and arguments replaced."""
    body = replay.split(":", 1)[1]
    spec = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    spec.update(job=job, args=args, kwargs={})
    raw = zlib.compress(json.dumps(spec, separators=(",", ":"), sort_keys=True).encode(), 9)
    return "simfs1:" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _touch_command(c: Ctx) -> str:
    return f"{TOUCH} {c.p('replayed')}"


REPLAYS: list[tuple[str, Callable[[Ctx], list], tuple[str, ...], tuple[type[BaseException], ...]]] = [
    ("posix:system", lambda c: [_touch_command(c)], ("posix.system", "os.system"), ()),
    ("os:system", lambda c: [_touch_command(c)], ("os.system",), ()),
    ("builtins:exec", lambda c: [f"import posix; posix.system({_touch_command(c)!r})"],
     ("exec", "posix.system", "os.system"), ()),
    ("builtins:eval", lambda c: [f"__import__('posix').system({_touch_command(c)!r})"],
     ("eval", "posix.system", "os.system"), ()),
    ("posix:unlink", lambda c: [c.p("keep.txt")], ("posix.unlink", "os.unlink"), (FileNotFoundError,)),
    ("subprocess:run", lambda c: [[TOUCH, c.p("replayed")]], ("subprocess",), ()),
]


@pytest.mark.parametrize("job, args, names, simulated", [
    pytest.param(*case, id=f"replay {case[0]}", marks=marks(f"replay {case[0]}")) for case in REPLAYS])
def test_replay_string_naming_a_dangerous_callable(env: Env, job: str, args: Callable[[Ctx], list],
                                                   names: tuple[str, ...],
                                                   simulated: tuple[type[BaseException], ...]) -> None:
    """simfs.replay() of a hand-made string whose job is a shell, exec, eval or unlink with
    arguments: refused (before running, naming the job, or by a BypassError in the rank) or, for
    unlink, simulated (the simulated disk has no such file); the real command never runs."""
    text = _forge(simfs.Cluster().run(replayable_job).replay, job, args(env.ctx))
    result = None
    with env.host.watch() as problems:
        try:
            result = simfs.replay(text)
        except (ValueError, TypeError, simfs.SimfsError) as exc:
            if not any(n in str(exc) for n in (*names, job)):
                problems.append(f"refused without naming the job: {exc}")
    if result is not None:
        error = result.errors.get(0)
        refused = isinstance(error, simfs.BypassError) and any(n in str(error) for n in names)
        if not (refused or isinstance(error, simulated)):
            problems.append(f"replayed and ran the job: returns {result.returns}, errors {result.errors}")
    assert not problems, "\n".join(problems)


# -- arguments that describe no real cluster ---------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    pytest.param({"collective_timeout": -1}, "collective_timeout", id="collective_timeout=-1"),
    pytest.param({"watchdog": 0}, "watchdog", id="watchdog=0"),
    pytest.param({"env": {"A": 1}}, "env", id="env={'A': 1}"),
    pytest.param({"cwd": "rel"}, "cwd", id="cwd='rel'"),
    pytest.param({"collective_bandwidth": 1e-300}, "collective_bandwidth", id="collective_bandwidth=1e-300"),
    pytest.param({"collective_latency": -1}, "collective_latency", id="collective_latency=-1"),
])
def test_bad_cluster_argument_is_rejected(kwargs: dict, name: str) -> None:
    """A Cluster argument no real cluster has is rejected at once, naming the argument."""
    with pytest.raises((ValueError, TypeError), match=name):
        simfs.Cluster(**kwargs)


def test_empty_profile_file_is_rejected(tmp_path: Path) -> None:
    """simfs.Profile.load of an empty file raises naming the file, instead of returning defaults."""
    empty = tmp_path / "site.toml"
    empty.write_text("")
    with pytest.raises((ValueError, simfs.SimfsError), match=r"site\.toml"):
        simfs.Profile.load(str(empty))


# -- the host process after runs ------------------------------------------------------------------------

@escapes("pickle after a run")
def test_host_can_pickle_os_functions_after_a_run() -> None:
    """After run() returns, functions the host passes to other processes by name still pickle."""
    assert simfs.Cluster().run(_probe_read, PROBE).ok
    for fn in (os.getpid, os.stat, open):
        assert pickle.loads(pickle.dumps(fn)) is fn


# -- attempts that could kill or hang the host: in a child interpreter ---------------------------------

CHILD_PRELUDE = """
import json, os, resource, sys
sys.modules["torch"] = None  # keeps torch out (simfs then skips its torch patches): ~0.5 s instead of 3 s
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
import simfs

def summary(r):
    return {"returns": {str(k): v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
                        for k, v in r.returns.items()},
            "errors": {str(k): f"{type(e).__name__}: {e}" for k, e in r.errors.items()},
            "crashed": sorted(r.crashed), "hung": sorted(r.hung), "notes": r.notes, "vt": repr(r.virtual_time)}

def report(**fields):
    print("RESULT " + json.dumps(fields), flush=True)
"""


@dataclass
class Child:
    returncode: int | None  # None: killed at the timeout
    out: str
    err: str
    result: dict | None

    def why(self) -> str:
        return f"rc={self.returncode}, stdout tail {self.out[-500:]!r}, stderr tail {self.err[-1500:]!r}"


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != CANARY}
    env.update(OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]), **extra)
    return env


def python(code: str, timeout: float, **extra_env: str) -> Child:
    """CHILD_PRELUDE + ``code`` (dedented) in a fresh interpreter; its last ``report(...)`` is .result."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, cwd=REPO, env=child_env(**extra_env))
        returncode, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, out, err = None, _text(exc.stdout), _text(exc.stderr)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    return Child(returncode, out, err, json.loads(lines[-1][7:]) if lines else None)


def _text(data: Any) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


RANK_ATTEMPT = """
SENTINEL = {sentinel!r}
received, calls = [], []
signal.signal(signal.SIGUSR1, lambda s, f: received.append(s))
def job():
    try:
        {act}
    except simfs.BypassError as exc:
        return "refused: " + str(exc)
    return "returned"
r = simfs.Cluster().run(job)
"""


def _rank_outcome_ok(child: Child, names: tuple[str, ...]) -> None:
    outcome = str(child.result["run"]["returns"].get("0", "")) if child.result else ""
    if outcome.startswith("refused"):
        assert any(n in outcome for n in names), outcome


FATAL = [
    ("posix.abort()", "posix.abort()", ("abort",)),
    ("os.abort()", "os.abort()", ("os.abort",)),
    ("posix._exit(3)", "posix._exit(3)", ("_exit",)),
    ("signal.raise_signal(SIGKILL)", "signal.raise_signal(signal.SIGKILL)", ("raise_signal",)),
    ("signal.pthread_kill(main_thread().ident, SIGUSR1)",
     "signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)", ("pthread_kill",)),
    ("ctypes.string_at(0)", "ctypes.string_at(0)", ("ctypes",)),
    ("posix.execv(touch)", f"posix.execv({TOUCH!r}, [{TOUCH!r}, SENTINEL])", ("execv",)),
]


@pytest.mark.parametrize("act, names", [pytest.param(act, names, id=name, marks=marks(name))
                                        for name, act, names in FATAL])
def test_fatal_call_ends_only_the_rank(tmp_path: Path, act: str, names: tuple[str, ...]) -> None:
    """abort, _exit, SIGKILL, a bad pthread_kill, a segfault, exec: at most the rank's simulated
    process ends (or the call is refused); the host process lives on and reports the run."""
    sentinel = tmp_path / "exec-sentinel"
    child = python("import ctypes, posix, signal, threading\n" + RANK_ATTEMPT.format(sentinel=str(sentinel), act=act)
                   + "report(run=summary(r), received=received)\n", timeout=30)
    assert child.returncode == 0 and child.result is not None, f"the host process did not survive: {child.why()}"
    assert not sentinel.exists(), "the host process was replaced by another program"
    assert child.result["received"] == [], f"the host received {child.result['received']}"
    _rank_outcome_ok(child, names)


HOOKS = [
    ("sys.addaudithook", "sys.addaudithook(lambda event, args: calls.append(event))",
     "n = len(calls)\nos.listdir('.')\neffect = len(calls) - n", ("addaudithook",)),
    ("os.register_at_fork", "os.register_at_fork(after_in_child=lambda: open(SENTINEL, 'w').close())",
     "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\neffect = os.path.exists(SENTINEL)",
     ("register_at_fork",)),
]


@pytest.mark.parametrize("act, probe, names", [pytest.param(act, probe, names, id=name, marks=marks(name))
                                               for name, act, probe, names in HOOKS])
def test_permanent_interpreter_hook(tmp_path: Path, act: str, probe: str, names: tuple[str, ...]) -> None:
    """Hooks the interpreter never forgets (audit hooks, at-fork hooks) registered in a rank must not
    act on the host after the run (in a child interpreter: they cannot be removed)."""
    code = RANK_ATTEMPT.format(sentinel=str(tmp_path / "hook-sentinel"), act=act)
    child = python("import signal\n" + code + probe + "\nreport(run=summary(r), effect=effect)\n", timeout=30)
    assert child.returncode == 0 and child.result is not None, child.why()
    assert not child.result["effect"], f"the hook acted on the host after the run: {child.result}"
    _rank_outcome_ok(child, names)


def test_exec_family_is_refused(tmp_path: Path) -> None:
    """os.exec* would replace the host process by another program: each is refused naming it."""
    sentinel = tmp_path / "exec-sentinel"
    child = python(f"""
        T, S = {TOUCH!r}, {str(sentinel)!r}
        CALLS = {{
            "execv": lambda: os.execv(T, [T, S]), "execve": lambda: os.execve(T, [T, S], {{}}),
            "execl": lambda: os.execl(T, T, S), "execle": lambda: os.execle(T, T, S, {{}}),
            "execlp": lambda: os.execlp("touch", "touch", S), "execlpe": lambda: os.execlpe("touch", "touch", S, {{}}),
            "execvp": lambda: os.execvp("touch", ["touch", S]),
            "execvpe": lambda: os.execvpe("touch", ["touch", S], {{"PATH": "/usr/bin:/bin"}}),
        }}
        def job():
            out = {{}}
            for name, call in CALLS.items():
                try:
                    call()
                    out[name] = "returned"
                except simfs.BypassError as exc:
                    out[name] = str(exc)
            return out
        r = simfs.Cluster().run(job)
        report(run=summary(r), calls=r.returns.get(0))
        """, timeout=30)
    assert child.returncode == 0 and child.result is not None, child.why()
    assert not sentinel.exists()
    calls = child.result["calls"]
    assert calls is not None, child.result
    wrong = {name: text for name, text in calls.items() if f"os.{name}" not in text}
    assert not wrong, wrong


@escapes("sleep(inf)")
def test_sleep_forever_does_not_poison_the_clock() -> None:
    """time.sleep(float('inf')) in a rank: the run ends (refused, an error as in a real process, or
    a reported hang) with a finite virtual time, and the next runs of the cluster work."""
    child = python("""
        import time
        c = simfs.Cluster()
        def sleepy():
            time.sleep(float("inf"))
        def write():
            with open("/shared/after", "w") as f:
                f.write("x")
            return os.path.exists("/shared/after")
        def read():
            return os.path.exists("/shared/after")
        first = c.run(sleepy)
        report(first=summary(first), second=summary(c.run(write)), third=summary(c.run(read)))
        """, timeout=30)
    assert child.result is not None, child.why()
    first, second, third = child.result["first"], child.result["second"], child.result["third"]
    assert "0" in first["errors"] or 0 in first["hung"], first
    for run in (first, second, third):
        assert math.isfinite(float(run["vt"])), run
    assert second["returns"] == {"0": True} and third["returns"] == {"0": True}, (second, third)


def test_c_loop_holding_the_gil_is_reported() -> None:
    """A rank stuck in C code that never releases the GIL (a sum over a huge range): no thread of
    the process can interrupt it, so runs that must survive it go through simfs.isolated, whose
    supervisor kills the stuck child after its watchdog (2 s) and reports every thread's stack,
    the rank's line included. The child gets 15 s: the report is due after ~2 s plus start-up."""
    child = python("""
        def spin():
            return sum(range(10 ** 12))
        def runs():
            return summary(simfs.Cluster(carrier="greenlet").run(spin))  # (a rank process: test_runtime)
        try:
            report(run=simfs.isolated(runs, watchdog=2))
        except simfs.Stalled as exc:
            report(stalled=str(exc), stacks=exc.stacks)
        os._exit(0)
        """, timeout=15)
    assert child.result is not None, f"no report within 15 s: {child.why()}"
    assert "spin" in child.result["stacks"] and "watchdog 2s" in child.result["stalled"], child.result


@escapes("Ctrl-C")
def test_ctrl_c_stops_the_run() -> None:
    """SIGINT during a run of ranks that sleep forever in virtual time: run() ends promptly
    (KeyboardInterrupt or a partial result) and leaves no real thread behind."""
    code = CHILD_PRELUDE + textwrap.dedent("""
        import time
        def forever():
            while True:
                time.sleep(1)
        threads = len(os.listdir("/proc/self/task"))
        print("ready", flush=True)
        try:
            simfs.Cluster(ranks_per_node=2).run(forever)
            outcome = "returned"
        except KeyboardInterrupt:
            outcome = "KeyboardInterrupt"
        time.sleep(0.5)
        report(outcome=outcome, before=threads, after=len(os.listdir("/proc/self/task")))
        """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=child_env())
    try:
        assert proc.stdout is not None and select.select([proc.stdout], [], [], 30)[0], "the child never started"
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"rc={proc.returncode}: {err[-1500:]}"
    result = json.loads(lines[-1][7:])
    assert result["outcome"] in ("KeyboardInterrupt", "returned"), result
    assert result["after"] == result["before"], f"real threads left running: {result}"


SET_JOB = """
def set_job():
    return list({"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"})
"""


@escapes("PYTHONHASHSEED")
def test_replay_under_another_hash_seed_matches_or_says_so() -> None:
    """A job whose result depends on string hashing (set order), replayed from its replay string in
    an interpreter with another PYTHONHASHSEED: the same result, or a clear report of the mismatch."""
    first = python(SET_JOB + "r = simfs.Cluster().run(set_job)\nreport(replay=r.replay, returns=r.returns[0])",
                   timeout=30, PYTHONHASHSEED="1")
    assert first.result is not None, first.why()
    again = python(SET_JOB + textwrap.dedent(f"""
        plain = set_job()
        try:
            r = simfs.replay({first.result['replay']!r}, set_job)
            report(plain=plain, returns=r.returns.get(0), notes=r.notes, errors=summary(r)["errors"])
        except Exception as exc:
            report(plain=plain, raised=f"{{type(exc).__name__}}: {{exc}}")
        """), timeout=30, PYTHONHASHSEED="2")
    assert again.result is not None, again.why()
    assert again.result["plain"] != first.result["returns"], "precondition: the two hash seeds order the set alike"
    if "raised" in again.result:
        assert "hash" in again.result["raised"].lower(), again.result
    elif again.result["returns"] != first.result["returns"]:
        said = json.dumps([again.result["notes"], again.result["errors"]]).lower()
        assert "hash" in said, f"different result, nothing said: {first.result['returns']} -> {again.result}"


def test_resource_rewriting_a_large_file_without_fsync_stays_bounded() -> None:
    """RESOURCE TEST. A 16 MiB file rewritten 128 times without fsync (unsynced data a crash could
    still lose): the simulation keeps memory bounded, peak RSS of the process < 150 MB (measured
    with RUSAGE_CHILDREN by a wrapper whose only child is that process)."""
    code = CHILD_PRELUDE + textwrap.dedent("""
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
        def rewrite():
            data = b"x" * (16 << 20)
            for _ in range(128):
                with open("/shared/big", "wb") as f:
                    f.write(data)
            return os.path.getsize("/shared/big")
        report(run=summary(simfs.Cluster(carrier="greenlet", isolate=False).run(rewrite)))  # the model, in one process
        """)
    wrapper = ("import resource, subprocess, sys\n"
               "done = subprocess.run([sys.executable, '-c', sys.argv[1]], capture_output=True, text=True)\n"
               "print(done.stdout + done.stderr)\n"
               "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", wrapper, code], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=child_env())
    peak = [line for line in done.stdout.splitlines() if line.startswith("PEAK ")]
    assert peak and '"0": 16777216' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert int(peak[-1].split()[1]) < 150 * 1024, f"peak RSS {int(peak[-1].split()[1]) // 1024} MB"


LATER_JOB = f"""
import io, subprocess
def later(sentinel):
    out = {{}}
    for name, call in (("open", lambda: open("/shared/later-open", "w").close()),
                       ("io.open", lambda: io.open("/shared/later-io", "w").close()),
                       ("subprocess.run", lambda: subprocess.run([{TOUCH!r}, sentinel]))):
        try:
            call()
            out[name] = "returned"
        except simfs.BypassError as exc:
            out[name] = "refused"
        except Exception as exc:
            out[name] = f"{{type(exc).__name__}}: {{exc}}"
    out["simulated files"] = sorted(n for n in os.listdir("/shared") if n.startswith("later"))
    return out
"""


@pytest.mark.parametrize("module", [pytest.param(name, id=f"importlib.reload({name})",
                                                 marks=marks(f"importlib.reload({name})"))
                                    for name in ("os", "io", "builtins", "subprocess")])
def test_reload_inside_a_rank(tmp_path: Path, module: str) -> None:
    """importlib.reload(<module>) in a rank: the host keeps working and later runs of the cluster are
    still intercepted (open and io.open stay simulated, subprocess stays refused)."""
    sentinel = tmp_path / "later-sentinel"
    child = python(LATER_JOB + textwrap.dedent(f"""
        import importlib
        def reload_it():
            importlib.reload(sys.modules[{module!r}])
        c = simfs.Cluster()
        first = summary(c.run(reload_it))
        later_run = c.run(later, {str(sentinel)!r})
        report(first=first, cwd=os.getcwd(), later=later_run.returns.get(0), errors=summary(later_run)["errors"],
               real=os.path.lexists("/shared"))
        """), timeout=30)
    assert child.result is not None, child.why()
    assert child.result["cwd"] == str(REPO), child.result
    assert not child.result["real"] and not sentinel.exists(), f"a later run reached the real disk: {child.result}"
    assert child.result["later"] == {"open": "returned", "io.open": "returned", "subprocess.run": "refused",
                                     "simulated files": ["later-io", "later-open"]}, child.result


def test_absurd_cluster_size_is_rejected_at_once() -> None:
    """Cluster(nodes=10**7) is refused at once with a ValueError naming nodes, not by running out
    of memory (in a child with a 768 MiB address-space limit)."""
    child = python("""
        resource.setrlimit(resource.RLIMIT_AS, (768 << 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            simfs.Cluster(nodes=10 ** 7)
            report(outcome="accepted")
        except BaseException as exc:
            report(outcome=type(exc).__name__, value_error=isinstance(exc, ValueError), message=str(exc))
        """, timeout=15)
    assert child.result is not None, child.why()
    assert child.result.get("value_error") and "nodes" in child.result["message"], child.result


def test_first_run_in_a_fresh_interpreter_leaves_the_host_as_it_was() -> None:
    """A plain job (file I/O on 4 ranks) as the first run of a fresh interpreter: every host
    observation (tests/_host_state.py) is the same after run() as before."""
    child = python("""
        import socket
        from _host_state import Host
        def job():
            os.makedirs(f"/shared/d{os.environ['RANK']}")
            with open(f"/shared/d{os.environ['RANK']}/f", "w") as f:
                f.write("x")
            return sorted(os.listdir("/shared"))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host = Host([], b"blob", listener)
        with host.watch() as problems:
            r = simfs.Cluster(nodes=2, ranks_per_node=2).run(job)
        report(ok=r.ok, problems=problems)
        """, timeout=30)
    assert child.result is not None, child.why()
    assert child.result["ok"], child.result
    assert child.result["problems"] == [], "\n".join(child.result["problems"])


def _square(x: int) -> int:
    return x * x


def test_process_pool_still_works_after_the_attempts() -> None:
    """Last in the module (so after the attempts in this process): the host can still run work in
    a real ProcessPoolExecutor."""
    assert simfs.Cluster().run(_probe_read, PROBE).ok
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        assert pool.submit(_square, 7).result(timeout=60) == 49
