"""The kernel's flusher over one disk's page cache: which inodes it writes back, and when.

Linux writes dirty file data back on its own (fs/fs-writeback.c, mm/page-writeback.c; the knobs in
Documentation/admin-guide/sysctl/vm.rst):

- periodically: the flusher wakes every ``dirty_writeback_centisecs`` (500) and writes back every
  inode first dirtied more than ``dirty_expire_centisecs`` (3000) ago (``wb_check_old_data_flush``;
  an inode's ``dirtied_when`` is set when it goes from clean to dirty and kept while it stays
  dirty, ``__mark_inode_dirty``);
- in the background, at once, when dirty memory passes ``dirty_background_bytes``
  (``balance_dirty_pages`` -> ``wb_start_background_writeback``): the oldest dirtied inodes first,
  until it is below again (``wb_writeback`` while ``wb_over_bg_thresh``).

Wakeups fall on the multiples of the interval in virtual time. This module keeps the accounting
(dirty bytes per inode, in the order inodes were dirtied) and the policy; the journal (journal.py)
writes back the inodes it names, and asks before each change and each crash, so what a wakeup
wrote back between two of them is written back by then.
"""

from __future__ import annotations

import math


class Flusher:
    """Dirty bytes of one disk per inode, oldest dirtied first, and which of them are due."""

    __slots__ = ("_bytes", "_dirtied", "background", "expire", "interval", "total")

    def __init__(self, *, expire: float, interval: float, background: float) -> None:
        self.expire = expire  # seconds an inode may stay dirty (dirty_expire_centisecs / 100)
        self.interval = interval  # seconds between wakeups, 0: none (dirty_writeback_centisecs / 100)
        self.background = background  # dirty bytes past which writeback starts at once
        self._dirtied: dict[int, float] = {}  # ino -> when it became dirty, oldest first
        self._bytes: dict[int, int] = {}
        self.total = 0

    def dirty(self, ino: int, nbytes: int, now: float) -> None:
        """``nbytes`` more of ``ino`` are dirty (a clean inode is dirtied ``now``)."""
        if nbytes <= 0:
            return
        if ino not in self._bytes:
            self._dirtied[ino] = now
            self._bytes[ino] = 0
        self._bytes[ino] += nbytes
        self.total += nbytes

    def clean(self, ino: int, nbytes: int) -> None:
        """``nbytes`` of ``ino`` are no longer dirty (written back, overwritten, or dropped)."""
        if nbytes <= 0:
            return
        left = self._bytes[ino] - nbytes
        self.total -= nbytes
        if left > 0:
            self._bytes[ino] = left
        else:
            del self._bytes[ino], self._dirtied[ino]

    def clear(self) -> None:
        """Nothing is dirty (a crash dropped the page cache)."""
        self._dirtied.clear()
        self._bytes.clear()
        self.total = 0

    def expired(self, now: float) -> list[int]:
        """The inodes the wakeups up to ``now`` wrote back: dirtied at least ``expire`` before one."""
        if not self._dirtied or not self.interval or math.isinf(self.expire):
            return []
        cutoff = math.floor(now / self.interval) * self.interval - self.expire
        out = []
        for ino, when in self._dirtied.items():
            if when > cutoff:
                break  # dirtied in time order: the rest are younger
            out.append(ino)
        return out

    def over(self) -> list[int]:
        """The inodes background writeback writes, oldest dirtied first, to bring the dirty bytes
        to ``background`` or below (none while they are there already)."""
        out: list[int] = []
        left = self.total
        for ino in self._dirtied:
            if left <= self.background:
                break
            out.append(ino)
            left -= self._bytes[ino]
        return out
