"""What the coord-in-simfs tests share: the cluster layout (>= 8 ranks on >= 2 nodes), the
profiles they run on, and a check that a run succeeded on every rank."""

from __future__ import annotations

from conftest import MODEL

import simfs

NODES, RPN = 2, 4
WORLD = NODES * RPN
LAG = 60.0  # exact attribute ttls of the adversarial nfs variant
NFS_LAG = simfs.profiles.get("nfs").replace(acdirmin=LAG, acdirmax=LAG, acregmin=LAG, acregmax=LAG)
PROFILES = {"local": "local", "nfs": "nfs", "nfs_lag": NFS_LAG, "lustre": "lustre", "objectstore": "objectstore"}


def cluster(profile, seed: int = 0, faults=(), nodes: int = NODES, rpn: int = RPN) -> simfs.Cluster:
    """A cluster on ``profile`` (a name in PROFILES, a built-in name or a Profile)."""
    chosen = PROFILES.get(profile, profile) if isinstance(profile, str) else profile
    return simfs.Cluster(nodes=nodes, ranks_per_node=rpn, profile=chosen, seed=seed, **MODEL,
                         faults=faults)


def ok(result: simfs.Result, world: int | None = None) -> dict:
    """The returns of a run that must have succeeded (on all ``world`` ranks, if given)."""
    assert result.ok, result.summary()
    if world is not None:
        assert sorted(result.returns) == list(range(world))
    return result.returns
