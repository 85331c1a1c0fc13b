"""checkpoint.async_save: returns once the tensors may change (what is saved is what they held
at the call, bit for bit), the future completes, at most one save is in flight, a failure
reaches the future and the next save on every rank, and the background save's collectives
never mix with the training thread's (simfs ranks and real gloo processes)."""

from __future__ import annotations

import os
import tempfile
import threading
from unittest import mock

import numpy as np
import pytest
import torch
from _checkpoint_cases import assert_same, blank, state_dicts
from hypothesis import given, settings

import checkpoint
import coord
import simfs
from _coord_sim import cluster, ok
from _procs import run_procs
from checkpoint import CheckpointManager, SaveFuture, Sharded, async_saver

PATH = "/shared/ckpt/async"


def _snapshot(x: object) -> object:
    """A deep copy of a state dict's tensors and arrays."""
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_snapshot(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


def _scramble(x: object) -> None:
    """Flip every bit of every tensor and array in place (as training would change them)."""
    if isinstance(x, dict):
        for v in x.values():
            _scramble(v)
    elif isinstance(x, list):
        for v in x:
            _scramble(v)
    elif isinstance(x, torch.Tensor):
        x.reshape(-1).view(torch.uint8).bitwise_not_()
    elif isinstance(x, np.ndarray):
        raw = x.reshape(-1).view(np.uint8)
        np.bitwise_not(raw, out=raw)


class _Gate:
    """Holds background saves until opened, so the test acts while they are in flight."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self._save = async_saver.save_staged

    def __call__(self, *args: object, **kwargs: object) -> None:
        assert self.open.wait(30)
        self._save(*args, **kwargs)

    def __enter__(self) -> _Gate:
        self._patch = mock.patch.object(async_saver, "save_staged", self)
        self._patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.open.set()
        self._patch.stop()


# -- one process -----------------------------------------------------------------------------

@given(state_dicts)
@settings(max_examples=25)
def test_changing_the_tensors_after_return_does_not_change_what_is_saved(sd):
    expected = _snapshot(sd)
    with tempfile.TemporaryDirectory() as tmp, _Gate() as gate:
        future = checkpoint.async_save(sd, os.path.join(tmp, "ckpt"))
        assert isinstance(future, SaveFuture) and not future.done()
        _scramble(sd)
        gate.open.set()
        assert future.result(timeout=30) is None
        target = blank(expected)
        checkpoint.load(target, os.path.join(tmp, "ckpt"))
    assert_same(expected, target)


def test_the_next_save_waits_for_the_one_in_flight_and_a_save_cannot_be_cancelled(tmp_path):
    with _Gate() as gate:
        first = checkpoint.async_save({"w": torch.ones(3)}, tmp_path / "a")
        assert not first.cancel() and first.running()
        returned = threading.Event()
        second: list[SaveFuture] = []
        thread = threading.Thread(target=lambda: (second.append(checkpoint.async_save({"w": torch.ones(3)},
                                                                                     tmp_path / "b")),
                                                  returned.set()))
        thread.start()
        assert not returned.wait(0.3)  # blocked behind the first save
        gate.open.set()
        thread.join(30)
        assert first.done() and returned.is_set()
    second[0].result(timeout=30)
    assert checkpoint.is_committed(tmp_path / "a") and checkpoint.is_committed(tmp_path / "b")
    assert second[0].path == str(tmp_path / "b")


def test_a_failure_reaches_the_future_and_only_an_unseen_one_the_next_save(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    failed = checkpoint.async_save({"w": torch.ones(2)}, tmp_path / "file" / "ckpt")  # cannot make the directory
    assert isinstance(failed.exception(timeout=30), checkpoint.CheckpointError)
    checkpoint.async_save({"w": torch.ones(2)}, tmp_path / "ok").result()  # seen: the next save goes ahead
    unseen = checkpoint.async_save({"w": torch.ones(2)}, tmp_path / "file" / "ckpt")
    unseen_done = threading.Event()
    unseen.add_done_callback(lambda _: unseen_done.set())
    assert unseen_done.wait(30)
    with pytest.raises(checkpoint.SaveError, match="future nobody checked: CheckpointError") as info:
        checkpoint.async_save({"w": torch.ones(2)}, tmp_path / "next")
    assert info.value.failures.keys() == {0} and info.value.path == str(tmp_path / "file" / "ckpt")
    assert not (tmp_path / "next").exists()  # the next save did not start
    checkpoint.async_save({"w": torch.ones(2)}, tmp_path / "next").result()  # raised once: counted as seen


def test_manager_async_save_applies_retention_before_its_future_completes(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=1)
    mgr.async_save(1, {"w": torch.ones(2), "step": 1})
    w = torch.full((2,), 2.0)
    future = mgr.async_save(2, {"w": w, "step": 2})
    w.fill_(-1)
    future.result()
    assert sorted(os.listdir(tmp_path)) == ["step-00000002"]
    target = {"w": torch.zeros(2), "step": 0}
    assert mgr.load(target) == 2 and target["w"].tolist() == [2.0, 2.0]
    with pytest.raises(FileExistsError):
        mgr.async_save(2, {"w": w, "step": 2})


# -- simfs ranks -----------------------------------------------------------------------------

def _part(comm, value: float) -> Sharded:
    return Sharded(torch.full((4,), value), (4 * comm.world_size,), (4 * comm.rank,))


def training_job(rounds: int) -> list:
    """Save asynchronously, then keep training: change the tensors and run collectives on the
    default group while the save is in flight. What is loaded is what the tensors held."""
    comm = coord.get_comm()
    w = _part(comm, float(comm.rank))
    future = checkpoint.async_save({"w": w, "step": 1}, PATH)
    in_flight = not future.done()
    for i in range(rounds):
        w.local.add_(1.0)
        total = torch.tensor([float(i)])
        torch.distributed.all_reduce(total)
        assert total.item() == i * comm.world_size
        assert comm.all_gather_object(i) == [i] * comm.world_size
    future.result()
    target = {"w": _part(comm, -1.0), "step": 0}
    checkpoint.load(target, PATH)
    return [in_flight, target["w"].local.tolist(), target["step"]]


@pytest.mark.parametrize("profile", ["local", "nfs"])
def test_training_goes_on_during_the_save_without_mixing_collectives_or_changing_it(profile):
    returns = ok(cluster(profile, nodes=2, rpn=2).run(training_job, 20), 4)
    for rank, (in_flight, loaded, step) in returns.items():
        assert in_flight and loaded == [float(rank)] * 4 and step == 1


def one_in_flight_job() -> list:
    comm = coord.get_comm()
    first = checkpoint.async_save({"w": _part(comm, 1.0)}, PATH + "-1")
    done_at_return = first.done()
    second = checkpoint.async_save({"w": _part(comm, 2.0)}, PATH + "-2")
    waited = first.done()
    second.result()
    return [done_at_return, waited, checkpoint.is_committed(PATH + "-1")]


def test_a_second_async_save_waits_for_the_first_on_every_rank():
    returns = ok(cluster("nfs", nodes=2, rpn=2).run(one_in_flight_job), 4)
    assert all(r == [False, True, True] for r in returns.values())


def failing_job(observers: list[int]) -> dict:
    """The first save fails on rank 2's writes; ``observers`` look at its future."""
    comm = coord.get_comm()
    out: dict = {}
    future = checkpoint.async_save({"w": _part(comm, 1.0)}, PATH + "-bad")
    if comm.rank in observers:
        error = future.exception()
        out["future"] = (type(error).__name__, sorted(error.failures), str(error))
    try:
        checkpoint.async_save({"w": _part(comm, 2.0)}, PATH + "-next").result()
        out["next"] = "saved"
    except checkpoint.SaveError as exc:
        out["next"] = (sorted(exc.failures), str(exc))
        checkpoint.async_save({"w": _part(comm, 2.0)}, PATH + "-next").result()
    out["committed"] = checkpoint.is_committed(PATH + "-next")
    return out


@pytest.mark.parametrize("observers", [[], [0], [0, 1, 2, 3]], ids=["none", "rank0", "all"])
def test_an_error_in_the_background_write_surfaces_on_the_future_and_the_next_save_of_every_rank(observers):
    fault = simfs.InjectErrno("ENOSPC", path=f"{PATH}-bad/*-r2-*.bin", ranks=(2,))
    returns = ok(cluster("local", nodes=2, rpn=2).run(failing_job, observers, faults=[fault]), 4)
    for rank, out in returns.items():
        if rank in observers:
            name, failed, message = out["future"]
            assert name == "SaveError" and failed == [2] and "No space left on device" in message
        if len(observers) == 4:
            assert out["next"] == "saved"
        else:
            failed, message = out["next"]
            assert failed == sorted(set(range(4)) - set(observers)), out
            assert "future nobody checked: SaveError" in message and "failed on rank(s) [2]" in message
            assert "No space left on device" in message
        assert out["committed"]


def staging_error_job() -> tuple:
    comm = coord.get_comm()
    sd = {"w": _part(comm, 1.0), "extra": object() if comm.rank == 1 else None}
    error = checkpoint.async_save(sd, PATH).exception()
    return type(error).__name__, tuple(error.failures), "StateDictError" in str(error)


def test_a_staging_error_on_one_rank_fails_the_save_on_every_rank():
    returns = ok(cluster("local", nodes=1, rpn=3).run(staging_error_job), 3)
    assert set(returns.values()) == {("SaveError", (1,), True)}


# -- real gloo processes ----------------------------------------------------------------------

def gloo_async_job(root: str) -> list:
    """Collectives on the default group from the training thread while the save runs on its own
    group; then a staging failure on rank 1, unseen, fails the next save on both ranks."""
    comm = coord.get_comm()
    w = _part(comm, float(comm.rank))
    future = checkpoint.async_save({"w": w}, os.path.join(root, "a"))
    for i in range(50):
        w.local.add_(1.0)
        total = torch.tensor([1.0])
        torch.distributed.all_reduce(total)
        assert total.item() == comm.world_size and comm.all_gather_object(i) == [i, i]
    future.result(timeout=60)
    target = {"w": _part(comm, -1.0)}
    checkpoint.load(target, os.path.join(root, "a"))
    bad = {"w": _part(comm, 0.0), "x": object() if comm.rank == 1 else None}
    unseen = checkpoint.async_save(bad, os.path.join(root, "b"))
    outcome = [target["w"].local.tolist()]
    try:
        checkpoint.async_save({"w": w}, os.path.join(root, "c"))
    except checkpoint.SaveError as exc:
        outcome.append((sorted(exc.failures), "StateDictError" in str(exc), unseen.done()))
    checkpoint.async_save({"w": w}, os.path.join(root, "c")).result(timeout=60)
    return outcome


def test_real_gloo_ranks_train_during_the_save_and_share_failures(tmp_path):
    returns = run_procs(gloo_async_job, 2, str(tmp_path), timeout=90)
    for rank, (loaded, failure) in enumerate(returns):
        assert loaded == [float(rank)] * 4
        assert failure == ([0, 1], True, True)
    assert checkpoint.is_committed(tmp_path / "c") and not checkpoint.is_committed(tmp_path / "b")
