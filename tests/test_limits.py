"""Runs that fit the machine's resource limits: a host under an address-space limit (a login
node's, a batch job's, a CI container's ``ulimit -v``) runs collectives on its rank processes, whose
outboxes map only what they use; a rank that cannot start, for any limit, ends with
simfs.RankCannotStart naming the limit, its value and what to change; an outbox its owner grew
after the seal is still written by its owner alone."""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import mmap
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from conftest import missing

import simfs
from simfs.confinement import landlock
from simfs.rank.outbox import FIRST_MAP, Outbox


@pytest.fixture(autouse=True)
def _needs_landlock() -> None:
    if not landlock.abi():
        missing("landlock", "rank processes confine themselves with Landlock (Linux 5.13+)")


ERRORS = "out['errors'] = {r: [type(e).__name__, getattr(e, 'limit', ''), getattr(e, 'value', 0), str(e)] " \
         "for r, e in result.errors.items()}\n"


def _host(body: str, tmp_path: Path, *, address_space: int | None = None, errors: bool = False) -> Any:
    """Run ``body`` in a fresh interpreter, under RLIMIT_AS ``address_space`` from its first line
    (before torch or simfs is imported); what it stores in ``out`` comes back as JSON (with
    ``errors``, what its ``result.errors`` held)."""
    result = tmp_path / "out.json"
    limit = "" if address_space is None else f"resource.setrlimit(resource.RLIMIT_AS, ({address_space},) * 2)\n"
    script = f"import json, os, resource\n{limit}import simfs, torch\nout = {{}}\n{textwrap.dedent(body)}\n" \
             f"{ERRORS if errors else ''}open({str(result)!r}, 'w').write(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def test_a_host_under_a_4_gib_address_space_limit_runs_collectives_on_its_ranks(tmp_path: Path) -> None:
    """Each rank process maps of its outbox what its slots use (a 12 MiB tensor here), not all 16 GiB."""
    out = _host("""
        def job():
            import torch
            import torch.distributed as dist
            dist.init_process_group("gloo")
            small, large = torch.ones(8) * (dist.get_rank() + 1), torch.ones(3 << 20) * (dist.get_rank() + 1)
            dist.all_reduce(small)
            dist.all_reduce(large)
            return [float(small[0]), float(large.sum())]

        result = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False, seed=1).run(job)
        out['returns'] = result.returns
    """, tmp_path, address_space=4 << 30, errors=True)
    assert out["errors"] == {}
    assert out["returns"] == {rank: [10.0, 10.0 * (3 << 20)] for rank in map(str, range(4))}


def test_a_host_under_a_file_size_limit_runs_the_collectives_its_outboxes_hold(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (ulimit -f) bounds the outboxes' size, which truncate(2) obeys: collectives that
    fit in it run, a larger one fails, naming the limit."""
    out = _host("""
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, resource.RLIM_INFINITY))

        def job(size):
            import torch
            import torch.distributed as dist
            dist.init_process_group("gloo")
            tensor = torch.ones(size)
            dist.all_reduce(tensor)
            return float(tensor[0])

        cluster = simfs.Cluster(1, 2, dist_initialized=False, seed=1)
        out['fits'] = cluster.run(job, 1 << 18).returns
        result = cluster.run(job, 1 << 20)
    """, tmp_path, errors=True)
    assert out["fits"] == {"0": 2.0, "1": 2.0}
    for kind, _, _, message in out["errors"].values():
        assert kind == "OSError" and "its outbox's 4,194,304 bytes" in message, message
        assert "RLIMIT_FSIZE (ulimit -f) is 4 MiB" in message, message


def test_an_outbox_that_cannot_grow_names_rlimit_as(tmp_path: Path) -> None:
    """A collective larger than the address space left: the post fails, naming the limit."""
    out = _host("""
        from simfs.runtime.carrier.outbox import Outboxes
        boxes = Outboxes.create(1)
        box = boxes.view(0)
        tensor = torch.ones(64 << 20, dtype=torch.uint8)
        used = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize:")).split()[1]) << 10
        resource.setrlimit(resource.RLIMIT_AS, (used + (16 << 20), resource.RLIM_INFINITY))
        try:
            box.post("g", [tensor])
        except OSError as exc:
            out['error'] = [exc.errno, str(exc)]
    """, tmp_path)
    code, message = out["error"]
    assert code == errno.ENOMEM
    assert "rank 0's outbox could not map" in message and "RLIMIT_AS (ulimit -v) is" in message, message


def _one() -> int:
    return 1


def _children() -> set[int]:
    found: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        found |= {int(pid) for pid in Path(f"/proc/self/task/{tid}/children").read_text().split()}
    return found


def _mapped(pid: int) -> int:
    """Bytes process ``pid`` maps (proc(5): VmSize)."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmSize:"))
    return int(line.split()[1]) << 10


def test_a_rank_that_cannot_start_names_the_limit_its_value_and_what_to_change() -> None:
    """The kept zygote's RLIMIT_AS lowered to what it maps and half its first outbox mapping:
    every rank forked from it fails at its start, and its error says why."""
    before = _children()
    with simfs.zygote_kept(_one):
        cluster = simfs.Cluster(1, 2, seed=1)
        assert cluster.run(_one).returns == {0: 1, 1: 1}
        (zygote,) = _children() - before
        limit = _mapped(zygote) + FIRST_MAP // 2
        resource.prlimit(zygote, resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        result = cluster.run(_one)
    assert result.returns == {}
    for rank in (0, 1):
        error = result.errors[rank]
        assert isinstance(error, simfs.RankCannotStart), repr(error)
        assert (error.rank, error.limit, error.value) == (rank, "RLIMIT_AS", limit)
        assert f"rank {rank}'s process could not start" in str(error) and "ulimit -v" in str(error), str(error)


def test_a_host_out_of_descriptors_names_rlimit_nofile(tmp_path: Path) -> None:
    out = _host("""
        limit = len(os.listdir("/proc/self/fd")) + 3  # two ranks' outboxes (two each), less the listing's
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        try:
            simfs.Cluster(1, 4, seed=1).run(int)
        except simfs.RankCannotStart as exc:
            out['error'] = [exc.rank, exc.limit, exc.value, limit, str(exc)]
    """, tmp_path)
    rank, name, value, limit, message = out["error"]
    assert rank in range(4) and (name, value) == ("RLIMIT_NOFILE", limit) and "ulimit -n" in message, message


UID = 2_000_000_007  # a user of the test's own: RLIMIT_NPROC counts every process of the real user


def test_a_rank_the_zygote_cannot_fork_names_rlimit_nproc(tmp_path: Path) -> None:
    """The zygote forked under an RLIMIT_NPROC that it fits and no process it forks does (the
    host's own limit put back right after, so the host's thread starts): each rank's error says why."""
    if os.getuid() != 0:
        missing("root", "the host runs as a user of its own, whose processes RLIMIT_NPROC then counts")
    out = _host(f"""
        import ctypes
        from simfs.confinement import kernel
        from simfs.runtime.carrier.zygote import Zygote

        class Header(ctypes.Structure):  # include/uapi/linux/capability.h, version 3
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        os.setresuid({UID}, 0, 0)  # its processes counted as that user's; files still read as root
        header, data = Header(0x20080522, 0), (Data * 2)()
        kernel.syscall("capget", ctypes.addressof(header), ctypes.addressof(data))
        data[0].effective &= ~((1 << 24) | (1 << 21))  # CAP_SYS_RESOURCE, CAP_SYS_ADMIN: exempt from it (fork(2))
        kernel.syscall("capset", ctypes.addressof(header), ctypes.addressof(data))
        fork = Zygote.fork.__func__

        def fork_under_a_limit(cls, *args):
            soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
            threads = int(next(line for line in open("/proc/self/status") if line.startswith("Threads:")).split()[1])
            out['limit'] = threads + 1
            resource.setrlimit(resource.RLIMIT_NPROC, (threads + 1, hard))
            try:
                return fork(cls, *args)
            finally:
                resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))

        Zygote.fork = classmethod(fork_under_a_limit)
        result = simfs.Cluster(1, 2, seed=1).run(int)
    """, tmp_path, errors=True)
    assert set(out["errors"]) == {"0", "1"}
    for kind, name, value, message in out["errors"].values():
        assert (kind, name, value) == ("RankCannotStart", "RLIMIT_NPROC", out["limit"]), message
        assert "the zygote could not fork it" in message and "ulimit -u" in message, message


def _tampers_after_growth() -> dict[str, Any]:
    """Both ranks all-reduce 8 MiB (each one's outbox mapping grows past its first, after the
    seal); rank 1 then tries every way to write rank 0's outbox, and both all-reduce again."""
    first = torch.ones(2 << 20) * (dist.get_rank() + 1)
    dist.all_reduce(first)
    tried: dict[str, str] = {}
    if dist.get_rank() == 1:
        box = next(o for o in gc.get_objects() if isinstance(o, Outbox))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        read_only = box._readable[0]
        writable = libc.open(f"/proc/self/fd/{read_only}".encode(), os.O_RDWR)
        tried["open"] = "ok" if writable >= 0 else errno.errorcode[ctypes.get_errno()]

        def failed(result: int, bad: int) -> str:
            return errno.errorcode[ctypes.get_errno()] if result == bad else "ok"

        shared, both = mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
        tried["mmap writable"] = failed(libc.mmap(None, 8 << 20, both, shared, writable, 0), ctypes.c_void_p(-1).value)
        view = libc.mmap(None, 8 << 20, mmap.PROT_READ, shared, read_only, 0)
        tried["mprotect writable"] = failed(libc.mprotect(view, 8 << 20, both), -1)
        garbage = b"\xff" * 64
        tried["pwrite"] = failed(libc.pwrite(writable, garbage, len(garbage), ctypes.c_long(4 << 20)), -1)
        tried["grow"] = failed(libc.ftruncate(writable, ctypes.c_long(1 << 40)), -1)
    second = torch.ones(2 << 20) * (dist.get_rank() + 1)
    dist.all_reduce(second)
    return {"sums": [float(first.sum()), float(second.sum())], "tried": tried}


def test_a_peer_cannot_write_an_outbox_its_owner_grew_after_the_seal() -> None:
    result = simfs.Cluster(1, 2, dist_initialized=True, seed=1).run(_tampers_after_growth)
    assert result.ok, result.summary()
    assert FIRST_MAP < 8 << 20
    total = 3.0 * (2 << 20)
    assert result.returns[0] == {"sums": [total, total], "tried": {}}
    assert result.returns[1] == {"sums": [total, total], "tried": {
        "open": "ok", "mmap writable": "EPERM", "mprotect writable": "EACCES", "pwrite": "EPERM", "grow": "EPERM"}}
