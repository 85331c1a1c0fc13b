"""(i) torch.distributed's rendezvous on a shared filesystem. ``init_process_group(init_method=
"file://...")`` and ``dist.FileStore`` keep their keys in one file that every rank appends to
under flock(2) (c10d's FileStore.cpp): where flock excludes only the same node's processes
(BeeGFS's default, gcsfuse through FUSE) ranks of two nodes append over each other and keys are
lost, so a count of arrivals never reaches the world size; Linux NFS makes a lock a cache
coherency point and Lustre's locks are coherent, so there it works. ``env://`` (a TCPStore served
by rank 0's process) needs no filesystem at all. Each rank is a process running torch's own c10d."""

from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import FileStore, Store, TCPStore  # type: ignore[attr-defined]  # unstubbed re-exports

from simfs import Result

from ._common import ALL_PROFILES, scenario

FAMILY = "rendezvous"
STORE = "/shared/rendezvous-store"
# how long a rank waits for the others to be counted: longer than a search's latest start (5 min)
PATIENCE = timedelta(minutes=10)
POLL = 2.0  # seconds between looks at the count


def _count_arrivals(store: Store) -> int:
    """Each rank adds itself, then waits until every rank was counted (as c10d's store-based
    barrier does); the count it last read."""
    world = dist.get_world_size()
    store.add("arrived", 1)
    deadline = time.monotonic() + PATIENCE.total_seconds()
    seen = int(store.get("arrived"))
    while seen < world and time.monotonic() < deadline:
        time.sleep(POLL)
        seen = int(store.get("arrived"))
    return seen


def _everyone_counted(result: Result) -> None:
    world = len(result.returns)
    seen = sorted(set(result.returns.values()))
    if seen != [world]:
        raise AssertionError(f"the ranks counted {seen} arrivals, not {world}: keys were lost")


@scenario("filestore-rendezvous", expect={"local": "pass", "nfs": "pass", "lustre": "pass", "beegfs": "fail",
                                          "objectstore": "fail"},
          check=_everyone_counted, family=FAMILY, tags=("naive",), carrier="process", max_examples=10)
def file_store_rendezvous() -> int:
    """Every rank counts itself into a dist.FileStore on the shared mount and waits for all (file:// rendezvous).

    The FileStore appends each key under flock: on BeeGFS and gcsfuse, whose flock excludes only
    the same node, two nodes append at the same offset and an arrival is lost (the count stops
    short of the world size); on the object store the second node's upload of the file is also
    refused (ESTALE)."""
    return _count_arrivals(FileStore(STORE, dist.get_world_size()))


@scenario("tcpstore-rendezvous", expect=dict.fromkeys(ALL_PROFILES, "pass"), check=_everyone_counted,
          family=FAMILY, tags=("fixed",), carrier="process", max_examples=10)
def tcp_store_rendezvous() -> int:
    """Every rank counts itself into a dist.TCPStore served by rank 0 (env:// rendezvous): no file involved.

    The store's server keeps the keys in one process and answers each client in order, so every
    arrival counts on every filesystem."""
    rank0 = dist.get_rank() == 0
    store = TCPStore("node0", 29501, dist.get_world_size(), rank0, timeout=PATIENCE)
    return _count_arrivals(store)
