"""torch.distributed as users write it, unmodified, in rank processes on 2 nodes x 2 ranks: DDP,
FSDP2 on a 2-D DeviceMesh with DCP, init_device_mesh with no process group yet, simfs's own
checkpoint of FSDP2 state resharded, a crashed rank in a collective, and the stores c10d's
rendezvous uses, all on the simulation (torch_distributed="c10d")."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import pytest
import torch

import simfs
from scenarios.outcome import Event
from scenarios.reporting.timeline import timeline_svgs
from simfs.faults import CrashNode

C10D = {"carrier": "process", "torch_distributed": "c10d"}


def _cluster(profile: str = "nfs", **kwargs: Any) -> simfs.Cluster:
    settings: dict[str, Any] = {"nodes": 2, "ranks_per_node": 2, "profile": profile, **C10D, **kwargs}
    return simfs.Cluster(**settings)


def _ok(result: simfs.Result) -> dict[int, Any]:
    assert result.ok, result.summary() + "\n" + "\n".join(result.tracebacks.values())
    return result.returns


def _flat(params: Any) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in params]).tolist()


# -- jobs (module level: rank processes and replays find them by name) -------------------------------

def ddp_job(steps: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")  # env:// from the environment torchrun would give
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.0001)  # several buckets: several all-reduces
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)  # each rank its own data
    for step in range(steps):
        batch = torch.randn(4, 8)
        if step == 0:
            with ddp.no_sync():  # gradients accumulate locally, then the next step all-reduces them
                ddp(batch).sum().backward()
            continue
        ddp(batch).sum().backward()
        opt.step()
        opt.zero_grad()
    backend = dist.get_backend()
    dist.destroy_process_group()
    return {"params": _flat(model.parameters()), "backend": backend}


def fsdp_save_job(path: str) -> list[float]:
    """FSDP2 on a 2 x 2 mesh (shard over "dp"), two steps, DCP save; returns the full parameters."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = _fsdp_model()
    torch.manual_seed(7)
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    return _flat(p.full_tensor() for p in model.parameters())


def fsdp_load_job(path: str, after: float) -> list[float]:
    """A job started ``after`` virtual seconds later: a fresh model, DCP load and set_state_dict;
    returns the full parameters."""
    import time

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    time.sleep(after)
    model, opt = _fsdp_model(seed=1)
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return _flat(p.full_tensor() for p in model.parameters())


def _fsdp_model(seed: int = 0) -> tuple[Any, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    for layer in model:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def checkpoint_save_job(path: str) -> list[float]:
    """simfs's checkpoint.save of an FSDP2 model's DTensor state dict (sharded over 4 ranks)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import checkpoint

    mesh = init_device_mesh("cpu", (4,))
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 2))
    fully_shard(model, mesh=mesh)
    checkpoint.save(model.state_dict(), path)
    return _flat(p.full_tensor() for p in model.parameters())


def checkpoint_load_job(path: str) -> list[float]:
    """The same state loaded into an FSDP2 model sharded over 2 of the ranks (another mesh)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import checkpoint

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replica", "shard"))
    torch.manual_seed(99)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 2))
    fully_shard(model, mesh=mesh["shard"])
    state = model.state_dict()
    checkpoint.load(state, path)
    model.load_state_dict(state)
    dist.barrier()
    return _flat(p.full_tensor() for p in model.parameters())


def mesh_without_init_job() -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    before = dist.is_initialized()
    mesh = init_device_mesh("cpu", (4,))
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total, group=mesh.get_group())
    return {"before": before, "after": dist.is_initialized(), "sum": float(total.item()),
            "ranks": dist.get_process_group_ranks(mesh.get_group())}


def crashed_peer_job() -> float:
    import time

    import torch.distributed as dist

    value = torch.ones(2)
    dist.barrier()
    if dist.get_rank() >= 2:
        time.sleep(5.0)  # node 1 crashes at 1 s of virtual time, before its ranks arrive
    dist.all_reduce(value)
    return float(value.sum())


def store_job(host: str, port: int, path: str) -> dict[str, Any]:
    import torch.distributed as dist

    out: dict[str, Any] = {}
    try:
        dist.TCPStore(host, port, 2, False, timeout=__import__("datetime").timedelta(seconds=5))
    except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
        out["tcp"] = f"{type(exc).__name__}: {exc}"
    store = dist.FileStore(path, 4)
    store.set(f"rank{dist.get_rank()}", b"x")
    dist.barrier()
    out["file_keys"] = store.num_keys()
    out["exists"] = os.path.exists(path)
    return out


def file_store_count_job(path: str) -> int:
    import torch.distributed as dist

    store = dist.FileStore(path, 4)
    store.add("count", 1)
    dist.barrier()
    return int(store.add("count", 0))


# -- tests -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["nfs", "local"])
def test_ddp_steps_leave_every_rank_with_the_same_parameters(profile: str) -> None:
    returns = _ok(_cluster(profile, dist_initialized=False).run(ddp_job, 4))
    first = returns[0]["params"]
    assert all(r["params"] == first for r in returns.values())
    assert {r["backend"] for r in returns.values()} == {"gloo"}
    torch.manual_seed(0)  # the same model, trained in one process on the mean gradient, ends the same
    assert first != _flat(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                              torch.nn.Linear(16, 4)).parameters())


@pytest.mark.parametrize("profile", ["nfs", "local"])
def test_fsdp2_on_a_2d_mesh_saved_with_dcp_loads_bit_exact_after_a_restart(profile: str) -> None:
    cluster = _cluster(profile)
    saved = _ok(cluster.run(fsdp_save_job, "/shared/ckpt/step2"))
    loaded = _ok(cluster.run(fsdp_load_job, "/shared/ckpt/step2", 90.0))  # a requeued job, 90 s later
    for rank in range(4):
        assert loaded[rank] == saved[rank]
    assert saved[0] == saved[2] and saved[1] == saved[3]  # the dp groups are ranks {0, 2} and {1, 3}


def test_checkpoint_of_an_fsdp2_state_dict_loads_onto_a_mesh_of_another_size() -> None:
    cluster = _cluster("nfs")
    saved = _ok(cluster.run(checkpoint_save_job, "/shared/ours"))
    loaded = _ok(cluster.run(checkpoint_load_job, "/shared/ours"))
    assert all(params == saved[0] for params in [*saved.values(), *loaded.values()])


def test_init_device_mesh_with_no_process_group_initialises_the_simulated_one() -> None:
    returns = _ok(_cluster(dist_initialized=False).run(mesh_without_init_job))
    for r in returns.values():
        assert r == {"before": False, "after": True, "sum": 6.0, "ranks": [0, 1, 2, 3]}


def test_a_crashed_node_leaves_the_others_hung_in_the_collective_naming_the_ranks_waited_for() -> None:
    result = _cluster(faults=[CrashNode(node=1, at_time=1.0)], collective_timeout=600.0).run(crashed_peer_job)
    assert set(result.crashed) == {2, 3}
    for rank in (0, 1):
        assert result.hung[rank].waiting_for == [2, 3]
        assert "all_reduce" in result.hung[rank].what
    trace = [Event(0, e.time, e.rank, e.node, e.op, e.path, e.outcome) for e in result.trace]
    (_, svg), = timeline_svgs(trace, None)
    assert "all_reduce" in svg and "barrier" in svg


def test_stores_in_a_rank_touch_no_real_socket_and_no_real_file(tmp_path: Any) -> None:
    canary = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    canary.bind(("127.0.0.1", 0))
    canary.listen(8)
    canary.settimeout(0.2)
    port = canary.getsockname()[1]
    knocked: list[Any] = []

    def watch() -> None:
        for _ in range(20):
            try:
                knocked.append(canary.accept())
            except OSError:
                continue

    watcher = threading.Thread(target=watch)
    watcher.start()
    real_path = str(tmp_path / "store")
    try:
        returns = _ok(_cluster(mounts={"/shared": "nfs", str(tmp_path): "local"}).run(
            store_job, "127.0.0.1", port, real_path))
    finally:
        watcher.join()
        canary.close()
    assert knocked == []
    assert not os.path.exists(real_path)
    for r in returns.values():
        assert r["tcp"].startswith("DistStoreError: The client socket has timed out after 5000ms")
        assert r["file_keys"] == 4 and r["exists"] is True


@pytest.mark.parametrize(("profile", "lost"), [("nfs", False), ("local", False), ("beegfs", True)])
def test_a_file_store_on_a_shared_mount_has_the_mounts_lock_semantics(profile: str, lost: bool) -> None:
    """c10d's FileStore appends under flock(2). NFS locks are a cache coherency point, so every
    rank's add counts; BeeGFS checks flock only on the local machine by default (2 nodes append
    over each other)."""
    returns = _ok(_cluster(profile).run(file_store_count_job, "/shared/store"))
    counts = set(returns.values())
    assert (counts != {4}) is lost


def collectives_job() -> dict[str, Any]:
    """torch.distributed's other collectives, as a job calls them."""
    import torch.distributed as dist

    rank, size = dist.get_rank(), dist.get_world_size()
    out: dict[str, Any] = {}
    chunks = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    received = torch.empty(size * 2)
    dist.all_to_all_single(received, chunks)
    out["all_to_all_single"] = received.tolist()
    outs = [torch.empty(1) for _ in range(size)]
    dist.all_to_all(outs, [torch.tensor([float(10 * rank + r)]) for r in range(size)])
    out["all_to_all"] = [t.item() for t in outs]
    scattered = torch.empty(1)
    dist.reduce_scatter(scattered, [torch.tensor([float(rank + r)]) for r in range(size)])
    out["reduce_scatter"] = scattered.item()
    peer = rank ^ 1  # 0<->1, 2<->3
    inbox = torch.empty(3)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), peer),
           dist.P2POp(dist.irecv, inbox, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    out["p2p"] = inbox.tolist()
    pairs, _ = dist.new_subgroups(group_size=2)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total, group=pairs)
    out["subgroup_sum"] = total.item()
    dist.monitored_barrier(timeout=__import__("datetime").timedelta(seconds=30))
    objs: list[Any] = [None]
    dist.broadcast_object_list(objs if rank else [{"from": 0}], src=0)
    out["object"] = objs[0] if rank else {"from": 0}
    return out


def test_point_to_point_all_to_all_subgroups_and_object_collectives() -> None:
    returns = _ok(_cluster().run(collectives_job))
    for rank, r in returns.items():
        assert r["all_to_all_single"] == [float(100 * src + 2 * rank + i) for src in range(4) for i in range(2)]
        assert r["all_to_all"] == [float(10 * src + rank) for src in range(4)]
        assert r["reduce_scatter"] == float(sum(src + rank for src in range(4)))
        assert r["p2p"] == [float(rank ^ 1)] * 3
        assert r["subgroup_sum"] == float((rank // 2) * 4 + 1)
        assert r["object"] == {"from": 0}


def store_server_crash_job() -> str:
    """Rank 0 serves a TCPStore; node 1's ranks wait for a key that never comes."""
    import time
    from datetime import timedelta

    import torch.distributed as dist

    rank = dist.get_rank()
    store = dist.TCPStore("node0", 29502, 4, rank == 0, timeout=timedelta(seconds=300))
    if rank < 2:
        time.sleep(3600.0)  # node 0 crashes at 1 s
    start = time.monotonic()
    try:
        store.get("never-set")
    except dist.DistNetworkError as exc:
        return f"{type(exc).__name__} after {time.monotonic() - start:.1f}s: {exc}"
    return "got it"


def test_a_tcpstore_whose_node_crashes_resets_its_waiting_clients_at_once() -> None:
    result = _cluster(faults=[CrashNode(node=0, at_time=1.0)]).run(store_server_crash_job)
    assert set(result.crashed) == {0, 1}
    for rank in (2, 3):
        assert result.returns[rank].startswith("DistNetworkError after 1.0s: Connection reset by peer"), \
            result.returns[rank]


def async_save_job() -> list[float]:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    rank, size = dist.get_rank(), dist.get_world_size()
    dcp.async_save({f"w{rank}": torch.full((2,), float(rank))}, checkpoint_id="/shared/async").result()
    dist.barrier()
    state = {f"w{r}": torch.zeros(2) for r in range(size)}
    dcp.load(state, checkpoint_id="/shared/async")
    return [float(state[f"w{r}"][0]) for r in range(size)]


def test_dcp_async_save_then_load() -> None:
    """DCP's async_save needs a group that serves CPU tensors (as gloo does). On one disk: on NFS
    the load right after the save may find node 1's cached 'not found' for .metadata (every
    rank's writer looked before rank 0 wrote it), as a real NFS client can."""
    returns = _ok(_cluster("local").run(async_save_job))
    assert all(values == [0.0, 1.0, 2.0, 3.0] for values in returns.values())
