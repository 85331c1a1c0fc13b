"""Collectives' tensors through shared memory (runtime/carrier/outbox.py): what a rank posts is read
back exactly by every rank until the group's collective after next; a rank never writes over
what a peer may still have to read; tensors do not cross the host's socket."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import simfs
from simfs.port import framing as wire
from simfs.rank.c10d.reduce import stack
from simfs.rank.outbox import Place
from simfs.runtime.carrier.outbox import Outboxes

DTYPES = (torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.uint8, torch.bool)


def _tensor(dtype: torch.dtype, numel: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2 if dtype == torch.bool else 100, (numel,), generator=g).to(dtype)


posts = st.lists(st.tuples(st.sampled_from(("g0", "g1")), st.lists(st.tuples(st.sampled_from(DTYPES),
                                                                       st.integers(0, 40_000)), min_size=1,
                                                             max_size=3),
                           st.booleans()),
                 min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(posts)
def test_a_post_reads_back_exactly_until_its_groups_collective_after_next(
        steps: list[tuple[str, list[tuple[torch.dtype, int]], bool]]) -> None:
    """Posts of two groups, of sizes that grow and shrink (slots move), some followed by a failed
    collective (give_up): every post of a group still reads back bit-exactly after the group's
    next post, from another rank's side."""
    boxes = Outboxes.create(2)
    try:
        mine, theirs = boxes.view(0), boxes.view(1)
        # group -> [(places, tensors)] of its last two posts
        last: dict[str, list[tuple[list[Place], list[torch.Tensor]]]] = {}
        for n, (group, shapes, failed) in enumerate(steps):
            tensors = [_tensor(dtype, numel, seed=1000 * n + i) for i, (dtype, numel) in enumerate(shapes)]
            places = mine.post(group, tensors)
            last[group] = ([*last.get(group, []), (places, tensors)])[-2:]
            if failed:
                mine.give_up(group)
            for earlier, sent in last[group]:
                got = [theirs.read([place])[0] for place in earlier]
                for a, b in zip(got, sent):
                    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    finally:
        boxes.close()


def test_given_up_slots_are_never_written_again() -> None:
    boxes = Outboxes.create(1)
    try:
        box = boxes.view(0)
        first = box.post("g", [torch.ones(10)])
        box.give_up("g")
        box.post("g", [torch.zeros(10)])
        box.post("g", [torch.zeros(10)])
        assert torch.equal(box.read(first)[0], torch.ones(10))
    finally:
        boxes.close()


def test_tensors_of_one_dtype_and_shape_are_read_as_rows_that_stack_without_a_copy() -> None:
    boxes = Outboxes.create(3)
    try:
        places = [boxes.view(r).post("g", [torch.full((2, 3), float(r))])[0] for r in range(3)]
        rows = boxes.view(0).read(places)
        stacked = stack(rows)
        assert stacked.data_ptr() == rows[0].data_ptr()  # no copy
        assert torch.equal(stacked, torch.stack([torch.full((2, 3), float(r)) for r in range(3)]))
        mixed = boxes.view(0).read([places[0], boxes.view(1).post("h", [torch.ones(4)])[0]])
        assert torch.equal(mixed[0], torch.zeros(2, 3)) and torch.equal(mixed[1], torch.ones(4))
    finally:
        boxes.close()


def _collectives(sizes: list[int]) -> list[float]:
    """all_reduce, all_gather_into_tensor and broadcast of each size on the world and on a
    subgroup, interleaved (the slots of two groups grow and move); a checksum of each result."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pair = dist.new_group([0, 2])
    sums = []
    for n, size in enumerate(sizes):
        t = torch.arange(size, dtype=torch.float64) + rank * 1000 + n
        dist.all_reduce(t)
        sums.append(float(t.sum()))
        out = torch.empty(size * world, dtype=torch.float64)
        dist.all_gather_into_tensor(out, torch.full((size,), float(rank + n)))
        sums.append(float(out.sum()))
        if rank in (0, 2):
            b = torch.full((size,), float(rank))
            dist.broadcast(b, src=2, group=pair)
            sums.append(float(b.sum()))
    return sums


def _expected(sizes: list[int], rank: int) -> list[float]:
    sums = []
    for n, size in enumerate(sizes):
        base = torch.arange(size, dtype=torch.float64)
        sums.append(float(sum((base + r * 1000 + n).sum() for r in range(4))))
        sums.append(float(sum(size * float(r + n) for r in range(4))))
        if rank in (0, 2):
            sums.append(float(size * 2.0))
    return sums


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=6))
def test_collectives_of_any_sizes_on_two_groups_get_exact_results(sizes: list[int]) -> None:
    result = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(_collectives, sizes)
    assert result.ok, result.summary()
    assert result.returns == {r: _expected(sizes, r) for r in range(4)}


def _big_all_reduce() -> float:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(4 << 20)  # 16 MiB
    dist.all_reduce(t)
    return float(t[0])


def test_a_collectives_tensors_do_not_cross_the_hosts_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host receives where a 16 MiB tensor lies, not its bytes."""
    largest = [0]
    receive = wire.receive

    def measured(fd: int, limit: int | None = None) -> bytes | None:
        data = receive(fd, limit)
        largest[0] = max(largest[0], len(data or b""))
        return data

    monkeypatch.setattr(wire, "receive", measured)
    result = simfs.Cluster(nodes=2, ranks_per_node=2, dist_initialized=False).run(_big_all_reduce)
    assert result.ok, result.summary()
    assert result.returns == dict.fromkeys(range(4), 4.0)
    assert 0 < largest[0] < 64 << 10
