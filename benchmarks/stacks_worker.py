"""The jobs of stacks_bench.py, as a user writes them (init_process_group("gloo") from torchrun's
environment). Run by torchrun (``torchrun --nproc-per-node 4 stacks_worker.py JOB``) or on a
simulated 2 x 2 cluster (``python stacks_worker.py --simfs JOB``); prints one JSON line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

STEPS = 20
ALLREDUCES = 50
MIB = 1 << 20


def _mlp() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def _train(model: Any) -> None:
    """STEPS steps of SGD, each rank on its own random batches."""
    import torch
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(dist.get_rank())
    for _ in range(STEPS):
        model(torch.randn(32, 64)).sum().backward()
        opt.step()
        opt.zero_grad()


def ddp() -> dict[str, Any]:
    """A small MLP under DDP, 20 steps."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(_mlp())
    _train(model)
    checksum = float(sum(p.detach().sum() for p in model.parameters()))
    dist.destroy_process_group()
    return {"checksum": checksum}


def fsdp() -> dict[str, Any]:
    """The same MLP under FSDP2 on a 1-D mesh of every rank, 20 steps."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = _mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    _train(model)
    checksum = float(sum(p.full_tensor().detach().sum() for p in model.parameters()))
    dist.destroy_process_group()
    return {"checksum": checksum}


def allreduce(count: int = ALLREDUCES) -> dict[str, Any]:
    """``count`` all-reduces of 1 MiB; the seconds each took (wall, as this process sees it)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(MIB // 4)
    dist.all_reduce(tensor)  # warm: connections made
    start = time.perf_counter()
    for _ in range(count):
        dist.all_reduce(tensor)
    seconds = (time.perf_counter() - start) / max(count, 1)
    dist.destroy_process_group()
    return {"seconds_each": seconds}


JOBS = {"ddp": ddp, "fsdp": fsdp, "allreduce": allreduce}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--simfs", action="store_true", help="run on a simulated 2 x 2 cluster")
    parser.add_argument("job", choices=sorted(JOBS))
    args = parser.parse_args()
    if not args.simfs:
        result = JOBS[args.job]()
        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(result))
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import simfs

    run = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(JOBS[args.job])
    if not run.ok:
        raise SystemExit(run.summary())
    print(json.dumps(run.returns[0]))


if __name__ == "__main__":
    main()
