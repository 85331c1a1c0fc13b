"""A module whose import records the clock it ran under (tests/test_process_carrier.py: a module
the cluster preloads is imported once, in the host, before the rank processes are forked)."""

import time

IMPORTED_AT = time.time()


def tracked() -> None:
    """An object of the module's that cycle collection tracks (a function), for a rank to look for
    among the collector's generations."""
