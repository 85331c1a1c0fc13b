"""transformers' Trainer, unmodified, in rank processes on 2 nodes x 2 ranks: a tiny GPT-2 built
from a config (no download), checkpoints every 2 steps rotated by ``save_total_limit``, and a job
that stops and is resumed with ``resume_from_checkpoint`` following the loss curve of an
uninterrupted run."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _stacks import PROFILES, RESUBMITTED, cluster, needs, ok, writers

STEPS = 6

# imported once, before the ranks are forked
PRELOAD = ("transformers.trainer", "transformers.models.gpt2.modeling_gpt2")


def train_job(output_dir: str, stop_at: int = 0, resume: bool = False) -> dict[str, Any]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
            return {"input_ids": ids, "labels": ids}

    class StopAt(TrainerCallback):  # the job ends early, as one that is preempted would
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == stop_at:
                control.should_training_stop = True

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32))
    args = TrainingArguments(output_dir=output_dir, max_steps=STEPS, save_steps=2, save_total_limit=2,
                             per_device_train_batch_size=2, logging_steps=1, report_to=[], use_cpu=True,
                             disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[StopAt()] if stop_at else [])
    trainer.train(resume_from_checkpoint=resume or None)
    return {"losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
            "process_index": args.process_index, "world_zero": trainer.is_world_process_zero(),
            "local_zero": trainer.is_local_process_zero(), "kept": sorted(os.listdir(output_dir))}


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_the_trainer_rotates_its_checkpoints_and_resumes_on_the_loss_curve_of_an_uninterrupted_run(
        profile: str) -> None:
    needs("transformers", "accelerate")
    whole = cluster(profile, PRELOAD).run(train_job, "/shared/out")
    uninterrupted = ok(whole)
    assert [uninterrupted[rank]["process_index"] for rank in range(4)] == [0, 1, 2, 3]
    assert [uninterrupted[rank]["world_zero"] for rank in range(4)] == [True, False, False, False]
    assert [uninterrupted[rank]["local_zero"] for rank in range(4)] == [True, False, True, False]
    assert uninterrupted[0]["kept"] == ["checkpoint-4", "checkpoint-6"]  # save_total_limit=2 removed checkpoint-2
    assert len(uninterrupted[0]["losses"]) == STEPS
    # only the world's rank 0 writes the model, optimizer and trainer state; each rank its RNG state
    assert writers(whole, "/shared/out/checkpoint-*/model.safetensors") == {0}
    assert writers(whole, "/shared/out/checkpoint-*/trainer_state.json") == {0}
    assert writers(whole, "/shared/out/checkpoint-*/rng_state_*.pth") == {0, 1, 2, 3}

    restarted = cluster(profile, PRELOAD)
    stopped = ok(restarted.run(train_job, "/shared/out", STEPS - 2))
    assert stopped[0]["kept"] == ["checkpoint-2", "checkpoint-4"]
    restarted.idle(RESUBMITTED)
    resumed = ok(restarted.run(train_job, "/shared/out", 0, True))
    for rank in range(4):
        assert resumed[rank]["losses"] == pytest.approx(uninterrupted[rank]["losses"], rel=1e-5)
    assert resumed[0]["kept"] == ["checkpoint-4", "checkpoint-6"]
