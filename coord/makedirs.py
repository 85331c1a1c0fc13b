"""Create a shared directory once and return only when every rank can use it, and it survives a
crash: the creator fsyncs the parent of each directory it made (fsync(2): the entry of a new name
reaches the disk only with an fsync of its directory)."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from .atomic import fsync_dir
from .comm import Comm, get_comm
from .errors import CoordError, WaitTimeout
from .wait import revalidate, wait_visible

log = logging.getLogger("coord")


def _missing(path: str) -> list[str]:
    """``path`` and its ancestors that do not exist (as far as this node sees), outermost first."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current) and os.path.dirname(current) != current:
        missing.append(current)
        current = os.path.dirname(current)
    return missing[::-1]


def _create(path: str, mode: int) -> None:
    """os.makedirs that survives the NFS trap (EEXIST, then a stale 'not found'), then makes the
    entry of each directory it may have made durable. A directory another process made at the
    same time is fsynced too, which costs one fsync and changes nothing."""
    missing = _missing(path)
    try:
        os.makedirs(path, mode, exist_ok=True)
    except (FileExistsError, FileNotFoundError):
        revalidate(path)
        os.makedirs(path, mode, exist_ok=True)
    for created in missing:
        fsync_dir(os.path.dirname(created))


def makedirs_once(path: str | os.PathLike[str], *, comm: Comm | Any = None, scope: str = "global",
                  timeout: float = 120.0, mode: int = 0o777) -> None:
    """One rank creates ``path`` (rank 0; with ``scope="node"`` local rank 0 of each node, for
    node-local paths) and fsyncs the parent of every directory it made, every rank learns that it
    did, then each waits, revalidating its caches, until the directory is visible to it. Returns
    on a rank only when the directory is usable there and its entry (and those of the ancestors
    it made) is durable; raises on every rank if any rank could not create or see it in
    ``timeout`` seconds. A collective: every rank of ``comm`` calls it."""
    if scope not in ("global", "node"):
        raise ValueError(f"makedirs_once: scope must be 'global' or 'node', got {scope!r}")
    target = os.fspath(path)
    comm = get_comm(comm)
    node = comm.node if scope == "node" else 0
    creator = comm.rank == 0 if scope == "global" else comm.local_rank == 0
    failure = None
    if creator:
        try:
            _create(target, mode)
            log.debug("makedirs_once(%s): created by rank %d", target, comm.rank)
        except OSError as exc:
            failure = f"{type(exc).__name__}: {exc}"
    outcomes = comm.all_gather_object((node, creator, failure))
    failures = [(r, n, f) for r, (n, c, f) in enumerate(outcomes) if c and f]
    if failures:  # raised on every rank, so no rank waits in the next collective
        rank, where, why = failures[0]
        on = f" on node {where}" if scope == "node" else ""
        raise CoordError(f"makedirs_once({target!r}): rank {rank}{on} could not create it: {why}")
    problem = None
    try:
        wait_visible(target, timeout=timeout, is_dir=True, what=f"directory {target} created by rank "
                     f"{outcomes.index((node, True, None))} to become visible")
    except WaitTimeout as exc:
        problem = str(exc)
    log.debug("makedirs_once(%s): rank %d sees it", target, comm.rank)
    report = comm.all_gather_object((socket.gethostname(), problem))
    unseen = [f"rank {r} on {host}: {why}" for r, (host, why) in enumerate(report) if why]
    if unseen:
        raise CoordError(f"makedirs_once({target!r}) created it, but not every rank could see it: " + "; ".join(unseen))
