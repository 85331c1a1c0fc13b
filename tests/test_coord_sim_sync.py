"""coord.sync_files inside simfs clusters: the root's files (in its node-local /tmp/src) end up
byte-identical, with the same modes, in every node's node-local /tmp/dst; only what differs is
sent; stale files go (delete=True) or stay (delete=False); tampered nodes are repaired; errors
reach every rank without a hang; a node that crashed mid-sync is repaired by the restarted job."""

from __future__ import annotations

import math
import os
import random
import shutil
import stat

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import coord
import simfs
from _coord_sim import cluster, ok

SRC, DST = "/tmp/src", "/tmp/dst"
LAYOUTS = {"2x4": (2, 4), "4x2": (4, 2)}
PROFILES = ["local", "nfs", "lustre", "objectstore"]

# relative path -> (size, mode); contents are derived from the path (see _content)
BASE_TREE = {
    "pkg/a.txt": (10, 0o644),
    "pkg/big.bin": (20000, 0o600),
    "pkg/empty": (0, 0o644),
    "pkg/sub/run.sh": (5000, 0o755),
    "pkg/sub/deeper/readonly.cfg": (300, 0o444),
    "conf.yaml": (123, 0o640),
    "data/s1.bin": (7000, 0o644),
    "data/s2.bin": (9, 0o644),
    "data/notes.txt": (50, 0o644),
}
# what the sources below install in dest: a directory keeps its name, a file its base name,
# a glob its matches' paths below the pattern's fixed prefix
SOURCES = [f"{SRC}/pkg", f"{SRC}/conf.yaml", f"{SRC}/data/*.bin"]


def _expected_rel(rel: str) -> str | None:
    if rel.startswith("pkg/") or rel == "conf.yaml":
        return rel
    if rel.startswith("data/") and rel.endswith(".bin"):
        return rel[len("data/"):]
    return None


def _content(rel: str, size: int, salt: int = 0) -> bytes:
    return random.Random(f"{rel}:{salt}").randbytes(size)


def _cluster(layout: str = "2x4", profile: str = "nfs", seed: int = 0, faults=()) -> simfs.Cluster:
    nodes, rpn = LAYOUTS[layout]
    return cluster(profile, seed, faults, nodes, rpn)


_ok = ok


def write_tree(base: str, tree: dict, salt: int = 0) -> None:
    for rel, (size, mode) in tree.items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(_content(rel, size, salt))
        os.chmod(path, mode)


def snapshot(base: str) -> dict:
    """Every entry below ``base`` (not following links): files as (bytes, mode), links as
    ('LINK', target)."""
    out = {}
    for top, dirs, names in os.walk(base):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, base)
            if os.path.islink(path):
                out[rel] = ("LINK", os.readlink(path))
            else:
                with open(path, "rb") as f:
                    out[rel] = (f.read(), stat.S_IMODE(os.lstat(path).st_mode))
    return out


def _expect(tree: dict, salt: int = 0, mapping=_expected_rel) -> dict:
    out = {}
    for rel, (size, mode) in tree.items():
        dest = mapping(rel)
        if dest is not None:
            out[dest] = (_content(rel, size, salt), mode)
    return out


def _leaders(returns: dict, rpn: int) -> dict:
    return {rank: out for rank, out in returns.items() if rank % rpn == 0}


def sync_job(tree: dict, sources: list[str], chunk_size: int, root: int = 0) -> tuple:
    rank = dist.get_rank()
    if rank == root:
        write_tree(SRC, tree)
    report = coord.sync_files(sources, DST, root=root, chunk_size=chunk_size)
    leader = int(os.environ["LOCAL_RANK"]) == 0
    return report, snapshot(DST) if leader else None


# -- every node gets the root's files ------------------------------------------------------------

@pytest.mark.parametrize("profile,layout", [(p, "2x4") for p in PROFILES] + [("nfs", "4x2")])
@pytest.mark.parametrize("chunk_size", [8 << 20, 4096, 777])
def test_every_node_gets_byte_identical_files_with_modes(profile, layout, chunk_size) -> None:
    nodes, rpn = LAYOUTS[layout]
    returns = _ok(_cluster(layout, profile, seed=1).run(sync_job, BASE_TREE, SOURCES, chunk_size))
    expected = _expect(BASE_TREE)
    assert len(expected) == 8
    leaders = _leaders(returns, rpn)
    assert len(leaders) == nodes
    for rank, (_report, tree) in leaders.items():
        assert tree == expected, rank
    for report, _ in returns.values():
        assert report.files == len(expected) and report.sent == len(expected)
        assert report.bytes_sent == sum(len(data) for data, _ in expected.values())
        assert report.nodes_updated == nodes and report.removed == 0 and report.unchanged == 0


@pytest.mark.parametrize("root", [3, 5])
def test_any_rank_can_be_the_root(root) -> None:
    returns = _ok(_cluster("2x4", "nfs", seed=2).run(sync_job, BASE_TREE, SOURCES, 4096, root))
    for rank, (_, tree) in _leaders(returns, 4).items():
        assert tree == _expect(BASE_TREE), rank


# -- incremental: only what differs is sent --------------------------------------------------------

def incremental_job(steps: list[str]) -> list:
    """Sync, then for each step change something and sync again; returns per step the report
    and (on node leaders) the dest snapshot."""
    rank = dist.get_rank()
    leader = int(os.environ["LOCAL_RANK"]) == 0
    out = []
    if rank == 0:
        write_tree(SRC, BASE_TREE)
    for step in steps:
        if rank == 0 and step == "change_one":
            write_tree(SRC, {"pkg/sub/run.sh": (5000, 0o755)}, salt=1)
        if rank == 0 and step == "grow_one":
            write_tree(SRC, {"pkg/big.bin": (20001, 0o600)})
        if rank == 0 and step == "chmod_one":
            os.chmod(f"{SRC}/pkg/a.txt", 0o600)
        if leader and step.startswith("stale"):
            os.makedirs(f"{DST}/pkg/old", exist_ok=True)
            with open(f"{DST}/pkg/old/stale.txt", "w") as f:
                f.write("from an earlier version")
        if leader and rank // int(os.environ["LOCAL_WORLD_SIZE"]) == 1 and step == "tamper":
            with open(f"{DST}/pkg/a.txt", "r+b") as f:
                f.write(b"X")
            os.unlink(f"{DST}/s2.bin")
            os.chmod(f"{DST}/conf.yaml", 0o666)
        dist.barrier()
        report = coord.sync_files(SOURCES, DST, chunk_size=4096, delete=step != "stale_keep")
        out.append((step, report, snapshot(DST) if leader else None))
    return out


def test_second_call_with_nothing_changed_sends_nothing() -> None:
    returns = _ok(_cluster("2x4", "nfs", seed=3).run(incremental_job, ["first", "again", "again"]))
    for steps in returns.values():
        for _, report, tree in steps[1:]:
            assert report.sent == 0 and report.bytes_sent == 0 and report.nodes_updated == 0
            assert report.unchanged == report.files == 8 and report.removed == 0
            if tree is not None:
                assert tree == _expect(BASE_TREE)


def test_changing_one_file_sends_only_that_file() -> None:
    returns = _ok(_cluster("4x2", "nfs", seed=4).run(incremental_job, ["first", "change_one", "grow_one"]))
    for steps in returns.values():
        (_, first, _), (_, one, tree1), (_, grown, tree2) = steps
        assert first.sent == 8
        assert (one.sent, one.bytes_sent, one.unchanged, one.nodes_updated) == (1, 5000, 7, 4)
        assert (grown.sent, grown.bytes_sent, grown.unchanged) == (1, 20001, 7)
        if tree1 is not None:
            expected = _expect(BASE_TREE)
            expected["pkg/sub/run.sh"] = (_content("pkg/sub/run.sh", 5000, 1), 0o755)
            assert tree1 == expected
            assert tree2["pkg/big.bin"] == (_content("pkg/big.bin", 20001), 0o600)


def test_mode_change_alone_is_applied_without_sending_bytes() -> None:
    returns = _ok(_cluster("2x4", "local", seed=5).run(incremental_job, ["first", "chmod_one"]))
    for steps in returns.values():
        _, report, tree = steps[1]
        assert report.sent == 0 and report.bytes_sent == 0
        if tree is not None:
            assert tree["pkg/a.txt"][1] == 0o600


@pytest.mark.parametrize("delete", [True, False])
def test_stale_files_removed_with_delete_and_kept_without(delete) -> None:
    step = "stale_delete" if delete else "stale_keep"
    returns = _ok(_cluster("2x4", "nfs", seed=6).run(incremental_job, ["first", step]))
    for steps in returns.values():
        _, report, tree = steps[1]
        assert report.sent == 0
        assert report.removed == (1 if delete else 0)
        if tree is not None:
            stale = os.path.join("pkg", "old", "stale.txt")
            assert (stale in tree) is not delete
            assert {k: v for k, v in tree.items() if k != stale} == _expect(BASE_TREE)


def test_tampered_node_is_repaired_and_only_it_is_updated() -> None:
    returns = _ok(_cluster("2x4", "nfs", seed=7).run(incremental_job, ["first", "tamper"]))
    for rank, steps in returns.items():
        _, report, tree = steps[1]
        assert (report.sent, report.nodes_updated) == (2, 1)  # the changed and the deleted file
        assert report.bytes_sent == 10 + 9
        assert report.unchanged == (8 if rank < 4 else 6)
        if tree is not None:
            assert tree == _expect(BASE_TREE), rank  # conf.yaml's mode was put back too


def tamper_job(kind: str) -> tuple:
    """First sync, then node 1's leader damages its copy in one way, then sync again."""
    rank = dist.get_rank()
    if rank == 0:
        write_tree(SRC, BASE_TREE)
    coord.sync_files(SOURCES, DST)
    if rank == 4:
        target = f"{DST}/pkg/a.txt"
        if kind == "truncated":
            os.truncate(target, 3)
        elif kind == "emptied":
            os.truncate(target, 0)
        elif kind == "symlink_instead_of_file":
            os.unlink(target)
            os.symlink(f"{DST}/conf.yaml", target)
        elif kind == "directory_instead_of_file":
            os.unlink(target)
            os.makedirs(f"{target}/junk")
            with open(f"{target}/junk/j", "w") as f:
                f.write("junk")
        elif kind == "file_instead_of_directory":
            os.unlink(f"{DST}/pkg/sub/deeper/readonly.cfg")
            os.rmdir(f"{DST}/pkg/sub/deeper")
            with open(f"{DST}/pkg/sub/deeper", "w") as f:
                f.write("in the way")
        elif kind == "symlinked_directory":
            os.makedirs("/tmp/elsewhere", exist_ok=True)
            shutil.rmtree(f"{DST}/pkg/sub")
            os.symlink("/tmp/elsewhere", f"{DST}/pkg/sub")  # e.g. someone moved it to a bigger disk
        elif kind == "whole_dest_removed":
            shutil.rmtree(DST)
    dist.barrier()
    try:
        coord.sync_files(SOURCES, DST)
    except coord.CoordError as exc:
        return "CoordError", str(exc)
    elsewhere = sorted(os.listdir("/tmp/elsewhere")) if os.path.isdir("/tmp/elsewhere") else []
    return "ok", snapshot(DST) if rank % 4 == 0 else None, elsewhere


@pytest.mark.parametrize("kind", ["truncated", "emptied", "symlink_instead_of_file", "whole_dest_removed",
                                  "directory_instead_of_file", "file_instead_of_directory",
                                  "symlinked_directory"])
def test_any_tampering_of_a_node_copy_is_repaired(kind) -> None:
    """'Leave every node's copy exactly equal to the root's' whatever the node's copy became:
    also a directory or a symbolic link where the root has a file or a directory (rsync replaces
    them; writing through a symlinked directory would put files outside dest)."""
    returns = _ok(_cluster("2x4", "local", seed=8).run(tamper_job, kind))
    for rank, out in returns.items():
        assert out[0] == "ok", (rank, out)
        if rank % 4 == 0:
            assert out[1] == _expect(BASE_TREE), rank
        assert out[2] == [], "files were written outside the destination"


# -- streaming and batching --------------------------------------------------------------------------

def _tensor_broadcasts(result: simfs.Result) -> int:
    return sum(1 for e in result.trace if e.rank == 0 and e.op == "broadcast")


@pytest.mark.parametrize("chunk_size", [1000, 4096, 19999, 20000, 1 << 20])
def test_chunks_smaller_than_a_file_stream_it(chunk_size) -> None:
    tree = {"one/big.bin": (20000, 0o644)}
    result = _cluster("2x4", "nfs", seed=9).run(sync_job, tree, [f"{SRC}/one"], chunk_size)
    for _, snap in _leaders(_ok(result), 4).values():
        assert snap == {"one/big.bin": (_content("one/big.bin", 20000), 0o644)}
    assert _tensor_broadcasts(result) == math.ceil(20000 / chunk_size)


def test_many_small_files_are_batched() -> None:
    tree = {f"many/f{i:03d}": (i % 7 * 10, 0o644) for i in range(250)}
    total = sum(size for size, _ in tree.values())
    result = _cluster("2x4", "nfs", seed=10).run(sync_job, tree, [f"{SRC}/many"], 2048)
    for report, snap in _leaders(_ok(result), 4).values():
        assert snap == _expect(tree, mapping=lambda rel: rel) and report.sent == 250
    assert _tensor_broadcasts(result) == math.ceil(total / 2048) < 20  # not one transfer per file


# -- errors: clear, on every rank, no hang -------------------------------------------------------------

def setup_job() -> None:
    if dist.get_rank() == 0:
        write_tree(SRC, BASE_TREE)


def error_job(case: str) -> tuple:
    rank = dist.get_rank()
    sources = SOURCES
    if rank == 0 and case == "symlink_outside":
        with open("/tmp/secret", "w") as f:
            f.write("not yours")
        os.symlink("/tmp/secret", f"{SRC}/pkg/sub/leak")
    if case == "missing":
        sources = [*SOURCES, f"{SRC}/nope"]
    elif case == "glob_matches_nothing":
        sources = [f"{SRC}/data/*.nothing"]
    try:
        coord.sync_files(sources, DST)
    except coord.CoordError as exc:
        return "CoordError", str(exc)
    return "returned", None


ERROR_CASES = {
    "missing": ([], ["the root could not list its sources", f"{SRC}/nope", "does not exist"]),
    "glob_matches_nothing": ([], ["the root could not list its sources", "matches no file"]),
    "symlink_outside": ([], ["symbolic link to /tmp/secret", "outside"]),
    "unreadable": ([simfs.InjectErrno("EACCES", path=f"{SRC}/pkg/big.bin", op="open", ranks=(0,))],
                   ["cannot read source", "big.bin", "Permission denied"]),
    "dest_full": ([simfs.InjectErrno("ENOSPC", path=f"{DST}/*", ranks=(4,))],
                  ["No space left on device"]),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
@pytest.mark.parametrize("layout", ["2x4", "4x2"])
def test_errors_are_raised_on_every_rank_without_a_hang(case, layout) -> None:
    faults, phrases = ERROR_CASES[case]
    cluster = _cluster(layout, "nfs", seed=11)
    _ok(cluster.run(setup_job))
    result = cluster.run(error_job, case, faults=faults)
    returns = _ok(result)
    assert len(returns) == 8
    for rank, (kind, message) in returns.items():
        assert kind == "CoordError", (rank, kind)
        for phrase in phrases:
            assert phrase in message, (rank, message)
    assert result.virtual_time < 60


# -- a node crashes during the sync; the restarted job repairs it ---------------------------------------

def crash_sync_job(chunk_size: int) -> tuple:
    if dist.get_rank() == 0 and not os.path.exists(SRC):
        write_tree(SRC, BASE_TREE)
    report = coord.sync_files(SOURCES, DST, chunk_size=chunk_size)
    return report, snapshot(DST) if int(os.environ["LOCAL_RANK"]) == 0 else None


@pytest.mark.parametrize("layout,node", [("2x4", 1), ("4x2", 2)])
@given(seed=st.integers(0, 2**32 - 1), after_ops=st.integers(0, 60), chunk_size=st.sampled_from([1000, 8 << 20]))
@settings(max_examples=8)
def test_restarted_sync_repairs_a_node_that_crashed_mid_sync(layout, node, seed, after_ops, chunk_size) -> None:
    rpn = LAYOUTS[layout][1]
    cluster = _cluster(layout, "nfs", seed, faults=[simfs.CrashNode(node=node, after_ops=after_ops)])
    first = cluster.run(crash_sync_job, chunk_size)
    crashed_mid_sync = bool(first.crashed)
    if crashed_mid_sync:
        assert sorted(first.crashed) == list(range(node * rpn, (node + 1) * rpn))
    again = _ok(cluster.run(crash_sync_job, chunk_size, faults=[]))
    for rank, (_report, tree) in _leaders(again, rpn).items():
        assert tree == _expect(BASE_TREE), rank  # byte-identical, modes too, no temporary leftovers
    if not crashed_mid_sync:  # the crash point lay beyond the first job: nothing left to do
        assert again[0][0].sent == 0


def test_crash_on_the_rename_of_a_received_file_then_repair() -> None:
    cluster = _cluster("2x4", "nfs", seed=12, faults=[simfs.CrashNode(node=1, on=f"rename:{DST}/*")])
    first = cluster.run(crash_sync_job, 4096)
    assert sorted(first.crashed) == [4, 5, 6, 7] and not first.ok
    again = _ok(cluster.run(crash_sync_job, 4096, faults=[]))
    assert again[4][0].sent == 8 and again[4][0].unchanged == 0  # node 1 lost everything it had received
    for _, tree in _leaders(again, 4).values():
        assert tree == _expect(BASE_TREE)


def test_failed_sync_leaves_no_partial_temporary_files_on_surviving_nodes() -> None:
    """When a peer dies mid-transfer the surviving receivers get a collective error; the files
    they were receiving must not stay behind half-written in dest (``_Receiver.abort`` exists
    for this; with delete=False nothing else would ever remove them)."""
    cluster = _cluster("2x4", "nfs", seed=12, faults=[simfs.CrashNode(node=1, on=f"rename:{DST}/*")])
    first = cluster.run(crash_sync_job, 4096)
    assert sorted(first.crashed) == [4, 5, 6, 7]
    left = _ok(cluster.run(lambda: sorted(snapshot(DST)) if os.path.isdir(DST) else [], faults=[]))
    assert not [name for name in left[0] if ".sync." in name], left[0]


# -- Hypothesis: random trees, synced then changed and synced again ------------------------------------

NAME = st.text(alphabet="abcxyzABZ019_-. é", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
MODES = st.sampled_from([0o644, 0o600, 0o755, 0o444, 0o700, 0o640])


@st.composite
def trees(draw) -> dict:
    paths = draw(st.lists(st.lists(NAME, min_size=1, max_size=3).map("/".join), min_size=1, max_size=12,
                          unique=True))
    files = {}
    for path in sorted(paths, key=len):
        # a file cannot also be a directory: drop paths whose prefix is a file (and vice versa)
        parts = path.split("/")
        if any("/".join(parts[:i]) in files for i in range(1, len(parts))):
            continue
        if any(other.startswith(path + "/") for other in files):
            continue
        files[path] = (draw(st.integers(0, 20000)), draw(MODES))
    return {f"t/{k}": v for k, v in files.items()}


def tree_job(tree: dict, changes: dict, removed: list[str], chunk_size: int) -> list:
    rank = dist.get_rank()
    leader = int(os.environ["LOCAL_RANK"]) == 0
    out = []
    if rank == 0:
        write_tree(SRC, tree)
    out.append((coord.sync_files(f"{SRC}/t", DST, chunk_size=chunk_size), snapshot(DST) if leader else None))
    if rank == 0:
        write_tree(SRC, changes, salt=1)
        for rel in removed:
            os.unlink(os.path.join(SRC, rel))
    out.append((coord.sync_files(f"{SRC}/t", DST, chunk_size=chunk_size), snapshot(DST) if leader else None))
    return out


@pytest.mark.parametrize("profile", PROFILES)
@given(data=st.data())
@settings(max_examples=6)
def test_random_trees_sync_then_resync_after_changes(profile, data) -> None:
    tree = data.draw(trees(), label="tree")
    rels = sorted(tree)
    changed = data.draw(st.lists(st.sampled_from(rels), unique=True, max_size=3), label="changed")
    removed = data.draw(st.lists(st.sampled_from([r for r in rels if r not in changed] or rels), unique=True,
                                 max_size=2).map(lambda xs: [x for x in xs if x not in changed]), label="removed")
    changes = {rel: (data.draw(st.integers(1, 20000)), data.draw(MODES)) for rel in changed}
    chunk_size = data.draw(st.sampled_from([700, 4096, 8 << 20]), label="chunk_size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    returns = _ok(_cluster("2x4", profile, seed).run(tree_job, tree, changes, removed, chunk_size))

    first = _expect(tree, mapping=lambda rel: rel)
    second = {k: v for k, v in first.items() if k not in removed}
    for rel, (size, mode) in changes.items():
        second[rel] = (_content(rel, size, salt=1), mode)
    content_changed = [rel for rel in changed if second[rel][0] != first[rel][0]]
    for rank, ((r1, snap1), (r2, snap2)) in returns.items():
        assert r1.files == len(tree) and r1.sent == len(tree)
        assert r2.files == len(second) and r2.sent == len(content_changed)
        assert r2.bytes_sent == sum(len(second[rel][0]) for rel in content_changed)
        assert r2.removed == len(removed)
        if rank % 4 == 0:
            assert snap1 == first and snap2 == second
