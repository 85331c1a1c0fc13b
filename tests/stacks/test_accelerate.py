"""accelerate, unmodified, in rank processes on 2 nodes x 2 ranks: each rank's own state, then
``prepare``, ``save_state`` and ``load_state`` bringing back what was saved."""

from __future__ import annotations

from typing import Any

import pytest
from _stacks import PROFILES, cluster, needs, ok, writers

PRELOAD = ("accelerate",)  # imported once, before the ranks are forked


def save_and_load_job(directory: str) -> dict[str, Any]:
    import torch
    from accelerate import Accelerator, PartialState

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    torch.manual_seed(10 + accelerator.process_index)
    for _ in range(2):
        accelerator.backward(model(torch.randn(3, 4)).sum())
        optimizer.step()
        optimizer.zero_grad()
    saved = [p.detach().clone() for p in model.parameters()]
    accelerator.save_state(directory)
    accelerator.wait_for_everyone()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    accelerator.load_state(directory)
    state = PartialState()
    return {"restored": all(torch.equal(a, b) for a, b in zip(saved, model.parameters(), strict=True)),
            "process_index": accelerator.process_index, "local_index": accelerator.local_process_index,
            "main": accelerator.is_main_process, "partial": (state.process_index, state.num_processes)}


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_save_state_and_load_state_bring_back_what_each_rank_saved(profile: str) -> None:
    needs("accelerate")
    result = cluster(profile, PRELOAD).run(save_and_load_job, "/shared/state")
    returns = ok(result)
    assert all(returns[rank]["restored"] for rank in range(4))
    assert [returns[rank]["process_index"] for rank in range(4)] == [0, 1, 2, 3]
    assert [returns[rank]["local_index"] for rank in range(4)] == [0, 1, 0, 1]
    assert [returns[rank]["main"] for rank in range(4)] == [True, False, False, False]
    assert [returns[rank]["partial"] for rank in range(4)] == [(rank, 4) for rank in range(4)]
    # the main process writes the model and optimizer; each rank its own random states
    assert writers(result, "/shared/state/model.safetensors") == {0}
    assert writers(result, "/shared/state/optimizer.bin") == {0}
    assert writers(result, "/shared/state/random_states_*.pkl") == {0, 1, 2, 3}
