"""coord: coordination primitives for distributed training jobs on shared filesystems.

Production code: plain os/pathlib and torch.distributed (or one process), no simulator."""

from .atomic import atomic_write, fsync_dir
from .comm import Comm, LocalComm, TorchComm, get_comm
from .decide import rank0_decides
from .errors import CoordError, LockLost, LockTimeout, WaitTimeout
from .filelock import FileLock
from .makedirs import makedirs_once
from .sync import Entry, SyncReport, build_manifest, sync_files
from .wait import revalidate, wait_for, wait_visible

__all__ = [
    "Comm", "CoordError", "Entry", "FileLock", "LocalComm", "LockLost", "LockTimeout", "SyncReport", "TorchComm",
    "WaitTimeout", "atomic_write", "build_manifest", "fsync_dir", "get_comm", "makedirs_once", "rank0_decides",
    "revalidate", "sync_files", "wait_for", "wait_visible",
]
