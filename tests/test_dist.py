"""Simulated torch.distributed inside ranks: process-group state, object and tensor
collectives, groups, mismatches and timeouts in virtual time."""

from __future__ import annotations

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed import GroupMember, ReduceOp

import simfs
from simfs.runtime.wakeup import SLICE


def _run(job, *args, nodes: int = 1, ranks_per_node: int = 2, seed: int = 0, **cluster_kwargs) -> simfs.Result:
    return simfs.Cluster(nodes=nodes, ranks_per_node=ranks_per_node, seed=seed, **cluster_kwargs).run(job, *args)


def _ok(result: simfs.Result) -> dict:
    assert result.ok, result.summary()
    return result.returns


# -- process group state ----------------------------------------------------------------------------

def test_rank_world_size_initialized() -> None:
    def job() -> tuple:
        return dist.is_available(), dist.is_initialized(), dist.get_rank(), dist.get_world_size()

    returns = _ok(_run(job, nodes=2, ranks_per_node=3))
    assert returns == {r: (True, True, r, 6) for r in range(6)}


def test_outside_ranks_torch_distributed_is_real() -> None:
    _run(lambda: dist.get_rank())
    assert not dist.is_initialized()
    with pytest.raises(ValueError):
        dist.get_rank()


def test_init_process_group_accepted_once() -> None:
    def job() -> tuple:
        dist.init_process_group("gloo")
        first = (dist.is_initialized(), dist.get_rank(), dist.get_world_size())
        try:
            dist.init_process_group("gloo")
        except ValueError:
            return first, "ValueError"
        return first, "accepted twice"

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns == {r: ((True, r, 3), "ValueError") for r in range(3)}


def test_uninitialized_until_init_process_group() -> None:
    def job() -> list:
        out: list = [dist.is_initialized()]
        for call in (dist.get_rank, dist.get_world_size, dist.barrier):
            try:
                call()
                out.append("no error")
            except ValueError:
                out.append("ValueError")
        dist.init_process_group(backend="gloo")
        out += [dist.is_initialized(), dist.get_rank(), dist.get_world_size()]
        dist.barrier()
        dist.destroy_process_group()
        out.append(dist.is_initialized())
        return out

    returns = _ok(_run(job, nodes=2, ranks_per_node=1, dist_initialized=False))
    assert returns == {r: [False, "ValueError", "ValueError", "ValueError", True, r, 2, False] for r in range(2)}


def test_init_process_group_with_a_rank_no_process_has_waits_for_the_store_server_as_c10d_does() -> None:
    """Every process claims rank 5, so none serves the TCPStore at MASTER_ADDR: each client retries
    until c10d's timeout (the default group's, 30 minutes), in virtual time."""
    def job() -> str:
        try:
            dist.init_process_group("gloo", rank=5, world_size=2)
        except dist.DistStoreError as exc:
            return str(exc)
        return "accepted"

    result = _run(job, dist_initialized=False)
    assert all(r.startswith("The client socket has timed out after 1800000ms") for r in _ok(result).values())
    assert result.virtual_time == pytest.approx(1800.0)


def test_init_process_group_timeout_sets_collective_timeout() -> None:
    def job() -> tuple:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=50))
        if dist.get_rank() == 1:
            return "skipped"
        start = time.monotonic()
        try:
            dist.barrier()
        except dist.DistBackendError:
            return "timeout", time.monotonic() - start
        return "completed"

    result = _run(job, dist_initialized=False)
    assert result.returns[1] == "skipped"
    kind, waited = result.returns[0]
    assert kind == "timeout" and waited == pytest.approx(50.0, abs=1e-3)


def _own_timeouts_job() -> tuple:
    """Rank 1 gives init_process_group 5 s; rank 0 arrives at the barrier a minute late."""
    if os.environ["RANK"] == "1":
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    else:
        dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        time.sleep(60)
    start = time.monotonic()
    try:
        dist.barrier()
    except dist.DistBackendError as exc:
        return "failed", time.monotonic() - start, str(exc)
    return "completed", time.monotonic() - start, ""


@pytest.mark.parametrize("carrier", ["greenlet", "process"])
def test_one_ranks_init_process_group_timeout_stays_its_own(carrier: str) -> None:
    """torch keeps a process group's timeout per process: rank 1's 5 s ends rank 1's wait only;
    the others wait with their own (the cluster's, 30 minutes) and learn of rank 1's failure."""
    result = _run(_own_timeouts_job, ranks_per_node=3, dist_initialized=False, carrier=carrier)
    kind, waited, message = result.returns[1]
    assert kind == "failed" and waited == pytest.approx(5.0, abs=1e-2) and "timed out after 5s" in message
    for rank in (0, 2):
        kind, waited, message = result.returns[rank]
        assert "timed out after 5s" not in message, (rank, message)


def _forged_group_timeout(timeout: float) -> str:
    """Rank 0 sends the host the request c10d sends for a new process group, naming the default
    group with ``timeout``; then both ranks meet at a barrier."""
    from simfs.port import schema
    from simfs.tasks.task import current_task

    answer = "sent"
    if dist.get_rank() == 0:
        calls = current_task().context.sys
        try:
            calls._ask(schema.DistGroup("WORLD", [0, 1], timeout))
        except ValueError as exc:
            answer = f"refused: {exc}"
    dist.barrier()
    return answer


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0])
def test_a_forged_group_timeout_that_is_no_number_of_seconds_is_refused_and_changes_no_one(timeout: float) -> None:
    result = _run(_forged_group_timeout, timeout, carrier="process")
    assert result.ok, result.summary()
    assert result.returns[0].startswith("refused: process group 'WORLD': timeout"), result.returns


# -- barrier ----------------------------------------------------------------------------------------

def test_barrier_waits_for_the_slowest_rank() -> None:
    def job() -> float:
        start = time.monotonic()
        time.sleep(10.0 * dist.get_rank())
        dist.barrier()
        return time.monotonic() - start

    returns = _ok(_run(job, nodes=2, ranks_per_node=2))
    after = list(returns.values())
    assert min(after) >= 30.0  # everyone leaves after the last arrival (rank 3 at 30 s)
    assert max(after) - min(after) < SLICE + 1e-3  # each after its own wake-up (runtime/wakeup.py)


def test_async_op_returns_completed_work() -> None:
    def job() -> tuple:
        t = torch.tensor([float(dist.get_rank() + 1)])
        work = dist.all_reduce(t, async_op=True)
        barrier_work = dist.barrier(async_op=True)
        return work.wait(), work.is_completed(), barrier_work.wait(), t.item()

    assert _ok(_run(job, ranks_per_node=3)) == {r: (True, True, True, 6.0) for r in range(3)}


# -- object collectives -----------------------------------------------------------------------------

def test_broadcast_object_list_copies() -> None:
    def job() -> tuple:
        rank = dist.get_rank()
        original = {"payload": [1, 2, 3]}
        objs = [original, "second"] if rank == 0 else [None, None]
        dist.broadcast_object_list(objs, src=0)
        received = objs[0]
        if rank == 1:
            received["payload"].append("mutated by rank 1")
        dist.barrier()
        return objs[1], received, received is original

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns[0] == ("second", {"payload": [1, 2, 3]}, True)
    assert returns[1] == ("second", {"payload": [1, 2, 3, "mutated by rank 1"]}, False)
    assert returns[2] == ("second", {"payload": [1, 2, 3]}, False)


def test_broadcast_object_list_from_nonzero_src() -> None:
    def job() -> list:
        objs = [f"from {dist.get_rank()}"]
        dist.broadcast_object_list(objs, src=2)
        return objs

    assert _ok(_run(job, ranks_per_node=3)) == {r: ["from 2"] for r in range(3)}


_SHARED: dict = {}


def test_all_gather_object_gives_copies() -> None:
    _SHARED.clear()

    def job() -> tuple:
        rank = dist.get_rank()
        mine = {"rank": rank, "items": [rank]}
        _SHARED[rank] = mine
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, mine)
        out[0]["items"].append("local edit")
        dist.barrier()
        return out, out[rank] is mine, any(o is _SHARED[i] for i, o in enumerate(out))

    returns = _ok(_run(job, ranks_per_node=3, carrier="greenlet"))  # aliasing is possible in one process only
    _SHARED.clear()
    for out, same_as_mine, aliased in returns.values():
        assert not same_as_mine and not aliased
        assert [o["rank"] for o in out] == [0, 1, 2]
        assert out[0]["items"] == [0, "local edit"]  # only this rank's own copy changed
        assert [o["items"] for o in out[1:]] == [[1], [2]]


def test_gather_object_only_dst_receives() -> None:
    def job() -> object:
        rank = dist.get_rank()
        target = [None] * 3 if rank == 1 else None
        dist.gather_object(("obj", rank), target, dst=1)
        return target

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns == {0: None, 1: [("obj", 0), ("obj", 1), ("obj", 2)], 2: None}


def test_scatter_object_list() -> None:
    def job() -> object:
        rank = dist.get_rank()
        out = [None]
        inputs = [{"for": i} for i in range(3)] if rank == 0 else None
        dist.scatter_object_list(out, inputs, src=0)
        if rank == 0:
            return out[0], out[0] is inputs[0]
        return out[0], False

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns == {0: ({"for": 0}, False), 1: ({"for": 1}, False), 2: ({"for": 2}, False)}


@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(objs=st.lists(st.recursive(st.none() | st.integers() | st.text(max_size=5),
                                  lambda c: st.lists(c, max_size=3)
                                  | st.dictionaries(st.text(max_size=3), c, max_size=3),
                                  max_leaves=8),
                     min_size=2, max_size=4))
@settings(max_examples=20)
def test_all_gather_object_round_trips(objs: list) -> None:
    def job(values: list) -> list:
        out = [None] * len(values)
        dist.all_gather_object(out, values[dist.get_rank()])
        return out

    returns = _ok(_run(job, objs, ranks_per_node=len(objs)))
    assert all(v == objs for v in returns.values())


# -- tensor collectives -----------------------------------------------------------------------------

OPS = {"SUM": ReduceOp.SUM, "MAX": ReduceOp.MAX, "MIN": ReduceOp.MIN, "PRODUCT": ReduceOp.PRODUCT,
       "AVG": ReduceOp.AVG}


def _reference(op: str, rows: list[list[float]]) -> torch.Tensor:
    stacked = torch.tensor(rows, dtype=torch.float64)
    return {"SUM": stacked.sum(0), "MAX": stacked.max(0).values, "MIN": stacked.min(0).values,
            "PRODUCT": stacked.prod(0), "AVG": stacked.mean(0)}[op]


def reduce_job(rows: list[list[float]], op: str) -> list[float]:
    t = torch.tensor(rows[dist.get_rank()], dtype=torch.float64)
    dist.all_reduce(t, op=OPS[op])
    return t.tolist()


@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(data=st.data())
@settings(max_examples=30)
def test_all_reduce_ops(data: st.DataObject) -> None:
    world = data.draw(st.integers(1, 4), label="world")
    length = data.draw(st.integers(1, 5), label="length")
    rows = data.draw(st.lists(st.lists(st.integers(-20, 20).map(float), min_size=length, max_size=length),
                              min_size=world, max_size=world), label="rows")
    op = data.draw(st.sampled_from(sorted(OPS)), label="op")
    returns = _ok(_run(reduce_job, rows, op, nodes=1, ranks_per_node=world))
    expected = _reference(op, rows).tolist()
    for rank, got in returns.items():
        assert got == pytest.approx(expected), (rank, op, rows)


def test_all_reduce_default_op_is_sum_and_keeps_dtype() -> None:
    def job() -> tuple:
        t = torch.tensor([dist.get_rank() + 1, 10], dtype=torch.int32)
        dist.all_reduce(t)
        return t.tolist(), str(t.dtype)

    assert _ok(_run(job, ranks_per_node=3)) == {r: ([6, 30], "torch.int32") for r in range(3)}


@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(data=st.data())
@settings(max_examples=20)
def test_reduce_only_dst_gets_result(data: st.DataObject) -> None:
    world = data.draw(st.integers(2, 4))
    dst = data.draw(st.integers(0, world - 1))
    rows = data.draw(st.lists(st.lists(st.integers(-9, 9).map(float), min_size=3, max_size=3),
                              min_size=world, max_size=world))

    def job() -> list:
        t = torch.tensor(rows[dist.get_rank()], dtype=torch.float64)
        dist.reduce(t, dst=dst, op=ReduceOp.MAX)
        return t.tolist()

    returns = _ok(_run(job, ranks_per_node=world))
    for rank, got in returns.items():
        assert got == (_reference("MAX", rows).tolist() if rank == dst else rows[rank])


@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(data=st.data())
@settings(max_examples=20)
def test_broadcast_all_gather_into_tensor(data: st.DataObject) -> None:
    world = data.draw(st.integers(1, 4))
    src = data.draw(st.integers(0, world - 1))
    rows = data.draw(st.lists(st.lists(st.integers(-100, 100), min_size=2, max_size=2),
                              min_size=world, max_size=world))

    def job() -> dict:
        rank = dist.get_rank()
        mine = torch.tensor(rows[rank], dtype=torch.int64)
        b = mine.clone()
        dist.broadcast(b, src=src)
        gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(gathered, mine)
        flat = torch.zeros(2 * world, dtype=torch.int64)
        dist.all_gather_into_tensor(flat, mine)
        return {"bcast": b.tolist(), "all_gather": [g.tolist() for g in gathered], "into": flat.tolist()}

    returns = _ok(_run(job, ranks_per_node=world))
    for got in returns.values():
        assert got["bcast"] == rows[src]
        assert got["all_gather"] == rows
        assert got["into"] == [x for row in rows for x in row]


@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(data=st.data())
@settings(max_examples=20)
def test_reduce_scatter_tensor(data: st.DataObject) -> None:
    world = data.draw(st.integers(1, 4))
    chunk = data.draw(st.integers(1, 3))
    rows = data.draw(st.lists(st.lists(st.integers(-50, 50).map(float), min_size=world * chunk,
                                       max_size=world * chunk), min_size=world, max_size=world))
    op = data.draw(st.sampled_from(["SUM", "MAX", "MIN"]))

    def job() -> list:
        out = torch.zeros(chunk, dtype=torch.float64)
        dist.reduce_scatter_tensor(out, torch.tensor(rows[dist.get_rank()], dtype=torch.float64), op=OPS[op])
        return out.tolist()

    returns = _ok(_run(job, ranks_per_node=world))
    full = _reference(op, rows).tolist()
    for rank, got in returns.items():
        assert got == full[rank * chunk:(rank + 1) * chunk]


def test_gather_and_scatter_tensors() -> None:
    def job() -> dict:
        rank = dist.get_rank()
        mine = torch.full((2,), float(rank * 10))
        gathered = [torch.zeros(2) for _ in range(3)] if rank == 2 else None
        dist.gather(mine, gathered, dst=2)
        part = torch.zeros(3)
        pieces = [torch.arange(3, dtype=torch.float32) + 100 * i for i in range(3)] if rank == 1 else None
        dist.scatter(part, pieces, src=1)
        return {"gathered": None if gathered is None else [g.tolist() for g in gathered], "part": part.tolist()}

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns[2]["gathered"] == [[0.0, 0.0], [10.0, 10.0], [20.0, 20.0]]
    assert returns[0]["gathered"] is None and returns[1]["gathered"] is None
    for rank in range(3):
        assert returns[rank]["part"] == [100.0 * rank, 100.0 * rank + 1, 100.0 * rank + 2]


def test_received_tensors_are_not_shared() -> None:
    def job() -> list:
        rank = dist.get_rank()
        t = torch.tensor([1.0, 2.0]) if rank == 0 else torch.zeros(2)
        dist.broadcast(t, src=0)
        out = [torch.zeros(2) for _ in range(2)]
        dist.all_gather(out, t)
        if rank == 1:
            t.add_(100)
            out[0].add_(1000)
        dist.barrier()
        return t.tolist() + out[0].tolist()

    assert _ok(_run(job)) == {0: [1.0, 2.0, 1.0, 2.0], 1: [101.0, 102.0, 1001.0, 1002.0]}


# -- groups -----------------------------------------------------------------------------------------

@pytest.mark.slow  # a Hypothesis property over rank processes: run by .ci/run
@given(data=st.data())
@settings(max_examples=15)
def test_new_group_subsets(data: st.DataObject) -> None:
    world = data.draw(st.integers(2, 4))
    members = sorted(data.draw(st.sets(st.integers(0, world - 1), min_size=1, max_size=world)))

    def job() -> tuple:
        rank = dist.get_rank()
        group = dist.new_group(members)
        if group is GroupMember.NON_GROUP_MEMBER:
            return "non-member", None, None, None
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=group)
        ranks = [None] * dist.get_world_size(group)
        dist.all_gather_object(ranks, rank, group=group)
        return dist.get_rank(group), dist.get_world_size(group), t.item(), ranks

    returns = _ok(_run(job, ranks_per_node=world))
    for rank, got in returns.items():
        if rank in members:
            assert got == (members.index(rank), len(members), float(sum(members)), members)
        else:
            assert got == ("non-member", None, None, None)


def test_group_collectives_use_group_ranks_for_src() -> None:
    def job() -> object:
        group = dist.new_group([1, 2])
        if group is GroupMember.NON_GROUP_MEMBER:
            return None
        objs = [f"from {dist.get_rank()}"]
        dist.broadcast_object_list(objs, src=2, group=group)  # src is a global rank
        objs2 = [f"from {dist.get_rank()}"]
        dist.broadcast_object_list(objs2, group=group, group_src=0)  # group rank 0 == global 1
        return objs[0], objs2[0], dist.get_process_group_ranks(group), dist.get_global_rank(group, 1)

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns[0] is None
    assert returns[1] == returns[2] == ("from 2", "from 1", [1, 2], 2)


def test_groups_and_world_do_not_interfere() -> None:
    def job() -> list:
        rank = dist.get_rank()
        pair = dist.new_group([0, 1])
        out = []
        if rank in (0, 1):
            for _ in range(3):
                dist.barrier(group=pair)
                out.append("pair")
        dist.barrier()
        out.append("world")
        return out

    returns = _ok(_run(job, ranks_per_node=3))
    assert returns == {0: ["pair"] * 3 + ["world"], 1: ["pair"] * 3 + ["world"], 2: ["world"]}


# -- mismatches and timeouts ------------------------------------------------------------------------

def mismatch_job() -> str:
    if dist.get_rank() == 0:
        dist.barrier()
    else:
        out = [None, None]
        dist.all_gather_object(out, "x")
    return "completed"


def test_collective_mismatch_raises() -> None:
    result = _run(mismatch_job)
    assert not result.returns
    assert any(isinstance(e, simfs.CollectiveMismatch) for e in result.errors.values()), result.summary()
    mismatch = next(str(e) for e in result.errors.values() if isinstance(e, simfs.CollectiveMismatch))
    assert "barrier" in mismatch and "all_gather" in mismatch  # all_gather_object's own all_gather


def test_collective_mismatch_reported_to_every_rank_at_once() -> None:
    result = _run(mismatch_job)
    # both ranks arrived: neither should sit out the 30-minute timeout "waiting" for the other
    assert set(result.errors) == {0, 1}, result.summary()
    assert all(isinstance(e, simfs.CollectiveMismatch) for e in result.errors.values()), result.summary()
    assert result.virtual_time < 1800


def skip_barrier_job() -> object:
    rank = dist.get_rank()
    if rank == 2:
        return "skipped"
    start = time.monotonic()
    try:
        dist.barrier()
    except dist.DistBackendError as exc:
        return "DistBackendError", time.monotonic() - start, str(exc)
    return "completed"


@pytest.mark.parametrize("timeout", [30.0, 1800.0])
def test_skipped_barrier_times_out_in_virtual_time(timeout: float) -> None:
    wall0 = time.perf_counter()
    result = _run(skip_barrier_job, ranks_per_node=3, collective_timeout=timeout)
    assert time.perf_counter() - wall0 < 5
    assert result.returns[2] == "skipped"
    for rank in (0, 1):
        kind, waited, message = result.returns[rank]
        assert kind == "DistBackendError"
        assert waited == pytest.approx(timeout, abs=1e-3)
        assert "2" in message
        info = result.hung[rank]
        assert info.waiting_for == [2]
        assert info.waited == pytest.approx(timeout, abs=1e-3)
    assert 2 not in result.hung
    assert result.virtual_time == pytest.approx(timeout, abs=1e-2)


def test_default_timeout_is_torchs_thirty_minutes() -> None:
    result = _run(skip_barrier_job, ranks_per_node=3)
    assert result.returns[0][1] == pytest.approx(1800.0, abs=1e-3)


def test_group_after_timeout_is_aborted() -> None:
    def job() -> object:
        if dist.get_rank() == 1:
            return "skipped"
        try:
            dist.barrier()
        except dist.DistBackendError:
            pass
        start = time.monotonic()
        try:
            dist.barrier()
        except dist.DistBackendError:
            return "second barrier failed", time.monotonic() - start
        return "second barrier completed"

    result = _run(job, collective_timeout=60)
    assert result.returns[1] == "skipped"
    kind, waited = result.returns[0]
    assert kind == "second barrier failed" and waited < 1.0


def test_monitored_barrier_honours_its_own_timeout() -> None:
    def job() -> object:
        if dist.get_rank() == 1:
            return "skipped"
        start = time.monotonic()
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=7))
        except dist.DistBackendError:
            return "timeout", time.monotonic() - start
        return "completed"

    result = _run(job, ranks_per_node=3)
    assert result.returns[1] == "skipped"
    for rank in (0, 2):
        assert result.returns[rank][0] == "timeout"
        assert result.returns[rank][1] == pytest.approx(7.0, abs=1e-3)
        assert result.hung[rank].waiting_for == [1]
    assert result.virtual_time < 100


def test_monitored_barrier_completes_when_all_arrive() -> None:
    def job() -> float:
        start = time.monotonic()
        time.sleep(3.0 * dist.get_rank())
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
        return time.monotonic() - start

    returns = _ok(_run(job, ranks_per_node=3))
    assert min(returns.values()) >= 6.0


def test_crashed_peer_makes_collective_time_out() -> None:
    def job() -> object:
        rank = dist.get_rank()
        if rank == 1:
            with open("/shared/boom", "w") as f:
                f.write("x")
        dist.barrier()
        return rank

    result = _run(job, nodes=2, ranks_per_node=1, collective_timeout=120,
                  faults=[simfs.CrashNode(node=1, on="open:/shared/boom")])
    assert 1 in result.crashed
    assert isinstance(result.errors.get(0), dist.DistBackendError), result.summary()
    assert result.hung[0].waiting_for == [1]
