"""``simfs://`` for fsspec: the calling rank's view of the simulated filesystems, and
torch.distributed.checkpoint's FsspecWriter/FsspecReader running on top of it."""

from __future__ import annotations

import logging
import os
import time

import fsspec
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs

dcp = pytest.importorskip("torch.distributed.checkpoint")
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter  # noqa: E402


def _ok(result: simfs.Result) -> dict:
    assert result.ok, result.summary() + "\n" + "".join(result.tracebacks.values())
    return result.returns


def _attempt(fn) -> object:
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the type is the observation
        return (type(exc).__name__,)


# -- basic operations -------------------------------------------------------------------------------

def write_read_job() -> dict:
    rank = dist.get_rank()
    fs = fsspec.filesystem("simfs")
    if rank == 0:
        fs.makedirs("/shared/fs/sub", exist_ok=True)
        with fsspec.open("simfs:///shared/fs/x", "wb") as f:
            f.write(b"hello")
        with fs.open("/shared/fs/sub/y.txt", "w") as f:
            f.write("text ✓")
    dist.barrier()
    out: dict = {}
    with fsspec.open("simfs:///shared/fs/x", "rb") as f:
        out["read"] = f.read()
    with fsspec.open("simfs:///shared/fs/sub/y.txt", "r", encoding="utf-8") as f:
        out["read_text"] = f.read()
    with open("/shared/fs/x", "rb") as f:
        out["builtin_open"] = f.read()
    out["ls"] = sorted(fs.ls("/shared/fs", detail=False))
    out["ls_url"] = sorted(fs.ls("simfs:///shared/fs/", detail=False))
    out["ls_detail"] = sorted((d["name"], d["type"], d["size"]) for d in fs.ls("/shared/fs", detail=True))
    out["ls_file"] = fs.ls("/shared/fs/x", detail=False)
    info = fs.info("simfs:///shared/fs/x")
    out["info"] = (info["name"], info["size"], info["type"])
    out["info_dir"] = fs.info("/shared/fs/sub")["type"]
    out["exists"] = (fs.exists("/shared/fs/x"), fs.exists("/shared/fs/nope"), fs.isdir("/shared/fs/sub"),
                     fs.isfile("/shared/fs/x"), fs.isfile("/shared/fs/sub"))
    out["cat"] = fs.cat("/shared/fs/sub/y.txt")
    out["cat_range"] = fs.cat_file("/shared/fs/x", start=1, end=3)
    out["size"] = fs.size("/shared/fs/x")
    return out


def test_write_then_read_from_another_node() -> None:
    returns = _ok(simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=0).run(write_read_job))
    for got in returns.values():
        assert got["read"] == got["builtin_open"] == b"hello"
        assert got["read_text"] == "text ✓"
        assert got["ls"] == got["ls_url"] == ["/shared/fs/sub", "/shared/fs/x"]
        assert got["ls_detail"][1] == ("/shared/fs/x", "file", 5)
        assert got["ls_detail"][0][:2] == ("/shared/fs/sub", "directory")
        assert got["ls_file"] == ["/shared/fs/x"]
        assert got["info"] == ("/shared/fs/x", 5, "file")
        assert got["info_dir"] == "directory"
        assert got["exists"] == (True, False, True, True, False)
        assert got["cat"] == "text ✓".encode()
        assert got["cat_range"] == b"el"
        assert got["size"] == 5


def namespace_job() -> dict:
    fs = fsspec.filesystem("simfs")
    out: dict = {}
    fs.makedirs("/shared/ns/a/b", exist_ok=True)
    out["makedirs_exists"] = _attempt(lambda: fs.makedirs("/shared/ns/a/b", exist_ok=False))
    out["makedirs_ok"] = _attempt(lambda: fs.makedirs("/shared/ns/a/b", exist_ok=True))
    fs.mkdir("/shared/ns/m/n")  # create_parents defaults to True
    fs.pipe("/shared/ns/a/f", b"payload")
    out["info_missing"] = _attempt(lambda: fs.info("/shared/ns/nope"))
    fs.cp_file("/shared/ns/a/f", "/shared/ns/a/g")
    out["copied"] = fs.cat("/shared/ns/a/g")
    fs.mv("/shared/ns/a/g", "/shared/ns/h")
    out["moved"] = (fs.exists("/shared/ns/a/g"), fs.cat("/shared/ns/h"))
    out["find"] = fs.find("/shared/ns")
    out["glob"] = sorted(fs.glob("/shared/ns/*"))
    out["walk"] = [(d, sorted(ds), sorted(fs_)) for d, ds, fs_ in fs.walk("/shared/ns")]
    out["du"] = fs.du("/shared/ns")
    fs.touch("/shared/ns/t")
    out["touch"] = fs.size("/shared/ns/t")
    with fs.open("/shared/ns/h", "ab") as f:
        f.write(b"+more")
    out["append"] = fs.cat("/shared/ns/h")
    fs.rm("/shared/ns/t")
    out["rm_file"] = fs.exists("/shared/ns/t")
    fs.rmdir("/shared/ns/m/n")
    out["rmdir"] = fs.exists("/shared/ns/m/n")
    out["os_view"] = sorted(os.listdir("/shared/ns"))
    return out


def test_namespace_operations() -> None:
    returns = _ok(simfs.Cluster(profile="nfs", seed=0).run(namespace_job))
    got = returns[0]
    assert got["makedirs_exists"] == ("FileExistsError",)
    assert got["makedirs_ok"] == ("ok", None)
    assert got["info_missing"] == ("FileNotFoundError",)
    assert got["copied"] == b"payload"
    assert got["moved"] == (False, b"payload")
    assert got["find"] == ["/shared/ns/a/f", "/shared/ns/h"]
    assert got["glob"] == ["/shared/ns/a", "/shared/ns/h", "/shared/ns/m"]
    assert got["walk"] == [("/shared/ns", ["a", "m"], ["h"]), ("/shared/ns/a", ["b"], ["f"]),
                           ("/shared/ns/a/b", [], []), ("/shared/ns/m", ["n"], []), ("/shared/ns/m/n", [], [])]
    assert got["du"] == len(b"payload") * 2
    assert got["touch"] == 0
    assert got["append"] == b"payload+more"
    assert got["rm_file"] is False
    assert got["rmdir"] is False
    assert got["os_view"] == ["a", "h", "m"]


def test_rm_recursive_removes_a_directory_tree() -> None:
    def job() -> tuple:
        fs = fsspec.filesystem("simfs")
        fs.makedirs("/shared/tree/a/b")
        fs.pipe("/shared/tree/a/f", b"1")
        fs.pipe("/shared/tree/a/b/g", b"2")
        fs.rm("/shared/tree/a", recursive=True)
        return fs.exists("/shared/tree/a"), os.listdir("/shared/tree")

    result = simfs.Cluster(profile="local").run(job)
    assert result.returns == {0: (False, [])}, result.summary()


def test_view_is_the_calling_ranks_node() -> None:
    def job() -> tuple:
        fs = fsspec.filesystem("simfs")
        rank = dist.get_rank()
        if rank == 0:
            fs.pipe("/tmp/node-local", b"node0 only")
        dist.barrier()
        return fs.exists("/tmp/node-local"), fs.exists("/shared")

    returns = _ok(simfs.Cluster(nodes=2, ranks_per_node=2, profile="local", seed=0).run(job))
    assert returns == {0: (True, True), 1: (True, True), 2: (False, True), 3: (False, True)}


def test_url_to_fs_and_protocol() -> None:
    def job() -> tuple:
        fs, path = fsspec.core.url_to_fs("simfs:///shared/dir/file")
        return type(fs).__name__, path, fs.protocol

    result = simfs.Cluster().run(job)
    name, path, protocol = result.returns[0]
    assert name == "SimFileSystem"
    assert path == "/shared/dir/file"
    assert "simfs" in (protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def test_outside_a_rank_raises_simfs_error() -> None:
    simfs.Cluster().run(lambda: None)  # registers the protocol
    fs = fsspec.filesystem("simfs")
    with pytest.raises(simfs.SimfsError):
        fs.ls("/shared")
    with pytest.raises(simfs.SimfsError):
        fs.info("/shared")
    with pytest.raises(simfs.SimfsError):
        fsspec.open("simfs:///shared/x", "wb").open()
    with pytest.raises(simfs.SimfsError):
        fs.makedirs("/shared/x", exist_ok=True)
    assert not os.path.exists("/shared/x")


@given(data=st.binary(max_size=20_000), chunk=st.integers(1, 5000), read_chunk=st.integers(1, 5000))
@settings(max_examples=25)
def test_content_round_trip(data: bytes, chunk: int, read_chunk: int) -> None:
    def job() -> tuple:
        fs = fsspec.filesystem("simfs")
        rank = dist.get_rank()
        if rank == 0:
            with fsspec.open("simfs:///shared/blob", "wb") as f:
                for i in range(0, len(data), chunk):
                    f.write(data[i:i + chunk])
        dist.barrier()
        pieces = []
        with fs.open("/shared/blob", "rb") as f:
            while piece := f.read(read_chunk):
                pieces.append(piece)
        return b"".join(pieces), fs.size("/shared/blob")

    returns = _ok(simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=1).run(job))
    assert returns == {0: (data, len(data)), 1: (data, len(data))}


# -- torch.distributed.checkpoint -------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _quiet_dcp_logs():
    logger = logging.getLogger("torch.distributed.checkpoint")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def dcp_job(wait: float, thread_count: int) -> dict:
    rank = dist.get_rank()
    state = {f"t{i}": torch.arange(4.0) + 10 * i for i in range(4)}
    state["step"] = 7
    dcp.save(state, storage_writer=FsspecWriter("simfs:///shared/dcp", thread_count=thread_count))
    time.sleep(wait)
    target = {f"t{i}": torch.zeros(4) for i in range(4)}
    target["step"] = 0
    dcp.load(target, storage_reader=FsspecReader("simfs:///shared/dcp"))
    return {"state": {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in target.items()},
            "files": sorted(os.listdir("/shared/dcp")), "rank": rank}


EXPECTED_STATE = {**{f"t{i}": [10.0 * i + j for j in range(4)] for i in range(4)}, "step": 7}


@pytest.mark.parametrize("thread_count", [1, 3])
def test_dcp_save_load_with_fsspec_on_local(thread_count: int) -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=1, profile="local", seed=0).run(dcp_job, 0.0, thread_count)
    returns = _ok(result)
    for got in returns.values():
        assert got["state"] == EXPECTED_STATE
        assert ".metadata" in got["files"]
        assert any(name.endswith(".distcp") for name in got["files"])
    assert any(e.op == "rename" and e.path.startswith("/shared/dcp/") for e in result.trace)


def test_dcp_on_nfs_after_attribute_caches_expire() -> None:
    for seed in range(5):
        returns = _ok(simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=seed).run(dcp_job, 61.0, 1))
        assert all(got["state"] == EXPECTED_STATE for got in returns.values())


def test_dcp_load_right_after_save_meets_stale_negative_lookup_on_nfs() -> None:
    """Every rank stats ``.metadata`` at the start of dcp.save (the overwrite check); on NFS
    with lookupcache=all the other node keeps that "not found" until its cached attributes of
    the directory expire, so a load right after the save can fail there. simfs must reproduce
    this for some interleavings, and only on the node that did not write ``.metadata``."""
    failures = []
    for seed in range(10):
        result = simfs.Cluster(nodes=2, ranks_per_node=1, profile="nfs", seed=seed).run(dcp_job, 0.0, 1)
        if not result.ok:
            failures.append(result)
            assert "/shared/dcp/.metadata" in "".join(result.tracebacks.values()), result.summary()
            failed_opens = [e for e in result.trace if e.op == "open" and e.path == "/shared/dcp/.metadata"
                            and e.outcome == "ENOENT"]
            assert failed_opens and all(e.node == 1 for e in failed_opens)
    assert failures, "no interleaving showed the stale negative lookup"
    local = simfs.Cluster(nodes=2, ranks_per_node=1, profile="local", seed=0).run(dcp_job, 0.0, 1)
    assert local.ok, local.summary()
