"""What a rank asks of the simulated kernel is served by the host's objects on every carrier: a
rank process holds no copy of them that a call could reach instead (os.sync flushed a forked copy
of the node's caches, fcntl(F_GETFL) and os.closerange read a descriptor table the rank does not
hold), and nothing of the kernel is reachable from its side."""

from __future__ import annotations

import errno
import fcntl
import gc
import os
import time
import types

import pytest

import simfs
from simfs.fs.client import Client
from simfs.fs.filesystems import Filesystems
from simfs.fs.mount import Mount
from simfs.fs.vfs import NodeVfs as Vfs
from simfs.runtime.dist import DistWorld
from simfs.runtime.kvstore import Stores
from simfs.runtime.machine import Machine
from simfs.runtime.scheduler import Scheduler
from simfs.runtime.syscalls.base import SyscallsBase

SIZE = 10_000


def _sync_then_read() -> int | None:
    """Rank 0 (node 0) writes without closing and calls os.sync(); rank 1 (node 1) opens the file a
    minute of virtual time later: what sync(2) sent to the server is what it reads."""
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    if rank == 0:
        f = open("/shared/data", "wb")
        f.write(b"x" * SIZE)
        f.flush()
        os.sync()
        dist.barrier()
        dist.barrier()
        f.close()
        return None
    dist.barrier()
    time.sleep(60)
    with open("/shared/data", "rb") as f:
        seen = len(f.read())
    dist.barrier()
    return seen


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_os_sync_reaches_the_server_for_other_nodes(carrier: str) -> None:
    result = simfs.Cluster(2, 1, profile="nfs", carrier=carrier).run(_sync_then_read)
    assert result.ok, result.summary()
    assert result.returns[1] == SIZE


def _flags() -> list[int]:
    fd = os.open("/shared/f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        return [fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND, fcntl.fcntl(fd, fcntl.F_GETFD)]
    finally:
        os.close(fd)


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_fcntl_reads_the_descriptors_flags(carrier: str) -> None:
    result = simfs.Cluster(1, 1, carrier=carrier).run(_flags)
    assert result.ok, result.summary()
    assert result.returns[0] == [os.O_APPEND, fcntl.FD_CLOEXEC]


def _closerange_then_fstat() -> str:
    fd = os.open("/shared/f", os.O_WRONLY | os.O_CREAT)
    os.closerange(3, 1 << 31)
    try:
        os.fstat(fd)
    except OSError as exc:
        return errno.errorcode[exc.errno or 0]
    return "still open"


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_closerange_closes_the_simulated_descriptors(carrier: str) -> None:
    """A rank process asked its forked copy of the descriptor table, which holds none (failed at
    89754bd: "still open")."""
    result = simfs.Cluster(1, 1, carrier=carrier).run(_closerange_then_fstat)
    assert result.ok, result.summary()
    assert result.returns[0] == "EBADF"


_KERNEL = (Machine, SyscallsBase, Scheduler, DistWorld, Filesystems, Mount, Client, Vfs, Stores)


def _host_objects_reachable() -> list[str]:
    """The kernel's objects reachable from this rank's own: its process, its system calls,
    machine, scheduler and world (modules, classes and functions are code, not state)."""
    from simfs.tasks.task import current_task

    task = current_task()
    assert task is not None
    seen: set[int] = set()
    found: list[str] = []
    todo: list[object] = [task, task.context]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                                               types.CodeType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, _KERNEL):
            found.append(type(obj).__name__)
            continue
        todo.extend(gc.get_referents(obj))
    return sorted(set(found))


def test_a_rank_process_holds_no_object_of_the_hosts_kernel() -> None:
    """Its side is built from plain data (schema.RankSpec); at 89754bd its system calls held a
    forked Syscalls, which held the node's vfs, machine and scheduler."""
    result = simfs.Cluster(2, 1, profile="nfs", carrier="process").run(_host_objects_reachable)
    assert result.ok, result.summary()
    assert result.returns == {0: [], 1: []}


def test_the_same_walk_finds_them_in_a_greenlet_rank() -> None:
    """The walk above can see them: a greenlet rank's system calls are the kernel's own."""
    result = simfs.Cluster(1, 1, carrier="greenlet").run(_host_objects_reachable)
    assert result.ok, result.summary()
    assert {"Syscalls", "DistWorld", "Scheduler"} <= set(result.returns[0])


def _collectives() -> list[object]:
    import torch.distributed as dist

    dist.barrier()
    gathered: list[object] = [None, None]
    dist.all_gather_object(gathered, int(os.environ["RANK"]))
    return gathered


@pytest.mark.parametrize("carrier", simfs.carriers.CARRIERS)
def test_every_carriers_collectives_are_the_ports_requests(carrier: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A greenlet rank's torch.distributed asks the kernel's handler of the Collective request, as a
    rank process's does; at 15ba83d it called the run's DistWorld itself, beside the port."""
    from simfs.runtime.carrier.hostdist import DistRequests

    asked: list[tuple[int, str]] = []
    serve = DistRequests.collective

    def collective(self: DistRequests, rank: int, request: object) -> object:
        asked.append((rank, request.kind))  # type: ignore[attr-defined]  # a schema.Collective
        return serve(self, rank, request)  # type: ignore[arg-type]

    monkeypatch.setattr(DistRequests, "collective", collective)
    result = simfs.Cluster(2, 1, carrier=carrier, isolate=False).run(_collectives)
    assert result.ok, result.summary()
    assert result.returns == {0: [0, 1], 1: [0, 1]}
    for rank in (0, 1):  # c10d's all_gather_object is two all_gathers (sizes, then bytes); simfs's one
        kinds = [kind for asker, kind in asked if asker == rank]
        assert kinds[0] == "barrier" and len(kinds) >= 2, asked
