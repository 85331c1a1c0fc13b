"""The probe's own directory under PATH: made by rank 0 and announced to every rank, refused
before anything else when a rank cannot write there, and removed at the end, also after Ctrl-C,
SIGTERM (what torchrun sends when another node failed) or an error on any rank."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from coord import Comm, WaitTimeout, wait_visible

PREFIX = ".simfs-probe-"
REMOVE_SECONDS = 65.0
"""Longest rank 0 retries removing the probe directory at the end, at least the probe's timeout:
a cached 'not found' or listing that hides entries another node made lives at most a directory
attribute lifetime, 60 s on NFS by default (nfs(5) acdirmax), and may outlive the timeout (what
the probe then reports as lower bounds). Each retry finds what expired, so a mount without such
caches is done at the first."""


class ProbeRefused(ValueError):
    """PATH cannot be probed from some rank: it is missing, not a directory, or not writable."""


class Session:
    """One rank's view of the probe directory, and names for fresh subdirectories (the same on
    every rank: each rank asks for them in the same order)."""

    def __init__(self, mount: str, name: str) -> None:
        self.mount = mount
        self.name = name
        self.root = os.path.join(mount, name)
        self._made = 0

    def fresh(self, label: str) -> str:
        """A new name under the probe directory, never looked up before by any rank."""
        self._made += 1
        return f"{label}-{self._made}"

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)


def _unusable(mount: str) -> str | None:
    """Why this rank cannot probe ``mount`` (None: it looks usable)."""
    if not os.path.exists(mount):
        return "it does not exist"
    if not os.path.isdir(mount):
        return "it is not a directory"
    if not os.access(mount, os.W_OK | os.X_OK):
        return f"it is not writable by uid {os.getuid()}"
    return None


def _try(what: str, action: Callable[[str], object], path: str) -> str | None:
    try:
        action(path)
    except OSError as exc:
        return f"{what}: {exc.strerror or exc}"
    return None


def _write_test(root: str, timeout: float) -> str | None:
    """Can this rank see rank 0's probe directory and write in it?"""
    try:
        wait_visible(root, timeout=timeout, is_dir=True)
    except WaitTimeout:
        return f"rank 0's probe directory {root} did not appear here within {timeout:g} s"
    probe_file = os.path.join(root, f".write-test-{uuid.uuid4().hex[:8]}")

    def write_and_remove(path: str) -> None:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)

    return _try("cannot write a file there", write_and_remove, probe_file)


def remove_tree(path: str, timeout: float) -> bool:
    """Remove ``path`` and everything under it, again and again while this client's cached
    listings still miss entries other nodes made; False if something is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextmanager
def open_session(comm: Comm, mount: str, timeout: float) -> Iterator[Session]:
    """The probe directory on every rank (a collective); removed when the block ends, however it
    ends. Raises ProbeRefused on every rank, having touched nothing, if any rank cannot use its
    mount."""
    mount = os.path.abspath(mount)
    name = f"{PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    reason = None
    main = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.getsignal(signal.SIGTERM)
    session = Session(mount, name)
    try:  # an interrupt (Ctrl-C, SIGTERM) from here on removes what rank 0 made, or may have made
        if comm.rank == 0:
            reason = _unusable(mount) or _try("cannot create a directory there", os.mkdir, session.root)
        name, first = comm.broadcast_object((name, reason))
        session = Session(mount, name)
        if comm.rank != 0 and first is None:
            reason = _unusable(mount) or _write_test(session.root, timeout)
        refused = [f"rank {rank}: cannot probe {path!r}: {why}"
                   for rank, (path, why) in enumerate(comm.all_gather_object((mount, reason))) if why]
        if refused:
            raise ProbeRefused("; ".join(refused))
        if main:
            signal.signal(signal.SIGTERM, _interrupt)
    except BaseException:
        # (reason is still None when the interrupt came before _try returned: the directory may exist,
        # and its name is this process's own; when mkdir failed there is nothing to remove)
        if comm.rank == 0 and reason is None:
            remove_tree(session.root, timeout)
        raise
    try:
        yield session
        comm.barrier()
        if comm.rank == 0 and not remove_tree(session.root, max(timeout, REMOVE_SECONDS)):
            raise OSError(f"could not remove the probe directory {session.root}")
    except BaseException:
        remove_tree(session.root, timeout)  # every rank: what it made, and what others left
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
