"""checkpoint's pure parts: box geometry (exact-cover check against brute force), Split
placements (torch.chunk sizes), the global plan (each distinct chunk written once, replicas
balanced by bytes and large ones split, clear errors for overlaps, gaps and disagreements)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from checkpoint import Broadcast, LayoutError, Sharded, Split
from checkpoint.boxes import cover_problem, volume
from checkpoint.layout import local_box
from checkpoint.plan import SPLIT_BYTES, LocalChunk, build


def _cells(box):
    return set(itertools.product(*(range(o, o + s) for o, s in zip(*box))))


@given(st.lists(st.integers(0, 4), max_size=2), st.data())
def test_cover_problem_agrees_with_brute_force(dims, data):
    shape = tuple(dims)
    box = st.tuples(*(st.tuples(st.integers(0, 5), st.integers(0, 4)) for _ in shape))
    drawn = data.draw(st.lists(box, min_size=1, max_size=5, unique=True))
    boxes = [(tuple(o for o, _ in b), tuple(s for _, s in b)) for b in drawn]
    problem = cover_problem(shape, boxes)
    inside = all(o + s <= g for b in boxes for o, s, g in zip(*b, shape))
    cells = [_cells(b) for b in boxes if volume(b[1])]
    union = set().union(*cells) if cells else set()
    exact = inside and sum(map(len, cells)) == len(union) == volume(shape)
    assert (problem is None) == exact, (shape, boxes, problem)


@given(st.lists(st.integers(0, 9), min_size=1, max_size=3), st.data())
def test_split_matches_torch_chunk(shape, data):
    shape = tuple(shape)
    mesh = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    placements = [data.draw(st.sampled_from([Broadcast()] + [Split(d) for d in range(len(shape))])) for _ in mesh]
    full = torch.arange(volume(shape)).reshape(shape)
    seen = []
    for coords in itertools.product(*(range(n) for n in mesh)):
        expected = full
        for placement, n, c in zip(placements, mesh, coords):
            if isinstance(placement, Split):
                parts = torch.chunk(expected, n, placement.dim) if expected.shape[placement.dim] else ()
                expected = parts[c] if c < len(parts) else expected.narrow(placement.dim, 0, 0)
        box = local_box(shape, placements, mesh, coords)
        assert box[1] == tuple(expected.shape)
        assert torch.equal(Sharded.of(full, placements, mesh, coords).local, expected)
        seen.append(box)
    distinct = list(set(seen))
    assert cover_problem(shape, distinct) is None


def _chunk(key, offsets, shape, global_shape, dtype="float32", kind="tensor"):
    return LocalChunk(key, kind, dtype, tuple(global_shape), tuple(offsets), tuple(shape))


def _written(plan):
    """key -> list of (writer rank, box) the plan writes."""
    out = {}
    for rank, rank_plan in enumerate(plan.ranks):
        for piece in rank_plan.pieces:
            out.setdefault(plan.locals[rank][piece.chunk].key, []).append((rank, (piece.offsets, piece.shape)))
    return out


def test_replicated_items_are_written_once_and_balanced():
    # 8 replicated 1 KiB tensors on 4 ranks, plus one shard per rank of a sharded tensor
    plans = [[_chunk(f"r{i}", (0,), (256,), (256,)) for i in range(8)] + [_chunk("s", (r * 4, 0), (4, 8), (16, 8))]
             for r in range(4)]
    plan = build(plans)
    written = _written(plan)
    assert all(len(written[f"r{i}"]) == 1 for i in range(8))
    assert sorted(r for r, _ in written["s"]) == [0, 1, 2, 3]
    loads = [sum(p.nbytes for p in rp.pieces) for rp in plan.ranks]
    assert max(loads) - min(loads) <= 1024
    assert plan.ranks[0].replicated == list(range(8))  # replicas are hashed; the unique shard is not


def test_large_replicated_tensor_is_split_across_replicas():
    rows = 4 * SPLIT_BYTES // 4096  # 4096-byte rows: 4 * SPLIT_BYTES in all
    plans = [[_chunk("big", (0, 0), (rows, 1024), (rows, 1024))] for _ in range(3)]
    plan = build(plans)
    pieces = [(r, p) for r, rp in enumerate(plan.ranks) for p in rp.pieces]
    assert sorted(r for r, _ in pieces) == [0, 1, 2]
    assert sum(p.nbytes for _, p in pieces) == rows * 4096
    cover = [(p.offsets, p.shape) for _, p in pieces]
    assert cover_problem((rows, 1024), cover) is None
    for _, p in pieces:  # each piece is a contiguous byte range of the chunk: its rows
        assert p.start == p.offsets[0] * 4096 and p.nbytes == p.shape[0] * 4096


@pytest.mark.parametrize(("plans", "message"), [
    ([[_chunk("w", (0,), (6,), (10,))], [_chunk("w", (4,), (6,), (10,))]], r"'w'.*\[0:6\] and \[4:10\] overlap"),
    ([[_chunk("w", (0,), (4,), (10,))], [_chunk("w", (6,), (4,), (10,))]], r"'w'.*hold 8 of its 10 elements"),
    ([[_chunk("w", (0,), (5,), (10,))], [_chunk("w", (5,), (5,), (10,), dtype="float16")]],
     r"disagree on the dtype of 'w': rank 0 has 'float32', rank 1 has 'float16'"),
    ([[_chunk("w", (0,), (5,), (10,))], [_chunk("w", (5,), (5,), (11,))]],
     r"disagree on the global shape of 'w': rank 0 has \[10\], rank 1 has \[11\]"),
    ([[_chunk("w", (8,), (4,), (10,))]], r"'w'.*chunk \[8:12\] lies outside the shape \[10\]"),
    ([[_chunk("o", (0,), (5,), (5,), "uint8", "object")], [_chunk("o", (0,), (6,), (6,), "uint8", "object")]],
     r"replicas of 'o' differ: rank 0 pickles it to 5 bytes, rank 1 to 6"),
])
def test_layout_errors_name_the_tensor(plans, message):
    with pytest.raises(LayoutError, match=message):
        build(plans)
