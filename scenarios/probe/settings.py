"""How much the probe measures and how long it may wait: every default, with its reason."""

from __future__ import annotations

from dataclasses import dataclass

POLL = 0.005
"""Seconds between an observer's checks of what it waits for: the resolution of every lag. 5 ms is
far below the cache lifetimes worth reporting (tens of ms to minutes) and costs a kernel-cache hit
per check while the answer is still stale."""

NO_LAG = 0.05
"""A lag or cache lifetime below this many seconds counts as none: ten poll intervals, above the
scheduling noise of two processes sharing a small machine (measured lags on a local disk: < 5 ms)."""

MAX_LINKS = 5
"""Revalidations of cached attributes followed at most: from a 3 s acregmin doubling, the fifth
ends at 96 s, past NFS's 60 s acregmax (and the per-trial timeout ends the chain sooner)."""

RERUN_TIMEOUT = 120.0
"""The ``--timeout`` the probe asks for when a change outlived a shorter one: enough for the longest
default cache lifetime of the mounts it names, NFS's acdirmax of 60 s (nfs(5); include/uapi/linux/
nfs_fs.h NFS_DEF_ACDIRMAX), to be seen and confirmed as the cap: the attribute chain's change that
confirms it comes after lifetimes of 30 and 60 s and a quarter of the last, 105 s in. Past it the
probe asks for twice the timeout that fell short."""


def rerun_timeout(timeout: float) -> float:
    """The ``--timeout`` to rerun with when a change outlived ``timeout``."""
    return max(RERUN_TIMEOUT, 2 * timeout)


@dataclass(frozen=True)
class Settings:
    """Trial counts, per-trial timeout and the sizes of the rate measurements."""

    trials: int = 5
    """Rounds of each lag measurement. Five tell a fixed cache lifetime (five equal lags) from a
    spread one; their p99 is their max, which the report says (n is next to every figure)."""
    timeout: float = 10.0
    """Seconds an observer waits for one change before the trial counts as 'not seen'. 10 s covers
    FUSE and BeeGFS caches (1-2 s) and NFS's acregmin (3 s), and keeps a default run under 2 min.
    It does not cover NFS's directory caches (acdirmin 30 s, acdirmax 60 s): a timeout past 60 s
    makes every visibility round and attribute revalidation on such a mount wait that long, minutes
    per run, for what a short run already shows ("not seen within 10 s"). So what outlives it is
    reported and calibrated as a lower bound ('at least 10 s'), and the probe ends saying so and
    what to rerun (``--timeout`` RERUN_TIMEOUT)."""
    metadata_files: int = 200
    """Files each rank creates, stats and unlinks for the metadata rates (mdtest-like): enough for
    a rate at ~1 ms per operation (a network mount) within a second per phase."""
    bandwidth_bytes: int = 64 << 20
    """Bytes each rank writes then reads for the bandwidth (IOR-like, 1 MiB transfers): above
    typical write-back thresholds of small clients, yet a second at 64 MB/s."""
    bandwidth_seconds: float = 5.0
    """A bandwidth transfer stops after this many seconds (a slow mount reports what it did)."""
    fsyncs: int = 20
    """4 KiB write + fsync pairs for the fsync latency: a p50 and a rough p99."""
    rename_seconds: float = 1.0
    """How long the writer replaces a file by rename while a reader on another node reads it."""
    granularity_seconds: float = 2.5
    """Longest the timestamp-granularity loop runs (it stops at the second step it sees): a 1 s tick
    shows two steps, a 2 s tick (FAT-like servers) one. ``--quick``: 1.2 s, one step of a 1 s tick."""
    quick: bool = False

    @classmethod
    def quick_mode(cls, trials: int | None = None, timeout: float | None = None) -> Settings:
        """``--quick``: 2 trials, 3 s timeout (FUSE-scale caches still seen whole), small rates;
        under 20 s on a mount whose caches live at most 3 s."""
        return cls(trials=trials or 2, timeout=timeout or 3.0, metadata_files=50, bandwidth_bytes=8 << 20,
                   bandwidth_seconds=1.0, fsyncs=5, rename_seconds=0.3, granularity_seconds=1.2,
                   quick=True)

    @classmethod
    def default(cls, trials: int | None = None, timeout: float | None = None) -> Settings:
        return cls(trials=trials or cls.trials, timeout=timeout or cls.timeout)
