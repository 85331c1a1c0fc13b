"""checkpoint with CUDA tensors: saved from the GPU (staged through pinned host memory), loaded
into GPU targets through pinned staging buffers, resharded between CPU and GPU layouts. Needs a
GPU (skipped without CUDA: CI has none)."""

from __future__ import annotations

import pytest
import torch
from _checkpoint_cases import DTYPES, assert_same, make_tensor, raw

import checkpoint
from checkpoint import Sharded, Split

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]


def _state(device: str) -> dict:
    return {str(dtype).removeprefix("torch."): make_tensor(dtype, (33, 17), i).to(device)
            for i, dtype in enumerate(DTYPES)}


@pytest.mark.parametrize(("saved_on", "loaded_on"), [("cuda", "cuda"), ("cpu", "cuda"), ("cuda", "cpu")])
def test_round_trip_between_devices_is_bit_exact(tmp_path, saved_on, loaded_on):
    sd = _state(saved_on)
    checkpoint.save(sd, tmp_path)
    target = {k: torch.zeros_like(v, device=loaded_on) for k, v in sd.items()}
    checkpoint.load(target, tmp_path)
    assert all(v.device.type == loaded_on for v in target.values())
    assert_same({k: v.cpu() for k, v in sd.items()}, {k: v.cpu() for k, v in target.items()})


def test_resharded_load_into_gpu_parts(tmp_path):
    full = make_tensor(torch.bfloat16, (64, 48), 5)
    checkpoint.save({"w": full.cuda()}, tmp_path)
    for rank in range(3):  # three column parts, loaded one by one as three ranks would
        part = Sharded.of(torch.zeros(64, 48, dtype=torch.bfloat16, device="cuda"), [Split(1)], [3], [rank])
        checkpoint.load({"w": part}, tmp_path)
        expected = Sharded.of(full, [Split(1)], [3], [rank]).local
        assert part.local.is_cuda and raw(part.local) == raw(expected)  # bits: NaN payloads included


def test_staging_copies_gpu_tensors_into_pinned_memory():
    staged = checkpoint.stage({"w": torch.arange(10, device="cuda")}, pin_memory=True)
    data = staged.data[0]
    assert torch.from_numpy(data).is_pinned()
    assert data.view("int64").tolist() == list(range(10))
