"""Exceptions of checkpoint. Every one is an ``Exception`` (never a ``BaseException``) under
``CheckpointError``, and names the path, file, tensor or rank it is about."""

from __future__ import annotations

from typing import Any


def describe(exc: BaseException) -> str:
    """``Type: message``, as failures are reported to other ranks."""
    return f"{type(exc).__name__}: {exc}"


class CheckpointError(Exception):
    """Base class of every checkpoint error."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """No committed checkpoint at the path: its manifest is absent (never written, or the save
    that would have written it failed or crashed)."""


class CorruptCheckpoint(CheckpointError):
    """The checkpoint's bytes do not match its manifest: a missing, truncated or modified file,
    or a tile whose checksum differs."""


class ManifestError(CorruptCheckpoint):
    """The manifest is unreadable or invalid: bad JSON, an unknown version or dtype, a path out of
    the checkpoint directory, an offset past its file, a shape its chunks do not cover."""


class LayoutError(CheckpointError):
    """Shards that do not make up their tensor: overlaps, gaps, disagreeing dtypes or shapes,
    replicas that differ, or a placement that cannot be saved (Partial)."""


class StateDictError(CheckpointError):
    """A state dict that cannot be saved or loaded as asked: an unsupported object, a key
    collision, or a target whose shape, dtype or kind does not match the checkpoint."""


class RanksFailed(CheckpointError):
    """A collective save or load failed on some ranks; raised on every rank. ``failures`` maps
    each failed rank to its cause."""

    action = "checkpoint operation"

    def __init__(self, path: str, failures: dict[int, str]) -> None:
        self.path = path
        self.failures = dict(failures)
        detail = "; ".join(f"rank {rank}: {cause}" for rank, cause in sorted(self.failures.items()))
        super().__init__(f"{self.action} of {path} failed on rank(s) {sorted(self.failures)}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.failures)


class SaveError(RanksFailed):
    """A save failed; nothing was committed (the previous checkpoint at the path is intact)."""

    action = "save"


class LoadError(RanksFailed):
    """A load failed on some rank (the targets may be partly overwritten)."""

    action = "load"
