"""checkpoint.save: a collective. Plan (local plans gathered, the global plan scattered back, or
reused from the cache when the layout is unchanged), write (each rank its own new files),
commit (the coordinator writes the manifest once every rank has reported success). Any failure,
on any rank or in any helper thread, raises on every rank and leaves the previous checkpoint at
the path untouched."""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import msgspec
import numpy as np
import xxhash

from coord import Comm, CoordError, get_comm, makedirs_once

from ._gc import paused
from .commit import RankReport, build_manifest, collect_garbage, commit
from .errors import CheckpointError, LayoutError, SaveError, describe
from .files import DEFAULT_THREADS, is_ours, remove_quietly
from .manifest import Manifest, Value
from .plan import GlobalPlan, RankPlan, build
from .staging import Staged, stage
from .tiles import MIN_TILE_BYTES, TILE_BYTES
from .write import write_pieces

log = logging.getLogger("checkpoint")

_CACHE_SIZE = 8
# own local plan fingerprint -> (fingerprint of every rank's, this rank's plan, the global plan on rank 0)
_plan_cache: OrderedDict[bytes, tuple[bytes, RankPlan, GlobalPlan | None]] = OrderedDict()


def save(state_dict: Mapping[Any, Any], path: str | os.PathLike[str], *, comm: Comm | Any = None,
         allow_pickle: bool = False, threads: int = DEFAULT_THREADS) -> None:
    """Save ``state_dict`` (this rank's part of it) to the directory ``path``, a collective over
    ``comm`` (default: ``coord.get_comm()``). Returns once the checkpoint is committed and
    durable; raises SaveError on every rank if any rank fails, LayoutError if the ranks' shards
    do not make up their tensors or replicas differ."""
    with paused():
        try:
            staged: Staged | Exception = stage(state_dict, allow_pickle=allow_pickle)
        except Exception as exc:  # noqa: BLE001 - every rank must learn it in the plan exchange
            staged = exc
        save_staged(staged, path, comm=comm, threads=threads)


def save_staged(staged: Staged | Exception, path: str | os.PathLike[str], *, comm: Comm | Any = None,
                threads: int = DEFAULT_THREADS, tile_bytes: int = TILE_BYTES) -> None:
    """The save after staging (see ``stage``): ``staged`` is this rank's staged data, or the
    exception staging raised (so that every rank fails together). Chunks are stored as tiles of
    at most ``tile_bytes`` (at least 64), each with its checksum."""
    if threads < 1:
        raise ValueError(f"save: threads must be >= 1, got {threads}")
    if tile_bytes < MIN_TILE_BYTES:
        raise ValueError(f"save: tile_bytes must be >= {MIN_TILE_BYTES}, got {tile_bytes}")
    comm = get_comm(comm)
    directory = os.path.abspath(os.fspath(path))
    save_id, mine, plan = _plan(comm, directory, staged)
    staged = cast(Staged, staged)
    try:
        makedirs_once(directory, comm=comm)  # a collective: every rank raises alike
    except CoordError as exc:
        raise CheckpointError(f"save of {directory}: cannot make the checkpoint directory: {exc}") from exc
    error: Exception | None = None
    try:
        written = write_pieces(directory, save_id, comm.rank, mine.pieces, cast(list[np.ndarray], staged.data),
                               mine.replicated, tile_bytes, threads)
        values = {i: d for i, d in enumerate(staged.data) if isinstance(d, Value)}
        report = RankReport(None, written.files, written.stored, written.hashes, values)
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator, raised on every rank
        error = exc
        report = RankReport(describe(exc))
    reports = comm.gather_object(report)
    verdict, manifest = _decide(directory, save_id, plan, reports) if comm.rank == 0 else (None, None)
    verdict = comm.broadcast_object(verdict)
    if verdict is not None:
        failure, committed = verdict
        if not committed:
            _remove_own(directory, save_id, comm.rank)
        raise failure from error
    if manifest is not None:  # the coordinator, once the others may go on
        try:
            removed = collect_garbage(directory, manifest)
            log.debug("checkpoint: %s: removed %d unreferenced files", directory, len(removed))
        except OSError as exc:
            log.warning("checkpoint: %s committed, but removing unreferenced files failed: %s", directory, exc)
    log.debug("checkpoint: rank %d saved %s", comm.rank, directory)


def _plan(comm: Comm, directory: str, staged: Staged | Exception) -> tuple[str, RankPlan, GlobalPlan | None]:
    """(save id, this rank's plan, the global plan on the coordinator); raises on every rank if
    staging failed on any rank or the layout is invalid."""
    error = describe(staged) if isinstance(staged, Exception) else None
    chunks = [] if isinstance(staged, Exception) else staged.chunks
    own = xxhash.xxh3_128_digest(msgspec.msgpack.encode((comm.rank, comm.world_size, chunks)))
    cached = _plan_cache.get(own)
    save_id = f"{time.time_ns():x}{os.urandom(4).hex()}" if comm.rank == 0 else ""
    exchanged = comm.all_gather_object((error, own, cached[0] if cached else None, save_id))
    failures = {rank: e for rank, (e, *_) in enumerate(exchanged) if e}
    if failures:
        raise SaveError(directory, failures) from (staged if isinstance(staged, Exception) else None)
    save_id = exchanged[0][3]
    combined = xxhash.xxh3_128_digest(b"".join(fingerprint for _, fingerprint, *_ in exchanged))
    if cached is not None and all(c == combined for _, _, c, _ in exchanged):
        _plan_cache.move_to_end(own)
        return save_id, cached[1], cached[2]
    local_plans = comm.gather_object(chunks)
    plan: GlobalPlan | None = None
    parts: list[tuple[CheckpointError | None, RankPlan | None]] | None = None
    if comm.rank == 0:
        assert local_plans is not None
        try:
            plan = build(local_plans)
            parts = [(None, rank_plan) for rank_plan in plan.ranks]
        except LayoutError as exc:
            parts = [(exc, None)] * comm.world_size
        except Exception as exc:  # noqa: BLE001 - every rank must learn it
            parts = [(SaveError(directory, {0: f"planning: {describe(exc)}"}), None)] * comm.world_size
    failure, mine = comm.scatter_object(parts)
    if failure is not None:
        raise failure
    assert mine is not None
    _plan_cache[own] = (combined, mine, plan)
    while len(_plan_cache) > _CACHE_SIZE:
        _plan_cache.popitem(last=False)
    return save_id, mine, plan


def _decide(directory: str, save_id: str, plan: GlobalPlan | None,
            reports: list[RankReport] | None) -> tuple[tuple[CheckpointError, bool] | None, Manifest | None]:
    """On the coordinator: commit if every rank succeeded. Returns (None, the manifest) on
    success, else (the error every rank raises and whether the manifest may have been
    replaced, None)."""
    assert plan is not None and reports is not None
    failures = {rank: report.error for rank, report in enumerate(reports) if report.error}
    if failures:
        return (SaveError(directory, failures), False), None
    try:
        manifest = build_manifest(plan, reports, save_id)
    except LayoutError as exc:
        return (exc, False), None
    try:
        commit(directory, manifest)
    except Exception as exc:  # noqa: BLE001 - every rank must learn it
        return (SaveError(directory, {0: f"commit: {describe(exc)}"}), True), None
    return None, manifest


def _remove_own(directory: str, save_id: str, rank: int) -> None:
    """After a failed save: remove the files this rank wrote for it (best effort; the next
    successful save removes whatever is left)."""
    try:
        remove_quietly(directory, [name for name in os.listdir(directory) if is_ours(name, save_id, rank)])
    except OSError as exc:
        log.warning("checkpoint: could not remove the files of a failed save in %s: %s", directory, exc)
