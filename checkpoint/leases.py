"""Reader leases on checkpoint directories, and deletion that respects them.

A reader creates a lease file in the directory, then checks that the directory is not marked for
deletion; a deleter creates the mark, then looks for leases (younger than a timeout) and deletes
only when there are none, else removes its mark. Each writes before it looks, so either the
deleter sees the lease or the reader sees the mark: a leased checkpoint is never deleted.
Deletion removes the manifest first and fsyncs the directory (the checkpoint stops existing,
durably), then the other files: a crash mid-way leaves an uncommitted directory, never a
partial checkpoint that looks committed."""

from __future__ import annotations

import contextlib
import logging
import os
import time

from coord import fsync_dir
from coord.atomic import unique_suffix

from .files import MANIFEST_NAME

log = logging.getLogger("checkpoint")

LEASE_PREFIX = ".lease."
DELETING = ".deleting"


def is_marked(directory: str) -> bool:
    """Is the directory marked for deletion (by a deleter now, or by one that crashed)? Asked
    by listing it: a network filesystem answers a lookup from a cached 'not found', and a
    listing from the server."""
    return DELETING in os.listdir(directory)


def unmark(directory: str) -> None:
    """Remove a deletion mark (from a deleter that crashed after uncommitting the directory)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, DELETING))


def acquire(directory: str) -> str | None:
    """Take a reader lease on ``directory``: the lease file's path, or None if the directory is
    gone or marked for deletion. The caller checks the checkpoint only after this."""
    lease = os.path.join(directory, f"{LEASE_PREFIX}{unique_suffix()}")
    try:
        os.close(os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if is_marked(directory):
        release(lease)
        return None
    return lease


def release(lease: str) -> None:
    """Drop a lease (gone already is fine: its directory may have been deleted once it expired)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lease)


def active_leases(directory: str, timeout: float) -> list[str]:
    """The leases in ``directory`` younger than ``timeout`` seconds (older ones are stale: their
    reader crashed or outlived the timeout)."""
    now = time.time()
    active = []
    for name in os.listdir(directory):
        if name.startswith(LEASE_PREFIX):
            try:
                age = now - os.stat(os.path.join(directory, name)).st_mtime
            except FileNotFoundError:
                continue
            if age < timeout:
                active.append(name)
    return active


def delete(directory: str, lease_timeout: float) -> bool:
    """Delete the checkpoint directory unless a reader holds a lease on it (then False, and the
    directory is left as it was)."""
    marker = os.path.join(directory, DELETING)
    os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o666))
    leases = active_leases(directory, lease_timeout)
    if leases:
        unmark(directory)
        log.info("checkpoint: kept %s: read under lease %s", directory, leases[0])
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, MANIFEST_NAME))
    fsync_dir(directory)
    for name in os.listdir(directory):
        if name != DELETING:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
    unmark(directory)
    os.rmdir(directory)
    log.debug("checkpoint: deleted %s", directory)
    return True
