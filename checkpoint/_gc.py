"""Automatic garbage collection paused while a save or load builds many small objects: with a
large heap (torch alone holds ~200k objects) each full collection costs ~0.1 s, and planning
20k tensors would trigger several."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause automatic collection for the block (if it was on); nothing is collected early."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
