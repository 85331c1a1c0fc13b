"""coord on real processes: torch.distributed with gloo, 4 spawned ranks emulating 2 nodes of 2
ranks each (torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE / GROUP_RANK), on the local disk.

Spawning costs ~3 s (every process imports torch), so one spawned function runs many checks and
returns what each rank observed; the tests below assert on those observations. Rank code is at
module level (the spawn context pickles it by name)."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import time

import pytest

import coord
from _procs import error_of, run_procs

pytestmark = pytest.mark.slow  # real gloo processes: left out of README's test command, run by .ci/run

WORLD = 4
NODES = 2
BIG = 9 << 20  # > 8 MiB: more than one default sync chunk, more than typical socket buffers


def _tree(root: str) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mode) of every file under root."""
    out = {}
    for top, _, names in os.walk(root):
        for name in names:
            p = os.path.join(top, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (hashlib.sha256(f.read()).hexdigest(), stat.S_IMODE(os.stat(p).st_mode))
    return out


def _layout(comm) -> tuple:
    return comm.local_rank, comm.local_world_size, comm.node, comm.num_nodes


# -- one spawn: layout, collectives, makedirs_once, rank0_decides, wait_visible, sync_files ------------

def _world_checks(base: str) -> dict:
    import torch.distributed as dist

    out: dict = {}
    rank = dist.get_rank()
    comm = coord.get_comm()
    out["comm"] = (type(comm).__name__, comm.rank, comm.world_size, *_layout(comm))
    out["passthrough"] = coord.get_comm(comm) is comm

    # -- node layout when torchrun's variables are absent or unusable: from the hostnames ---------
    saved = {k: os.environ.pop(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
    out["hosts_real"] = _layout(coord.TorchComm())
    real_hostname = socket.gethostname
    socket.gethostname = lambda: ["hostB", "hostA", "hostB", "hostA"][rank]
    try:
        out["hosts_fake"] = _layout(coord.TorchComm())
    finally:
        socket.gethostname = real_hostname
    bad_envs = {"partial": {"LOCAL_RANK": saved["LOCAL_RANK"]},
                "rank_out_of_range": {"LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
                "local_world_too_big": {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0"},
                "not_a_number": {"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}}
    out["bad_env"] = {}
    for name, env in bad_envs.items():
        os.environ.update(env)
        out["bad_env"][name] = _layout(coord.TorchComm())
        for k in env:
            del os.environ[k]
    os.environ.update(saved)

    # -- object collectives -------------------------------------------------------------------------
    out["broadcast"] = comm.broadcast_object({"from": rank, "big": list(range(1000))} if rank == 1 else None, src=1)
    out["all_gather"] = comm.all_gather_object(("rank", rank))
    out["gather"] = comm.gather_object(rank * 10, dst=1)
    out["scatter"] = comm.scatter_object([f"item{i}" for i in range(WORLD)] if rank == 2 else None, src=2)
    payload = os.urandom(BIG) if rank == 3 else None
    got = comm.broadcast_bytes(payload, src=3)
    out["bytes"] = (len(got), hashlib.sha256(got).hexdigest(), type(got).__name__)
    if rank == 3:
        out["bytes_sent"] = hashlib.sha256(payload).hexdigest()
    out["bytes_empty"] = comm.broadcast_bytes(b"" if rank == 0 else None, src=0)
    sub = comm.subgroup([3, 1])
    if sub is None:
        out["sub"] = None
    else:
        blob = os.urandom(BIG) if sub.rank == 1 else None
        got = sub.broadcast_bytes(blob, src=1)
        out["sub"] = {
            "rank": sub.rank, "world": sub.world_size, "layout": _layout(sub),
            "passthrough": coord.get_comm(sub) is sub,
            "broadcast": sub.broadcast_object(f"from {rank}" if sub.rank == 1 else None, src=1),
            "all_gather": sub.all_gather_object(rank),
            "gather": sub.gather_object(rank, dst=1),
            "scatter": sub.scatter_object(["s0", "s1"] if sub.rank == 1 else None, src=1),
            "bytes": hashlib.sha256(got).hexdigest(),
            "bytes_sent": hashlib.sha256(blob).hexdigest() if blob is not None else None,
            "decide": coord.rank0_decides(lambda: ("decided by", rank), comm=sub),
        }
    comm.barrier()
    comm.barrier(timeout=30)  # gloo: a monitored barrier

    # -- makedirs_once: who creates, and every rank can use the directory at once ---------------------
    calls: list[str] = []
    real_makedirs = os.makedirs

    def recording_makedirs(name, *args, **kwargs):
        calls.append(os.fspath(name))
        return real_makedirs(name, *args, **kwargs)

    os.makedirs = recording_makedirs
    try:
        target = f"{base}/mk/global/a/b"
        coord.makedirs_once(target)
        with open(f"{target}/from-rank{rank}", "w") as f:
            f.write("x")
        out["mk_global_creator"] = target in calls
        node_target = f"{base}/mk/node{comm.node}/a"
        coord.makedirs_once(node_target, scope="node", comm=comm)
        with open(f"{node_target}/from-rank{rank}", "w") as f:
            f.write("x")
        out["mk_node_creator"] = node_target in calls
        coord.makedirs_once(target)  # already there: fine again
        out["mk_fail"] = error_of(lambda: coord.makedirs_once(f"{base}/blocker/sub", timeout=2))
        out["mk_bad_scope"] = error_of(lambda: coord.makedirs_once(f"{base}/x", scope="rack"))
    finally:
        os.makedirs = real_makedirs
    comm.barrier()
    out["mk_global_listing"] = sorted(os.listdir(target))

    # -- rank0_decides ------------------------------------------------------------------------------------
    evaluated = []

    def decide():
        evaluated.append(rank)
        return {"rank": rank, "pid": os.getpid()}

    out["decide"] = coord.rank0_decides(decide)
    out["decide_src2"] = coord.rank0_decides(decide, comm=comm, src=2)
    out["decide_evaluated"] = evaluated

    def fails():
        raise KeyError(f"nothing on rank {rank}")

    out["decide_error"] = error_of(lambda: coord.rank0_decides(fails))

    # -- wait_visible: a waiter returns once a file made later by another rank exists -----------------
    comm.barrier()
    flag = f"{base}/wv/flag"
    if rank == 0:
        time.sleep(0.3)
        out["wv_created"] = time.time()
        os.makedirs(os.path.dirname(flag), exist_ok=True)
        with coord.atomic_write(flag, "w") as f:  # appears whole
            f.write("ready")
    else:
        coord.wait_visible(flag, timeout=20, is_dir=False, interval=0.01, max_interval=0.05)
        out["wv_seen"] = time.time()
        with open(flag) as f:
            out["wv_content"] = f.read()
    start = time.monotonic()
    out["wv_timeout"] = error_of(lambda: coord.wait_visible(f"{base}/wv/never", timeout=0.2, interval=0.02))
    out["wv_timeout_took"] = time.monotonic() - start

    # -- sync_files: rank 0's sources to every "node"'s own destination ------------------------------
    dest = f"{base}/dst/node{comm.node}"
    leader = comm.local_rank == 0
    out["sync"] = []
    for step in range(3):
        if step == 2:
            if rank == 0:
                with open(f"{base}/src/model/sub/config.json", "w") as f:
                    f.write('{"changed": true}')
            if rank == 2:  # a stale file on node 1
                with open(f"{dest}/model/stale.bin", "w") as f:
                    f.write("stale")
        report = coord.sync_files(f"{base}/src/model", dest, chunk_size=1 << 20)
        out["sync"].append((report, _tree(dest) if leader else None))
    out["sync_missing_source"] = error_of(lambda: coord.sync_files(f"{base}/src/missing", dest))
    return out


def _make_source(root: str) -> dict[str, bytes]:
    files = {"weights.bin": os.urandom(3 << 20), "tokenizer.txt": b"vocab\n" * 1000, "sub/config.json": b"{}",
             "sub/empty": b"", "sub/deeper/notes.md": b"# notes\n"}
    for rel, data in files.items():
        path = os.path.join(root, "model", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    os.chmod(os.path.join(root, "model", "sub", "deeper", "notes.md"), 0o600)
    return files


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("world")
    files = _make_source(str(base / "src"))
    (base / "blocker").write_text("a regular file where a directory is wanted")
    start = time.monotonic()
    outs = run_procs(_world_checks, WORLD, str(base), nodes=NODES, timeout=180)
    return {"base": str(base), "outs": outs, "files": files, "took": time.monotonic() - start}


def test_layout_from_torchrun_env(world) -> None:
    assert [o["comm"] for o in world["outs"]] == [
        ("TorchComm", 0, 4, 0, 2, 0, 2), ("TorchComm", 1, 4, 1, 2, 0, 2),
        ("TorchComm", 2, 4, 0, 2, 1, 2), ("TorchComm", 3, 4, 1, 2, 1, 2)]
    assert all(o["passthrough"] for o in world["outs"])


def test_layout_from_hostnames(world) -> None:
    outs = world["outs"]
    # one real machine: one node holding every rank
    assert [o["hosts_real"] for o in outs] == [(r, 4, 0, 1) for r in range(4)]
    # hostnames B, A, B, A: nodes numbered by first appearance, local ranks in rank order
    assert [o["hosts_fake"] for o in outs] == [(0, 2, 0, 2), (0, 2, 1, 2), (1, 2, 0, 2), (1, 2, 1, 2)]
    for case in ("partial", "rank_out_of_range", "local_world_too_big", "not_a_number"):
        assert [o["bad_env"][case] for o in outs] == [(r, 4, 0, 1) for r in range(4)], case


def test_object_collectives(world) -> None:
    outs = world["outs"]
    for rank, o in enumerate(outs):
        assert o["broadcast"] == {"from": 1, "big": list(range(1000))}
        assert o["all_gather"] == [("rank", r) for r in range(4)]
        assert o["gather"] == ([0, 10, 20, 30] if rank == 1 else None)
        assert o["scatter"] == f"item{rank}"
        assert o["bytes"] == (BIG, outs[3]["bytes_sent"], "bytes")
        assert o["bytes_empty"] == b""


def test_subgroup(world) -> None:
    outs = world["outs"]
    assert outs[0]["sub"] is None and outs[2]["sub"] is None
    one, three = outs[1]["sub"], outs[3]["sub"]
    assert (one["rank"], three["rank"]) == (0, 1) and one["world"] == three["world"] == 2
    assert one["layout"] == (0, 2, 0, 1) and three["layout"] == (1, 2, 0, 1)  # a subgroup asks the hostnames
    assert one["passthrough"] and three["passthrough"]
    for s in (one, three):
        assert s["broadcast"] == "from 3"  # group rank 1 is global rank 3
        assert s["all_gather"] == [1, 3]
        assert s["bytes"] == three["bytes_sent"]
        assert s["decide"] == ("decided by", 1)
    assert one["gather"] is None and three["gather"] == [1, 3]
    assert (one["scatter"], three["scatter"]) == ("s0", "s1")


def test_makedirs_once(world) -> None:
    outs = world["outs"]
    assert [o["mk_global_creator"] for o in outs] == [True, False, False, False]
    assert [o["mk_node_creator"] for o in outs] == [True, False, True, False]  # local rank 0 of each node
    for o in outs:
        assert o["mk_global_listing"] == [f"from-rank{r}" for r in range(4)]
        assert o["mk_fail"][0] == "CoordError" and "rank 0 could not create it" in o["mk_fail"][1]
        assert o["mk_bad_scope"][0] == "ValueError"
    base = world["base"]
    assert sorted(os.listdir(f"{base}/mk/node0/a")) == ["from-rank0", "from-rank1"]
    assert sorted(os.listdir(f"{base}/mk/node1/a")) == ["from-rank2", "from-rank3"]


def test_rank0_decides(world) -> None:
    outs = world["outs"]
    decided = outs[0]["decide"]
    assert decided["rank"] == 0 and all(o["decide"] == decided for o in outs)
    by_two = outs[2]["decide_src2"]
    assert by_two["rank"] == 2 and by_two["pid"] != decided["pid"] and all(o["decide_src2"] == by_two for o in outs)
    assert [o["decide_evaluated"] for o in outs] == [[0], [], [2], []]  # fn runs on the deciding rank only
    kind, message = outs[0]["decide_error"]
    assert kind == "KeyError" and "nothing on rank 0" in message  # the original error on rank 0
    for o in outs[1:]:
        kind, message = o["decide_error"]
        assert kind == "CoordError" and "rank 0" in message and "KeyError" in message and "nothing on rank 0" in message


def test_wait_visible(world) -> None:
    outs = world["outs"]
    for o in outs[1:]:
        assert o["wv_seen"] >= outs[0]["wv_created"] and o["wv_content"] == "ready"
    for o in outs:
        assert o["wv_timeout"][0] == "WaitTimeout" and "never" in o["wv_timeout"][1]
        assert 0.2 <= o["wv_timeout_took"] < 2.0


def test_sync_files(world) -> None:
    outs, base = world["outs"], world["base"]
    files = world["files"]
    total = sum(len(d) for d in files.values())
    expected_tree = {os.path.join("model", rel): v for rel, v in _tree(os.path.join(base, "src", "model")).items()}
    for rank, o in enumerate(outs):
        (first, tree1), (second, tree2), (third, tree3) = o["sync"]
        assert first == coord.SyncReport(files=5, sent=5, unchanged=0, removed=0, bytes_sent=total, nodes_updated=2)
        # incremental: nothing differs, nothing is sent
        assert second == coord.SyncReport(files=5, sent=0, unchanged=5, removed=0, bytes_sent=0, nodes_updated=0)
        # one file changed at the root (and a stale file on node 1): only that file travels
        node = rank // 2
        assert third == coord.SyncReport(files=5, sent=1, unchanged=4, removed=node,
                                         bytes_sent=len('{"changed": true}'), nodes_updated=2)
        if rank % 2 == 0:  # node leaders reported their copy after each call
            assert tree3 == expected_tree
            assert tree1 == tree2
            assert tree1[os.path.join("model", "sub", "config.json")][0] == hashlib.sha256(b"{}").hexdigest()
            assert {k: v for k, v in tree1.items() if not k.endswith("config.json")} == \
                {k: v for k, v in tree3.items() if not k.endswith("config.json")}
        kind, message = o["sync_missing_source"]
        assert kind == "CoordError" and "could not list its sources" in message
    for node in (0, 1):
        assert _tree(f"{base}/dst/node{node}") == expected_tree
        assert stat.S_IMODE(os.stat(f"{base}/dst/node{node}/model/sub/deeper/notes.md").st_mode) == 0o600
    assert not os.path.exists(f"{base}/dst/node1/model/stale.bin")


# -- FileLock contention: no update lost; the unlocked read-modify-write loses them ------------------

def _counter_contention(base: str, locked_rounds: int, naive_rounds: int) -> dict:
    comm = coord.get_comm()
    counter, naive, inside = f"{base}/counter", f"{base}/naive", f"{base}/inside"
    if comm.rank == 0:
        for path in (counter, naive):
            with open(path, "w") as f:
                f.write("0")
    comm.barrier()
    overlaps = 0
    start = time.monotonic()
    for _ in range(locked_rounds):
        with coord.FileLock(f"{base}/lock", timeout=60, poll=0.005):
            try:  # nobody else may be inside: an exclusive marker for the critical section
                os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                overlaps += 1
            with open(counter) as f:
                value = int(f.read())
            time.sleep(0.002)  # widen the read-modify-write window
            with open(counter, "w") as f:
                f.write(str(value + 1))
            try:
                os.unlink(inside)
            except FileNotFoundError:
                overlaps += 1
    locked_took = time.monotonic() - start
    comm.barrier()
    with open(counter) as f:
        locked_total = int(f.read())
    # the naive version: read, (everyone has read), write
    for _ in range(naive_rounds):
        with open(naive) as f:
            value = int(f.read())
        comm.barrier()
        with open(naive, "w") as f:
            f.write(str(value + 1))
        comm.barrier()
    with open(naive) as f:
        naive_total = int(f.read())
    leftovers = sorted(n for n in os.listdir(base) if n.startswith("lock."))
    return {"locked": locked_total, "naive": naive_total, "overlaps": overlaps, "took": locked_took,
            "generations": leftovers}


def test_filelock_contention_loses_no_update(tmp_path) -> None:
    outs = run_procs(_counter_contention, WORLD, str(tmp_path), 25, 5, timeout=120)
    assert [o["overlaps"] for o in outs] == [0] * WORLD
    assert all(o["locked"] == WORLD * 25 for o in outs)
    # the same contention without a lock: every rank read the same value in each round
    assert all(o["naive"] == 5 for o in outs)  # 20 increments, 15 lost
    # older generations were cleaned up: generation 0 (never re-created) and the newest remain
    assert outs[0]["generations"][0] == "lock.000000000000" and len(outs[0]["generations"]) == 2
    assert os.listdir(tmp_path) and not os.path.exists(tmp_path / "inside")


# -- makedirs_once(scope="node") when one node's creator fails --------------------------------------

def _node_scope_failure(base: str) -> tuple[str, str] | None:
    comm = coord.get_comm()
    return error_of(lambda: coord.makedirs_once(f"{base}/n/node{comm.node}/x", scope="node", timeout=5))


def test_makedirs_once_node_scope_failure_raises_everywhere(tmp_path) -> None:
    """Node 1's creator cannot create its directory (a regular file is in the way). The docstring
    promises an exception on every rank; the ranks of node 0 must not be left in a collective."""
    (tmp_path / "n" / "node1").parent.mkdir()
    (tmp_path / "n" / "node1").write_text("in the way")
    outs = run_procs(_node_scope_failure, WORLD, str(tmp_path), nodes=NODES, timeout=60)
    for rank, outcome in enumerate(outs):
        assert outcome is not None and outcome[0] == "CoordError", (rank, outcome)
    assert "could not create" in outs[2][1]
