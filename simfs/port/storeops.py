"""What a store operation means, on both sides of the port: the kernel's stores (runtime/kvstore.py)
and a rank's c10d store (rank/c10d/store.py) answer compareSet alike."""

from __future__ import annotations


def compare_and_swap(current: bytes | None, expected: bytes, desired: bytes) -> tuple[bool, bytes]:
    """c10d's compareSet on a key holding ``current`` (None: missing, which counts as ``b""``):
    whether to store ``desired``, and the value the call returns (the value now held, or
    ``expected`` for a missing key that was not expected to be missing)."""
    if current is None and expected:
        return False, expected
    if (current or b"") == expected:
        return True, desired
    assert current is not None
    return False, current
