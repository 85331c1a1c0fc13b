"""Cross-node filesystem semantics per profile: what one node sees of another node's
mkdir / create / rename / unlink / overwrite (with and without cached lookups), close-to-open,
O_EXCL, flock scopes, the makedirs trap and mtime granularity.

Every cluster has 2 nodes and (unless a test needs more) one rank per node, so rank 0 runs
on node 0 and rank 1 on node 1. Events are ordered with barriers and virtual sleeps."""

from __future__ import annotations

import errno
import fcntl
import math
import os
import time

import pytest
import torch.distributed as dist
from conftest import MODEL
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

D = "/shared/d"
T = 10.0  # exact attribute ttl of the nfs variant used where timing must be exact

NFS_T = simfs.profiles.get("nfs").replace(acdirmin=T, acdirmax=T, acregmin=T, acregmax=T)
OBJ = simfs.profiles.get("objectstore")
PROFILES = {"local": "local", "nfs": NFS_T, "lustre": "lustre", "objectstore": "objectstore"}
COHERENT = ("local", "lustre")


def _cluster(profile, seed: int = 0, ranks_per_node: int = 1, **kwargs) -> simfs.Cluster:
    return simfs.Cluster(nodes=2, ranks_per_node=ranks_per_node, profile=profile, seed=seed,
                         **MODEL, **kwargs)


def _run_ok(cluster: simfs.Cluster, job, *args, **kwargs) -> dict:
    result = cluster.run(job, *args, **kwargs)
    assert result.ok, result.summary()
    return result.returns


def _sleep_until(t0: float, offset: float) -> None:
    wait = t0 + offset - time.monotonic()
    if wait > 0:
        time.sleep(wait)


# -- 1. another node's view of namespace changes ---------------------------------------------------

EVENTS = ("mkdir", "create", "rename", "unlink", "overwrite")
OLD_VIEW = {"mkdir": False, "create": False, "rename": (True, False), "unlink": True, "overwrite": 2}
NEW_VIEW = {"mkdir": True, "create": True, "rename": (False, True), "unlink": False, "overwrite": 9}


def _setup(event: str) -> None:
    os.mkdir(D)
    if event in ("rename", "unlink", "overwrite"):
        with open(D + "/old", "wb") as f:
            f.write(b"v1")


def _event(event: str) -> None:
    if event == "mkdir":
        os.mkdir(D + "/new")
    elif event == "create":
        with open(D + "/new", "wb") as f:
            f.write(b"new")
    elif event == "rename":
        os.rename(D + "/old", D + "/new")
    elif event == "unlink":
        os.unlink(D + "/old")
    else:  # overwrite in place, with a different size
        with open(D + "/old", "wb") as f:
            f.write(b"version-2")


def _observe(event: str):
    """What the calling node believes, through path lookups and stat only."""
    if event == "mkdir":
        return os.path.isdir(D + "/new")
    if event == "create":
        return os.path.exists(D + "/new")
    if event == "rename":
        return os.path.exists(D + "/old"), os.path.exists(D + "/new")
    if event == "unlink":
        return os.path.exists(D + "/old")
    return os.path.getsize(D + "/old")


def view_job(event: str, offsets: tuple[float, ...], look_first: bool):
    """Rank 0 changes the namespace; rank 1 (node 1) looks at given offsets after its first look."""
    rank = dist.get_rank()
    if rank == 0:
        _setup(event)
    dist.barrier()
    t0 = time.monotonic()
    before = _observe(event) if rank == 1 and look_first else None
    dist.barrier()
    if rank == 0:
        _event(event)
    dist.barrier()
    if rank == 0:
        return None
    seen = []
    for offset in offsets:
        _sleep_until(t0, offset)
        seen.append(_observe(event))
    return before, seen


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_change_is_visible_at_once_without_a_prior_lookup(profile: str, event: str) -> None:
    returns = _run_ok(_cluster(PROFILES[profile], seed=3), view_job, event, (0.0,), False)
    assert returns[1] == (None, [NEW_VIEW[event]])


OFFSETS = (0.0, 4.5, 5.5, T - 0.5, T + 0.5, 59.5, 60.5)


def _expected_after_cached_lookup(profile: str, event: str, offset: float):
    old, new = OLD_VIEW[event], NEW_VIEW[event]
    if profile in COHERENT:
        return new
    if profile == "nfs":  # every cached entry and attribute lives exactly T, from the first look
        return new if offset > T else old
    # objectstore: "not found" is cached negative_ttl (5 s), entries and attributes 60 s
    negative_expired = offset > OBJ.negative_ttl
    positive_expired = offset > OBJ.positive_ttl
    if event in ("mkdir", "create"):
        return new if negative_expired else old
    if event == "rename":  # the old name is a stale positive entry, the new one a negative entry
        return (not positive_expired, negative_expired)
    return new if positive_expired else old


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_change_after_a_cached_lookup(profile: str, event: str) -> None:
    returns = _run_ok(_cluster(PROFILES[profile], seed=5), view_job, event, OFFSETS, True)
    before, seen = returns[1]
    assert before == OLD_VIEW[event]
    assert seen == [_expected_after_cached_lookup(profile, event, off) for off in OFFSETS], list(zip(OFFSETS, seen))


@settings(max_examples=15)
@given(data=st.data(), event=st.sampled_from(EVENTS))
def test_default_nfs_staleness_is_bounded_by_the_attribute_cache_times(data, event: str) -> None:
    """Default nfs: ttls are drawn in [acregmin=3, acregmax=60] / [acdirmin=30, acdirmax=60];
    whatever the draws, a change is unseen for 2.5 s (29.5 s for names) and seen after 60 s."""
    nfs = simfs.profiles.get("nfs")
    offsets = (0.0, nfs.acregmin - 0.5, nfs.acdirmin - 0.5, nfs.acdirmax + 0.5)
    result = _cluster("nfs").run(view_job, event, offsets, True, choices=data)
    assert result.ok, result.summary()
    before, seen = result.returns[1]
    old, new = OLD_VIEW[event], NEW_VIEW[event]
    assert before == old
    assert seen[0] == seen[1] == old
    if event in ("mkdir", "create", "rename"):  # names: governed by the directory's ttl alone
        assert seen[2] == old
    else:  # the file's own attributes (ttl in [3, 60]) may have expired by now
        assert seen[2] in (old, new)
    assert seen[3] == new


@settings(max_examples=15)
@given(ttl=st.integers(1, 120), event=st.sampled_from(("mkdir", "create")), seed=st.integers(0, 2**16))
def test_nfs_negative_entry_lives_exactly_the_parent_ttl(ttl: int, event: str, seed: int) -> None:
    profile = simfs.profiles.get("nfs").replace(acdirmin=float(ttl), acdirmax=float(ttl))
    offsets = (0.0, ttl - 0.25, ttl + 0.25)
    before, seen = _run_ok(_cluster(profile, seed=seed), view_job, event, offsets, True)[1]
    assert (before, seen) == (False, [False, False, True])


# -- 2. listing the parent revalidates it -----------------------------------------------------------

def listing_job(event: str):
    rank = dist.get_rank()
    if rank == 0:
        _setup(event)
    dist.barrier()
    before = _observe(event) if rank == 1 else None
    dist.barrier()
    if rank == 0:
        _event(event)
    dist.barrier()
    if rank == 0:
        return None
    stale = _observe(event)
    listing = sorted(os.listdir(D))
    return before, stale, listing, _observe(event)


@settings(max_examples=10)
@given(data=st.data(), event=st.sampled_from(("mkdir", "create", "rename", "unlink")))
def test_listing_the_parent_makes_new_entries_visible_on_nfs(data, event: str) -> None:
    result = _cluster("nfs").run(listing_job, event, choices=data)
    assert result.ok, result.summary()
    before, stale, listing, after = result.returns[1]
    assert before == OLD_VIEW[event]
    assert stale == OLD_VIEW[event]  # a cached entry, still trusted
    assert listing == {"mkdir": ["new"], "create": ["new"], "rename": ["new"], "unlink": []}[event]
    assert after == NEW_VIEW[event]  # the listing dropped the stale entry


# -- 3. close-to-open -------------------------------------------------------------------------------

F = "/shared/f"


def cto_reopen_job():
    """The reader has read v1 (data cached); the writer replaces it; the reader opens again."""
    rank = dist.get_rank()
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"v1")
    dist.barrier()
    if rank == 1:
        with open(F, "rb") as f:
            first = f.read()
    dist.barrier()
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"v2")
    dist.barrier()
    if rank == 1:
        with open(F, "rb") as f:
            return first, f.read()
    return None


@pytest.mark.parametrize("profile", list(PROFILES))
def test_open_after_close_sees_the_new_content(profile: str) -> None:
    returns = _run_ok(_cluster(PROFILES[profile], seed=2), cto_reopen_job)
    assert returns[1] == (b"v1", b"v2")


def held_open_job(offsets: tuple[float, ...]):
    """The reader keeps one descriptor open across the writer's write+close and reads again."""
    rank = dist.get_rank()
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"v1")
    dist.barrier()
    t0 = time.monotonic()
    fd = None
    if rank == 1:
        fd = os.open(F, os.O_RDONLY)
        first = os.pread(fd, 100, 0)
    dist.barrier()
    if rank == 0:
        with open(F, "r+b") as f:
            f.write(b"v2")
    dist.barrier()
    if rank == 0:
        return None
    seen = []
    for offset in offsets:
        _sleep_until(t0, offset)
        seen.append(os.pread(fd, 100, 0))
    os.close(fd)
    return first, seen


@pytest.mark.parametrize("profile", list(PROFILES))
def test_read_without_reopen_may_return_cached_data(profile: str) -> None:
    offsets = (0.0, T - 0.5, T + 0.5)
    returns = _run_ok(_cluster(PROFILES[profile], seed=4), held_open_job, offsets)
    first, seen = returns[1]
    assert first == b"v1"
    if profile in COHERENT:
        assert seen == [b"v2", b"v2", b"v2"]
    elif profile == "nfs":  # data cache valid while the file's attributes are (exactly T here)
        assert seen == [b"v1", b"v1", b"v2"]
    else:  # objectstore: attributes cached 60 s
        assert seen == [b"v1", b"v1", b"v1"]


def dirty_job():
    """The writer writes but has not closed; the reader opens and reads; then the writer closes."""
    rank = dist.get_rank()
    if rank == 0:
        with open(F, "wb") as f:
            f.write(b"v1")
    dist.barrier()
    f = None
    if rank == 0:
        f = open(F, "r+b", buffering=0)
        f.write(b"v2")
    dist.barrier()
    during = None
    if rank == 1:
        with open(F, "rb") as g:
            during = g.read()
    dist.barrier()
    if rank == 0:
        f.close()
    dist.barrier()
    if rank == 1:
        with open(F, "rb") as g:
            return during, g.read()
    return None


@pytest.mark.parametrize("profile", list(PROFILES))
def test_unclosed_writes_and_other_nodes(profile: str) -> None:
    returns = _run_ok(_cluster(PROFILES[profile], seed=6), dirty_job)
    during, after = returns[1]
    # local writes through; lustre recalls the writer's dirty data; nfs and objectstore hold it until close
    assert during == (b"v2" if profile in COHERENT else b"v1")
    assert after == b"v2"


# -- 4. O_EXCL across nodes -------------------------------------------------------------------------

X = "/shared/lock"


def excl_job(check_first: bool):
    rank = dist.get_rank()
    if check_first:
        os.path.exists(X)  # a negative entry on both nodes
    dist.barrier()
    try:
        fd = os.open(X, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        won = False
    else:
        os.write(fd, b"rank%d" % rank)
        os.close(fd)
        won = True
    dist.barrier()
    os.listdir("/shared")  # on nfs the loser may hold a stale negative entry: revalidate first
    with open(X, "rb") as f:
        return won, f.read()


@settings(max_examples=25)
@given(data=st.data(), profile=st.sampled_from(("local", "nfs", "lustre")), check_first=st.booleans())
def test_o_excl_has_exactly_one_winner(data, profile: str, check_first: bool) -> None:
    result = _cluster(PROFILES[profile]).run(excl_job, check_first, choices=data)
    assert result.ok, result.summary()
    winners = [rank for rank, (won, _) in result.returns.items() if won]
    assert len(winners) == 1
    assert {content for _, content in result.returns.values()} == {b"rank%d" % winners[0]}


def excl_close_job():
    """O_EXCL create, write, close: where does the loser find out?"""
    rank = dist.get_rank()
    dist.barrier()
    try:
        fd = os.open(X, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        outcome = "EEXIST at open"
    else:
        os.write(fd, b"rank%d" % rank)
        try:
            os.close(fd)
        except OSError as exc:
            outcome = errno.errorcode[exc.errno] + " at close"
        else:
            outcome = "won"
    dist.barrier()
    time.sleep(OBJ.negative_ttl + 1)  # the loser's cached 'not found' (if any) expires
    with open(X, "rb") as f:
        return outcome, f.read()


def test_o_excl_is_racy_on_objectstore_and_the_first_upload_wins() -> None:
    """A new object exists only on its node until close, so O_EXCL is a lookup and both nodes
    can create; the upload is conditional on the name being absent, so the second close gets
    ESTALE (gcsfuse docs/semantics.md: 'the flush from first mount wins')."""
    both = 0
    for seed in range(6):
        result = _cluster("objectstore", seed=seed).run(excl_close_job)
        assert result.ok, result.summary()
        outcomes = sorted(outcome for outcome, _ in result.returns.values())
        assert outcomes in (["EEXIST at open", "won"], ["ESTALE at close", "won"]), outcomes
        both += outcomes == ["ESTALE at close", "won"]
        winner = next(rank for rank, (outcome, _) in result.returns.items() if outcome == "won")
        assert {c for _, c in result.returns.values() if c is not None} == {b"rank%d" % winner}
    assert both > 0


def test_exclusive_create_racy_parameter_lets_both_nodes_create() -> None:
    """``exclusive_create="racy"`` (O_EXCL as a lookup then a create, as over NFSv2) must let
    some interleaving of two racing nodes both succeed, on any profile that sets it."""
    profile = simfs.profiles.get("nfs").replace(exclusive_create="racy")
    outcomes = []
    for seed in range(12):
        result = _cluster(profile, seed=seed).run(excl_job, False)
        assert result.ok, result.summary()
        outcomes.append(sorted(won for won, _ in result.returns.values()))
    assert all(wins in ([False, True], [True, True]) for wins in outcomes)
    assert [True, True] in outcomes, outcomes


def excl_after_close_job():
    rank = dist.get_rank()
    if rank == 0:
        fd = os.open(X, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
    dist.barrier()
    if rank == 1:
        try:
            os.close(os.open(X, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return "EEXIST"
        return "created"
    return None


@pytest.mark.parametrize("profile", list(PROFILES))
def test_o_excl_fails_once_the_file_is_closed_on_another_node(profile: str) -> None:
    assert _run_ok(_cluster(PROFILES[profile], seed=1), excl_after_close_job)[1] == "EEXIST"


# -- 5. flock scopes --------------------------------------------------------------------------------

LK = "/shared/lk"


def _open_lock_file() -> int:
    """Rank 0 makes the lock file, then every rank opens it (two nodes creating one new object
    on an object store would make the second upload fail: that is not what these tests test)."""
    if dist.get_rank() == 0:
        os.close(os.open(LK, os.O_CREAT | os.O_RDWR))
    dist.barrier()
    return os.open(LK, os.O_RDWR)


def flock_nb_job(tries: tuple[int, ...]):
    """Rank 0 takes LOCK_EX; then the ranks in ``tries`` attempt LOCK_EX|LOCK_NB."""
    rank = dist.get_rank()
    fd = _open_lock_file()
    dist.barrier()
    if rank == 0:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    dist.barrier()
    outcome = "held" if rank == 0 else "idle"
    if rank in tries:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            outcome = "locked"
        except BlockingIOError as exc:
            outcome = errno.errorcode[exc.errno]
    dist.barrier()
    os.close(fd)
    return outcome


FLOCK_CASES = [
    ("nfs", None, "cluster"), ("nfs", "node", "node"), ("nfs", "none", "none"),
    ("local", None, "cluster"),
    ("lustre", None, "cluster"),          # mount.lustre(8) flock: the default since 2.12.3
    ("lustre", "node", "node"),           # mount -o localflock
    ("beegfs", None, "node"),             # tuneUseGlobalFileLocks=false
    ("objectstore", None, "node"),        # FUSE without FUSE_FLOCK_LOCKS: the kernel locks locally
]


@pytest.mark.parametrize("base,override,mode", FLOCK_CASES)
def test_flock_across_nodes(base: str, override, mode: str) -> None:
    profile = simfs.profiles.get(base)
    if override is not None:
        profile = profile.replace(flock=override)
    assert profile.flock == mode
    returns = _run_ok(_cluster(profile, seed=1), flock_nb_job, (1,))
    assert returns == {0: "held", 1: "EAGAIN" if mode == "cluster" else "locked"}


@pytest.mark.parametrize("mode", ["cluster", "node", "none"])
def test_flock_on_the_same_node(mode: str) -> None:
    """Ranks 0, 1 on node 0 and ranks 2, 3 on node 1; rank 0 holds the lock, ranks 1 and 2 try."""
    profile = simfs.profiles.get("nfs").replace(flock=mode)
    returns = _run_ok(_cluster(profile, seed=2, ranks_per_node=2), flock_nb_job, (1, 2))
    same_node = "locked" if mode == "none" else "EAGAIN"
    other_node = "EAGAIN" if mode == "cluster" else "locked"
    assert returns == {0: "held", 1: same_node, 2: other_node, 3: "idle"}


HOLD = 7.0


def flock_wait_job():
    rank = dist.get_rank()
    fd = _open_lock_file()
    dist.barrier()
    t0 = time.monotonic()
    if rank == 0:
        fcntl.flock(fd, fcntl.LOCK_EX)
        time.sleep(HOLD)
        released = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return t0, released
    time.sleep(1.0)
    asked = time.monotonic()
    fcntl.flock(fd, fcntl.LOCK_EX)
    got = time.monotonic()
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return asked, got


@pytest.mark.parametrize("base,override,mode", FLOCK_CASES)
def test_blocking_flock_waits_for_the_holder(base: str, override, mode: str) -> None:
    profile = simfs.profiles.get(base)
    if override is not None:
        profile = profile.replace(flock=override)
    returns = _run_ok(_cluster(profile, seed=3), flock_wait_job)
    t0, released = returns[0]
    asked, got = returns[1]
    assert released >= t0 + HOLD
    if mode == "cluster":
        assert released <= got < released + 0.1
    else:
        assert asked <= got < asked + 0.1 < released


# -- 6. the makedirs trap ---------------------------------------------------------------------------

def makedirs_job():
    rank = dist.get_rank()
    seen = os.path.exists(D) if rank == 1 else None
    dist.barrier()
    if rank == 0:
        os.mkdir(D)
    dist.barrier()
    if rank == 0:
        return None
    try:
        os.makedirs(D, exist_ok=True)
    except FileExistsError:
        return seen, "FileExistsError"
    return seen, "ok"


MAKEDIRS_CASES = [
    ("nfs", simfs.profiles.get("nfs"), "ok"),  # fs/nfs/dir.c nfs_mkdir: d_drop on failure
    ("nfs, a stale entry surviving EEXIST", simfs.profiles.get("nfs").replace(eexist_drops_entry=False),
     "FileExistsError"),
    ("beegfs", "beegfs", "FileExistsError"),
    ("lustre+stale-negative", simfs.profiles.get("lustre").replace(**simfs.profiles.LUSTRE_STALE_NEGATIVE),
     "FileExistsError"),
    ("local", "local", "ok"),
    ("lustre", "lustre", "ok"),
    ("objectstore", "objectstore", "ok"),
]


@settings(max_examples=10)
@given(data=st.data(), case=st.sampled_from(MAKEDIRS_CASES))
def test_makedirs_exist_ok_after_a_negative_lookup(data, case) -> None:
    _, profile, expected = case
    result = _cluster(profile).run(makedirs_job, choices=data)
    assert result.ok, result.summary()
    assert result.returns[1] == (False, expected)


# -- 9. mtime ---------------------------------------------------------------------------------------

def mtime_job(starts: tuple[float, ...]):
    """Rank 0 writes a file at each start time (virtual seconds after the run began)."""
    if dist.get_rank() != 0:
        return None
    t0 = time.monotonic()
    out = []
    for i, start in enumerate(starts):
        _sleep_until(t0, start)
        wall = time.time()
        with open(f"/shared/m{i}", "wb") as f:
            f.write(b"x")
        out.append((wall, os.stat(f"/shared/m{i}").st_mtime))
    return out


@settings(max_examples=20)
@given(
    ticks=st.lists(st.integers(0, 60), min_size=2, max_size=4, unique=True).map(sorted),
    granularity=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    base=st.sampled_from(["local", "nfs", "objectstore"]),
)
def test_mtime_is_rounded_to_the_granularity(ticks: list[int], granularity: float, base: str) -> None:
    # writes start at k * 0.1 + 0.01 s (0.01..0.41 past a multiple of 0.5): a write (open to
    # close, < 0.08 s even on objectstore) never straddles a granularity boundary
    starts = tuple(1 + k * 0.1 + 0.01 for k in ticks)
    profile = simfs.profiles.get(base).replace(mtime_granularity=granularity)
    out = _run_ok(_cluster(profile), mtime_job, starts)[0]
    (w0, m0), rest = out[0], out[1:]
    for _wall, mtime in out:
        if granularity:
            assert mtime % granularity == 0
    for wall, mtime in rest:  # differences do not depend on the clock's origin
        if granularity:
            expected = (math.floor(wall / granularity) - math.floor(w0 / granularity)) * granularity
            assert mtime - m0 == pytest.approx(expected, abs=1e-6)
        else:
            assert mtime - m0 == pytest.approx(wall - w0, abs=0.05)


@pytest.mark.parametrize("profile", ["local", "nfs", "beegfs", "lustre"])
def test_default_mtime_granularity(profile: str) -> None:
    out = _run_ok(_cluster(profile), mtime_job, (1.25, 1.75, 2.25))[0]
    mtimes = [m for _, m in out]
    if profile in ("beegfs", "lustre"):  # whole seconds: the first two writes share a second
        assert mtimes[0] == mtimes[1] and mtimes[2] == mtimes[0] + 1.0
    else:  # one jiffy (4 ms at CONFIG_HZ=250)
        assert mtimes[0] < mtimes[1] < mtimes[2]
        assert mtimes[1] - mtimes[0] == pytest.approx(0.5, abs=0.01)
        steps = [(m - mtimes[0]) / 0.004 for m in mtimes[1:]]
        assert all(step == pytest.approx(round(step), abs=1e-3) for step in steps)


def mtime_clock_job():
    if dist.get_rank() != 0:
        return None
    time.sleep(2.5)
    before = time.time()
    with open("/shared/clock", "wb") as f:
        f.write(b"x")
    after = time.time()
    written = os.stat("/shared/clock").st_mtime
    os.utime("/shared/clock", (before - 3600, before - 3600))
    return before, after, written, os.stat("/shared/clock").st_mtime


@pytest.mark.parametrize("profile", list(PROFILES))
def test_mtime_reads_on_the_same_clock_as_time_time(profile: str) -> None:
    """st_mtime and time.time() share an origin (age checks like ``time.time() - getmtime(p)``
    work), and os.utime round-trips (to the granularity)."""
    g = simfs.profiles.get(PROFILES[profile]).mtime_granularity
    before, after, written, set_back = _run_ok(_cluster(PROFILES[profile]), mtime_clock_job)[0]
    assert before - g <= written <= after
    expected = before - 3600
    if g:
        expected = math.floor(expected / g) * g
    assert set_back == pytest.approx(expected, abs=1e-3)
