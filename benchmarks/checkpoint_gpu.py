"""checkpoint on a GPU: how long ``checkpoint.async_save`` blocks training per GB of CUDA tensors,
next to a plain copy of the same tensors into pinned host memory (the least any asynchronous save
must block: the tensors may change as soon as it returns), and the time until the save is
committed. One process, no torch.distributed (async_save uses one process's comm).

  python benchmarks/checkpoint_gpu.py [--gib 1 ...] [--repeats 5] [--scratch DIR] [--record]

Needs CUDA (exits saying so without it). A section of its own in reports/BENCHMARKS.md, naming the
GPU, torch and the disk: the GPU machine is rarely the one the CPU benchmarks ran on."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint
from common import RUNS, add_record_flag, filesystem, table, write_report

TENSORS = 64
HEADERS = ["what (CUDA, 64 tensors)", "seconds per GB", "vs pinned copy"]


def _state(gib: float) -> dict[str, torch.Tensor]:
    per = int(gib * (1 << 30)) // TENSORS // 4
    return {f"t{i}": torch.randn(per, device="cuda") for i in range(TENSORS)}


def _pinned_copy_s(state: dict[str, torch.Tensor]) -> float:
    """Copy every tensor into pinned host buffers allocated beforehand (non-blocking), then wait."""
    buffers = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in state.items()}
    torch.cuda.synchronize()
    start = time.perf_counter()
    for key, tensor in state.items():
        buffers[key].copy_(tensor, non_blocking=True)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _async_save_s(state: dict[str, torch.Tensor], path: str) -> tuple[float, float]:
    """(seconds until async_save returns, seconds until its checkpoint is committed)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    future = checkpoint.async_save(state, path)
    blocked = time.perf_counter() - start
    future.result()
    return blocked, time.perf_counter() - start


def gpu_rows(scratch: str, repeats: int, gib: float = 1.0) -> list[list[str]]:
    """The rows (empty without CUDA); checkpoints go under ``scratch`` and are removed."""
    if not torch.cuda.is_available():
        return []
    state = _state(gib)
    gb = sum(t.numel() * t.element_size() for t in state.values()) / 1e9
    pinned, blocked, committed = [], [], []
    for i in range(repeats):
        pinned.append(_pinned_copy_s(state))
        path = os.path.join(scratch, f"gpu-{i}")
        b, c = _async_save_s(state, path)
        blocked.append(b)
        committed.append(c)
        shutil.rmtree(path)
    copy = statistics.median(pinned) / gb
    rows = [["plain copy into pinned host memory", f"{copy:.3f}", "1.00x"]]
    for label, samples in (("async_save: blocks training", blocked), ("async_save: committed", committed)):
        per_gb = statistics.median(samples) / gb
        rows.append([label, f"{per_gb:.3f}", f"{per_gb / copy:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, nargs="+", default=[1.0], help="sizes of the state, GiB of CUDA tensors")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scratch", default=None, help="directory for the checkpoints (default: under reports/runs/)")
    add_record_flag(parser)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("checkpoint_gpu: no CUDA device here")
    os.makedirs(RUNS, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="checkpoint_gpu-", dir=args.scratch or RUNS) as scratch:
        where = filesystem(scratch)
        rows = {gib: gpu_rows(scratch, args.repeats, gib) for gib in args.gib}
    markdown = (f"## checkpoint on a GPU\n\nMedians of {args.repeats} repeats; {torch.cuda.get_device_name()}, "
                f"torch {torch.__version__}; disk: {where}. One process, {TENSORS} float32 tensors.")
    for gib, gib_rows in rows.items():
        markdown += f"\n\n{gib:g} GiB:\n\n" + table(HEADERS, gib_rows)
    print(markdown)
    command = (f"python benchmarks/checkpoint_gpu.py --gib {' '.join(f'{g:g}' for g in args.gib)} "
               f"--repeats {args.repeats}")
    data = {"filesystem": where, "rows": {f"{gib:g} GiB": gib_rows for gib, gib_rows in rows.items()}}
    write_report("checkpoint_gpu", command, markdown, data, record=args.record)


if __name__ == "__main__":
    main()
