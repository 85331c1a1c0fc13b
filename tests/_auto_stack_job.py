"""A job for tests/test_autocarrier.py whose module names DDP (a training stack), as a training
script does."""

from __future__ import annotations

import os

from torch.nn.parallel import DistributedDataParallel


def wraps_a_model() -> None:
    assert DistributedDataParallel is not None
    os.makedirs("/shared/trace", exist_ok=True)
