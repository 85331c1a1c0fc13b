"""A search runs thousands of examples back to back; each leaves garbage that triggers full
cyclic collections, and a full collection walks every object of the process -- with torch
imported, a quarter million that no example made. Freezing them for the search (CPython's
``gc.freeze``) keeps collections to what the search allocates."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def host_objects_frozen() -> Iterator[None]:
    """Exclude the objects that exist now from cyclic collection until the block ends; a host
    that froze objects itself keeps its own arrangement (nothing it froze is thawed)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
