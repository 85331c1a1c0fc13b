"""What the stack tests share: the cluster every stack runs on (2 nodes x 2 ranks, rank processes
with torch's real c10d, the defaults), a check that a library is installed (the ``stacks`` extra),
and who wrote what, read from a run's trace."""

from __future__ import annotations

import fnmatch
import importlib.util
from typing import Any

from conftest import missing

import simfs

PROFILES = ("nfs", "local")
# how long after a job ends its resubmission starts (Cluster.idle): longer than NFS's attribute and
# lookup caches live (acdirmax 60 s, nfs(5)), as a job that waits in a queue; a job resumed at once
# is the stacks family's scenario (a node may not see the checkpoint yet)
RESUBMITTED = 120.0


def needs(*libraries: str) -> None:
    """Skip (fail under SIMFS_REQUIRE=stacks) unless every one of ``libraries`` is installed."""
    absent = [name for name in libraries if importlib.util.find_spec(name) is None]
    if absent:
        missing("stacks", f"{', '.join(absent)} not installed (pip install -e '.[stacks]', after the CPU torch)")


def cluster(profile: str, preload: tuple[str, ...] = ()) -> simfs.Cluster:
    """2 nodes x 2 ranks; ``preload``: the stack's modules, imported once before the ranks start."""
    return simfs.Cluster(nodes=2, ranks_per_node=2, profile=profile, preload=preload)


def ok(result: simfs.Result) -> dict[int, Any]:
    assert result.ok, result.summary() + "\n" + "\n".join(result.tracebacks.values())
    return result.returns


def writers(result: simfs.Result, pattern: str) -> set[int]:
    """The ranks that wrote to a file whose path matches the glob ``pattern``."""
    return {event.rank for event in result.trace if event.op == "write" and fnmatch.fnmatch(event.path, pattern)}
