"""What a search runs: the job, its restarted job, the property, and the cluster it runs on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import simfs
from simfs import Result, carriers, plaindata
from simfs.runtime.dist import GLOO

Check = Callable[[Result], object]


@dataclass(frozen=True)
class Target:
    """A job with its optional ``recover`` (run on the restarted cluster) and ``check``."""

    job: Callable[[], Any]
    nodes: int
    ranks_per_node: int
    profile: simfs.Profile
    recover: Callable[[], Any] | None = None
    check: Check | None = None
    carrier: str = carriers.DEFAULT  # how its ranks are carried (simfs.Cluster's carrier)
    watchdog: float = 60.0  # real seconds a rank process may run without a request (simfs.Cluster's)
    preload: tuple[str, ...] = ()  # modules the rank processes start with (simfs.Cluster's preload)
    collectives: str = GLOO  # how ranks leave a collective (simfs.Cluster's collectives)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def cluster(self) -> simfs.Cluster:
        """A new cluster for one example. Greenlet ranks run in this process (isolate=False): the
        search is where explore put it, a confined child, or the caller's process by its choice
        (explore's isolate=False), and an example's restart runs on the same cluster."""
        return simfs.Cluster(nodes=self.nodes, ranks_per_node=self.ranks_per_node, profile=self.profile,
                             carrier=self.carrier, watchdog=self.watchdog, isolate=False, preload=self.preload,
                             collectives=self.collectives)

    def describe(self) -> str:
        carried = ", each rank a process" if self.carrier == "process" else ", ranks as greenlets of one process"
        return (f"{getattr(self.job, '__qualname__', repr(self.job))} on {self.profile.name} "
                f"({self.nodes} node{'s' if self.nodes > 1 else ''} x {self.ranks_per_node} ranks{carried})")


plaindata.register(Target)
