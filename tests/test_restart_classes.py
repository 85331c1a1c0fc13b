"""Restarts known by their answers (simfs/fs/tape.py, scenarios/restarts.py): a run's tape asked
again of the disks it started from gets every answer the run got; a crash state is known
exactly when an earlier restart got every answer it gives, and then the verdict is the one a run
on it reaches; a restart's start (Cluster.stay_down, Crash.down_until) and its new inode numbers
do not depend on the cut it crashed at."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import MODEL, MODEL_CARRIER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simfs
from scenarios import registry
from scenarios.example import Crash, Example
from scenarios.exhaustive import CrashWalk
from scenarios.library.latest import resume, tracker_atomic, tracker_in_place
from scenarios.replaying import decode, encode
from scenarios.restarts import RestartClasses, Unknown
from scenarios.target import Target
from scenarios.verdict import judge
from simfs.errors import ConfigError, SimfsError
from simfs.faults import PowerLoss
from simfs.fs.procfs import CLK_TCK
from simfs.fs.server import INODES_PER_BOOT, QUERIES, Server
from simfs.fs.tape import Step, Tape, TappedServer

PROFILES = ["local", "local-posix", "nfs", "lustre", "objectstore", "beegfs"]
NAMES = ["a", "b", "d/x", "d/y", "e"]
OPS = ["write", "append", "fsync", "read", "rename", "replace", "unlink", "mkdir", "rmdir", "stat", "listdir",
       "scandir", "link", "symlink", "readlink", "truncate", "chmod", "utime", "statvfs", "flock", "exists"]


def _program(steps: list[tuple[str, int, int]]) -> list[str]:
    """Each rank runs its share of ``steps`` in /shared and tells what each did."""
    rank = int(os.environ["RANK"])
    told = []
    for op, i, j in steps[rank::2]:
        a, b = f"/shared/{NAMES[i]}", f"/shared/{NAMES[j]}"
        try:
            told.append(f"{op} {_do(op, a, b)}")
        except OSError as exc:
            told.append(f"{op} {errno.errorcode.get(exc.errno or 0, exc.errno)}")
    return told


def _do(op: str, a: str, b: str) -> Any:  # one branch per operation
    if op in ("write", "append", "fsync"):
        with open(a, "a" if op == "append" else "w") as f:
            f.write(op * 3)
            if op == "fsync":
                f.flush()
                os.fsync(f.fileno())
        return None
    if op == "read":
        with open(a) as f:
            return f.read()
    two: dict[str, Callable[[str, str], Any]] = {"rename": os.rename, "replace": os.replace, "link": os.link,
                                                 "symlink": os.symlink}
    one: dict[str, Callable[[str], Any]] = {"unlink": os.unlink, "mkdir": os.mkdir, "rmdir": os.rmdir,
                                            "readlink": os.readlink, "listdir": lambda p: sorted(os.listdir(p)),
                                            "exists": os.path.exists}
    if op in two:
        return two[op](a, b)
    if op in one:
        return one[op](a)
    if op == "stat":
        st_ = os.stat(a)
        return (st_.st_ino, st_.st_size, st_.st_mode, st_.st_nlink, st_.st_mtime)
    if op == "scandir":
        with os.scandir(os.path.dirname(a)) as it:
            return sorted((e.name, e.is_dir()) for e in it)
    if op == "truncate":
        return os.truncate(a, 2)
    if op == "chmod":
        return os.chmod(a, 0o600)
    if op == "utime":
        return os.utime(a, (5.0, 5.0))
    if op == "statvfs":
        return os.statvfs(a).f_bfree
    fd = os.open(a, os.O_RDWR | os.O_CREAT)  # flock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _copies(cluster: simfs.Cluster, clock: list[float]) -> list[Server]:
    return [m.server.replica(lambda: clock[0]) for m in cluster.fs.disks()]


_steps = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, len(NAMES) - 1), st.integers(0, len(NAMES) - 1)),
                  max_size=24)


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=_steps, after=_steps)
def test_a_tape_asked_again_of_the_disks_it_started_from_gets_every_answer(profile: str, before: list[Any],
                                                                             after: list[Any]) -> None:
    cluster = simfs.Cluster(nodes=2, ranks_per_node=1, profile=profile, seed=1, **MODEL)  # type: ignore[arg-type]
    cluster.run(_program, before)
    cluster.power_loss()
    clock = [0.0]
    started = _copies(cluster, clock)
    tape = cluster.fs.tape = Tape(cluster.fs.clock)
    result = cluster.run(_program, after)
    assert result.ok, result.errors
    assert cluster.fs.tape is None  # taken off by the run
    assert not tape.opaque
    assert len(tape.steps) >= len(after)  # every operation asks its server something
    for step in tape.steps:
        assert step.ask(started[step.disk], clock) == step.answer, step
    cluster.power_loss()
    asked = _copies(cluster, clock)  # the disks as a crash after the run left them
    before = [_everything(disk) for disk in asked]
    for step in tape.steps:
        if step.request in QUERIES:  # what a replay asks of a crash copy itself
            step.ask(asked[step.disk], clock)
    assert [_everything(disk) for disk in asked] == before


def _restarts(walk: CrashWalk) -> tuple[list[Tape], list[Any]]:
    """Every cut's restart run (as a walk without classes runs them), with its tape."""
    cluster = walk.target.cluster()
    tapes, verdicts = [], []
    for cut in walk.cuts:
        result, tape = walk.restart(cluster, cut)
        tapes.append(tape)
        verdicts.append(judge(result, walk.target.check, run=1))
    return tapes, verdicts


CLASSED = [("latest-atomic", "nfs"), ("latest-atomic", "local"), ("latest-in-place", "local-posix"),
           ("replace-by-rename-fsynced", "objectstore"), ("replace-by-rename-unsynced", "lustre"),
           ("checkpoint-overwrite", "local"), ("checkpoint-resume-newest-dir", "nfs"), ("sync-files", "local-posix")]


@pytest.mark.parametrize(("name", "profile"), CLASSED)
def test_a_state_is_known_exactly_when_an_earlier_restart_got_its_answers_and_its_verdict_is_a_run_s(
        name: str, profile: str) -> None:
    s = registry.get(name)
    target = Target(s.job, 2, 1, simfs.profiles.get(profile), recover=s.recover, check=s.check,
                    carrier=MODEL_CARRIER)
    walk = CrashWalk(target, limit=1000, alike=False)
    clock = [0.0]
    pristine = [[d.replica(lambda: clock[0]) for d in cut.disks] for cut in walk.cuts]
    tapes, verdicts = _restarts(walk)
    classes = RestartClasses()
    known = 0
    for i, (tape, verdict) in enumerate(zip(tapes, verdicts)):
        said = classes.verdict(pristine[i])
        same_before = not tape.opaque and any(t.steps == tape.steps and not t.opaque for t in tapes[:i])
        assert (not isinstance(said, Unknown)) == same_before, (name, profile, i)
        if not isinstance(said, Unknown):
            assert said == verdict, (name, profile, i)
            known += 1
        classes.add(tape, verdict)
    assert known == classes.known
    assert len(walk.cuts) > 3


def test_a_walk_with_classes_reaches_every_verdict_a_walk_without_them_does() -> None:
    for job in (tracker_in_place, tracker_atomic):
        target = Target(job, 2, 1, simfs.profiles.get("local-posix"), recover=resume, carrier=MODEL_CARRIER)
        plain = [failure for _, failure in CrashWalk(target, 1000, alike=False).restarts()]
        walk = CrashWalk(target, 1000)
        held = [disk for cut in walk.cuts for disk in cut.disks]
        assert len({id(disk) for disk in held}) < len(held)  # an unchanged disk's copy is shared
        assert [failure for _, failure in walk.restarts()] == plain
        assert walk.classes is not None and walk.classes.known > 0
        assert walk.classes.runs + walk.classes.known == len(plain)


def _looks_at_proc() -> str:
    with open("/proc/self/stat") as f:
        return f.read().split()[21]


def test_a_run_that_looks_at_proc_is_never_known_by_its_answers() -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile="nfs", seed=1, **MODEL)  # type: ignore[arg-type]
    cluster.power_loss()
    clock = [0.0]
    started = _copies(cluster, clock)
    tape = cluster.fs.tape = Tape(cluster.fs.clock)
    assert cluster.run(_looks_at_proc).ok
    assert tape.opaque
    classes = RestartClasses()
    classes.add(tape, None)
    assert isinstance(classes.verdict(started), Unknown)


def test_a_client_reading_server_state_outside_its_requests_is_refused_while_taped() -> None:
    server = simfs.Cluster(nodes=1, ranks_per_node=1, **MODEL).fs.disks()[0].server  # type: ignore[arg-type]
    seen = TappedServer(server, Tape(lambda: 0.0), 0)
    assert seen.kinds is server.kinds and seen.crashes == server.crashes
    with pytest.raises(AttributeError, match="'inodes' was read outside its requests"):
        seen.inodes  # the read is what is refused


def _step(request: str, answer: Any) -> Step:
    return Step(0, request, (1,), (), 0.0, answer)


def test_two_runs_that_got_the_same_answers_and_then_asked_differently_are_an_error() -> None:
    first, second = Tape(lambda: 0.0), Tape(lambda: 0.0)
    first.steps = [_step("getattr", 1), _step("lookup", None)]
    second.steps = [_step("getattr", 1), _step("readdir", ())]
    classes = RestartClasses()
    classes.add(first, None)
    with pytest.raises(SimfsError, match="two restarted jobs got the same answers from the disks"):
        classes.add(second, None)
    ended = Tape(lambda: 0.0)
    ended.steps = [_step("getattr", 1)]
    with pytest.raises(SimfsError, match="then one asked lookup"):
        classes.add(ended, None)


def _creates_after_losing(count: int) -> int:
    """Rank code: makes ``count`` files nothing syncs (a power loss takes them), then one more."""
    for i in range(count):
        with open(f"/shared/lost{i}", "w") as f:
            f.write("x")
    return 0


def _new_file_number() -> int:
    with open("/shared/new", "w") as f:
        f.write("y")
    return os.stat("/shared/new").st_ino


@settings(max_examples=15, deadline=None)
@given(count=st.integers(0, 30), profile=st.sampled_from(["local", "local-posix", "nfs", "lustre"]))
def test_a_restarted_server_numbers_new_inodes_whatever_the_crash_lost(count: int, profile: str) -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile=profile, seed=3, **MODEL)  # type: ignore[arg-type]
    cluster.run(_creates_after_losing, count)
    cluster.power_loss()
    number = cluster.run(_new_file_number).returns[0]
    assert number == INODES_PER_BOOT + 1 < 2**32


def _started() -> float:
    return time.monotonic()


def test_a_cluster_that_stays_down_restarts_the_job_restart_gap_after_it_comes_back() -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile="nfs", seed=1, **MODEL)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Cluster\.stay_down: nothing crashed"):
        cluster.stay_down(100.0)
    cluster.power_loss()
    for bad in (-1.0, float("nan"), "soon"):
        with pytest.raises(ConfigError, match="until"):
            cluster.stay_down(bad)  # type: ignore[arg-type]
    cluster.stay_down(1000.0)
    cluster.stay_down(10.0)  # earlier than now: no change
    started = cluster.run(_started).returns[0]
    at_once = simfs.Cluster(nodes=1, ranks_per_node=1, profile="nfs", seed=1, **MODEL)  # type: ignore[arg-type]
    at_once.power_loss()  # at virtual time 0, as the other
    assert started - at_once.run(_started).returns[0] == pytest.approx(1000.0)


def _looks_for_the_flag(make: bool) -> bool:
    if make and os.environ["RANK"] == "0":
        time.sleep(1.0)  # after node 1 looked (and cached "not found")
        with open("/shared/flag", "w"):
            pass
    return os.path.exists("/shared/flag")


def test_an_idle_cluster_lets_the_nodes_caches_expire_before_the_next_job() -> None:
    cluster = simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=1, **MODEL)  # type: ignore[arg-type]
    assert cluster.run(_looks_for_the_flag, True).returns == {0: True, 1: False}
    # the next job at once: node 1's lookup cache still says "not found" (acdirmin, nfs(5))
    assert cluster.run(_looks_for_the_flag, False).returns == {0: True, 1: False}
    for bad in (-1.0, float("nan"), "soon"):
        with pytest.raises(ConfigError, match="seconds"):
            cluster.idle(bad)  # type: ignore[arg-type]
    before = cluster.run(_started).returns[0]
    cluster.idle(120.0)
    assert cluster.run(_looks_for_the_flag, False).returns == {0: True, 1: True}
    assert cluster.run(_started).returns[0] - before > 120.0


def test_a_restarted_job_s_node_booted_at_the_crash() -> None:
    cluster = simfs.Cluster(nodes=1, ranks_per_node=1, profile="nfs", seed=1, **MODEL)  # type: ignore[arg-type]
    cluster.run(_creates_after_losing, 3)
    ended = cluster.fs.clock.now
    copies = [m.server.crashed_copy(m.server.crash_states(1)[0])[0] for m in cluster.fs.disks()]
    cluster.restart_with(copies, ended + 5.0)
    ticks = int(cluster.run(_looks_at_proc).returns[0])
    assert ticks == round(cluster.restart_gap * CLK_TCK)  # it started restart_gap after the boot


def test_a_crash_that_keeps_the_cluster_down_replays_from_its_string() -> None:
    target = Target(tracker_in_place, 1, 1, simfs.profiles.get("nfs"), recover=resume, carrier=MODEL_CARRIER)
    example = Example(crash=Crash(PowerLoss(after_ops=3), pick=0, exact=True, down_until=123.5))
    decoded_target, decoded, _ = decode(encode(target, example))
    assert decoded == example and decoded_target.recover is resume
    corrupt = encode(target, Example(crash=Crash(PowerLoss(after_ops=3), down_until=-2.0)))
    with pytest.raises(ValueError, match="down_until"):
        decode(corrupt)


def _everything(server: Server) -> tuple[Any, ...]:
    """All a server holds, to compare two copies."""
    def inodes(table: dict[int, Any]) -> list[tuple[Any, ...]]:
        return sorted((n.ino, n.kind, n.mode, n.nlink, n.mtime, n.ctime, n.change, n.target,
                       None if n.data is None else n.data.tobytes(), n.entries) for n in table.values())
    return (inodes(server.inodes), inodes(server.journal.durable), server.kinds, server.usage(), server.crashes,
            server._next_ino)


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps)
def test_a_crash_copy_made_again_with_an_equal_key_equals_the_first(profile: str, steps: list[Any]) -> None:
    """What lets a walk share one copy among cuts: ``Server.copy_key`` changes with every change."""
    cluster = simfs.Cluster(nodes=2, ranks_per_node=1, profile=profile, seed=1, **MODEL)  # type: ignore[arg-type]
    made: dict[tuple[int, int], tuple[Any, tuple[Any, ...]]] = {}

    def at_each_operation(_: int) -> None:
        for d, mount in enumerate(cluster.fs.disks()):
            for i, state in enumerate(mount.server.crash_states(3)):
                key, copy = mount.server.copy_key(state), _everything(mount.server.crashed_copy(state)[0])
                if made.get((d, i), (None,))[0] == key:
                    assert made[(d, i)][1] == copy, (d, i, key)
                made[(d, i)] = key, copy

    cluster.fs.op_hook = at_each_operation
    assert cluster.run(_program, steps).ok


_RUNS = [0]


def _counts_its_runs() -> None:
    """Rank code that keeps state between runs (module-level, shared by greenlet ranks)."""
    _RUNS[0] += 1
    with open(f"/shared/run{_RUNS[0] % 2}", "w"):
        pass


def test_a_restarted_job_that_keeps_state_between_its_runs_is_told_not_given_a_wrong_verdict() -> None:
    target = Target(tracker_atomic, 1, 1, simfs.profiles.get("local-posix"), recover=_counts_its_runs,
                    carrier=MODEL_CARRIER)
    walk = CrashWalk(target, 1000)
    with pytest.raises(SimfsError, match="greenlet ranks keep module-level state from one run to the next"):
        for _ in walk.restarts():
            pass
