"""coord over NCCL: object collectives and byte broadcasts go through the current CUDA device.
Needs a GPU (skipped without CUDA: CI has none)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

import coord

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]


@pytest.fixture()
def nccl_group(cuda_device: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                       "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    yield
    dist.destroy_process_group()


def test_comm_uses_the_current_cuda_device(nccl_group, tmp_path):
    comm = coord.get_comm()
    assert isinstance(comm, coord.TorchComm) and comm.backend == "nccl"
    assert comm.device == torch.device("cuda", 0)
    assert comm.broadcast_object({"a": [1, 2]}) == {"a": [1, 2]}
    assert comm.all_gather_object("x") == ["x"]
    payload = os.urandom((9 << 20) + 3)
    assert comm.broadcast_bytes(payload) == payload
    comm.barrier()
    coord.makedirs_once(tmp_path / "run", comm=comm)
    assert (tmp_path / "run").is_dir()
    report = coord.sync_files(__file__, tmp_path / "dst", comm=comm)
    copied = (tmp_path / "dst" / os.path.basename(__file__)).read_bytes()
    assert report.sent == 1 and copied == open(__file__, "rb").read()
