"""torch's C++ entry points that open real paths or sockets themselves: inside a rank a TorchScript
archive named by path is written and read on the simulated machine, and the archive writer/reader
given a path and c10d's TCP and file stores are refused by name (the real file and the listening
canary see nothing); outside ranks they are the originals."""

from __future__ import annotations

import datetime
import io
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import TCPStore as ByName  # a by-name import, which a run replaces and gives back

import simfs


class _AddOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


@pytest.mark.filterwarnings("ignore:`torch.jit.[a-z]+` is deprecated:DeprecationWarning")  # still used
def test_torchscript_archives_named_by_path_live_on_the_simulated_machine(tmp_path: Path) -> None:
    scripted = torch.jit.script(_AddOne())  # compiled by the host: the rank only saves and loads it
    real = tmp_path / "model.pt"

    def job() -> tuple[float, float, bool]:
        os.makedirs(str(tmp_path))  # the host's real directory, made anew on the simulated node
        torch.jit.save(scripted, str(real))
        torch.jit.save(scripted, f="/shared/model.pt")
        again = torch.jit.load("/shared/model.pt")
        return again(torch.ones(1)).item(), torch.jit.load(str(real))(torch.zeros(1)).item(), os.path.exists(real)

    result = simfs.Cluster(profile="nfs").run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == (2.0, 1.0, True)
    assert not real.exists()
    torch.jit.save(scripted, str(real))  # the host's own call writes the real file
    assert torch.jit.load(str(real))(torch.ones(1)).item() == 2.0


@pytest.mark.parametrize("call,make", [
    ("torch._C.PyTorchFileWriter", lambda c: torch._C.PyTorchFileWriter(c)),
    ("torch._C.PyTorchFileReader", lambda c: torch._C.PyTorchFileReader(c)),
])
def test_cpp_openers_of_a_real_path_are_refused_by_name(tmp_path: Path, call: str,
                                                        make: Callable[[str], object]) -> None:
    canary = str(tmp_path / "canary")

    def job() -> str:
        try:
            make(canary)
        except simfs.BypassError as exc:
            return str(exc)
        return "ran"

    result = simfs.Cluster().run(job)
    assert result.ok, result.summary()
    assert result.returns[0].startswith(call) and "bypasses simfs" in result.returns[0]
    assert not Path(canary).exists()


def test_the_cpp_stores_are_refused_inside_ranks_and_the_hosts_names_are_its_own(tmp_path: Path) -> None:
    """torch's C++ stores, reached in a rank through a name made before the run, are refused
    (they would open a real file or port); torch's names are simfs's stores in ranks, and
    torch's own classes outside."""
    canary = str(tmp_path / "canary")
    native = torch._C._distributed_c10d
    cpp_file_store, cpp_tcp_store = native.FileStore, native.TCPStore  # the host's: torch's own classes

    def job() -> list[str]:
        out = []
        for make in (lambda: cpp_file_store(canary, 1),
                     lambda: cpp_tcp_store("127.0.0.1", 1, is_master=False, wait_for_workers=False)):
            try:
                make()
                out.append("ran")
            except simfs.BypassError as exc:
                out.append(str(exc))
        return out

    for carrier in ("greenlet", "process"):
        result = simfs.Cluster(carrier=carrier).run(job)
        assert result.ok, result.summary()
        file_store, tcp_store = result.returns[0]
        assert file_store.startswith("torch._C._distributed_c10d.FileStore bypasses simfs"), carrier
        assert tcp_store.startswith("torch._C._distributed_c10d.TCPStore bypasses simfs"), carrier
    assert not Path(canary).exists()
    assert dist.TCPStore is native.TCPStore and dist.FileStore is native.FileStore
    assert isinstance(dist.HashStore(), dist.Store)


@pytest.mark.parametrize("carrier", ["process", "greenlet"])
def test_a_file_store_of_a_rank_writes_the_simulated_file(tmp_path: Path, carrier: str) -> None:
    canary = str(tmp_path / "canary")

    def job() -> tuple[bytes, bool]:
        os.makedirs(os.path.dirname(canary))
        store = dist.FileStore(canary, 1)
        store.set("key", b"value")
        return store.get("key"), os.path.exists(canary)

    result = simfs.Cluster(carrier=carrier).run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == (b"value", True)
    assert not Path(canary).exists()


@pytest.mark.parametrize("carrier", ["process", "greenlet"])
def test_a_tcpstore_client_never_reaches_a_real_listener(carrier: str) -> None:
    """The TCPStore is simulated on both carriers (no server listens at that address: the client
    times out in virtual time). The real listener sees nothing."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]

        def job() -> str:
            try:
                dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=1))
            except (simfs.BypassError, dist.DistStoreError) as exc:
                return f"{type(exc).__name__}: {exc}"
            return "connected"

        result = simfs.Cluster(carrier=carrier).run(job)
        assert result.ok, result.summary()
        assert result.returns[0].startswith("DistStoreError: The client socket has timed out after 1000ms")
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_a_file_object_still_reaches_the_archive_writer_inside_a_rank() -> None:
    def job() -> int:
        buffer = io.BytesIO()
        writer = torch._C.PyTorchFileWriter(buffer)
        writer.write_record("data", b"hello", 5)
        writer.write_end_of_file()
        return len(buffer.getvalue())

    result = simfs.Cluster().run(job)
    assert result.ok, result.summary()
    assert result.returns[0] > 5


def test_a_greenlet_run_in_this_process_gives_torchs_store_names_back() -> None:
    """Greenlet ranks in the caller's own process (isolate=False) get simfs's stores under torch's
    names, by-name imports included, for the run only: afterwards every name is torch's class
    again and makes torch's own store."""
    import torch.distributed.distributed_c10d as c10d
    import torch.distributed.rendezvous as rendezvous

    native = torch._C._distributed_c10d

    def job() -> tuple[str, str]:
        made = ByName("node0", 29500, 1, True, wait_for_workers=False, timeout=datetime.timedelta(seconds=5))
        made.set("k", "v")
        return type(made).__module__, made.get("k").decode()

    result = simfs.Cluster(carrier="greenlet", isolate=False).run(job)
    assert result.ok, result.summary()
    assert result.returns[0] == ("simfs.rank.c10d.store", "v")
    for owner in (dist, c10d, rendezvous):
        for name in ("TCPStore", "FileStore"):
            assert getattr(owner, name, None) in (None, getattr(native, name)), f"{owner.__name__}.{name}"
    assert ByName is native.TCPStore
    assert type(dist.HashStore()) is native.HashStore


def test_a_module_imported_between_runs_has_its_by_name_store_replaced_too() -> None:
    """simfs looks for torch's store names once per module (a search's child only at the modules
    imported since its parent looked): a job module imported after earlier runs, which holds
    ``TCPStore`` by name, still gets simfs's store inside ranks, and torch's class back after."""
    simfs.Cluster(carrier="greenlet", isolate=False).run(lambda: None)  # the modules so far looked through
    late = type(os)("_simfs_test_late_import")
    late.TCPStore = dist.TCPStore  # as `from torch.distributed import TCPStore` in a module imported now
    with pytest.MonkeyPatch.context() as patches:
        patches.setitem(__import__("sys").modules, late.__name__, late)

        def job() -> str:
            made = late.TCPStore("node0", 29500, 1, True, wait_for_workers=False,
                                 timeout=datetime.timedelta(seconds=5))
            return type(made).__module__

        result = simfs.Cluster(carrier="greenlet", isolate=False).run(job)
        assert result.ok, result.summary()
        assert result.returns[0] == "simfs.rank.c10d.store"
        assert late.TCPStore is torch._C._distributed_c10d.TCPStore
