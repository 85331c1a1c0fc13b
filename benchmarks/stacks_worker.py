"""The jobs of stacks_bench.py, as a user writes them (init_process_group("gloo") from torchrun's
environment; transformers' and Lightning's trainers as they come). Run by torchrun (``torchrun
--nproc-per-node 4 stacks_worker.py [--root DIR] JOB``) or on a simulated 2 x 2 cluster (``python
stacks_worker.py --simfs JOB``, the stacks preloaded); prints one JSON line."""

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


def trainer(root: str) -> dict[str, Any]:
    """transformers' Trainer on a one-layer GPT-2 from a config, 20 steps, a checkpoint every 5
    kept by save_total_limit=2 (under ``root``)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 256

        def __getitem__(self, index: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=16))
    args = TrainingArguments(output_dir=f"{root}/trainer", max_steps=STEPS, save_steps=5, save_total_limit=2,
                             per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True,
                             log_level="error", seed=0)
    state = Trainer(model=model, args=args, train_dataset=Tokens()).train()
    return {"loss": float(state.training_loss)}


def lightning(root: str) -> dict[str, Any]:
    """Lightning's Trainer(strategy="ddp") on the MLP over every node and rank of the launch, 20 steps,
    ModelCheckpoint every 5 with save_top_k=2 and save_last (under ``root``)."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _mlp()

        def training_step(self, batch: Any, index: int) -> Any:
            loss = self.model(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32 * STEPS * 4, 64)), batch_size=32)
    checkpoints = ModelCheckpoint(dirpath=f"{root}/lightning", save_top_k=2, save_last=True, monitor="loss",
                                  every_n_train_steps=5)
    devices = int(os.environ["LOCAL_WORLD_SIZE"])  # 2 x 2 in simfs, 1 x 4 under torchrun
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", num_nodes=int(os.environ["WORLD_SIZE"]) // devices,
                        devices=devices, max_steps=STEPS,
                        callbacks=[checkpoints], enable_progress_bar=False, logger=False, enable_model_summary=False)
    trainer.fit(Module(), data)
    return {"step": trainer.global_step}


JOBS = {"ddp": ddp, "fsdp": fsdp, "allreduce": allreduce, "trainer": trainer, "lightning": lightning}
STACKS = {"trainer", "lightning"}  # jobs that write checkpoints under a root (--root; in simfs: /shared)
# what a simulated cluster running a stack's job preloads (simfs.Cluster's preload)
PRELOAD = {"trainer": ("transformers.trainer", "transformers.models.gpt2.modeling_gpt2"),
           "lightning": ("lightning.pytorch",)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--simfs", action="store_true", help="run on a simulated 2 x 2 cluster")
    parser.add_argument("--root", default="/shared/bench", help="where a stack's job writes its checkpoints")
    parser.add_argument("job", choices=sorted(JOBS))
    args = parser.parse_args()
    arguments = (args.root,) if args.job in STACKS else ()
    if not args.simfs:
        result = JOBS[args.job](*arguments)
        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(result))
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import simfs

    cluster = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False, preload=PRELOAD.get(args.job, ()))
    run = cluster.run(JOBS[args.job], *arguments)
    if not run.ok:
        raise SystemExit(run.summary())
    print(json.dumps(run.returns[0]))


if __name__ == "__main__":
    main()
