"""The ``nfs`` profile's defaults, confirmed on a real lagging filesystem.

Each test runs one scenario twice and asserts the same observable outcome on both:

* on the ``sshfs_pair`` from conftest (one directory exported over ssh on loopback, mounted twice):
  mount ``a`` plays node 0 and mount ``b`` node 1, in real time;
* in simfs on the built-in ``nfs`` profile, 2 nodes with one rank each (rank 0 = node 0 plays
  ``a``, rank 1 = node 1 plays ``b``), in virtual time.

Where FUSE/sshfs is not the Linux NFS client, the test asserts what sshfs really does and its
docstring says how and why it differs. What the sshfs pair caches (its mount options in conftest:
``cache=yes``, ``entry_timeout = attr_timeout = negative_timeout = cache_timeout = pair.cache``):

* the kernel's FUSE client keeps positive and negative dentries and attributes for *fixed* times
  counted from the reply that brought them (fs/fuse/dir.c): no acXXmin..acXXmax range, no doubling
  of an unchanged file's lifetime, and a negative entry is not tied to its parent directory's
  cached attributes (the directory changing does not drop it, nor does listing it);
* sshfs keeps its own cache of attributes and listings (sshfs cache.c) *under* the kernel's,
  valid through whole seconds (``time(NULL) + cache_timeout``), so the kernel's refetch when its
  own attributes expire can be answered from it: a stale size can last up to ``2 * pair.cache``.
  sshfs does not cache "not found";
* FUSE has no close-to-open: open() sends no GETATTR. Instead, with libfuse's ``kernel_cache``
  off (sshfs's default) every open drops the file's page cache (no ``FOPEN_KEEP_CACHE``), so data
  is read anew while the cached size is kept.

Real-time waits are a few ``pair.cache`` at most, and are polls with deadlines. An observation
that needs a cache to be still live is checked to have finished well inside ``pair.cache``; if the
machine was too slow for that, the scenario is run again on fresh names (at most 3 times).
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import torch.distributed as dist
from conftest import MODEL

import simfs

pytestmark = [pytest.mark.sshfs, pytest.mark.slow]  # (slow: real mounts, left out of README's test command)

NFS = simfs.profiles.get("nfs")
SIM_POLL = 0.25  # virtual seconds between polls in simfs
REAL_POLL = 0.02  # real seconds between polls on the sshfs mounts
SLACK = 1.0  # real seconds of scheduling noise allowed after a cache expired


# -- helpers ---------------------------------------------------------------------------------------

def _errno_of(fn: Callable[[], Any]) -> str | None:
    """The errno name ``fn()`` fails with, or None."""
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _sim(job: Callable[..., Any], *args: Any, seed: int = 0) -> dict:
    """Run ``job`` on 2 simulated nodes (one rank each) on the ``nfs`` profile; node 1's return."""
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=seed, **MODEL).run(job, *args)
    assert result.ok, result.summary()
    return result.returns[1]


class _TooSlow(Exception):
    """The machine was too slow to observe a cache while it was surely still live."""


def _live(pair, since: float, what: str) -> None:
    """Call right after an observation that needs a cache filled at ``since`` or later to be
    still live: it was unless this much real time has passed."""
    took = time.monotonic() - since
    if took > 0.75 * pair.cache:
        raise _TooSlow(f"{what}: {took:.2f}s after the cache was filled (cache {pair.cache}s)")


def _on_fresh_dirs(pair, scenario: Callable[[str, str], Any]) -> Any:
    """``scenario(a, b)`` on a new directory of the export, seen by neither mount yet, as ``a/X``
    and ``b/X``; run again on a new one when the machine was too slow to observe a live cache."""
    slow = []
    for _attempt in range(3):
        name = f"sem-{uuid.uuid4().hex[:12]}"
        os.mkdir(os.path.join(pair.export, name))
        try:
            return scenario(os.path.join(pair.a, name), os.path.join(pair.b, name))
        except _TooSlow as exc:
            slow.append(str(exc))
    pytest.fail(f"too slow to observe the FUSE caches 3 times: {slow}")


def _first_true(check: Callable[[], bool], limit: float) -> float | None:
    """Poll ``check`` until it is true (returns the monotonic time it first was) or ``limit``
    seconds pass (returns None)."""
    deadline = time.monotonic() + limit
    while True:
        now = time.monotonic()
        if check():
            return now
        if now > deadline:
            return None
        time.sleep(REAL_POLL)


# -- 1. a create failing with EEXIST drops the cached entry ----------------------------------------

EEXIST_OUTCOME = {
    "stale": False,          # after the other node's mkdir, the negative entry still answers
    "mkdir": "EEXIST",       # mkdir goes to the server (FUSE: revalidates) and fails
    "isdir": True,           # ... and the failed create left no stale negative entry
    "stale_e": False,
    "makedirs_exist_ok": None,  # so makedirs(exist_ok=True) does not raise
    "isdir_e": True,
}


def _eexist_sim_job() -> dict:
    rank = dist.get_rank()
    root = "/shared/eexist"
    if rank == 0:
        os.mkdir(root)
    dist.barrier()
    out: dict = {}
    if rank == 1:  # node 1 caches "not found" for both names
        out["before"] = (os.path.exists(f"{root}/d"), os.path.exists(f"{root}/e"))
    dist.barrier()
    if rank == 0:
        os.mkdir(f"{root}/d")
        os.mkdir(f"{root}/e")
    dist.barrier()
    if rank == 1:
        out["stale"] = os.path.exists(f"{root}/d")
        out["mkdir"] = _errno_of(lambda: os.mkdir(f"{root}/d"))
        out["isdir"] = os.path.isdir(f"{root}/d")
        out["stale_e"] = os.path.exists(f"{root}/e")
        out["makedirs_exist_ok"] = _errno_of(lambda: os.makedirs(f"{root}/e", exist_ok=True))
        out["isdir_e"] = os.path.isdir(f"{root}/e")
    return out


def test_eexist_drops_the_cached_entry(sshfs_pair) -> None:
    """b has cached "not found" for two names; a creates both directories. Through b, mkdir of one
    fails with EEXIST and isdir right after says True; makedirs(exist_ok=True) of the other does not
    raise. simfs's ``nfs`` profile (``eexist_drops_entry``) gives the same.

    Same outcome, different mechanism. Linux NFS sends the MKDIR trusting the negative dentry
    (``nfs_neg_need_reval`` skips revalidation for LOOKUP_CREATE), the server answers EEXIST and
    ``nfs_mkdir`` does ``d_drop`` on the error, so the next stat looks the name up anew. On FUSE
    (per the kernel source; not observable through the mount) no MKDIR is sent: an exclusive
    create (LOOKUP_EXCL, which mkdir uses) always revalidates the dentry and a negative one always
    gets a fresh LOOKUP (fs/fuse/dir.c ``fuse_dentry_revalidate``, kernel commit df8629af2934
    "fuse: always revalidate if exclusive create"), which finds the directory; the VFS returns
    EEXIST and the dentry it leaves is positive."""
    pair = sshfs_pair

    def scenario(a: str, b: str) -> dict:
        start = time.monotonic()
        before = (os.path.exists(f"{b}/d"), os.path.exists(f"{b}/e"))  # b caches "not found"
        os.mkdir(f"{a}/d")
        os.mkdir(f"{a}/e")
        out = {"before": before, "stale": os.path.exists(f"{b}/d"), "stale_e": os.path.exists(f"{b}/e")}
        _live(pair, start, "b's negative entries")
        out["mkdir"] = _errno_of(lambda: os.mkdir(f"{b}/d"))
        out["isdir"] = os.path.isdir(f"{b}/d")
        out["makedirs_exist_ok"] = _errno_of(lambda: os.makedirs(f"{b}/e", exist_ok=True))
        out["isdir_e"] = os.path.isdir(f"{b}/e")
        return out

    real = _on_fresh_dirs(pair, scenario)
    assert real.pop("before") == (False, False)
    assert real == EEXIST_OUTCOME

    assert NFS.eexist_drops_entry, ("the nfs profile keeps a stale negative entry after EEXIST "
                                    "(eexist_drops_entry=False); Linux NFS (d_drop in nfs_mkdir) and sshfs do not")
    for seed in range(3):
        sim = _sim(_eexist_sim_job, seed=seed)
        assert sim.pop("before") == (False, False)
        assert sim == EEXIST_OUTCOME, seed


# -- 2. how long a negative entry lives, and what a listing does to it -----------------------------

def _negative_sim_job(limit: float) -> dict:
    rank = dist.get_rank()
    root = "/shared/neg"
    if rank == 0:
        os.makedirs(f"{root}/listed")
    dist.barrier()
    out: dict = {}
    start = time.monotonic()
    if rank == 1:  # node 1 fetches both parents' attributes for the first time and caches "not found"
        out["before"] = os.path.exists(f"{root}/d")
        out["before_listed"] = os.path.exists(f"{root}/listed/x")
    dist.barrier()
    if rank == 0:
        os.mkdir(f"{root}/d")
        os.mkdir(f"{root}/listed/x")
    dist.barrier()
    if rank == 1:
        out["stale"] = os.path.exists(f"{root}/d")
        out["stale_listed"] = os.path.exists(f"{root}/listed/x")
        out["listing"] = os.listdir(f"{root}/listed")
        out["after_listdir"] = os.path.exists(f"{root}/listed/x")
        out["visible_after"] = None
        while time.monotonic() - start < limit:
            if os.path.exists(f"{root}/d"):
                out["visible_after"] = time.monotonic() - start
                break
            time.sleep(SIM_POLL)
    return out


def test_negative_entry_lifetime(sshfs_pair) -> None:
    """b caches "not found", then a creates the name: b's exists() stays False until the negative
    entry expires and is True right after; listing the parent through b does not help on sshfs.

    Differences from Linux NFS (and simfs's ``nfs`` profile, which models it):

    * Lifetime. NFS (lookupcache=all) trusts a negative dentry until its *parent directory's*
      cached attributes expire (acdirmin..acdirmax, 30..60 s; the first fetch's lifetime is drawn in
      that range by simfs) and the directory's change is then seen. FUSE's negative_timeout is a
      fixed TTL from the failed LOOKUP, not tied to the parent: measured, the name appears
      ``pair.cache`` seconds after b's lookup (sshfs does not cache "not found", so nothing lags
      beyond the kernel's TTL).
    * Listing. On NFS opening the directory revalidates it (close-to-open for directories), sees
      its mtime/change attribute moved and drops its cached lookups, negative ones included: the
      name is visible right after ``listdir``. FUSE has no such tie: ``listdir`` through b names
      the new directory (b had never listed the parent, so sshfs fetched the listing) while
      ``exists`` through b still says False until negative_timeout."""
    pair = sshfs_pair

    def lifetime(a: str, b: str) -> tuple[bool, bool, float | None]:
        start = time.monotonic()
        before = os.path.exists(f"{b}/d")  # the negative entry: its TTL starts after ``start``
        os.mkdir(f"{a}/d")
        stale = os.path.exists(f"{b}/d")
        _live(pair, start, "b's negative entry")
        seen = _first_true(lambda: os.path.exists(f"{b}/d"), 3 * pair.cache)
        return before, stale, None if seen is None else seen - start

    before, stale, visible_after = _on_fresh_dirs(pair, lifetime)
    assert (before, stale) == (False, False)
    assert visible_after is not None, f"not visible through b {3 * pair.cache}s after its creation"
    assert pair.cache - 0.1 <= visible_after <= pair.cache + SLACK, visible_after

    def listing(a: str, b: str) -> tuple[bool, list[str], bool]:
        start = time.monotonic()
        before = os.path.exists(f"{b}/x")
        os.mkdir(f"{a}/x")
        names = os.listdir(b)
        after = os.path.exists(f"{b}/x")
        _live(pair, start, "b's negative entry")
        return before, names, after

    before, names, after_listdir = _on_fresh_dirs(pair, listing)
    assert before is False
    assert names == ["x"]  # the listing knows the name ...
    assert after_listdir is False  # ... the lookup cache does not (differs from NFS, see above)

    # simfs, nfs profile: invisible until the parent's attributes expire, in acdirmin..acdirmax
    # virtual seconds after node 1 first fetched them; a listing makes it visible at once
    assert (NFS.lookupcache, NFS.lookup_tied_to_parent) == ("all", True)
    for seed in range(3):
        sim = _sim(_negative_sim_job, 2 * NFS.acdirmax, seed=seed)
        assert (sim["before"], sim["before_listed"]) == (False, False)
        assert (sim["stale"], sim["stale_listed"]) == (False, False)
        assert sim["listing"] == ["x"]
        assert sim["after_listdir"] is True
        assert sim["visible_after"] is not None
        assert NFS.acdirmin <= sim["visible_after"] <= NFS.acdirmax + SIM_POLL + 0.1, (seed, sim)


# -- 3. close-to-open -------------------------------------------------------------------------------

V1, V2, V2_LONG = b"version-1", b"version-2", b"version-2, longer"


def _cto_sim_job(limit: float) -> dict:
    rank = dist.get_rank()
    root = "/shared/cto"
    f, g, h = f"{root}/f", f"{root}/g", f"{root}/h"
    if rank == 0:
        os.mkdir(root)
        for path in (f, g, h):
            with open(path, "wb") as out_file:
                out_file.write(V1)
    dist.barrier()
    out: dict = {}
    held = None
    start = time.monotonic()
    if rank == 1:  # node 1 reads f through a handle it keeps, and caches g's and h's attributes
        held = open(f, "rb")
        out["held"] = held.read()
        out["g_size"] = os.stat(g).st_size
        out["h_size"] = os.stat(h).st_size
    dist.barrier()
    if rank == 0:
        for path, data in ((f, V2), (g, V2_LONG), (h, V2_LONG)):
            with open(path, "wb") as out_file:
                out_file.write(data)
    dist.barrier()
    if rank == 1:
        assert held is not None
        held.seek(0)
        out["held_reread"] = held.read()
        out["reopen"] = _read(f)
        held.seek(0)
        out["held_after_reopen"] = held.read()
        held.close()
        out["g_stat"] = os.stat(g).st_size
        with open(g, "rb") as gf:
            out["g_fstat_after_open"] = os.fstat(gf.fileno()).st_size
            out["g_open"] = gf.read()
        out["h_new_size_after"] = None
        while time.monotonic() - start < limit:
            if os.stat(h).st_size == len(V2_LONG):
                out["h_new_size_after"] = time.monotonic() - start
                break
            time.sleep(SIM_POLL)
    return out


def test_close_to_open(sshfs_pair) -> None:
    """a writes and closes files that b has open or cached. Through b: a handle opened earlier
    still reads the old bytes (cached pages; the file's attributes have not expired); the next
    open() reads the new bytes, and after it the old handle does too (the open dropped the
    file's cached pages); a stat of a file b has not reopened shows the old size until its cached
    attributes expire. simfs's ``nfs`` profile gives the same, with acregmin..acregmax (3..60 s)
    for that last lifetime.

    Differences from Linux NFS (and simfs's ``nfs`` profile, which models it):

    * No close-to-open on FUSE. NFS's open() sends a GETATTR whatever the attribute cache says
      (nfs(5) "Close-to-open cache consistency"), so the size the kernel holds is the new one right
      after open and a read returns the whole new file. FUSE's open sends no GETATTR; the new bytes
      come only because each open drops the page cache (sshfs leaves libfuse's ``kernel_cache``
      off, so no FOPEN_KEEP_CACHE). The cached, *old* size stays: ``fstat`` on the new handle
      shows it and a read stops there, so a file that grew reads back as its new bytes cut at the
      old length (``version-2`` of ``version-2, longer``) until the cached attributes expire (the
      kernel's and sshfs's, as below), after which an open reads it whole. A same-size overwrite is
      seen in full, as on NFS.
    * Lifetime of a stale size. NFS: acregmin..acregmax (doubling while the file does not change).
      sshfs: fixed TTLs; measured, between ``pair.cache`` and ``2 * pair.cache`` (about 2x here):
      the kernel's attr_timeout expires, and its refetch is answered from sshfs's own attribute
      cache, which counts whole seconds (``time(NULL) + cache_timeout``) and so may still hold the
      old size; the kernel keeps that for another attr_timeout."""
    pair = sshfs_pair

    def scenario(a: str, b: str) -> dict:
        f, g, h = "f", "g", "h"
        for name in (f, g, h):
            with open(f"{a}/{name}", "wb") as out_file:
                out_file.write(V1)
        start = time.monotonic()  # every attribute b caches from here on was fetched after this
        out: dict = {}
        with open(f"{b}/{f}", "rb") as held:
            out["held"] = held.read()
            out["g_size"] = os.stat(f"{b}/{g}").st_size
            out["h_size"] = os.stat(f"{b}/{h}").st_size
            for name, data in ((f, V2), (g, V2_LONG), (h, V2_LONG)):
                with open(f"{a}/{name}", "wb") as out_file:
                    out_file.write(data)
            held.seek(0)
            out["held_reread"] = held.read()
            _live(pair, start, "b's cached pages and attributes of f")
            out["reopen"] = _read(f"{b}/{f}")
            held.seek(0)
            out["held_after_reopen"] = held.read()
        out["g_stat"] = os.stat(f"{b}/{g}").st_size
        with open(f"{b}/{g}", "rb") as gf:
            out["g_fstat_after_open"] = os.fstat(gf.fileno()).st_size
            out["g_open"] = gf.read()
        h_stat = os.stat(f"{b}/{h}").st_size
        _live(pair, start, "b's cached attributes of g and h")
        out["h_stat"] = h_stat
        seen = _first_true(lambda: os.stat(f"{b}/{h}").st_size == len(V2_LONG), 3 * pair.cache)
        out["h_new_size_after"] = None if seen is None else seen - start
        seen = _first_true(lambda: _read(f"{b}/{g}") == V2_LONG, 3 * pair.cache)
        out["g_whole_after"] = None if seen is None else seen - start
        return out

    real = _on_fresh_dirs(pair, scenario)
    # the same on sshfs and on NFS
    assert (real["held"], real["g_size"], real["h_size"]) == (V1, len(V1), len(V1))
    assert real["held_reread"] == V1
    assert real["reopen"] == V2
    assert real["held_after_reopen"] == V2
    assert real["g_stat"] == real["h_stat"] == len(V1)
    # FUSE: no GETATTR at open, so the old size stays and cuts the new bytes
    assert real["g_fstat_after_open"] == len(V1)
    assert real["g_open"] == V2_LONG[:len(V1)] == V2
    # fixed TTLs: kernel attr_timeout, then possibly once more from sshfs's own attribute cache
    h_after = real["h_new_size_after"]
    assert h_after is not None, f"h's new size not seen through b in {3 * pair.cache}s"
    assert pair.cache - 0.1 <= h_after <= 2 * pair.cache + SLACK, h_after
    assert real["g_whole_after"] is not None, f"g never read whole through b in {3 * pair.cache}s"
    assert real["g_whole_after"] <= 2 * pair.cache + SLACK, real["g_whole_after"]

    assert NFS.cto
    for seed in range(3):
        sim = _sim(_cto_sim_job, 2 * NFS.acregmax, seed=seed)
        assert (sim["held"], sim["g_size"], sim["h_size"]) == (V1, len(V1), len(V1))
        assert sim["held_reread"] == V1
        assert sim["reopen"] == V2
        assert sim["held_after_reopen"] == V2
        assert sim["g_stat"] == len(V1)
        # close-to-open: the open fetched the new size, and the read returns the whole file
        assert sim["g_fstat_after_open"] == len(V2_LONG)
        assert sim["g_open"] == V2_LONG
        assert sim["h_new_size_after"] is not None
        assert NFS.acregmin <= sim["h_new_size_after"] <= NFS.acregmax + SIM_POLL + 0.1, (seed, sim)
