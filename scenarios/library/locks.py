"""(f) Mutual exclusion across nodes. flock is node-local on BeeGFS (tuneUseGlobalFileLocks=false)
and on FUSE mounts such as gcsfuse, so a read-modify-write under it loses updates there;
coord.FileLock relies on exclusive creation instead, which an object store lacks. A download
cache (huggingface_hub style) under flock shares one temporary file between nodes; unique
temporary names and an atomic rename need no lock to be correct."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO

# imported with the library, so that a search's rank processes are forked with it (importing it in
# every rank was a third of this scenario's search time); its import-time state serves FileLock
# (flock) unchanged: the fork state it resets in each forked rank, and a boot id that only
# SoftFileLock's stale-lock checks read
import filelock
import torch.distributed as dist

import coord
from simfs import Result

from ._common import ALL_PROFILES, content, read_file, scenario

FAMILY = "locks"
JOB = "/shared/job"
COUNTER = f"{JOB}/counter"
LOCK = f"{JOB}/counter.lock"
INCREMENTS = 2  # per rank
BLOBS = "/shared/hub/models--org--name/blobs"
BLOB = f"{BLOBS}/9f2c1d"
CHUNKS = 4
CHUNK_BYTES = 2048


@contextlib.contextmanager
def _flock(path: str) -> Iterator[None]:
    """fcntl.flock(LOCK_EX) on a lock file, released when the descriptor closes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _count(lock: Callable[[], AbstractContextManager[object]]) -> int:
    """Every rank increments a shared counter INCREMENTS times under ``lock()``; after a
    barrier each returns the value it reads."""
    if dist.get_rank() == 0:
        os.makedirs(JOB)
        with open(COUNTER, "w") as f:
            f.write("0")
    dist.barrier()
    for _ in range(INCREMENTS):
        with lock():
            value = int(read_file(COUNTER))
            with open(COUNTER, "w") as f:
                f.write(str(value + 1))
    dist.barrier()
    return int(read_file(COUNTER))


def _no_lost_update(result: Result) -> None:
    """Every rank read the counter at INCREMENTS per rank."""
    expected = INCREMENTS * len(result.returns)
    seen = sorted(set(result.returns.values()))
    if seen != [expected]:
        raise AssertionError(f"the counter ended at {seen}, not {expected}: increments were lost")


@scenario("flock-counter", expect={"beegfs": "fail", "objectstore": "fail", "local": "pass", "nfs": "pass",
                                   "lustre": "pass"},
          check=_no_lost_update, family=FAMILY, tags=("naive",))
def flock_counter() -> int:
    """Every rank increments a shared counter under fcntl.flock on a shared lock file.

    Where flock excludes only processes of the same node (BeeGFS's default, gcsfuse through
    FUSE), ranks of two nodes are inside at once: the counter loses updates or is read empty
    between another node's truncate and write (ValueError), and on the object store the
    second upload of the counter is refused (ESTALE). Linux NFS (NLM/NFSv4 locks), Lustre
    (flock, 2.12.3+) and one local disk exclude."""
    return _count(lambda: _flock(LOCK))


@scenario("filelock-counter", expect={"local": "pass", "nfs": "pass", "beegfs": "pass", "lustre": "pass",
                                      "objectstore": "fail"},
          check=_no_lost_update, family=FAMILY, tags=("fixed",))
def coord_filelock_counter() -> int:
    """Every rank increments a shared counter under coord.FileLock (exclusive creation, leases).

    It does not trust flock, so it excludes on BeeGFS too. It needs O_EXCL to be atomic on the
    server, which gcsfuse cannot give (a new object exists only on its node until close): there
    two ranks take the lock at once and one upload is refused (ESTALE)."""
    return _count(lambda: coord.FileLock(LOCK, timeout=None))


def _download(f: IO[bytes], start: int = 0) -> None:
    """The 'HTTP GET': the chunks after ``start``, with network time between them."""
    for i in range(start // CHUNK_BYTES, CHUNKS):
        time.sleep(0.05)
        f.write(content(f"chunk {i}", CHUNK_BYTES))


def _expected_blob() -> bytes:
    return b"".join(content(f"chunk {i}", CHUNK_BYTES) for i in range(CHUNKS))


def _load_blob() -> None:
    """After a barrier every rank reads the cached file; it must be the whole download."""
    dist.barrier()
    blob = read_file(BLOB)
    if blob != _expected_blob():
        raise ValueError(f"the cached file holds {len(blob)} bytes that are not the download")


@scenario("download-cache-flock", expect={"beegfs": "fail", "objectstore": "fail", "local": "pass", "nfs": "pass",
                                          "lustre": "pass"},
          family=FAMILY, tags=("naive",), carrier="process",  # filelock keeps fork state per process
          max_examples=50)  # (it fails at example 1 where it fails; 50 rank-process examples where it passes)
def hub_style_cache() -> None:
    """Fetch into a shared cache as huggingface_hub does: filelock.FileLock, append to blob.incomplete, move.

    filelock.FileLock is flock: on BeeGFS and gcsfuse ranks of two nodes hold it at once, append
    to the same .incomplete file and move it (FileNotFoundError, SameFileError, a doubled blob
    or, on the object store, ESTALE)."""
    coord.makedirs_once(BLOBS)
    if not os.path.exists(BLOB):
        with filelock.FileLock(BLOB + ".lock"):
            if not os.path.exists(BLOB):
                incomplete = BLOB + ".incomplete"
                with open(incomplete, "ab") as f:
                    f.seek(0, os.SEEK_END)
                    _download(f, f.tell())
                shutil.move(incomplete, BLOB)
    _load_blob()


@scenario("download-cache-atomic", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def atomic_cache() -> None:
    """Fetch into the shared cache with coord.atomic_write: a temporary file of its own, then one rename.

    Two nodes may both download (a lock would only save the bandwidth), but each writes its own
    temporary file and a rename installs a whole copy: no lock, no torn blob on any mount."""
    coord.makedirs_once(BLOBS)
    if not os.path.exists(BLOB):
        with coord.atomic_write(BLOB) as f:
            _download(f)
    _load_blob()
