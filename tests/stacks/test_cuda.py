"""CUDA in a simulated rank (rank/nocuda.py): a CUDA build of torch reports no device
there and refuses to start one with an error that says why; ``nccl`` names the simulated group,
on CPU tensors; the host's torch.cuda is untouched."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import simfs
from simfs.rank.nocuda import WHY
from simfs.runtime.carrier import preload


def _try_cuda(real_build: bool = False) -> dict[str, Any]:
    """What each way of starting CUDA raised (``real_build``: also torch.cuda.set_device and
    init_device_mesh, which call torch._C's CUDA functions directly, absent from a CPU build)."""
    from torch.distributed.device_mesh import init_device_mesh

    errors = {}
    attempts = {"cuda()": lambda: torch.ones(1).cuda(), "device=": lambda: torch.ones(1, device="cuda")}
    if real_build:
        attempts["set_device"] = lambda: torch.cuda.set_device(0)
        attempts["init_device_mesh"] = lambda: init_device_mesh("cuda", (4,))
    for name, attempt in attempts.items():
        try:
            attempt()
            errors[name] = "started"
        except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
            errors[name] = f"{type(exc).__name__}: {exc}"
    return {"available": torch.cuda.is_available(), "errors": errors}


def _assert_refused(result: simfs.Result) -> None:
    assert result.ok, result.summary()
    for outcome in result.returns.values():
        assert outcome["available"] is False
        assert outcome["errors"] == dict.fromkeys(outcome["errors"], f"RuntimeError: {WHY}")


def test_a_cuda_build_in_a_rank_has_no_device_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch here is a CPU build: the rank is made to see a CUDA build (the fork inherits it; the
    host imports what it preloads first, as torch._dynamo looks for CUDA's functions if it sees one)."""
    preload()
    lazy_init, available = torch.cuda._lazy_init, torch.cuda.is_available
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    _assert_refused(simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(_try_cuda))
    assert (torch.cuda._lazy_init, torch.cuda.is_available) == (lazy_init, available)  # the host's own


def test_a_cpu_build_keeps_torchs_own_error() -> None:
    result = simfs.Cluster(nodes=1, ranks_per_node=1, dist_initialized=False).run(lambda: _try_cuda()["errors"])
    assert result.ok, result.summary()
    assert result.returns[0]["cuda()"] == "AssertionError: Torch not compiled with CUDA enabled"


def _nccl_all_reduce() -> tuple[str, float]:
    import torch.distributed as dist

    dist.init_process_group("nccl")
    t = torch.full((3,), float(dist.get_rank()))
    dist.all_reduce(t)
    return dist.get_backend(), float(t[0])


def test_nccl_names_the_simulated_group_on_cpu_tensors() -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(_nccl_all_reduce)
    assert result.ok, result.summary()
    assert result.returns == dict.fromkeys(range(4), ("nccl", 6.0))


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_on_a_gpu_machine_a_rank_is_refused_cuda_and_the_host_keeps_it() -> None:
    _assert_refused(simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(_try_cuda, True))
    assert torch.ones(2, device="cuda").sum().item() == 2.0  # the host's CUDA still works
