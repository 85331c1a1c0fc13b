"""checkpoint.async_save with CUDA tensors: it stages them into pinned memory, returns once they may
change (what is saved is what they held, bit for bit), blocks about as long as a plain pinned
device-to-host copy, and saves on its own gloo group while the training thread runs NCCL
collectives. Needs a GPU (skipped without CUDA: CI has none)."""

from __future__ import annotations

import time
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from _checkpoint_cases import assert_same
from test_coord_gpu import nccl_group  # noqa: F401 - the fixture, used by name

import checkpoint
from checkpoint import async_saver
from checkpoint.manifest import Value

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]


def _cuda_state(seed: int, mib: int = 4, tensors: int = 4) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    n = (mib << 20) // 4 // tensors
    return {"layers": [torch.rand(n, device="cuda", generator=g) for _ in range(tensors)],
            "half": torch.rand(1000, device="cuda", generator=g).to(torch.bfloat16), "step": seed}


def _blank(sd: dict) -> dict:
    return {"layers": [torch.zeros_like(t) for t in sd["layers"]], "half": torch.zeros_like(sd["half"]), "step": 0}


def test_async_save_stages_cuda_tensors_into_pinned_memory_and_ignores_later_changes(tmp_path):
    sd = _cuda_state(1)
    expected = {"layers": [t.clone() for t in sd["layers"]], "half": sd["half"].clone(), "step": 1}
    staged: list[checkpoint.Staged] = []

    def spy(*args, **kwargs):
        staged.append(checkpoint.stage(*args, **kwargs))
        return staged[-1]

    with mock.patch.object(async_saver, "stage", spy):
        future = checkpoint.async_save(sd, tmp_path / "ckpt")
    for t in [*sd["layers"], sd["half"]]:
        t.mul_(-3.0)  # queued on the current stream right after the staging copies
    future.result(timeout=120)
    tensors = [d for d in staged[0].data if not isinstance(d, Value)]
    assert tensors and all(torch.from_numpy(d).is_pinned() for d in tensors)
    target = _blank(sd)
    checkpoint.load(target, tmp_path / "ckpt")
    assert_same(expected, target)


def test_async_save_blocks_about_as_long_as_a_pinned_copy(tmp_path):
    sd = _cuda_state(2, mib=512, tensors=8)
    checkpoint.async_save(sd, tmp_path / "warm").result(timeout=300)  # the pinned host cache fills once
    torch.cuda.synchronize()
    start = time.perf_counter()
    future = checkpoint.async_save(sd, tmp_path / "timed")
    blocking = time.perf_counter() - start
    future.result(timeout=300)
    total = time.perf_counter() - start
    buffers = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in sd["layers"]]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for buffer, t in zip(buffers, sd["layers"]):
        buffer.copy_(t)
    copy = time.perf_counter() - start
    print(f"async_save of 512 MiB: blocked {blocking * 1e3:.1f} ms (pinned copy {copy * 1e3:.1f} ms), "
          f"saved in {total * 1e3:.1f} ms")
    assert blocking < max(3 * copy, copy + 0.25)
    assert blocking < total


@pytest.mark.usefixtures("nccl_group")
def test_background_save_runs_beside_nccl_collectives_of_the_training_thread(tmp_path):
    sd = _cuda_state(3, mib=64)
    expected = {"layers": [t.clone() for t in sd["layers"]], "half": sd["half"].clone(), "step": 3}
    future = checkpoint.async_save(sd, tmp_path / "ckpt")
    total = torch.ones(1, device="cuda")
    for _ in range(50):
        dist.all_reduce(total)
        for t in sd["layers"]:
            t.add_(1.0)
    future.result(timeout=120)
    assert total.item() == 1.0
    target = _blank(sd)
    checkpoint.load(target, tmp_path / "ckpt")
    assert_same(expected, target)
