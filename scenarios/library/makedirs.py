"""(a) Creating a shared directory from many ranks: who creates it, and when the others may
use it. The naive variants fail where the real filesystem makes them fail; rank 0 with a
barrier, and coord.makedirs_once, pass everywhere."""

from __future__ import annotations

import os

import torch.distributed as dist

import coord

from ._common import ALL_PROFILES, scenario, write_file

FAMILY = "makedirs"
NESTED = "/shared/run/checkpoints"  # <output_dir>/checkpoints, neither there yet
TRACES = "/shared/traces"


def _use(path: str) -> None:
    """Use the directory right away: this rank writes its file in it."""
    write_file(os.path.join(path, f"rank-{dist.get_rank()}"), b"")


@scenario("makedirs-every-rank", expect={"beegfs": "fail", "local": "pass", "nfs": "pass", "lustre": "pass",
                                          "objectstore": "pass"},
          nodes=2, ranks_per_node=4, family=FAMILY, tags=("naive",))
def every_rank_makedirs() -> None:
    """Every rank runs os.makedirs(out/checkpoints, exist_ok=True), then a barrier (prime-rl PR #2523).

    On BeeGFS a rank that looked for the parent before another rank made it keeps that 'not
    found' after mkdir's EEXIST, so makedirs' own isdir() check fails and its mkdir of the child
    finds no parent (FileNotFoundError). The Linux NFS client drops the entry of a failed
    create, so kernel NFS does not fail."""
    os.makedirs(NESTED, exist_ok=True)
    dist.barrier()
    _use(NESTED)


@scenario("makedirs-exists-then-makedirs", expect={"beegfs": "fail", "local": "pass", "nfs": "pass",
                                                   "lustre": "pass", "objectstore": "pass"},
          nodes=2, ranks_per_node=4, family=FAMILY, tags=("naive",))
def exists_then_makedirs() -> None:
    """Every rank: if not os.path.exists(d): os.makedirs(d, exist_ok=True), then a barrier (Lingua #49).

    The exists() caches 'not found'; on BeeGFS it outlives the EEXIST of the rank that lost the
    race, and makedirs(exist_ok=True) raises FileExistsError."""
    if not os.path.exists(TRACES):
        os.makedirs(TRACES, exist_ok=True)
    dist.barrier()
    _use(TRACES)


@scenario("makedirs-rank0-no-barrier", expect=dict.fromkeys(ALL_PROFILES, "fail"), nodes=2, ranks_per_node=4,
          family=FAMILY, tags=("naive",))
def rank0_without_barrier() -> None:
    """Rank 0 creates the directory; the other ranks use it at once, without waiting for rank 0.

    A race on every filesystem, a local disk too: a rank that gets there first finds no
    directory (FileNotFoundError)."""
    if dist.get_rank() == 0:
        os.makedirs(TRACES, exist_ok=True)
    _use(TRACES)


@scenario("makedirs-rank0-barrier", expect=dict.fromkeys(ALL_PROFILES, "pass"), nodes=2, ranks_per_node=4,
          family=FAMILY, tags=("fixed",))
def rank0_then_barrier() -> None:
    """Rank 0 creates the directory, a barrier, then every rank uses it (Lingua #49's fix).

    No rank looked for the directory before it existed, so no node holds a stale 'not found'
    for it: the first lookup after the barrier asks the server."""
    if dist.get_rank() == 0:
        os.makedirs(NESTED, exist_ok=True)
    dist.barrier()
    _use(NESTED)


@scenario("makedirs-rank0-barrier-after-lookup", expect={"nfs": "fail", "objectstore": "fail", "local": "pass",
                                                         "lustre": "pass"},
          nodes=2, ranks_per_node=4, family=FAMILY, tags=("naive",))
def rank0_barrier_after_lookup() -> None:
    """Every rank first checks os.path.exists(d) (e.g. 'resume?'); rank 0 creates d, a barrier, all use d.

    The early exists() leaves a 'not found' in the node's cache: NFS keeps it while the parent's
    cached attributes live (acdirmin 30 s, lookupcache=all), gcsfuse for its 5 s negative stat
    cache, so after the barrier the other node's ranks cannot open files in d
    (FileNotFoundError). Not run on BeeGFS: whether its client keeps a plain 'not found' is
    inferred, not documented (see `simfs profiles beegfs`)."""
    os.path.exists(TRACES)
    if dist.get_rank() == 0:
        os.makedirs(TRACES, exist_ok=True)
    dist.barrier()
    _use(TRACES)


@scenario("makedirs-once", expect=dict.fromkeys(ALL_PROFILES, "pass"), nodes=2, ranks_per_node=4, family=FAMILY,
          tags=("fixed",))
def makedirs_once() -> None:
    """Every rank checks os.path.exists(d) first, then coord.makedirs_once(d) and uses it at once.

    Rank 0 creates it (surviving the EEXIST trap), every rank learns that, then waits with
    revalidation until it sees the directory: usable on every rank when the call returns."""
    os.path.exists(NESTED)
    coord.makedirs_once(NESTED)
    _use(NESTED)
