"""One rank of the checkpoint benchmark (launched twice by checkpoint_vs_dcp.py).

argv: <scratch dir> <result json> <repeats> <cases, comma-separated>. Every rank measures; rank 0
writes every rank's samples. Each repeat saves and loads the same state dict with checkpoint,
torch.distributed.checkpoint and a raw write (+fsync) of the same bytes, interleaved; loads start
cold (the files' pages are dropped with posix_fadvise after their fsync)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import checkpoint
import coord

MIB = 1 << 20


def build(case: str, mesh) -> dict:
    """The case's state dict on this rank (DTensors for shards and replicas, so both libraries
    see the same layout; each rank makes only its own part)."""
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)

    def part(*shape: int, dim: int = 0) -> DTensor:
        return DTensor.from_local(torch.empty(shape).uniform_(), mesh, [Shard(dim)])

    def replica(*shape: int) -> DTensor:
        return DTensor.from_local(torch.full(shape, 0.5), mesh, [Replicate()])

    if case == "a":  # 1 GiB in 64 tensors of 2048x2048, each split over the 2 ranks by rows
        return {f"layer{i}.weight": part(1024, 2048) for i in range(64)}
    if case == "b":  # 20k tensors of 1 KiB, 10k on each rank
        return {f"r{rank}.t{i}": torch.full((256,), float(i)) for i in range(10_000)}
    if case == "c":  # replicated + sharded mix, ~200 MiB
        sd: dict = {f"shard{i}": part(512, 2048) if i % 2 else part(1024, 1024, dim=1) for i in range(16)}
        sd |= {f"repl{i}": replica(1 << 20) for i in range(16)}
        sd |= {f"norm{i}": replica(1024) for i in range(500)}
        sd["step"] = 1000
        return sd
    raise ValueError(f"unknown case {case!r}")


def local_tensors(sd: dict) -> list[torch.Tensor]:
    """What a raw write of this rank's share writes: its shards, and every other replicated
    tensor (replicas split between the 2 ranks, as the libraries' dedup does)."""
    rank, out = dist.get_rank(), []
    for i, value in enumerate(sd.values()):
        if isinstance(value, DTensor):
            if isinstance(value.placements[0], Shard) or i % 2 == rank:
                out.append(value.to_local())
        elif isinstance(value, torch.Tensor):
            out.append(value)
    return out


class PeakRss:
    """Peak resident memory above the level at entry, sampled every 2 ms by a thread."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = _rss()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def extra(self) -> int:
        return self.peak - self.base


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def drop_cache(path: str) -> None:
    """Evict the (already fsynced) pages of every file under ``path``, so the next read is cold."""
    for top, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(top, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def raw_save(tensors: list[torch.Tensor], path: str) -> None:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, f"rank{dist.get_rank()}.bin"), "wb", buffering=0) as f:
        for t in tensors:
            f.write(t.numpy().data.cast("B"))
        os.fsync(f.fileno())
    coord.fsync_dir(path)


def raw_load(tensors: list[torch.Tensor], path: str) -> None:
    with open(os.path.join(path, f"rank{dist.get_rank()}.bin"), "rb", buffering=0) as f:
        for t in tensors:
            view = t.numpy().data.cast("B")
            done = 0
            while done < len(view):
                done += f.readinto(view[done:])


def timed_collective(fn, *args):
    """(seconds from a barrier to the barrier after ``fn(*args)`` on every rank, this rank's peak
    extra RSS, what ``fn`` returned)."""
    dist.barrier()
    with PeakRss() as rss:
        start = time.perf_counter()
        value = fn(*args)
        dist.barrier()
        elapsed = time.perf_counter() - start
    return elapsed, rss.extra, value


def run_case(case: str, scratch: str, repeats: int, mesh) -> dict:
    sd = build(case, mesh)
    tensors = local_tensors(sd)
    raw_bytes = sum(t.numel() * t.element_size() for t in tensors)
    methods = {
        "ours": (lambda p: checkpoint.save(sd, p), lambda p: checkpoint.load(sd, p)),
        "dcp": (lambda p: dcp.save(sd, checkpoint_id=p), lambda p: dcp.load(sd, checkpoint_id=p)),
        "raw": (lambda p: raw_save(tensors, p), lambda p: raw_load(tensors, p)),
    }
    samples: dict = {m: {"save_s": [], "load_s": [], "save_rss": [], "load_rss": []} for m in methods}
    for _ in range(repeats):
        for method, (save, load) in methods.items():
            path = os.path.join(scratch, f"{case}-{method}")
            if dist.get_rank() == 0:
                shutil.rmtree(path, ignore_errors=True)
            dist.barrier()
            t, rss, _ = timed_collective(save, path)
            samples[method]["save_s"].append(t)
            samples[method]["save_rss"].append(rss)
            drop_cache(path)
            t, rss, _ = timed_collective(load, path)
            samples[method]["load_s"].append(t)
            samples[method]["load_rss"].append(rss)
    files = {m: _size(os.path.join(scratch, f"{case}-{m}")) for m in methods}
    out = {"samples": samples, "raw_bytes": raw_bytes, "files_bytes": files}
    if case == "a":
        out["reshard"] = reshard(sd, scratch)
    return out


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(top, n)) for top, _, names in os.walk(path) for n in names)


def reshard(sd: dict, scratch: str) -> dict:
    """Bytes read vs needed: the row-split checkpoint loaded split by columns on the 2 ranks, and
    whole on one process; the DCP checkpoint the same way (read through checkpoint's DCP reader,
    which reads whole chunks as DCP does)."""
    mesh = next(iter(sd.values())).device_mesh
    by_columns = {k: DTensor.from_local(torch.zeros(v.shape[0], v.shape[1] // 2), mesh, [Shard(1)])
                  for k, v in sd.items()}
    whole = {k: torch.zeros(v.shape) for k, v in sd.items()} if dist.get_rank() == 0 else {}
    out: dict = {}
    for fmt in ("ours", "dcp"):
        path = os.path.join(scratch, f"a-{fmt}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", checkpoint.DcpCheckpointWarning)
            drop_cache(path)
            seconds, _, stats = timed_collective(checkpoint.load, by_columns, path)
            gathered = coord.get_comm().all_gather_object(stats)
            out[f"{fmt}_columns"] = [s.__dict__ | {"seconds": seconds} for s in gathered]
            if dist.get_rank() == 0:
                drop_cache(path)
                start = time.perf_counter()
                one = checkpoint.load(whole, path, comm=coord.LocalComm())
                out[f"{fmt}_whole"] = [one.__dict__ | {"seconds": time.perf_counter() - start}]
    same = all(torch.equal(by_columns[k].full_tensor(), sd[k].full_tensor()) for k in sd)
    return out | {"bit_exact": same}


def main() -> None:
    scratch, result, repeats, cases = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    results = {case: run_case(case, scratch, repeats, mesh) for case in cases}
    gathered = coord.get_comm().all_gather_object(results)
    if dist.get_rank() == 0:
        with open(result, "w") as f:
            json.dump(gathered, f)
    dist.barrier()  # leave together: a rank tearing down gloo while its peer still sends can abort
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
