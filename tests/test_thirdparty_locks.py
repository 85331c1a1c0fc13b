"""Third-party file locks inside simfs ranks, on 2 nodes x 4 ranks (and 4 x 8), with each
filesystem's real semantics: the installed filelock and pinned releases (4.3, 3.32, 3.29, 3.20,
installed by .ci/run into the git-ignored .ci/deps/filelock-VERSION and run in a subprocess with
that directory first on sys.path), and huggingface_hub's WeakFileLock. What a release does is
judged by its version number against the release that changed it, so the installed one (whatever
pip resolved) is held to its own behaviour.

- FileLock is flock: it excludes on local, nfs and lustre; on beegfs and objectstore flock is
  local to a node, so ranks of two nodes hold it at once and a read-modify-write counter loses
  updates (shown to happen, not skipped).
- SoftFileLock is O_CREAT|O_EXCL: it excludes where exclusive create is atomic (all but
  objectstore, whose racy create lets two holders in).
- No crash from filelock's module state with many ranks: each rank is an OS process, so its fork
  state (pid), boot id and registry of held paths (thread-locals) are its own, the default acquire
  (wait as long as it takes) from every rank raises no spurious "Deadlock", and a rank's threads
  each have their own lock context; the host's filelock works after a run, also when filelock was
  first imported inside the ranks. Each rank notes the virtual interval of its critical sections:
  two that overlap were held at once.
- Stale locks left by a rank of a crashed node, judged on the restart (the next cluster.run) as
  each version really does: >= 3.22 records pid and hostname and breaks a lock whose holder is
  dead on the same host only; >= 3.30 also compares the holder's start token (/proc/<pid>/stat
  start time and the boot id), so a pid reused after the reboot does not keep a dead holder's
  lock; 3.20 never breaks one; >= 4.2.1 keeps an empty marker ("recordless", a pre-3.22 holder)
  and breaks only through renameat2(RENAME_EXCHANGE), older ones through a plain rename. The
  record of the crashed holder reaches the server only where writes go through (local, nfs mounted
  with -o sync): on nfs, lustre and beegfs its unflushed write dies with the node (filelock does
  not fsync), leaving an empty marker that 3.22-4.2.0 break as malformed once 2 s old, from any
  host, and >= 4.2.1 never breaks; on the object store the marker itself is never uploaded.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from conftest import missing

import simfs

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
DEPS = ROOT / ".ci" / "deps"
INSTALLED = "installed"  # the filelock of this environment, whichever release pip resolved
PINNED = ("4.3.2", "3.32.7", "3.29.7", "3.20.3")  # what .ci/run installs into .ci/deps/filelock-VERSION
VERSIONS = (INSTALLED, *PINNED)

NODES, RPN = 2, 4
WORLD = NODES * RPN
LOCK = "/shared/job/lock"
COUNTER = "/shared/job/counter"
# nfs(5) "sync": every write reaches the server before the call returns
NFS_SYNC = simfs.profiles.get("nfs").replace(
    name="nfs_sync", write_back="through",
    sources={"write_back": "nfs(5) sync: writes are flushed to the server before the system call returns"})
PROFILES: dict[str, Any] = {"local": "local", "nfs": "nfs", "nfs_sync": NFS_SYNC, "lustre": "lustre",
                            "beegfs": "beegfs", "objectstore": "objectstore"}
FLOCK_EXCLUDES = ["local", "nfs", "lustre"]  # flock = "cluster"
FLOCK_NODE_LOCAL = ["beegfs", "objectstore"]  # flock = "node"
EXCL_ATOMIC = ["local", "nfs", "lustre", "beegfs"]  # exclusive_create = "atomic"
# each seed a run of the counter: every seed shows the node-local profiles' lost updates (most > 1)
# where flock or exclusive create does not exclude; the library's filelock-counter and
# flock-counter scenarios search the interleavings of the profiles where they do
SEEDS = list(range(2))


def _cluster(profile: str, seed: int = 0, nodes: int = NODES, rpn: int = RPN) -> simfs.Cluster:
    return simfs.Cluster(nodes=nodes, ranks_per_node=rpn, profile=PROFILES[profile], seed=seed)


def _outcome(lock: Any, timeout: float) -> str:
    """Try to take ``lock``: 'acquired' (then released), 'timeout', or the error."""
    import filelock

    try:
        lock.acquire(timeout=timeout)
    except filelock.Timeout:
        return "timeout"
    except Exception as exc:  # noqa: BLE001 - reported to the test, which names what it expects
        return f"error: {type(exc).__name__}: {exc}"
    lock.release()
    return "acquired"


# -- scenarios: JSON in, JSON out, run here (installed filelock) or in a subprocess (3.x) --------

def _counter_job(kind: str, per_rank: int) -> dict:
    """Every rank increments a shared counter ``per_rank`` times under the lock, noting the
    virtual interval of each critical section (the test sees sections of ranks that overlap)."""
    import filelock

    rank = dist.get_rank()
    if rank == 0:
        os.makedirs(os.path.dirname(COUNTER))
        with open(COUNTER, "w") as f:
            f.write("0")
    dist.barrier()
    sections: list[tuple[float, float]] = []
    errors: list[str] = []
    for _ in range(per_rank):
        try:
            with getattr(filelock, kind)(LOCK):  # the default: wait as long as it takes
                entered = time.monotonic()
                try:
                    with open(COUNTER) as f:
                        text = f.read()
                    if not text:  # read between another node's truncate and its write
                        errors.append("empty read")
                    with open(COUNTER, "w") as f:
                        f.write(str(int(text) + 1 if text else -1_000_000))
                except OSError as exc:  # e.g. ESTALE: another node's upload of the counter won
                    errors.append(errno.errorcode.get(exc.errno or 0, str(exc)))
                finally:
                    sections.append((entered, time.monotonic()))
        except OSError as exc:
            errors.append("lock: " + errno.errorcode.get(exc.errno or 0, str(exc)))
        except RuntimeError as exc:  # filelock's "Deadlock": a release that failed left the path registered
            errors.append(f"lock: {exc}")
    dist.barrier()
    try:
        with open(COUNTER) as f:
            text = f.read()
        count = int(text) if text else -1
    except OSError:
        count = -2
    return {"count": count, "sections": sections, "errors": errors}


def most_inside(sections: list[tuple[float, float]]) -> int:
    """The most critical sections open at one virtual instant (one that ends when another starts
    is not open with it)."""
    steps = sorted([(start, 1) for start, _ in sections] + [(end, -1) for _, end in sections])
    inside = most = 0
    for _, step in steps:
        inside += step
        most = max(most, inside)
    return most


def _version() -> str:
    """The filelock the ranks imported, read after the runs: the host imports it only then, so each
    rank process imports it itself, on its node, as a process started there does (a module the
    host imported before a run keeps what it read at import, the host's boot id among them:
    docs/limits.md)."""
    import filelock

    return filelock.__version__


def counter(kind: str, profile: str, seeds: list[int], per_rank: int = 3, nodes: int = NODES,
            rpn: int = RPN) -> dict:
    runs = []
    for seed in seeds:
        result = _cluster(profile, seed, nodes, rpn).run(_counter_job, kind, per_rank)
        ranks = list(result.returns.values())
        runs.append({"seed": seed, "ok": result.ok, "summary": None if result.ok else result.summary()[:4000],
                     "finals": sorted({r["count"] for r in ranks}),
                     "most": most_inside([tuple(s) for r in ranks for s in r["sections"]]),
                     "errors": [e for r in ranks for e in r["errors"]]})
    return {"version": _version(), "expected": nodes * rpn * per_rank, "runs": runs}


def _hold_and_crash() -> None:
    """Rank 4 (node 1) takes the SoftFileLock and holds it; its node crashes at t=5 s."""
    import filelock

    if dist.get_rank() == RPN:
        os.makedirs(os.path.dirname(LOCK))
        lock = filelock.SoftFileLock(LOCK)  # kept referenced: a collected lock releases itself
        lock.acquire()
        time.sleep(100)
        lock.release()


def _read_marker() -> str | None:
    try:
        with open(LOCK) as f:
            return f.read()
    except FileNotFoundError:
        return None


def _contend(timeout: float) -> dict:
    """The restarted job: rank 0 (node 0, another host) tries first, then rank 4 (node 1, the
    crashed holder's host)."""
    import filelock

    rank = dist.get_rank()
    out: dict = {"marker": _read_marker() if rank == 0 else None}
    dist.barrier()
    for who in (0, RPN):
        if rank == who:
            out["outcome"] = _outcome(filelock.SoftFileLock(LOCK), timeout)
        dist.barrier()
    return out


def stale(profile: str, timeout: float = 20.0) -> dict:
    cluster = _cluster(profile, seed=1)
    crashed = cluster.run(_hold_and_crash, faults=[simfs.CrashNode(node=1, at_time=5.0)])
    restarted = cluster.run(_contend, timeout)
    assert restarted.ok, restarted.summary()
    return {"version": _version(), "crashed": sorted(crashed.crashed),
            "marker": restarted.returns[0]["marker"],
            "node0": restarted.returns[0]["outcome"], "node1": restarted.returns[RPN]["outcome"]}


def _start_token(pid: int) -> int:
    """What filelock >= 3.30 records on Linux: the boot id in the high 64 bits, field 22 of
    /proc/<pid>/stat (start time since boot, in clock ticks) in the low ones."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = int(f.read().strip().replace("-", ""), 16)
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return (boot << 64) | int(data[data.rfind(b")") + 1:].split()[19])


def _recycled(timeout: float) -> dict:
    """The restarted job on node 1: rank 5 puts at the lock path the crashed holder's record with
    its pid replaced by rank 4's (alive now: a pid reused after the reboot), then rank 4's true
    record (its live start token); rank 6 tries each time."""
    import filelock

    rank = dist.get_rank()
    pids: list[Any] = [None] * WORLD
    dist.all_gather_object(pids, os.getpid())
    holder = pids[RPN]
    lines = (_read_marker() or "").splitlines()  # the crashed holder's record
    out: dict = {"lines": lines}
    for case in ("recycled", "live"):
        # recycled: the dead holder's host and start token; live: rank 4's own start token
        token = lines[2:] if case == "recycled" else [str(_start_token(holder))] if len(lines) > 2 else []
        record = [str(holder), *lines[1:2], *token]
        if rank == RPN + 1:
            with open(LOCK, "w") as f:
                f.write("".join(line + "\n" for line in record))
        dist.barrier()
        if rank == RPN + 2:
            try:  # (4.x imports it at first use)
                identity: Any = importlib.import_module("filelock._identity")
            except ImportError:  # < 3.30
                identity = None
            if identity is not None and hasattr(identity, "owner_is_stale"):  # >= 3.30: the library's verdict
                token = int(record[2]) if len(record) > 2 else None
                out[f"{case}_stale"] = identity.owner_is_stale(holder, identity.host_name(), token)
            out[case] = _outcome(filelock.SoftFileLock(LOCK), timeout)
        dist.barrier()
    return out


def recycled_pid(profile: str = "local", timeout: float = 5.0) -> dict:
    cluster = _cluster(profile, seed=2)
    cluster.run(_hold_and_crash, faults=[simfs.CrashNode(node=1, at_time=5.0)])
    restarted = cluster.run(_recycled, timeout)
    assert restarted.ok, restarted.summary()
    return {"version": _version(), **restarted.returns[RPN + 2]}


def _own_record() -> dict:
    import filelock

    rank = dist.get_rank()
    lock = filelock.SoftFileLock(f"{LOCK}-{rank}")
    with lock:
        lines = _read_marker_of(f"{LOCK}-{rank}").splitlines()
        expected = [str(os.getpid()), f"node{rank // RPN}", str(_start_token(os.getpid()))]
    return {"lines": lines, "expected": expected}


def _read_marker_of(path: str) -> str:
    with open(path) as f:
        return f.read()


def records(profile: str = "local") -> dict:
    """After node 1 crashed and rebooted (its boot id is new, node 0's is not), each rank's
    SoftFileLock record names its pid, host and start token."""
    cluster = _cluster(profile, seed=3)
    crashed = cluster.run(_make_dir_then_sleep, faults=[simfs.CrashNode(node=1, at_time=1.0)])
    assert sorted(crashed.crashed) == list(range(RPN, WORLD)), crashed.summary()
    result = cluster.run(_own_record)
    assert result.ok, result.summary()
    return {"version": _version(), "ranks": result.returns}


def _make_dir_then_sleep() -> None:
    if dist.get_rank() == 0:
        os.makedirs(os.path.dirname(LOCK))
    time.sleep(2.0)


def _import_inside_ranks() -> str:
    import filelock  # first imported here, inside a rank

    rank = dist.get_rank()
    if rank == 0:
        os.makedirs("/shared/h")
    dist.barrier()
    with filelock.FileLock("/shared/h/flock"):
        time.sleep(0.1)
    with filelock.SoftFileLock("/shared/h/soft"):
        time.sleep(0.1)
    return filelock.__version__


def _filelock_global(name: str) -> Any:
    """A module global of the imported filelock, in whichever of its modules the release keeps it."""
    return next((vars(module)[name] for key, module in list(sys.modules.items())
                 if key.startswith("filelock.") and name in getattr(module, "__dict__", ())), None)


def _recorded_pid(fork_state: Any) -> int | None:
    """The pid filelock's fork state recorded: 3.30-4.2 keep it as pid, 4.3 as process_identity
    (pid, pid namespace)."""
    return getattr(fork_state, "pid", None) or getattr(fork_state, "process_identity", (None,))[0]


def host_after() -> dict:
    """In a fresh interpreter: filelock first imported inside the ranks of a 2 x 4 run; then the
    host's filelock state is its own, and real locks work."""
    imported_before = "filelock" in sys.modules
    result = _cluster("nfs").run(_import_inside_ranks)
    assert result.ok, result.summary()
    import tempfile

    import filelock

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            real_boot: int | None = int(f.read().strip().replace("-", ""), 16)
    except OSError:
        real_boot = None
    with tempfile.TemporaryDirectory() as tmp:
        with filelock.FileLock(os.path.join(tmp, "a.lock"), timeout=5):
            pass
        soft = filelock.SoftFileLock(os.path.join(tmp, "b.lock"), timeout=5)
        with soft:
            with open(os.path.join(tmp, "b.lock")) as f:
                marker = f.read().splitlines()
        left = sorted(os.listdir(tmp))
    return {"version": filelock.__version__, "imported_before": imported_before,
            "rank_versions": sorted(set(result.returns.values())), "host_pid": os.getpid(),
            "fork_state_pid": _recorded_pid(_filelock_global("_FORK_STATE")),
            "boot_id": _filelock_global("_BOOT_ID"), "real_boot": real_boot,
            "marker": marker, "left": left}


def _own_state() -> dict:
    """After taking a FileLock and a SoftFileLock: the pid this rank's fork state recorded, its
    boot id and its node's, and its real thread-locals (id -> the module globals naming it)."""
    import _thread

    import filelock

    rank = dist.get_rank()
    if rank == 0:
        os.makedirs("/shared/own")
    dist.barrier()
    with filelock.FileLock(f"/shared/own/{rank}.flock"), filelock.SoftFileLock(f"/shared/own/{rank}.soft"):
        time.sleep(0.1)
    with open("/proc/sys/kernel/random/boot_id") as f:
        node_boot = int(f.read().strip().replace("-", ""), 16)
    names: dict[int, list[str]] = {}
    for key, module in list(sys.modules.items()):
        if key.startswith("filelock.") and module is not None:
            for name, value in vars(module).items():
                if isinstance(value, _thread._local):
                    names.setdefault(id(value), []).append(f"{key}.{name}")
    return {"pid": os.getpid(), "fork_pid": _recorded_pid(_filelock_global("_FORK_STATE")),
            "boot": _filelock_global("_BOOT_ID"), "node_boot": node_boot, "locals": sorted(names.items())}


def own_state() -> dict:
    result = _cluster("local").run(_own_state)
    assert result.ok, result.summary()
    return {"version": _version(), "ranks": result.returns}


SCENARIOS = {f.__name__: f for f in (counter, stale, recycled_pid, records, host_after, own_state)}
_SUBPROCESS = (
    "import json, sys\n"
    "deps, tests, calls = sys.argv[1:]\n"
    "sys.path[:0] = [p for p in (deps, tests) if p]\n"
    "import test_thirdparty_locks as t\n"
    "print('RESULT ' + json.dumps([t.SCENARIOS[name](*args) for name, args in json.loads(calls)]))\n"
)


def run_scenarios(version: str, calls: list[tuple[str, list]], fresh: bool = False) -> list[dict]:
    """Scenarios (name, args) with filelock ``version``: here for the installed one (unless
    ``fresh`` asks for a new interpreter), else in one subprocess with .ci/deps/filelock-VERSION
    first on sys.path (skipped where it is missing, failed under SIMFS_REQUIRE=filelock_releases)."""
    deps = ""
    if version != INSTALLED:
        where = DEPS / f"filelock-{version}"
        if not (where / "filelock" / "__init__.py").is_file():
            missing("filelock_releases", f"filelock {version} is not installed in {where.relative_to(ROOT)} "
                                 f"(pip install --no-deps --target {where.relative_to(ROOT)} filelock=={version}; "
                                 f".ci/run installs it)")
        deps = str(where)
    elif not fresh:
        return [SCENARIOS[name](*args) for name, args in calls]
    done = subprocess.run([sys.executable, "-c", _SUBPROCESS, deps, str(TESTS), json.dumps(calls)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"{calls} with filelock {version}:\n{done.stdout[-3000:]}\n" \
                                           f"{done.stderr[-6000:]}"
    outs: list[dict] = json.loads(lines[-1][len("RESULT "):])
    for out in outs:
        if version != INSTALLED:
            assert out["version"] == version, out["version"]  # the one in .ci/deps, not the installed one
    return outs


def run_scenario(version: str, name: str, *args: Any, fresh: bool = False) -> dict:
    return run_scenarios(version, [(name, list(args))], fresh)[0]


def _release(version: str) -> tuple[int, ...]:
    """The release ``version`` names (INSTALLED: this environment's), as numbers."""
    import filelock

    number = filelock.__version__ if version == INSTALLED else version
    return tuple(int(part) for part in number.split(".")[:3])


def _release_has_start_token(version: str) -> bool:
    return _release(version) >= (3, 30)


def _records_holder(version: str) -> bool:
    return _release(version) >= (3, 22)


def _breaks_through_exchange(version: str) -> bool:
    """4.2.1 moved the stale break to renameat2(RENAME_EXCHANGE) and from then on keeps an empty
    ("recordless") marker as a holder's; 3.22-4.2.0 rename the marker away and break an empty one
    as malformed once 2 s old."""
    return _release(version) >= (4, 2, 1)


# -- mutual exclusion ------------------------------------------------------------------------------

def _assert_excludes(out: dict) -> None:
    for run in out["runs"]:
        assert run["ok"], run["summary"]
        assert run["finals"] == [out["expected"]], run
        assert run["most"] == 1 and not run["errors"], run


@pytest.mark.parametrize("version", VERSIONS)
def test_filelock_flock_excludes_where_flock_is_cluster_wide_and_not_where_it_is_node_local(version) -> None:
    """FileLock (flock) on every profile, 2 nodes x 4 ranks, 3 increments each with the default
    acquire (no timeout), 2 seeds."""
    outs = run_scenarios(version, [("counter", ["FileLock", p, SEEDS]) for p in FLOCK_EXCLUDES + FLOCK_NODE_LOCAL])
    for out in outs[:len(FLOCK_EXCLUDES)]:
        _assert_excludes(out)
    for profile, out in zip(FLOCK_NODE_LOCAL, outs[len(FLOCK_EXCLUDES):]):
        # flock is node-local there: ranks of both nodes were inside at once, for some seed
        assert any(run["most"] > 1 for run in out["runs"]), (profile, out)
        # ... and the read-modify-write lost updates or saw a torn counter (ESTALE on the object
        # store, whose first upload wins)
        assert any(run["finals"] != [out["expected"]] or run["errors"] for run in out["runs"]), (profile, out)
        if profile == "beegfs":
            # nothing crashes: the counter just loses updates, the real trap on BeeGFS
            assert all(run["ok"] for run in out["runs"]), out
            assert any(min(run["finals"]) < out["expected"] for run in out["runs"]), out


@pytest.mark.parametrize("version", VERSIONS)
def test_softfilelock_excludes_where_exclusive_create_is_atomic_and_not_on_the_object_store(version) -> None:
    *atomic, out = run_scenarios(version, [("counter", ["SoftFileLock", p, SEEDS])
                                           for p in [*EXCL_ATOMIC, "objectstore"]])
    for each in atomic:
        _assert_excludes(each)
    # a lookup then an upload at close: two holders at once, for some seed
    assert any(run["most"] > 1 for run in out["runs"]), out


@pytest.mark.parametrize("version", VERSIONS)
def test_many_ranks_no_module_state_error(version) -> None:
    """4 nodes x 8 ranks on nfs: no KeyError or other crash from filelock's module state (its
    fork state, keyed on the pid, and its registry of held paths are per process), and the lock
    excludes."""
    for out in run_scenarios(version, [("counter", [kind, "nfs", [0], 2, 4, 8])
                                       for kind in ("FileLock", "SoftFileLock")]):
        _assert_excludes(out)


# -- filelock's module state belongs to each process, and the host's comes back ------------------

def test_host_filelock_works_after_a_run(tmp_path) -> None:
    import filelock

    _assert_excludes(counter("FileLock", "nfs", [0]))
    _assert_excludes(counter("SoftFileLock", "nfs", [0]))
    lock = filelock.FileLock(tmp_path / "a.lock", timeout=5)
    with lock:
        assert lock.is_locked
    assert not lock.is_locked
    soft = filelock.SoftFileLock(tmp_path / "b.lock", timeout=5)
    with soft:
        assert (tmp_path / "b.lock").read_text().splitlines()[0] == str(os.getpid())
        assert soft.is_lock_held_by_us
    assert not (tmp_path / "b.lock").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_filelock_first_imported_inside_ranks_leaves_the_host_its_own_state(version) -> None:
    """A fresh interpreter whose first `import filelock` runs inside the ranks: afterwards the
    host's fork state names the host's pid (not a rank's: filelock would take the host for a
    forked child), its boot id is the real one (not a simulated node's, which would make another
    real process judge this process's locks stale), and real locks work."""
    out = run_scenario(version, "host_after", fresh=True)
    assert not out["imported_before"] and out["rank_versions"] == [out["version"]], out
    assert out["fork_state_pid"] in (None, out["host_pid"]), out
    assert out["boot_id"] in (None, out["real_boot"]), out
    assert "b.lock" not in out["left"], out  # SoftFileLock removed its marker
    if _records_holder(version):
        assert out["marker"][0] == str(out["host_pid"]), out
    if len(out["marker"]) > 2 and out["real_boot"] is not None:
        assert int(out["marker"][2]) >> 64 == out["real_boot"], out


@pytest.mark.parametrize("version", VERSIONS)
def test_each_rank_has_its_own_filelock_process_state(version) -> None:
    """Wherever a release keeps them (4.3 moved them from _api and _identity to _core._fork,
    _core._registry, _core._shutdown and _identity._process, and imports the registry by name
    into three more modules): each rank process that imports filelock itself records its own pid
    in its fork state, its boot id is its node's, and the names of one thread-local (the registry
    of held paths among them) in several modules are one object."""
    out = run_scenario(version, "own_state", fresh=True)  # filelock first imported inside the ranks
    ranks = list(out["ranks"].values())
    for got in ranks:
        assert got["fork_pid"] == (got["pid"] if _release_has_start_token(version) else None), got
        assert got["boot"] == (got["node_boot"] if _release_has_start_token(version) else None), got
    if _records_holder(version):  # >= 3.22 keeps a registry of held paths
        assert all(any("registry" in name.lower() for _, names in got["locals"] for name in names)
                   for got in ranks), ranks
    for got in ranks:  # the modules that import the registry by name see the rank's one registry
        objects: dict[str, set[int]] = {}
        for ident, names in got["locals"]:
            for name in names:
                objects.setdefault(name.rpartition(".")[2], set()).add(ident)
        assert all(len(idents) == 1 for idents in objects.values()), got


@pytest.mark.parametrize("version", [v for v in VERSIONS if v in (INSTALLED, "3.32.7")])
def test_lock_record_names_the_rank_and_its_nodes_boot(version) -> None:
    """filelock >= 3.30 records pid, hostname and a start token: each rank's names its own pid,
    its node, and its node's boot id (node 1 rebooted, so its boot id differs from node 0's)
    with its /proc/<pid>/stat start time."""
    if not _release_has_start_token(version):
        pytest.skip("this filelock records no start token")
    out = run_scenario(version, "records", fresh=True)
    for rank, got in out["ranks"].items():
        assert got["lines"] == got["expected"], (rank, got)
    boots = {int(got["lines"][2]) >> 64 for got in out["ranks"].values()}
    assert len(boots) == NODES, boots


def _hold_in_a_thread() -> dict:
    import filelock

    lock = filelock.FileLock("/shared/thread.lock")  # thread_local=True (the default): a context per thread
    seen: dict = {}

    def first() -> None:
        lock.acquire()  # this thread ends holding it
        seen["first"] = lock.is_locked

    def second() -> None:
        seen["second"] = lock.is_locked  # another thread's context: not held by it

    for body in (first, second):
        thread = threading.Thread(target=body)
        thread.start()
        thread.join()
    return seen


def test_filelock_context_is_per_thread_of_a_rank_process() -> None:
    """filelock keeps each lock's per-thread context (ThreadLocalFileContext) and its held-path
    registry in threading.local subclasses, which are per OS thread: a rank process's threads are
    OS threads, so a second thread does not see the first's hold as its own. (On greenlet ranks
    they share it: README, Known limits.)"""
    result = _cluster("nfs", nodes=1, rpn=1).run(_hold_in_a_thread)
    assert result.ok, result.summary()
    assert result.returns[0] == {"first": True, "second": False}


# -- stale locks: a holder on a crashed node --------------------------------------------------------

# the record of the crashed holder reaches the server only where its write went through
RECORD_KEPT = ["local", "nfs_sync"]
RECORD_LOST = ["nfs", "lustre", "beegfs"]  # write-back: the unflushed record died with the node


@pytest.mark.parametrize("version", VERSIONS)
def test_stale_softfilelock_after_a_node_crash(version) -> None:
    """Node 1's holder dies with its node; in the restarted job node 0 tries first (20 s), then
    node 1. What each version does, per profile."""
    profiles = RECORD_KEPT + RECORD_LOST + ["objectstore"]
    for profile, out in zip(profiles, run_scenarios(version, [("stale", [p]) for p in profiles])):
        assert out["crashed"] == [RPN], out
        got = (out["marker"], out["node0"], out["node1"])
        if profile == "objectstore":
            # the marker is uploaded at close, which the holder never reached: no lock at all
            assert got == (None, "acquired", "acquired"), (profile, out)
        elif not _records_holder(version):
            # 3.20 writes nothing and never breaks a lock: it is held until someone deletes it
            assert got == ("", "timeout", "timeout"), (profile, out)
        elif profile in RECORD_LOST:
            if _breaks_through_exchange(version):
                # an empty marker is a holder that recorded nothing: never broken
                assert got == ("", "timeout", "timeout"), (profile, out)
            else:
                # an empty marker is malformed and broken once 2 s old, from any host
                assert got == ("", "acquired", "acquired"), (profile, out)
        else:
            lines = out["marker"].splitlines()
            assert lines[:2] == ["1000", "node1"], out  # the crashed rank's pid and host
            assert len(lines) == (3 if _release_has_start_token(version) else 2), out
            # another host's lock is never probed: node 0 waits it out
            assert out["node0"] == "timeout", (profile, out)
            # node 1 (same hostname) finds pid 1000 gone (os.kill -> ESRCH) and breaks it, by a
            # plain rename, or from 4.2.1 by renameat2(RENAME_EXCHANGE) called through ctypes,
            # which inside a rank is the simulated exchange: a local disk (ext4, XFS) exchanges;
            # NFS refuses the flag with EINVAL (fs/nfs/dir.c nfs_rename), so filelock gives up
            # the break and node 1 waits
            refused = _breaks_through_exchange(version) and profile == "nfs_sync"
            assert out["node1"] == ("timeout" if refused else "acquired"), (profile, out)


@pytest.mark.parametrize("version", VERSIONS)
def test_pid_reused_after_the_reboot(version) -> None:
    """On the restart, a lock record names a pid that is alive on the holder's node again (a
    pid reused after the reboot). filelock >= 3.30 compares start tokens: the boot id differs,
    so the holder is gone and the lock is broken; the true record of the live process is kept.
    Older releases only ask whether the pid is alive, so they keep both."""
    out = run_scenario(version, "recycled_pid", fresh=True)
    if _release_has_start_token(version):
        assert len(out["lines"]) == 3, out
        assert out["recycled_stale"] is True and out["live_stale"] is False, out
        assert out["live"] == "timeout", out
        assert out["recycled"] == "acquired", out  # (>= 4.2.1 through a simulated renameat2 exchange)
    else:
        assert (out["recycled"], out["live"]) == ("timeout", "timeout"), out


# -- huggingface_hub: WeakFileLock around a cache write from every rank -----------------------------

HF_CACHE = "/shared/hf/models--org--model"
HF_DATA = b"weights!" * 4096


def _hf_job(downloads: dict) -> dict:
    """Every rank fetches the blob under WeakFileLock; what it tells: whether the blob is whole
    and alone, how many downloads it made (``downloads``, the rank's own copy of the fixture's
    counter), and its critical section's virtual interval."""
    from huggingface_hub import file_download
    from huggingface_hub.utils import WeakFileLock

    if dist.get_rank() == 0:
        for sub in ("blobs", ".locks"):
            os.makedirs(f"{HF_CACHE}/{sub}")
    dist.barrier()
    blob = Path(HF_CACHE, "blobs", "etag1")
    with WeakFileLock(Path(HF_CACHE, ".locks", "etag1.lock")):
        entered = time.monotonic()
        file_download._download_to_tmp_and_move(
            incomplete_path=Path(f"{blob}.incomplete"), destination_path=blob,
            url_to_download="https://huggingface.co/org/model/resolve/main/model.bin", headers={},
            expected_size=len(HF_DATA), filename="model.bin", force_download=False, etag="etag1",
            xet_file_data=None)
        section = (entered, time.monotonic())
    dist.barrier()
    whole = blob.read_bytes() == HF_DATA and sorted(os.listdir(f"{HF_CACHE}/blobs")) == ["etag1"]
    return {"whole": whole, "downloads": downloads["downloads"], "section": section}


def _hf_counts(result: simfs.Result) -> tuple[int, int]:
    """(downloads, most ranks inside the lock at once) of a run of _hf_job."""
    ranks = list(result.returns.values())
    return sum(r["downloads"] for r in ranks), most_inside([tuple(r["section"]) for r in ranks])


@pytest.fixture
def hf_download(monkeypatch) -> dict:
    """huggingface_hub with its HTTP download replaced by one that writes HF_DATA in 8 chunks,
    one virtual second each, counting downloads (each rank process counts in its own copy)."""
    try:
        from huggingface_hub import file_download
        from huggingface_hub.utils import _fixes
    except ImportError as exc:
        missing("huggingface_hub", f"huggingface_hub is not importable ({exc}; pip install -e '.[test]')")
    assert hasattr(_fixes, "WeakFileLock") and hasattr(file_download, "_download_to_tmp_and_move")
    tracker = {"downloads": 0}

    def http_get(url: str, temp_file: Any, **kwargs: Any) -> None:
        tracker["downloads"] += 1
        step = len(HF_DATA) // 8
        for i in range(0, len(HF_DATA), step):
            temp_file.write(HF_DATA[i:i + step])
            time.sleep(1.0)

    monkeypatch.setattr(file_download, "http_get", http_get)
    return tracker


def test_hf_weakfilelock_downloads_once_on_nfs(hf_download) -> None:
    """flock excludes across nodes: one rank downloads, the others find the blob under the lock."""
    for seed in range(4):
        result = _cluster("nfs", seed).run(_hf_job, hf_download)
        assert result.ok, result.summary()
        assert all(r["whole"] for r in result.returns.values())
        assert _hf_counts(result) == (1, 1), (seed, result.returns)


def test_hf_weakfilelock_on_beegfs_downloads_once_per_node_and_the_blob_stays_whole(hf_download) -> None:
    """flock is node-local on BeeGFS: one rank per node holds the lock at once and both
    download, but each into its own temporary file renamed into place, so the blob is whole."""
    doubled = 0
    for seed in range(4):
        result = _cluster("beegfs", seed).run(_hf_job, hf_download)
        assert result.ok, result.summary()
        assert all(r["whole"] for r in result.returns.values())
        downloads, most = _hf_counts(result)
        assert downloads <= NODES and most <= NODES, (downloads, most)
        doubled += downloads == NODES and most == NODES
    assert doubled, "the node-local flock never let two nodes download at once"
