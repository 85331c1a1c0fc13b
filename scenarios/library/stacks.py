"""(k) The training stacks users run, unmodified in rank processes: transformers' Trainer, Lightning,
accelerate and datasets, each in the pattern that breaks on a shared mount next to the one that
holds. The libraries are imported inside the jobs (a machine without them lists these scenarios
and `simfs run` leaves them out, saying so); their rank processes start with them preloaded.

- Trainer with ``save_total_limit`` on a mount both nodes share: with ``save_on_each_node=True``
  each node's first rank saves the same checkpoint and rotates the same old ones away, so one
  node's deletion races the other's (transformers#20988); the releases since ignore the rotation's
  errors, and the last checkpoint stays whole either way.
- Lightning's ``trainer.test(ckpt_path="best")`` right after ``fit``: every rank loads the best
  checkpoint, and a node that looked for the checkpoint directory before rank 0 made it still has
  "no such directory" cached (NFS's lookup cache, acdirmin 30 s, nfs(5)) and fails
  (Lightning#6700: "FileNotFoundError ... with 12 GPUs across 2 nodes").
- accelerate's ``save_state`` over one directory, interrupted by a power loss: it rewrites the
  model, optimizer and random states in place, without fsync, so the restarted job's
  ``load_state`` finds a file torn or of another step.
- datasets: every rank asks whether the preprocessed dataset is on the mount, rank 0 builds it with
  ``save_to_disk``, and after a barrier every rank loads it; on NFS a node that asked before it
  existed has the answer cached. Asking on rank 0 alone, the others look only after the barrier."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
import torch.distributed as dist

from ._common import BrokenCheckpoint, scenario

FAMILY = "stacks"
SHARED = ("nfs", "local")  # a mount both nodes share, with and without NFS's caches
CRASHES = ("local", "local-posix", "nfs")
TRAINER = ("transformers", "accelerate")
TRAINER_MODULES = ("transformers.trainer", "transformers.models.gpt2.modeling_gpt2")
LIGHTNING = ("lightning",)
ACCELERATE = ("accelerate",)
DATASETS = ("datasets",)
# what one example costs against a greenlet example of simfs's library (a DDP example is ~7): each
# of the 2-4 ranks builds the stack's trainer, trains and saves, one rank after another
# (reports/BENCHMARKS.md, the main job: examples a second per scenario)
TRAINER_COST, LIGHTNING_COST, SMALL_STACK_COST = 40, 30, 10

OUTPUT = "/shared/trainer"
LIGHTNING_DIR = "/shared/lightning"
STATE = "/shared/accelerate"
PROCESSED = "/shared/data/processed"


# -- transformers' Trainer ------------------------------------------------------------------------

def _tiny_trainer(*, save_on_each_node: bool) -> Any:
    """A one-layer GPT-2 built from a config (no download), checkpointed every step and rotated."""
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 32

        def __getitem__(self, index: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))
    args = TrainingArguments(output_dir=OUTPUT, max_steps=3, save_steps=1, save_total_limit=1,
                             save_on_each_node=save_on_each_node, per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, disable_tqdm=True, log_level="error", seed=0)
    return Trainer(model=model, args=args, train_dataset=Tokens())


def _check_rotated() -> None:
    """After the training, rank 0 finds what save_total_limit=1 promises: the last checkpoint, whole
    (its model and its trainer state at step 3), and no other."""
    dist.barrier()
    if dist.get_rank() != 0:
        return
    kept = sorted(os.listdir(OUTPUT))
    if kept != ["checkpoint-3"]:
        raise BrokenCheckpoint(f"save_total_limit=1 kept {kept} in {OUTPUT}")
    last = f"{OUTPUT}/checkpoint-3"
    try:
        with open(f"{last}/trainer_state.json") as f:
            step = json.load(f)["global_step"]
        with open(f"{last}/model.safetensors", "rb") as f:
            header = f.read(8)
    except (OSError, ValueError, KeyError) as exc:
        raise BrokenCheckpoint(f"{last} is not whole: {type(exc).__name__}: {exc}") from None
    if step != 3 or len(header) < 8:
        raise BrokenCheckpoint(f"{last} holds step {step} and a model of {len(header)} bytes")


@scenario("trainer-save-on-each-node", nodes=2, ranks_per_node=2, max_examples=12, carrier="process",
          expect=dict.fromkeys(SHARED, "pass"), family=FAMILY, tags=("fixed",), needs=TRAINER,
          preload=TRAINER_MODULES, example_cost=TRAINER_COST)
def trainer_save_on_each_node() -> None:
    """transformers' Trainer with save_on_each_node=True and save_total_limit=1 on a shared mount.

    Each node's first rank saves every checkpoint into the same directory and deletes the older
    ones, so the two nodes' deletions race (transformers#20988); since the rotation ignores
    errors (shutil.rmtree(ignore_errors=True)), the last checkpoint stays whole."""
    _tiny_trainer(save_on_each_node=True).train()
    _check_rotated()


@scenario("trainer-rotate", nodes=2, ranks_per_node=2, max_examples=12, carrier="process",
          expect=dict.fromkeys(SHARED, "pass"), family=FAMILY, tags=("fixed",), needs=TRAINER,
          preload=TRAINER_MODULES, example_cost=TRAINER_COST)
def trainer_rotate() -> None:
    """transformers' Trainer with save_total_limit=1 on a shared mount (save_on_each_node off).

    Only the world's rank 0 saves the model and rotates; the other ranks write only their own
    random states into the checkpoint rank 0 made."""
    _tiny_trainer(save_on_each_node=False).train()
    _check_rotated()


# -- Lightning ------------------------------------------------------------------------------------

def _lightning_fit_then(test: str) -> None:
    """fit a small regression with ModelCheckpoint(save_top_k=2, save_last=True) on the mount,
    then test with ``ckpt_path=test`` on every rank."""
    import lightning
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Regression(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, index: int) -> Any:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss, sync_dist=True)
            return loss

        def test_step(self, batch: Any, index: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=4)
    checkpoints = ModelCheckpoint(dirpath=LIGHTNING_DIR, save_top_k=2, save_last=True, monitor="loss",
                                  every_n_train_steps=1)
    trainer = lightning.Trainer(accelerator="cpu", strategy="ddp", num_nodes=2, devices=2, max_steps=3,
                                callbacks=[checkpoints], enable_progress_bar=False, logger=False,
                                enable_model_summary=False)
    model = Regression()
    trainer.fit(model, data)
    trainer.test(model, data, ckpt_path=test, verbose=False)


@scenario("lightning-test-best", nodes=2, ranks_per_node=2, max_examples=20, carrier="process",
          expect={"nfs": "fail", "local": "pass"}, family=FAMILY, tags=("naive",), needs=LIGHTNING,
          preload=("lightning.pytorch",), example_cost=LIGHTNING_COST)
def lightning_test_best() -> None:
    """Lightning: fit with ModelCheckpoint on the mount, then trainer.test(ckpt_path="best") on every rank.

    Every rank loads the best checkpoint rank 0 saved; a node whose ranks looked for the
    checkpoint directory before it existed still has "not found" cached on NFS."""
    _lightning_fit_then("best")


# -- accelerate -----------------------------------------------------------------------------------

STATE_STEPS = (1, 2)


def _accelerated() -> tuple[Any, Any, Any]:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, prepared, optimizer


def accelerate_resume() -> int:
    """The restarted job: load_state of the one state directory; the model and the optimizer must
    be of the same step (the weights are filled with the step the optimizer counted)."""
    if not os.path.isdir(STATE):
        return 0
    accelerator, prepared, optimizer = _accelerated()
    try:
        accelerator.load_state(STATE)
    except Exception as exc:  # noqa: BLE001 - whatever a torn file makes the loaders raise
        raise BrokenCheckpoint(f"load_state({STATE}) failed: {type(exc).__name__}: {exc}") from None
    steps = {int(state["step"]) for state in optimizer.state_dict()["state"].values()}
    weight = float(accelerator.unwrap_model(prepared).weight.detach()[0, 0])
    if steps != {int(weight)}:
        raise BrokenCheckpoint(f"{STATE} holds weights of step {weight:g} and an optimizer of step(s) {sorted(steps)}")
    return int(weight)


@scenario("accelerate-save-state-power-loss", recover=accelerate_resume, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=40, carrier="process", expect=dict.fromkeys(CRASHES, "fail"), family=FAMILY,
          tags=("naive",), needs=ACCELERATE, preload=ACCELERATE, example_cost=SMALL_STACK_COST)
def accelerate_save_state_power_loss() -> None:
    """accelerate: save_state over the one state directory after each step; a crash, then load_state.

    save_state rewrites model.safetensors, optimizer.bin and each rank's random states in place
    and fsyncs none of them: a crash during a save or before its data reached the disk leaves a
    torn file, or a model of one step beside an optimizer of another."""
    accelerator, prepared, optimizer = _accelerated()
    for step in STATE_STEPS:
        accelerator.backward(prepared(torch.ones(2, 4)).sum())
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():  # what the restarted job checks against the optimizer's step
            accelerator.unwrap_model(prepared).weight.fill_(float(step))
        accelerator.save_state(STATE)


# -- datasets -------------------------------------------------------------------------------------

def _preprocess() -> None:
    import datasets

    table = datasets.Dataset.from_dict({"x": list(range(16))})
    table.map(lambda row: {"y": row["x"] * 2}).save_to_disk(PROCESSED)


def _load_processed() -> None:
    import datasets

    loaded = datasets.load_from_disk(PROCESSED)
    if list(loaded["y"]) != [2 * x for x in range(16)]:
        raise BrokenCheckpoint(f"{PROCESSED} holds {list(loaded['y'])[:4]}...")


@scenario("datasets-every-rank-asks", nodes=2, ranks_per_node=2, max_examples=20, carrier="process",
          expect={"nfs": "fail", "local": "pass"}, family=FAMILY, tags=("naive",), needs=DATASETS,
          preload=DATASETS, example_cost=SMALL_STACK_COST)
def datasets_every_rank_asks() -> None:
    """datasets: every rank asks whether the preprocessed dataset exists; rank 0 builds it; all load it.

    The ranks of node 1 asked before rank 0 saved it: after the barrier their NFS client still
    answers "no such directory" from its lookup cache and load_from_disk fails."""
    if not os.path.exists(PROCESSED) and dist.get_rank() == 0:
        _preprocess()
    dist.barrier()
    _load_processed()


@scenario("datasets-rank-zero-asks", nodes=2, ranks_per_node=2, max_examples=20, carrier="process",
          expect={"nfs": "pass", "local": "pass"}, family=FAMILY, tags=("fixed",), needs=DATASETS,
          preload=DATASETS, example_cost=SMALL_STACK_COST)
def datasets_rank_zero_asks() -> None:
    """datasets: only rank 0 asks whether the preprocessed dataset exists and builds it; all load it.

    The other ranks look for it only after the barrier, when it is on the server: their first
    lookup goes there."""
    if dist.get_rank() == 0 and not os.path.exists(PROCESSED):
        _preprocess()
    dist.barrier()
    _load_processed()
