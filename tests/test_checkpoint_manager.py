"""CheckpointManager: step directories, latest() never naming an incomplete checkpoint (no
manifest, a damaged one, marked for deletion), retention keeping exactly ``keep`` and never a
leased step, deletion that uncommits first; ranks agree (simfs, adversarial NFS caches); a
crash at any point of saves and rotations resumes from a loadable latest(); real gloo ranks."""

from __future__ import annotations

import functools
import os
import tempfile
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import checkpoint
import coord
import simfs
from _coord_sim import cluster, ok
from _procs import run_procs
from checkpoint import CheckpointManager, Sharded
from checkpoint.leases import DELETING, acquire, release
from checkpoint.steps import parse, step_name

ROOT = "/shared/ckpt"


def _sd(step: int) -> dict:
    return {"w": torch.full((3,), float(step)), "step": step}


def _loaded(mgr: CheckpointManager, step: int | None = None) -> tuple[int, float, int]:
    target = {"w": torch.zeros(3), "step": -1}
    got = mgr.load(target, step)
    return got, target["w"][0].item(), target["step"]


# -- names and bad input ---------------------------------------------------------------------

@given(st.integers(0, 10**12))
def test_step_names_sort_and_parse_back(step):
    assert parse(step_name(step)) == step
    assert step_name(step) < step_name(step + 1) or step + 1 >= 10**8  # zero-padded: listings sort


@pytest.mark.parametrize("name", ["step-7", "step-000000007", "step--0000001", "step-0000000x", "ckpt-00000001",
                                  "step-00000001.tmp", ""])
def test_other_names_are_not_steps(name):
    assert parse(name) is None


def test_bad_arguments_are_refused_clearly(tmp_path):
    for keep in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="keep must be an int >= 1"):
            CheckpointManager(tmp_path, keep=keep)
    with pytest.raises(ValueError, match="lease_timeout"):
        CheckpointManager(tmp_path, lease_timeout=0)
    mgr = CheckpointManager(tmp_path)
    for step, error in ((-1, ValueError), (True, TypeError), ("3", TypeError), (1.0, TypeError)):
        with pytest.raises(error, match="step"):
            mgr.save(step, _sd(0))
        with pytest.raises(error, match="step"):
            mgr.load({}, step)
    assert mgr.latest() is None and mgr.steps() == [] and not os.listdir(tmp_path)
    with pytest.raises(checkpoint.CheckpointNotFound, match="no committed checkpoint of any step"):
        mgr.load({})
    mgr.save(5, _sd(5))
    with pytest.raises(FileExistsError, match="step 5 is saved already"):
        mgr.save(5, _sd(6))
    with pytest.raises(checkpoint.CheckpointNotFound, match="step 4"):
        mgr.load({}, 4)
    assert _loaded(mgr) == (5, 5.0, 5)
    assert mgr.path(5) == os.path.join(str(tmp_path), "step-00000005")
    assert CheckpointManager(tmp_path / "missing").latest() is None


# -- latest() never names an incomplete checkpoint -------------------------------------------

def _damage(root: str, step: int, how: str) -> None:
    """Make the step directory what a crash, a corruption or a deleter would leave."""
    path = os.path.join(root, step_name(step))
    if how == "file":
        with open(path, "wb") as f:
            f.write(b"not a directory")
        return
    if how == "empty":
        os.makedirs(path)
        return
    checkpoint.save(_sd(step), path)
    manifest = os.path.join(path, checkpoint.MANIFEST_NAME)
    data = open(manifest, "rb").read()
    if how == "no_manifest":
        os.unlink(manifest)
    elif how == "tmp_manifest":  # a commit that crashed before its rename
        os.rename(manifest, os.path.join(path, f".{checkpoint.MANIFEST_NAME}.tmp.host.1.abc"))
    elif how == "truncated":
        with open(manifest, "wb") as f:
            f.write(data[:len(data) // 2])
    elif how == "flipped":
        with open(manifest, "wb") as f:
            f.write(data[:40] + bytes([data[40] ^ 0x10]) + data[41:])
    elif how == "marked":
        open(os.path.join(path, DELETING), "wb").close()


HOW = ("committed", "no_manifest", "tmp_manifest", "truncated", "flipped", "marked", "empty", "file")


@given(st.dictionaries(st.integers(0, 300), st.sampled_from(HOW), max_size=6))
@settings(max_examples=30)
def test_latest_is_the_newest_committed_checkpoint_never_an_incomplete_one(layout):
    committed = sorted(step for step, how in layout.items() if how == "committed")
    with tempfile.TemporaryDirectory() as root:
        for step, how in layout.items():
            _damage(root, step, how)
        mgr = CheckpointManager(root)
        assert mgr.steps() == committed
        assert mgr.latest() == (committed[-1] if committed else None)
        if committed:
            assert _loaded(mgr) == (committed[-1], float(committed[-1]), committed[-1])
        for step in set(layout) - set(committed):
            with pytest.raises(checkpoint.CheckpointNotFound):
                mgr.load({}, step)
        leases = [n for _, _, names in os.walk(root) for n in names if n.startswith(".lease.")]
        assert not leases  # every load released its lease


# -- retention ---------------------------------------------------------------------------------

@given(keep=st.integers(1, 4), plan=st.lists(st.tuples(st.integers(0, 60), st.sampled_from([None, *range(61)])),
                                              min_size=1, max_size=8, unique_by=lambda t: t[0]))
@settings(max_examples=30)
def test_retention_keeps_the_saved_step_and_the_newest_others_and_cleans_crashed_saves(keep, plan):
    """``plan``: steps to save, each after leaving a crashed save's directory at some step."""
    committed: set[int] = set()
    leftovers: set[int] = set()
    with tempfile.TemporaryDirectory() as root:
        mgr = CheckpointManager(root, keep=keep)
        for step, crashed in plan:
            if crashed is not None and crashed not in committed:
                os.makedirs(mgr.path(crashed), exist_ok=True)
                open(os.path.join(mgr.path(crashed), "0-r0-0.bin"), "wb").close()
                leftovers.add(crashed)
            mgr.save(step, _sd(step))
            leftovers.discard(step)
            others = sorted(committed - {step}, reverse=True)[:keep - 1]
            committed = {step, *others}
            leftovers = {s for s in leftovers if s > max(committed)}
            assert mgr.steps() == sorted(committed)
            assert sorted(os.listdir(root)) == sorted(step_name(s) for s in committed | leftovers)
        assert _loaded(mgr) == (max(committed), float(max(committed)), max(committed))


def test_a_leased_step_survives_retention_until_its_lease_is_released_or_stale(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=1, lease_timeout=60)
    mgr.save(1, _sd(1))
    lease = acquire(mgr.path(1))  # another job loading step 1
    assert lease is not None
    mgr.save(2, _sd(2))
    assert mgr.steps() == [1, 2] and os.path.exists(lease)
    assert _loaded(mgr, 1) == (1, 1.0, 1)
    release(lease)
    mgr.save(3, _sd(3))
    assert mgr.steps() == [3]
    stale = acquire(mgr.path(3))
    assert stale is not None
    os.utime(stale, (0, 0))  # its reader died long ago
    mgr.save(4, _sd(4))
    assert mgr.steps() == [4] and not os.path.exists(mgr.path(3))


def test_a_load_whose_listing_went_stale_before_its_lease_looks_again(tmp_path, monkeypatch):
    """The loader listed step 1, then paused; meanwhile a saver committed step 2 and retired 1
    (simfs found it: a rank paused 42 ms between listing the steps and looking at one)."""
    saver = CheckpointManager(tmp_path, keep=1)
    saver.save(1, _sd(1))
    loader = CheckpointManager(tmp_path, keep=1)
    real = checkpoint.manager.listing
    listings: list[list[int]] = []

    rotating = []

    def listing_then_rotation(root: str) -> list[int]:
        steps = real(root)
        if rotating:  # the saver's own retention
            return steps
        if not listings:
            rotating.append(True)
            saver.save(2, _sd(2))  # while this process paused
            rotating.clear()
        listings.append(steps)
        return steps

    monkeypatch.setattr(checkpoint.manager, "listing", listing_then_rotation)
    assert _loaded(loader) == (2, 2.0, 2)
    assert listings == [[1], [2]]


def test_a_step_marked_for_deletion_is_neither_latest_nor_loaded_and_goes_at_the_next_save(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=3)
    mgr.save(1, _sd(1))
    mgr.save(2, _sd(2))
    open(os.path.join(mgr.path(2), DELETING), "wb").close()  # a deleter at work (or one that crashed)
    assert acquire(mgr.path(2)) is None
    assert mgr.latest() == 1 and mgr.steps() == [1] and _loaded(mgr) == (1, 1.0, 1)
    with pytest.raises(checkpoint.CheckpointNotFound):
        mgr.load({}, 2)
    mgr.save(3, _sd(3))
    assert mgr.steps() == [1, 3] and not os.path.exists(mgr.path(2))


def test_a_deletion_that_fails_midway_leaves_an_uncommitted_directory_then_finishes(tmp_path, monkeypatch):
    """The manifest goes first: whatever is left after a failure is never a checkpoint."""
    mgr = CheckpointManager(tmp_path, keep=1)
    mgr.save(1, _sd(1))
    victim = mgr.path(1)
    real_unlink = os.unlink

    def failing_unlink(path, *args, **kwargs):
        if str(path).startswith(victim) and str(path).endswith(".bin"):
            raise PermissionError(1, "injected", path)
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", failing_unlink)
    mgr.save(2, _sd(2))  # retention fails on step 1's data: logged, the save stands
    monkeypatch.undo()
    assert os.path.isdir(victim) and not checkpoint.is_committed(victim)
    assert mgr.steps() == [2] and mgr.latest() == 2
    with pytest.raises(checkpoint.CheckpointNotFound):
        checkpoint.load({"w": torch.zeros(3)}, victim)
    mgr.save(1, _sd(1))  # the half-deleted step can be saved again, and is not deleted under it
    assert mgr.steps() == [1] and _loaded(mgr) == (1, 1.0, 1)
    mgr.save(3, _sd(3))
    assert sorted(os.listdir(tmp_path)) == [step_name(3)]


# -- ranks agree (simfs) ----------------------------------------------------------------------

def _part(comm, step: int) -> Sharded:
    return Sharded(torch.full((2,), float(step * 10 + comm.rank)), (2 * comm.world_size,), (2 * comm.rank,))


def _load_part(mgr: CheckpointManager, comm, step: int | None = None) -> tuple[int, list[float]]:
    target = {"w": _part(comm, 0), "step": -1}
    got = mgr.load(target, step)
    assert target["step"] == got
    return got, target["w"].local.tolist()


def agree_job(steps: list[int], keep: int) -> list:
    comm = coord.get_comm()
    mgr = CheckpointManager(ROOT, keep=keep)
    views = []
    for step in steps:
        mgr.save(step, {"w": _part(comm, step), "step": step})
        views.append((mgr.latest(), mgr.steps(), _load_part(mgr, comm)[0]))
    return views


@pytest.mark.parametrize("profile", ["nfs_lag", "local"])
def test_ranks_agree_on_latest_steps_and_what_they_load(profile):
    returns = ok(cluster(profile, nodes=2, rpn=2).run(agree_job, [3, 7, 8, 20], 2), 4)
    assert all(view == returns[0] for view in returns.values())
    assert returns[0] == [(3, [3], 3), (7, [3, 7], 7), (8, [7, 8], 8), (20, [8, 20], 20)]


def different_steps_job() -> tuple[str, str]:
    comm = coord.get_comm()
    mgr = CheckpointManager(ROOT)
    try:
        mgr.save(comm.rank % 2, {"step": 0})
    except ValueError as exc:
        return "save", str(exc)
    return "saved", ""


def test_ranks_passing_different_steps_fail_together():
    returns = ok(cluster("local", nodes=1, rpn=3).run(different_steps_job), 3)
    assert {r[0] for r in returns.values()} == {"save"}
    assert "different steps: [0, 1, 0]" in returns[0][1]


def rotation_job(rounds: int) -> list:
    """Ranks 0-1 save with keep=1, a step every 0.2 s; ranks 2-3, another job whose loads take
    longer than that, load the latest again and again: every load succeeds and reads the step
    it names, though newer steps were committed (and the older ones rotated) meanwhile."""
    comm = coord.get_comm()
    writers, readers = comm.subgroup([0, 1]), comm.subgroup([2, 3])
    loads = []
    if writers is not None:
        mgr = CheckpointManager(ROOT, keep=1, comm=writers)
        for step in range(1, rounds + 1):
            mgr.save(step, {"w": _part(writers, step), "step": step})
            time.sleep(0.2)
    else:
        mgr = CheckpointManager(ROOT, keep=1, comm=readers)
        while not loads or loads[-1] < rounds:
            if mgr.latest() is None:
                time.sleep(0.1)
                continue
            step, values = _load_part(mgr, readers)
            assert values == [float(step * 10 + readers.rank)] * 2
            loads.append(step)
    comm.barrier()
    return [loads, mgr.steps()]


@pytest.mark.parametrize("profile", ["nfs", "local"])
def test_rotation_never_deletes_a_checkpoint_another_job_is_loading(profile):
    slow_reads = simfs.SlowOps(0.3, op="open", path=f"{ROOT}/*/*.bin", ranks=(2, 3))
    returns = ok(cluster(profile, nodes=2, rpn=2).run(rotation_job, 8, faults=[slow_reads]), 4)
    loads, steps = returns[2][0], returns[0][1]
    assert len(set(loads)) > 2 and loads[-1] == 8
    assert steps[-1] == 8 and len(steps) <= 2  # a step whose load held its lease goes at the next save


def crash_job(steps: list[int], keep: int) -> None:
    comm = coord.get_comm()
    mgr = CheckpointManager(ROOT, keep=keep)
    for step in steps:
        mgr.save(step, {"w": _part(comm, step), "step": step})


def resume_job(saved: list[int], keep: int) -> dict:
    comm = coord.get_comm()
    mgr = CheckpointManager(ROOT, keep=keep)
    out: dict = {"latest": mgr.latest(), "steps": mgr.steps()}
    if out["latest"] is not None:
        assert _load_part(mgr, comm) == (out["latest"], [float(out["latest"] * 10 + comm.rank)] * 2)
    for step in out["steps"]:
        assert _load_part(mgr, comm, step) == (step, [float(step * 10 + comm.rank)] * 2)
    following = max(saved) + 1
    mgr.save(following, {"w": _part(comm, following), "step": following})
    out["after"] = (mgr.steps(), sorted(os.listdir(ROOT)))
    return out


@functools.cache
def _ops(profile: str, steps: tuple[int, ...], keep: int) -> int:
    """Filesystem operations of a crash_job run without a crash."""
    result = cluster(profile, nodes=2, rpn=1).run(crash_job, list(steps), keep)
    assert result.ok, result.summary()
    return result.ops


@given(st.data())
@settings(max_examples=12)
def test_a_crash_anywhere_in_saves_and_rotations_resumes_from_a_loadable_latest(data):
    profile = data.draw(st.sampled_from(["local", "nfs"]))
    steps, keep = (1, 2, 4, 5), 2
    sim = cluster(profile, nodes=2, rpn=1, seed=data.draw(st.integers(0, 2**16)))
    crash = simfs.PowerLoss(after_ops=data.draw(st.integers(0, _ops(profile, steps, keep))))
    sim.run(crash_job, list(steps), keep, faults=[crash])
    returns = ok(sim.run(resume_job, list(steps), keep), 2)
    out = returns[0]
    assert all(r == out for r in returns.values())
    assert set(out["steps"]) <= set(steps) and len(out["steps"]) <= keep + 1
    assert out["latest"] == max(out["steps"], default=None)
    kept, on_disk = out["after"]
    assert len(kept) == min(keep, len(out["steps"]) + 1) and on_disk == [step_name(s) for s in kept]


# -- real gloo processes ----------------------------------------------------------------------

def gloo_manager_job(root: str) -> list:
    comm = coord.get_comm()
    mgr = CheckpointManager(root, keep=2)
    for step in (10, 20, 30):
        mgr.save(step, {"w": _part(comm, step), "step": step})
    future = mgr.async_save(40, {"w": _part(comm, 40), "step": 40})
    future.result()
    return [mgr.latest(), mgr.steps(), _load_part(mgr, comm), _load_part(mgr, comm, 30)]


def test_real_gloo_ranks_save_rotate_and_load(tmp_path):
    returns = run_procs(gloo_manager_job, 2, str(tmp_path), timeout=90)
    for rank, (latest, steps, loaded, older) in enumerate(returns):
        assert (latest, steps) == (40, [30, 40])
        assert loaded == (40, [400.0 + rank] * 2) and older == (30, [300.0 + rank] * 2)
    assert sorted(os.listdir(tmp_path)) == [step_name(30), step_name(40)]
