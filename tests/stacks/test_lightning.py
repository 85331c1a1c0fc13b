"""Lightning, unmodified, in rank processes on 2 nodes x 2 ranks: ``Trainer(strategy="ddp",
num_nodes=2)`` with ``ModelCheckpoint(save_top_k=2, save_last=True)``, then a job resumed from
``last.ckpt``."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _stacks import PROFILES, RESUBMITTED, cluster, needs, ok, writers

PRELOAD = ("lightning.pytorch",)  # imported once, before the ranks are forked


def fit_job(directory: str, steps: int, resume: bool = False) -> dict[str, Any]:
    import lightning
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.utilities import rank_zero_only

    class Regression(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> Any:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
    checkpoints = ModelCheckpoint(dirpath=directory, save_top_k=2, save_last=True, monitor="loss",
                                  every_n_train_steps=2)
    trainer = lightning.Trainer(accelerator="cpu", strategy="ddp", num_nodes=2, devices=2, max_steps=steps,
                                callbacks=[checkpoints], enable_progress_bar=False, logger=False,
                                enable_model_summary=False)
    trainer.fit(Regression(), data, ckpt_path=f"{directory}/last.ckpt" if resume else None)
    return {"global_rank": trainer.global_rank, "rank_zero_only": rank_zero_only.rank,
            "world_size": trainer.world_size, "step": trainer.global_step,
            # another node may not see the directory yet (NFS): rank 0, which made it, looks
            "kept": sorted(os.listdir(directory)) if trainer.global_rank == 0 else None}


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_top_k_and_last_checkpoints_then_a_resume_from_last(profile: str) -> None:
    needs("lightning")
    simulated = cluster(profile, PRELOAD)
    first = simulated.run(fit_job, "/shared/ckpt", 6)
    returns = ok(first)
    assert [returns[rank]["global_rank"] for rank in range(4)] == [0, 1, 2, 3]
    assert [returns[rank]["rank_zero_only"] for rank in range(4)] == [0, 1, 2, 3]
    assert {returns[rank]["world_size"] for rank in range(4)} == {4}
    kept = returns[0]["kept"]
    assert "last.ckpt" in kept and len(kept) == 3, kept  # last.ckpt and the two best
    assert writers(first, "/shared/ckpt/*.ckpt") == {0}  # Lightning saves from global rank 0 only
    simulated.idle(RESUBMITTED)
    resumed = ok(simulated.run(fit_job, "/shared/ckpt", 8, True))
    assert {resumed[rank]["step"] for rank in range(4)} == {8}
