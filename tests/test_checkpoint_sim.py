"""checkpoint on simulated clusters (simfs): saved with one layout and world size (1-8) and
loaded with another, bit-exact, on local disks, NFS, Lustre and an object store; dedup (every
byte of every tensor in exactly one chunk of one file); replicas that differ and errors on one
rank (a writer thread included) fail the save on every rank, and a failed save over a
checkpoint leaves it intact."""

from __future__ import annotations

import itertools
import math
import os

import pytest
import torch
from _checkpoint_cases import Layout, TensorSpec, layouts, reshard, tensor_specs
from hypothesis import given, settings
from hypothesis import strategies as st

import checkpoint
import coord
import simfs
from _coord_sim import cluster, ok
from checkpoint import Sharded

PATH = "/shared/ckpt/step-1"


def _chunk_bytes(manifest):
    """file -> sorted (start, end) of every chunk stored in it."""
    out: dict = {}
    for entry in manifest.tensors.values():
        itemsize = torch.empty(0, dtype=getattr(torch, entry.dtype)).element_size()
        for chunk in entry.chunks:
            out.setdefault(chunk.file, []).append((chunk.offset, chunk.offset + itemsize * math.prod(chunk.shape)))
    return {f: sorted(r) for f, r in out.items()}


def reshard_job(specs: list[TensorSpec], saved: Layout, loaded: Layout) -> dict:
    return reshard(coord.get_comm(), specs, saved, loaded, PATH)


def _check_dedup(specs: list[TensorSpec], manifest) -> None:
    """Every tensor stored once: its chunks hold exactly its bytes, and no two chunks share a
    byte of any file (the manifest's own validation already proved the chunks cover it)."""
    for spec in specs:
        entry = manifest.tensors[spec.key]
        stored = sum(math.prod(c.shape) for c in entry.chunks)
        assert stored == math.prod(spec.shape), (spec, entry)
    for name, ranges in _chunk_bytes(manifest).items():
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), name
        assert ranges[-1][1] <= manifest.files[name].size


@st.composite
def reshard_cases(draw):
    specs = draw(tensor_specs())
    w1, w2 = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    profile = draw(st.sampled_from(["local", "nfs", "lustre", "objectstore"]))
    return specs, draw(layouts(specs, w1)), draw(layouts(specs, w2)), profile


@given(reshard_cases())
@settings(max_examples=25)
def test_save_with_one_layout_load_with_another(case):
    specs, saved, loaded, profile = case
    world = max(saved.world, loaded.world)
    nodes = 2 if world % 2 == 0 and world > 1 else 1
    returns = ok(cluster(profile, nodes=nodes, rpn=world // nodes).run(reshard_job, specs, saved, loaded), world)
    manifest = returns[0]["manifest"]
    assert manifest.world_size == saved.world
    _check_dedup(specs, manifest)
    assert returns[0]["verify"].tensors == len(specs)


def test_dp_tp_resharding_reads_only_what_it_needs():
    """Row-split (TP) over 4 ranks, replicated over 2 (DP), loaded as a 2-way row split: each
    loading rank needs half the tensor and reads only the tiles of its half (each 1 MiB chunk is one tile)."""
    spec = TensorSpec("w", torch.float32, (1024, 1024), 7)  # 4 MiB
    saved = Layout((2, 4), ((checkpoint.Broadcast(), checkpoint.Split(0)),))
    loaded = Layout((2,), ((checkpoint.Split(0),),))
    returns = ok(cluster("local", nodes=2, rpn=4).run(reshard_job, [spec], saved, loaded), 8)
    for rank in (0, 1):
        stats = returns[rank]["stats"]
        assert stats.bytes_needed == 2 << 20
        assert stats.bytes_read <= stats.bytes_needed * 1.1
    files = returns[0]["manifest"].files
    assert sum(f.size for f in files.values()) == 4 << 20  # the replicated shards written once


def replica_mismatch_job() -> str | None:
    comm = coord.get_comm()
    rank = comm.rank
    sd = {"shared": torch.full((3,), 1.0 if rank != 2 else 2.0), "step": 5}
    try:
        checkpoint.save(sd, PATH)
    except checkpoint.LayoutError as exc:
        return str(exc)
    return None


def test_replicas_that_differ_fail_on_every_rank_naming_item_and_ranks():
    returns = ok(cluster("local", nodes=1, rpn=4).run(replica_mismatch_job), 4)
    assert len(set(returns.values())) == 1
    message = returns[0]
    assert "replicas of 'shared' differ" in message and "ranks [0, 1, 3]" in message and "ranks [2]" in message


def _part(comm, value: float) -> Sharded:
    return Sharded(torch.full((4,), value), (4 * comm.world_size,), (4 * comm.rank,))


def save_old_job() -> None:
    comm = coord.get_comm()
    checkpoint.save({"w": _part(comm, float(comm.rank)), "step": 1}, PATH)


def failed_overwrite_job() -> dict:
    comm = coord.get_comm()
    new = {"w": _part(comm, 100.0 + comm.rank), "step": 2}
    out: dict = {}
    try:
        checkpoint.save(new, PATH)
    except checkpoint.SaveError as exc:
        out["error"] = (type(exc).__name__, sorted(exc.failures), str(exc))
    target = {"w": _part(comm, 0.0), "step": 0}
    checkpoint.load(target, PATH)
    out["loaded"] = (target["w"].local.tolist(), target["step"])
    comm.barrier()
    if comm.rank == 0:
        out["verify"] = checkpoint.verify(PATH)
        out["files"] = sorted(os.listdir(PATH))
        out["manifest"] = sorted(checkpoint.read_manifest(PATH).files)
    return out


@pytest.mark.parametrize("profile", ["local", "nfs"])
def test_error_in_a_writer_thread_fails_the_save_everywhere_and_keeps_the_old_checkpoint(profile):
    fault = simfs.InjectErrno("ENOSPC", path=f"{PATH}/*-r2-*.bin", ranks=(2,))
    sim = cluster(profile, nodes=2, rpn=2)
    ok(sim.run(save_old_job), 4)
    returns = ok(sim.run(failed_overwrite_job, faults=[fault]), 4)
    for rank, out in returns.items():
        name, failed, message = out["error"]
        assert name == "SaveError" and failed == [2], out
        assert "rank 2: CheckpointError: writer thread for " in message
        assert "OSError: [Errno 28] No space left on device" in message
        assert out["loaded"] == ([float(rank)] * 4, 1)  # the old checkpoint, untouched
    assert returns[0]["files"] == sorted([checkpoint.MANIFEST_NAME, *returns[0]["manifest"]])
