"""(b) Rank 0 creates a directory, the others wait for it: a fixed timeout each waiter starts
when it arrives (OLMo) against a barrier after the creation and a revalidating wait."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch.distributed as dist

import coord

from ._common import ALL_PROFILES, scenario, write_file

FAMILY = "wait"
STEP = "/shared/checkpoints/step-1000"


def _olmo_wait_for(condition: Callable[[], bool], description: str, timeout: float = 10.0) -> None:
    """OLMo's ``wait_for``: poll every 0.5 s, give up ``timeout`` seconds after this call."""
    start = time.monotonic()
    while not condition():
        time.sleep(0.5)
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{description} timed out")


def _write_shard() -> None:
    write_file(os.path.join(STEP, f"rank-{dist.get_rank()}.pt"), b"weights")


@scenario("wait-fixed-timeout", expect=dict.fromkeys(ALL_PROFILES, "fail"), max_examples=200, family=FAMILY,
          tags=("naive",))
def fixed_timeout_wait() -> None:
    """Rank 0 makes the step directory; the others poll path.exists() for 10 s, then write (OLMo wait_for 10 s).

    Each waiter's 10 s start when it arrives, not when rank 0 does: a rank 0 that starts late (a
    slow import, a node that joined late) makes them all time out (TimeoutError). On NFS it also
    fails with no one late: a waiter's first 'not found' stays cached for 30-60 s."""
    if dist.get_rank() == 0:
        os.makedirs(STEP, exist_ok=True)
    _olmo_wait_for(lambda: os.path.exists(STEP), "Waiting for checkpoint directory")
    _write_shard()


@scenario("wait-visible-after-barrier", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def barrier_then_wait_visible() -> None:
    """Rank 0 makes the step directory, a barrier, then coord.wait_visible(dir, timeout=120), then write.

    The barrier orders every waiter after the creation however late rank 0 starts; the wait
    revalidates the node's caches, so a lagging client cannot make it time out."""
    if dist.get_rank() == 0:
        os.makedirs(STEP, exist_ok=True)
    dist.barrier()
    coord.wait_visible(STEP, timeout=120, is_dir=True)
    _write_shard()
