"""Exhaustive crash states (ALICE, CrashMonkey): the job's recorded run is cut at every
operation, and at each cut every crash state the persistence model allows there is made real
and the restarted job runs on it. Cuts and states that leave the same disks are run once."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import simfs
from simfs.faults import PowerLoss
from simfs.fs.inode import DIR, ROOT
from simfs.fs.server import Server

from .example import Crash, Example, Execution, execute, finish, start
from .finding import Finding, finding_of
from .target import Target


def _disk_image(server: Server) -> bytes:
    """A digest of what a server holds: every path with its kind and content."""
    digest = hashlib.blake2b(digest_size=16)
    stack = [("", ROOT)]
    while stack:
        path, ino = stack.pop()
        node = server.inodes[ino]
        digest.update(f"{path}\0{node.kind}\0{node.target}\0".encode())
        if node.kind == DIR:
            assert node.entries is not None  # a directory's
            stack.extend((f"{path}/{name}", child) for name, child in sorted(node.entries.items(), reverse=True))
        elif node.data is not None:
            digest.update(node.data.tobytes())
    return digest.digest()


def cluster_image(cluster: simfs.Cluster) -> tuple[bytes, ...]:
    return tuple(_disk_image(m.server) for m in [*cluster.fs.shared, *cluster.fs.local])


def exhaust(target: Target, *, limit: int, started: float) -> Finding:
    """Every distinct crash state of the job's simple run (at most ``limit``), the restarted
    job on each; the first failure in order (earliest cut, simplest state) is the finding."""
    simple = execute(target, Example())
    if simple.failure is not None:
        return finding_of(target, Example(), simple, examples=1, wall=time.perf_counter() - started, found_at=1)
    total = sum(simple.job.node_ops)
    seen: set[tuple[bytes, ...]] = set()
    runs = 1
    for cut in range(total + 1):
        for example, execution in states_at(target, cut, total, seen):
            runs += 1
            if execution.failure is not None:
                return finding_of(target, example, execution, examples=runs, wall=time.perf_counter() - started,
                                  found_at=runs, notes=[_summary(len(seen), cut, total)])
            if len(seen) >= limit:
                return _passed(target, simple, runs, started, [f"bounded: stopped at {limit} distinct crash states "
                                                             f"(cut {cut} of {total})"])
    return _passed(target, simple, runs, started, [_summary(len(seen), total, total)])


def states_at(target: Target, cut: int, total: int,
              seen: set[tuple[bytes, ...]] | None = None) -> Iterator[tuple[Example, Execution]]:
    """Each crash state of a power loss before operation ``cut`` of the job's ``total`` (``cut ==
    total``: right after the job ended) whose disks are not in ``seen`` (which gets them), with the
    restarted job run and judged on it."""
    seen = set() if seen is None else seen
    index, offered = 0, 1
    while index < offered:
        crash = Crash(PowerLoss(after_ops=cut) if cut < total else None, pick=index, exact=True)
        example = Example(crash=crash)
        counts: list[int] = []
        cluster, execution = start(target, example, crash.picker(counts))
        offered, index = max(counts, default=1), index + 1
        image = cluster_image(cluster)
        if image in seen:
            continue
        seen.add(image)
        yield example, finish(cluster, target, example, execution)


def _summary(states: int, cut: int, total: int) -> str:
    return f"{states} distinct crash states tried, over cuts 0..{cut} of {total} operations"


def _passed(target: Target, simple: Execution, runs: int, started: float, notes: list[str]) -> Finding:
    return finding_of(target, Example(), simple, examples=runs, wall=time.perf_counter() - started, found_at=0,
                      notes=notes)
