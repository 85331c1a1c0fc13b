"""checkpoint on real processes: 4 gloo ranks on the local disk. One spawn (each process
imports torch, ~3 s) runs every check and returns what each rank saw: resharding between
layouts and world sizes (subgroups of 1-4 ranks), DTensor (Shard/Replicate on 1-D and 2-D
meshes) saved and loaded across meshes, a writer thread that fails on one rank, and replicas
that differ."""

from __future__ import annotations

import os

import torch
from _checkpoint_cases import Layout, TensorSpec, assert_same, reshard

import checkpoint
import coord
from _procs import run_procs
from checkpoint import Broadcast, Split

WORLD = 4
W = TensorSpec("w", torch.float32, (8, 6), 1)
B = TensorSpec("b", torch.bfloat16, (5,), 2)
S = TensorSpec("s", torch.int64, (), 3)
M = TensorSpec("m", torch.bool, (7, 3), 4)
BB = (Broadcast(), Broadcast())
R = (Broadcast(),)
CASES = [  # (specs, saved, loaded): DP x TP -> TP, TP -> DP, sharded -> one plain process, 3 ranks -> 2-D
    ([W, B, S], Layout((2, 2), ((Broadcast(), Split(0)), BB, BB)), Layout((3,), ((Split(1),), (Split(0),), R))),
    ([W, B], Layout((4,), ((Split(1),), (Split(0),))), Layout((2, 2), ((Split(0), Split(1)), (Broadcast(), Split(0))))),
    ([W, M], Layout((2,), ((Split(0),), (Split(1),))), Layout((1,), ((Broadcast(),), (Broadcast(),)))),
    ([M, S], Layout((3,), ((Split(0),), (Broadcast(),))), Layout((2, 2), ((Split(1), Split(0)), BB))),
]


def _dtensor_checks(base: str) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    full_w, full_v = W.full(), torch.arange(48, dtype=torch.float64).reshape(6, 8)
    mesh2 = init_device_mesh("cpu", (2, 2))
    sd = {"w": distribute_tensor(full_w, mesh2, [Replicate(), Shard(0)]),
          "v": distribute_tensor(full_v, mesh2, [Shard(0), Shard(1)]), "step": 3}
    checkpoint.save(sd, f"{base}/dtensor")
    mesh1 = init_device_mesh("cpu", (4,))
    target = {"w": distribute_tensor(torch.zeros(8, 6), mesh1, [Shard(1)]),
              "v": distribute_tensor(torch.zeros(6, 8, dtype=torch.float64), mesh1, [Replicate()]), "step": 0}
    checkpoint.load(target, f"{base}/dtensor")
    out = {"w": target["w"].full_tensor(), "v": target["v"].full_tensor(), "step": target["step"]}
    plain = {"w": torch.zeros(8, 6), "v": torch.zeros(6, 8, dtype=torch.float64)}
    checkpoint.load(plain, f"{base}/dtensor", comm=coord.LocalComm())  # one process, no collective
    out["plain"] = plain
    partial = {"p": DTensor.from_local(torch.ones(4), mesh1, [Partial()])}
    try:
        checkpoint.save(partial, f"{base}/partial")
    except checkpoint.CheckpointError as exc:
        out["partial"] = (type(exc).__name__, str(exc))
    return out


def _failing_writer_checks(base: str, rank: int) -> dict:
    from checkpoint import write

    path = f"{base}/overwrite"
    part = checkpoint.Sharded(torch.full((4,), float(rank)), (4 * WORLD,), (4 * rank,))
    checkpoint.save({"w": part}, path)
    emit = write._TileWriter._write
    if rank == 1:
        def broken(self, data):
            raise OSError("disk on fire")
        write._TileWriter._write = broken
    out: dict = {}
    try:
        checkpoint.save({"w": checkpoint.Sharded(torch.full((4,), 9.0), (4 * WORLD,), (4 * rank,))}, path)
    except checkpoint.SaveError as exc:
        out["error"] = (sorted(exc.failures), str(exc), isinstance(exc, Exception))
    finally:
        write._TileWriter._write = emit
    target = {"w": checkpoint.Sharded(torch.zeros(4), (4 * WORLD,), (4 * rank,))}
    checkpoint.load(target, path)
    out["loaded"] = target["w"].local.tolist()
    try:
        checkpoint.save({"x": torch.full((2,), 1.0 + (rank == 3))}, f"{base}/mismatch")
    except checkpoint.LayoutError as exc:
        out["mismatch"] = str(exc)
    return out


def _all_checks(base: str) -> dict:
    comm = coord.get_comm()
    out: dict = {"cases": []}
    for i, (specs, saved, loaded) in enumerate(CASES):
        result = reshard(comm, specs, saved, loaded, f"{base}/case{i}")
        out["cases"].append({k: v for k, v in result.items() if k != "manifest"})
    out["dtensor"] = _dtensor_checks(base)
    out["failing"] = _failing_writer_checks(base, comm.rank)
    return out


def test_real_gloo_ranks(tmp_path):
    """One spawn for every check (a module fixture would spawn once per xdist worker)."""
    ranks = run_procs(_all_checks, WORLD, str(tmp_path), nodes=2, timeout=240)
    _check_resharding(str(tmp_path), ranks)
    _check_dtensors(ranks)
    _check_failing_writer(ranks)


def _check_resharding(base: str, ranks: list[dict]) -> None:
    for i, (specs, saved, loaded) in enumerate(CASES):  # each loading rank compared its parts bit for bit
        report = ranks[0]["cases"][i]["verify"]
        assert report.tensors == len(specs) and report.files <= saved.world
        assert [("stats" in ranks[r]["cases"][i]) for r in range(WORLD)] == [r < loaded.world for r in range(WORLD)]
        needed = sum(ranks[r]["cases"][i]["stats"].bytes_needed for r in range(loaded.world))
        assert needed >= sum(s.full().numel() * s.dtype.itemsize for s in specs)
        assert sorted(os.listdir(f"{base}/case{i}"))[-1] == checkpoint.MANIFEST_NAME


def _check_dtensors(ranks: list[dict]) -> None:
    for rank in range(WORLD):
        seen = ranks[rank]["dtensor"]
        assert_same(seen["w"], W.full())
        assert torch.equal(seen["v"], torch.arange(48, dtype=torch.float64).reshape(6, 8)) and seen["step"] == 3
        assert_same(seen["plain"]["w"], W.full())
        name, message = seen["partial"]
        assert name == "SaveError" and "Partial placement" in message and "'p'" in message


def _check_failing_writer(ranks: list[dict]) -> None:
    for rank in range(WORLD):
        seen = ranks[rank]["failing"]
        failed, message, is_exception = seen["error"]
        assert failed == [1] and is_exception
        assert "rank 1: CheckpointError: writer thread for " in message and ": OSError: disk on fire" in message
        assert seen["loaded"] == [float(rank)] * 4  # the previous checkpoint, intact
        assert "replicas of 'x' differ" in seen["mismatch"] and "ranks [0, 1, 2]" in seen["mismatch"]
