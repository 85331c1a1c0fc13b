"""The built-in scenario library (scenarios/library): every scenario is registered with a
one-line explanation, a family and real profiles; each scenario fails on each profile it
expects to fail on, for a fixed seed, start skew or crash, with the exception (or hang) that
filesystem produces; and it passes on every profile it expects to pass on, over seeds, start
skews and crash points drawn by Hypothesis. The search itself finds every naive one within the
scenario's own budget (slow)."""

from __future__ import annotations

import json
import pkgutil
import shutil

import pytest
import torch.distributed as dist
from conftest import missing
from hypothesis import given, settings
from hypothesis import strategies as st

import scenarios
import scenarios.library
import simfs
from scenarios.library._common import ALL_PROFILES, BrokenCheckpoint
from scenarios.library.drift import Raced
from scenarios.registry import Scenario, all_scenarios
from simfs.errors import RankError
from simfs.faults import Pause
from simfs.runspec import job_reference, resolve_job

pytestmark = pytest.mark.filterwarnings("ignore:Detected an existing checkpoint:UserWarning")  # DCP overwriting
LIBRARY = [sc for sc in all_scenarios() if sc.job.__module__.startswith("scenarios.library.")]
BY_NAME = {sc.name: sc for sc in LIBRARY}
FAMILIES = sorted({sc.family for sc in LIBRARY})
SYMPTOM = dist.DistBackendError  # what the ranks waiting for a failed one raise


def _pairs(verdict: str, crashes: bool) -> list[tuple[str, str]]:
    return [(sc.name, profile) for sc in LIBRARY if bool(sc.crashes) == crashes
            for profile, expected in sc.expect.items() if expected == verdict]


def _cluster(sc: Scenario, profile: str, seed: int, faults: list[simfs.faults.Fault]) -> simfs.Cluster:
    """On the scenario's carrier; greenlet ranks in this process (the library is simfs's own code,
    and the restarted job runs on the same cluster)."""
    if sc.missing():
        missing("stacks", f"{sc.name} needs {', '.join(sc.missing())} (pip install -e '.[stacks]')")
    return simfs.Cluster(nodes=sc.nodes, ranks_per_node=sc.ranks_per_node, profile=profile, seed=seed, faults=faults,
                         carrier=sc.carrier, isolate=False, preload=sc.preload)


def _causes(result: simfs.Result) -> list[BaseException]:
    """What the ranks raised, without the timeouts of the ranks that waited for them."""
    return [exc for exc in result.errors.values() if not isinstance(exc, SYMPTOM)]


def _judge(sc: Scenario, result: simfs.Result) -> None:
    """The property a search checks: no rank raised, hung or crashed, and the check holds."""
    assert result.ok, result.summary()
    if sc.check is not None:
        sc.check(result)


# -- the registry ---------------------------------------------------------------------------------

def test_loading_the_library_registers_every_family_module() -> None:
    modules = {m.name for m in pkgutil.iter_modules(scenarios.library.__path__) if not m.name.startswith("_")}
    assert {sc.job.__module__.rsplit(".", 1)[1] for sc in LIBRARY} == modules
    assert {"makedirs", "wait", "decide", "latest", "rotation", "locks", "sync", "dcp", "checkpoint",
            "drift"} <= set(FAMILIES)


@pytest.mark.parametrize("sc", LIBRARY, ids=lambda sc: sc.name)
def test_scenario_is_described_and_runs_on_real_profiles(sc: Scenario) -> None:
    assert 20 <= len(sc.doc) <= 130 and sc.doc.endswith("."), sc.doc  # one line of the `simfs list` table
    assert sc.family.isidentifier(), sc.family
    assert set(sc.expect) <= set(simfs.profiles.names())
    assert len(set(sc.tags) & {"naive", "fixed"}) == 1, sc.tags
    assert bool(sc.crashes) == (sc.recover is not None)
    for program in (sc.job, sc.recover):  # replay strings name them: importable by reference
        if program is not None:
            reference = job_reference(program)
            assert reference is not None and resolve_job(reference) is program


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_pairs_a_naive_pattern_with_its_fix(family: str) -> None:
    members = [sc for sc in LIBRARY if sc.family == family]
    naive = [sc for sc in members if "naive" in sc.tags]
    fixed = [sc for sc in members if "fixed" in sc.tags]
    assert naive and fixed
    assert all("fail" in sc.expect.values() for sc in naive)
    assert all("pass" in sc.expect.values() for sc in fixed)


# -- failures: a fixed seed and fault shows each one ------------------------------------------------

LATE_RANK0 = [simfs.SlowRank(rank=0, delay=60.0)]  # a slow import, a node that joined late
LATE_CHECK = [Pause(rank=1, before_op=0, seconds=1.0)]  # rank 1 checks a second after the others
CREATED_NOT_WRITTEN = [Pause(rank=0, before_op=2, seconds=2.0),
                       *(Pause(rank=r, before_op=0, seconds=1.0) for r in (1, 2, 3))]
BETWEEN_CHECK_AND_OPEN = [Pause(rank=1, before_op=1, seconds=1.0), Pause(rank=0, before_op=5, seconds=2.0)]
# (scenario, profile) -> (seed, faults, what the failing rank raises (one of them); "hung": a
# collective nobody else reaches; "check": the scenario's check rejects what the ranks returned)
Raised = type[BaseException] | tuple[type[BaseException], ...]
FAILURES: dict[tuple[str, str], tuple[int, list[simfs.faults.Fault], Raised | str]] = {
    ("makedirs-every-rank", "beegfs"): (0, [], FileNotFoundError),
    ("makedirs-exists-then-makedirs", "beegfs"): (0, [], FileExistsError),
    **{("makedirs-rank0-no-barrier", p): (0, [], FileNotFoundError) for p in ALL_PROFILES},
    ("makedirs-rank0-barrier-after-lookup", "nfs"): (0, [], FileNotFoundError),
    ("makedirs-rank0-barrier-after-lookup", "objectstore"): (0, [], FileNotFoundError),
    **{("wait-fixed-timeout", p): (0, LATE_RANK0, TimeoutError) for p in ALL_PROFILES},
    ("decide-from-exists", "nfs"): (0, [], "hung"),
    ("decide-from-exists", "objectstore"): (0, [], "hung"),
    **{("rotate-every-node", p): (22 if p == "local" else 0, [], FileNotFoundError) for p in ALL_PROFILES},
    ("flock-counter", "beegfs"): (5, [], "check"),
    ("flock-counter", "objectstore"): (0, [], OSError),  # ESTALE: the other node's upload won
    ("filelock-counter", "objectstore"): (0, [], OSError),
    # which of the two nodes' moves fails first depends on the system calls the installed
    # filelock makes around flock
    ("download-cache-flock", "beegfs"): (0, [], (shutil.SameFileError, FileNotFoundError)),
    ("download-cache-flock", "objectstore"): (0, [], OSError),
    ("filestore-rendezvous", "beegfs"): (0, [], "check"),  # two nodes appended at one offset
    ("filestore-rendezvous", "objectstore"): (0, [], OSError),  # ESTALE: the other node's upload won
    # node 1's ranks looked for the directory before rank 0 made it: NFS's lookup cache still says no
    ("lightning-test-best", "nfs"): (0, [], FileNotFoundError),
    ("datasets-every-rank-asks", "nfs"): (0, [], FileNotFoundError),
    # drift: a pause where a slower rank (or its work) would be, or the broadcast's root leaving first
    **{("drift-check-after-barrier", p): (0, LATE_CHECK, Raced) for p in ALL_PROFILES},
    **{("drift-check-after-broadcast", p): (0, [], Raced) for p in ALL_PROFILES},
    # rank 3 gets the seed from rank 1, not the root: it may arrive (and check) after the root wrote
    # (61 s: node 1's other rank cached "not found" when it checked; NFS keeps that up to acdirmax)
    **{("drift-check-before-broadcast", p): (0, [simfs.SlowRank(rank=3, delay=61.0)], Raced) for p in ALL_PROFILES},
    **{("drift-check-after-allreduce", p): (0, LATE_CHECK, Raced) for p in ALL_PROFILES},
    # rank 0 created the file and is slow to write it; the others look a second later
    **{("drift-version-file", p): (0, CREATED_NOT_WRITTEN, Raced) for p in ALL_PROFILES},
    # rank 1 found the pointer, rank 0 removed it and is slow to recreate it
    **{("drift-pointer-recreated", p): (0, BETWEEN_CHECK_AND_OPEN, FileNotFoundError if p != "objectstore" else OSError)
       for p in ALL_PROFILES},
    **{("drift-lock-released-early", p): (0, [Pause(rank=0, before_op=6, seconds=0.01)], Raced)
       for p in ("local", "nfs", "lustre")},
}


def test_the_table_shows_every_expected_failure_without_a_crash() -> None:
    assert sorted(FAILURES) == sorted(_pairs("fail", crashes=False))


@pytest.mark.parametrize("name,profile", sorted(FAILURES))
def test_naive_scenario_fails_where_its_filesystem_makes_it_fail(name: str, profile: str) -> None:
    sc = BY_NAME[name]
    seed, faults, expected = FAILURES[name, profile]
    result = _cluster(sc, profile, seed, faults).run(sc.job)
    if expected == "check":
        assert result.ok and sc.check is not None, result.summary()
        with pytest.raises(AssertionError, match=r"(increments|keys) were lost"):
            sc.check(result)
    elif expected == "hung":
        assert result.hung and not _causes(result), result.summary()
    else:
        assert not isinstance(expected, str)
        assert any(isinstance(exc, expected) for exc in _causes(result)), result.summary()


def _ops_before(result: simfs.Result, node: int | None, op: str, path: str, nth: int) -> int:
    """How many operations ``node`` (None: every node) made before its ``nth`` ``op`` on ``path``
    (after_ops for a crash just before it); its ranks' filesystem operations, in the order they ran."""
    mine = [(e.op, e.path) for e in result.trace
            if node in (None, e.node) and e.rank >= 0 and e.path.startswith("/")]
    return [i for i, each in enumerate(mine) if each == (op, path)][nth - 1]


def _crash_then_recover(sc: Scenario, profile: str, seed: int, crash: simfs.faults.Fault) -> simfs.Result:
    """The job with ``crash``, then ``recover`` on the restarted cluster; its result."""
    assert sc.recover is not None
    cluster = _cluster(sc, profile, seed, [crash])
    cluster.run(sc.job)
    return cluster.run(sc.recover, faults=[])


TRACKER = "/shared/checkpoints/latest"
METADATA_TMP = "/shared/dcp/model/.metadata.tmp"
MANIFEST = "/tmp/code/.manifest.json"
DDP_CHECKPOINT = "/shared/ddp/model.pt"
ACCELERATE_OPTIMIZER = "/shared/accelerate/optimizer.bin"
# (scenario, profile) -> (seed, node that crashes just before its nth op on a path (None: the whole
# cluster loses power before the nth such op of any node), what the restarted job raises). On local,
# /shared is node 0's disk: its crash is a power loss and the seed draws what the disk keeps.
WRONG_COPY = (json.JSONDecodeError, RuntimeError)  # a torn manifest, or a copy it vouched for
SETTINGS_TMP = "/shared/conf/settings.tmp"
CRASHES: dict[tuple[str, str], tuple[int, tuple[int | None, str, str, int], type[BaseException] | tuple[type, ...]]] = {
    **{("latest-in-place", p): (0, (0, "write", TRACKER, 2), BrokenCheckpoint)
       for p in ("local", "local-posix", "nfs", "lustre")},
    **{("dcp-overwrite", p): (seed, (0, "rename", METADATA_TMP, 2), BrokenCheckpoint)
       for p, seed in (("local", 1), ("local-posix", 2), ("nfs", 0), ("lustre", 0), ("objectstore", 0))},
    **{("sync-trusting-manifest", p): (seed, (1, "write", MANIFEST, 2), WRONG_COPY)
       for p, seed in (("local", 2), ("local-posix", 0), ("nfs", 0), ("lustre", 1), ("objectstore", 0))},
    # rank 0's node dies as torch.save writes the second checkpoint into the file its open truncated
    **{("ddp-save-in-place", p): (0, (0, "write", DDP_CHECKPOINT, 2), BrokenCheckpoint)
       for p in ("local", "local-posix", "nfs", "lustre")},
    # rank 0 dies as it opens step-3 to fsync it: the data is written, the manifest is not
    **{("checkpoint-resume-newest-dir", p): (seed, (0, "open", "/shared/ckpt/run/step-3", 1), BrokenCheckpoint)
       for p, seed in (("local", 2), ("local-posix", 0), ("nfs", 0), ("lustre", 0), ("objectstore", 0))},
    # the power goes just before the second rename: the first one persisted, its file's data did not
    ("replace-by-rename-unsynced", "local-posix"): (0, (0, "rename", SETTINGS_TMP, 2), BrokenCheckpoint),
    ("replace-by-rename-unsynced", "lustre"): (0, (None, "rename", SETTINGS_TMP, 2), BrokenCheckpoint),
    # rank 0's node dies as the second save_state reopens the optimizer's file: the model is of step 2
    # (or torn, where its data had not reached the disk), the optimizer of step 1
    **{("accelerate-save-state-power-loss", p): (0, (0, "open", ACCELERATE_OPTIMIZER, 2), BrokenCheckpoint)
       for p in ("local", "local-posix", "nfs")},
}


def test_the_table_shows_every_expected_failure_after_a_crash() -> None:
    assert sorted(CRASHES) == sorted(_pairs("fail", crashes=True))


@pytest.mark.parametrize("name,profile", sorted(CRASHES))
def test_naive_scenario_leaves_what_the_restarted_job_cannot_use(name: str, profile: str) -> None:
    sc = BY_NAME[name]
    seed, (node, op, path, nth), raised = CRASHES[name, profile]
    probe = _cluster(sc, profile, seed, []).run(sc.job)
    assert probe.ok, probe.summary()  # without the crash it works
    before = _ops_before(probe, node, op, path, nth)
    crash = simfs.PowerLoss(after_ops=before) if node is None else simfs.CrashNode(node=node, after_ops=before)
    result = _crash_then_recover(sc, profile, seed, crash)
    assert any(_raised(exc, raised) for exc in _causes(result)), result.summary()


def _raised(exc: BaseException, expected: type[BaseException] | tuple[type, ...]) -> bool:
    """``exc`` is an ``expected``, or a rank process's (its class is the job's: RankError names it)."""
    if isinstance(exc, RankError):
        kinds = expected if isinstance(expected, tuple) else (expected,)
        return exc.type_name in {f"{k.__module__}.{k.__qualname__}" for k in kinds}
    return isinstance(exc, expected)


# -- passes: over seeds, start skews and crash points -------------------------------------------------

@pytest.mark.parametrize("name,profile", _pairs("pass", crashes=False))
@settings(max_examples=4, deadline=None)  # (the main job searches each pair over its whole budget)
@given(seed=st.integers(0, 2**32 - 1), late=st.integers(0, 7), delay=st.sampled_from([0.0, 0.5, 12.0, 300.0]))
def test_scenario_passes_where_its_filesystem_lets_it(name: str, profile: str, seed: int, late: int,
                                                      delay: float) -> None:
    sc = BY_NAME[name]
    faults = [simfs.SlowRank(rank=late % (sc.nodes * sc.ranks_per_node), delay=delay)]
    _judge(sc, _cluster(sc, profile, seed, faults).run(sc.job))


@st.composite
def _crashes(draw: st.DrawFn, nodes: int, node_ops: list[int], profile: str) -> simfs.faults.Fault:
    """A node crash, a storage-server restart or a power loss of the whole cluster, before an
    operation drawn uniformly over the recorded run's (no server restart where the disk is in
    a node or where uploads are whole objects: as scenarios.explore draws them)."""
    mount = simfs.profiles.get(profile)
    kinds = ["node", "power"] + ([] if mount.on_node or mount.upload == "whole" else ["server"])
    kind = draw(st.sampled_from(kinds))
    if kind == "node":
        node = draw(st.integers(0, nodes - 1))
        return simfs.CrashNode(node=node, after_ops=draw(st.integers(0, node_ops[node])))
    point = draw(st.integers(0, sum(node_ops)))
    return simfs.CrashServer(after_ops=point) if kind == "server" else simfs.PowerLoss(after_ops=point)


@pytest.mark.parametrize("name,profile", _pairs("pass", crashes=True))
@settings(max_examples=5, deadline=None)  # (the main job searches each pair over its whole budget)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_fixed_scenario_survives_any_crash(name: str, profile: str, data: st.DataObject, seed: int) -> None:
    sc = BY_NAME[name]
    probe = _cluster(sc, profile, seed, []).run(sc.job)
    _judge(sc, probe)
    crash = data.draw(_crashes(sc.nodes, probe.node_ops, profile))
    result = _crash_then_recover(sc, profile, seed, crash)
    _judge(sc, result)


# -- the search finds each naive one within the scenario's own budget -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name,profile", sorted(_pairs("fail", crashes=False) + _pairs("fail", crashes=True)))
def test_explore_finds_the_failure_within_the_scenario_budget(name: str, profile: str) -> None:
    sc = BY_NAME[name]
    if sc.missing():
        missing("stacks", f"{sc.name} needs {', '.join(sc.missing())} (pip install -e '.[stacks]')")
    finding = scenarios.explore(sc.job, recover=sc.recover, check=sc.check, nodes=sc.nodes,
                                ranks_per_node=sc.ranks_per_node, profile=profile, faults=sc.faults,
                                crashes=sc.crashes, max_examples=sc.max_examples, seed=0, shrink_time=0.0,
                                carrier=sc.carrier, preload=sc.preload)
    assert finding.failed, str(finding)


@pytest.mark.parametrize("cost", [0, -3, 2.5, "40", True])
def test_a_scenario_says_what_its_example_costs_as_a_whole_number(cost: object) -> None:
    """example_cost orders `simfs run`'s searches (a trainer's example costs ~5 DDP examples);
    anything but a whole number >= 1 is refused at registration, naming the scenario."""
    from scenarios.registry import scenario

    with pytest.raises(ValueError, match="scenario 'costly': example_cost must be a whole number >= 1"):
        scenario("costly", expect={"nfs": "pass"}, example_cost=cost)(lambda: None)  # type: ignore[arg-type]
