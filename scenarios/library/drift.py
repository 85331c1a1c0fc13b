"""(drift) Races that need one rank to run a few operations ahead of another after they met: a
collective's ranks do not leave it together (gloo's root of a broadcast leaves once it has sent,
every rank wakes after its own delay) and do different work between operations. Each naive
pattern fails on every filesystem, a local disk too, as it does under a real torchrun
(benchmarks/reach.py measures both); its fix passes everywhere.

Paths are relative, as jobs write them: the working directory is the shared mount (simfs) or the
run's directory (benchmarks/reach.py runs the same functions under torchrun)."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

import coord

from ._common import ALL_PROFILES, read_file, scenario, write_file

FAMILY = "drift"
CONFIG = "run/config.yaml"
MARKER = "prepared"
VERSION = "version"
POINTER = "latest"
LOCK = "data.lock"
DATA = "data"
HEADER = b"v2\n"
BODY = b"step=100;" * 8
CHUNKS = 4
WHOLE = HEADER + BODY * CHUNKS
POLLS, POLL = 500, 0.002  # a reader polls for the data every 2 ms, for a second
LOCKING_PROFILES = ("local", "nfs", "lustre")  # flock(2) excludes across nodes (profiles' flock="cluster")
# the searches of the races a real torchrun hits in fewer than one run in ten (reports/BENCHMARKS.md,
# "Reach"), and of their fixed counterparts alike: found within 200 examples at every seed of the
# reach benchmark, and later at some seeds and profiles; --quick takes a third
RARE = 600


class Raced(RuntimeError):
    """A rank saw what another rank's later step did, or half of it."""


def _must_not_exist(path: str) -> None:
    """A CLI's guard against overwriting an earlier run's output."""
    if os.path.isfile(path):
        raise Raced(f"{path} exists: refusing to overwrite an earlier run")


def _write_config() -> None:
    os.makedirs(os.path.dirname(CONFIG), exist_ok=True)
    write_file(CONFIG, b"lr: 0.1\n")


@scenario("drift-check-after-barrier", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def check_after_barrier() -> None:
    """Every rank checks that the config does not exist yet after a barrier, then rank 0 writes it.

    Ranks leave the barrier at different times: rank 0 may have written the config before a
    later rank's check, which then refuses to run (a CLI's "output must not exist" guard)."""
    dist.barrier()
    _must_not_exist(CONFIG)
    if dist.get_rank() == 0:
        _write_config()
    dist.barrier()


@scenario("drift-check-before-barrier", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def check_before_barrier() -> None:
    """Every rank checks before the barrier; rank 0 writes the config only after it.

    No rank leaves the barrier before every rank arrived, that is before every check was made."""
    _must_not_exist(CONFIG)
    dist.barrier()
    if dist.get_rank() == 0:
        _write_config()
    dist.barrier()


def _broadcast_seed() -> None:
    seed = torch.tensor([1234 if dist.get_rank() == 0 else 0])
    dist.broadcast(seed, src=0)


@scenario("drift-check-after-broadcast", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY,
          tags=("naive",))
def check_after_broadcast() -> None:
    """Rank 0 broadcasts the seed and writes its marker; the others then check that no marker is there yet.

    gloo's broadcast root returns once it has sent (gloo/broadcast.cc): it can write the marker
    before a receiver even returns from the broadcast."""
    _broadcast_seed()
    if dist.get_rank() == 0:
        write_file(MARKER, b"seed=1234")
    else:
        _must_not_exist(MARKER)
    dist.barrier()


@scenario("drift-check-before-broadcast", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY,
          tags=("naive",), max_examples=RARE)
def check_before_broadcast() -> None:
    """The others check before the broadcast, as if its root could not leave before they all arrived.

    A broadcast is no barrier: gloo's binomial tree (gloo/broadcast.cc) lets the root leave once
    its own children in the tree posted their receives; of 4 ranks, rank 3 gets the seed from
    rank 1 and may not have arrived, nor checked, when rank 0 writes the marker."""
    if dist.get_rank() != 0:
        _must_not_exist(MARKER)
    _broadcast_seed()
    if dist.get_rank() == 0:
        write_file(MARKER, b"seed=1234")
    dist.barrier()


@scenario("drift-check-then-barrier", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",),
          max_examples=RARE)
def check_then_barrier() -> None:
    """The others check, then a barrier, then the broadcast and the root's marker.

    No rank leaves the barrier before every rank arrived, that is before every check was made."""
    if dist.get_rank() != 0:
        _must_not_exist(MARKER)
    dist.barrier()
    _broadcast_seed()
    if dist.get_rank() == 0:
        write_file(MARKER, b"seed=1234")
    dist.barrier()


def _agree_on_step() -> None:
    step = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(step)


@scenario("drift-check-after-allreduce", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY,
          tags=("naive",))
def check_after_allreduce() -> None:
    """After an all-reduce every rank checks that the config does not exist; rank 0 writes it."""
    _agree_on_step()
    _must_not_exist(CONFIG)
    if dist.get_rank() == 0:
        _write_config()
    dist.barrier()


@scenario("drift-check-before-allreduce", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY,
          tags=("fixed",))
def check_before_allreduce() -> None:
    """Every rank checks before the all-reduce, which no rank leaves before all arrived."""
    _must_not_exist(CONFIG)
    _agree_on_step()
    if dist.get_rank() == 0:
        _write_config()
    dist.barrier()


def _read_version() -> int:
    text = read_file(VERSION)
    if not text:
        raise Raced(f"{VERSION} is empty: another trainer created it and has not written it yet")
    return int(text)


@scenario("drift-version-file", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY, tags=("naive",),
          max_examples=RARE)
def version_file() -> None:
    """Each trainer writes the shared version file if none is there, else reads it: open(w), then write.

    Another trainer can find the file created and still empty between the two."""
    dist.barrier()
    if not os.path.exists(VERSION):
        with open(VERSION, "w") as f:
            f.write("3")
    else:
        _read_version()
    dist.barrier()


@scenario("drift-version-file-atomic", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",),
          max_examples=RARE)
def version_file_atomic() -> None:
    """The version file is written whole under another name and renamed into place (coord.atomic_write).

    A reader reads it again after ESTALE: another node's rename replaced the file it had open."""
    dist.barrier()
    if not os.path.exists(VERSION):
        with coord.atomic_write(VERSION, "w") as f:
            f.write("3")
    else:
        _again_if_stale(_read_version, VERSION)
    dist.barrier()


def _follow_pointer() -> None:
    if os.path.exists(POINTER):
        read_file(POINTER)  # FileNotFoundError where it was removed since the check


def _again_if_stale(read: Callable[[], object], path: str) -> None:
    """``read()`` of ``path``; an NFS client whose open file was renamed over by another node's
    client reads ESTALE (the server removed the file it had open), so read the name again."""
    for _ in range(3):
        try:
            read()
            return
        except OSError as exc:
            if exc.errno != errno.ESTALE:
                raise
    raise Raced(f"{path} stayed stale")


@scenario("drift-pointer-recreated", expect=dict.fromkeys(ALL_PROFILES, "fail"), family=FAMILY, tags=("naive",))
def pointer_recreated() -> None:
    """Rank 0 removes and recreates the cache's `latest` pointer; the others check that it exists, then open it.

    Outside any lock: a rank whose check came before the remove and whose open after it finds no
    file."""
    if dist.get_rank() == 0:
        write_file(POINTER, b"blob-1")
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(POINTER)
        write_file(POINTER, b"blob-2")
    else:
        _follow_pointer()
    dist.barrier()


@scenario("drift-pointer-replaced", expect=dict.fromkeys(ALL_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def pointer_replaced() -> None:
    """Rank 0 renames a new pointer over the old (coord.atomic_write); readers read it again after ESTALE.

    The name always holds one of the two. An NFS reader whose open file was renamed over from
    another node reads ESTALE (the server removed that file) and reads the name again."""
    if dist.get_rank() == 0:
        write_file(POINTER, b"blob-1")
    dist.barrier()
    if dist.get_rank() == 0:
        with coord.atomic_write(POINTER, "wb") as f:
            f.write(b"blob-2")
    else:
        _again_if_stale(_follow_pointer, POINTER)
    dist.barrier()


def _read_when_there() -> None:
    """Poll under the lock until the data is there, then check that it is whole."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for _ in range(POLLS):
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                data = read_file(DATA) if os.path.exists(DATA) else None
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if data is not None:
                if data != WHOLE:
                    raise Raced(f"{DATA} read under the lock is incomplete ({len(data)} of {len(WHOLE)} bytes)")
                return
            time.sleep(POLL)
    finally:
        os.close(fd)


def _write(whole_under_lock: bool) -> None:
    """The header, then the body in chunks, each flushed; the lock is released after the header
    (naive) or after the close."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with open(DATA, "wb") as f:
            f.write(HEADER)
            f.flush()
            if not whole_under_lock:
                fcntl.flock(fd, fcntl.LOCK_UN)  # released before the body is written
            for _ in range(CHUNKS):
                f.write(BODY)
                f.flush()
        if whole_under_lock:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _publish_and_poll(whole_under_lock: bool) -> None:
    dist.barrier()
    if dist.get_rank() == 0:
        _write(whole_under_lock)
    else:
        _read_when_there()
    dist.barrier()


@scenario("drift-lock-released-early", expect=dict.fromkeys(LOCKING_PROFILES, "fail"), family=FAMILY,
          tags=("naive",), max_examples=RARE)
def lock_released_early() -> None:
    """Rank 0 releases the data's lock once the header is written; the others poll for the data under it.

    A reader whose poll takes the lock between the release and the last chunk reads part of it."""
    _publish_and_poll(whole_under_lock=False)


@scenario("drift-lock-held-to-the-end", expect=dict.fromkeys(LOCKING_PROFILES, "pass"), family=FAMILY,
          tags=("fixed",), max_examples=RARE)
def lock_held_to_the_end() -> None:
    """Rank 0 releases the lock only once the whole file is written and closed."""
    _publish_and_poll(whole_under_lock=True)
