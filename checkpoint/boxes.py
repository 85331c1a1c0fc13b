"""Boxes: the part of an n-dimensional tensor a chunk holds, as (offsets, shape) tuples, and the
check that a set of boxes covers a tensor exactly once."""

from __future__ import annotations

import math

Shape = tuple[int, ...]
Box = tuple[Shape, Shape]  # (offsets, shape)


def volume(shape: Shape) -> int:
    """Number of elements of a box of this shape."""
    return math.prod(shape)


def describe(box: Box) -> str:
    """``[0:2, 4:8]``: the index ranges of a box."""
    offsets, shape = box
    return "[" + ", ".join(f"{o}:{o + s}" for o, s in zip(offsets, shape)) + "]"


def inside(box: Box, global_shape: Shape) -> bool:
    """Does the box lie within a tensor of ``global_shape`` (same rank, no negative extents)?"""
    offsets, shape = box
    return (len(offsets) == len(shape) == len(global_shape)
            and all(o >= 0 and s >= 0 and o + s <= g for o, s, g in zip(offsets, shape, global_shape)))


def intersect(a: Box, b: Box) -> Box | None:
    """The common part of two boxes of one tensor, or None if they share no element."""
    offsets, shape = [], []
    for ao, as_, bo, bs in zip(a[0], a[1], b[0], b[1]):
        lo, hi = max(ao, bo), min(ao + as_, bo + bs)
        if hi <= lo:
            return None
        offsets.append(lo)
        shape.append(hi - lo)
    return tuple(offsets), tuple(shape)


def strides(shape: Shape) -> Shape:
    """Row-major strides in elements."""
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return tuple(out)


def cover_problem(global_shape: Shape, boxes: list[Box]) -> str | None:
    """None if the distinct ``boxes`` cover a tensor of ``global_shape`` exactly once, else what
    is wrong: a box outside the tensor, two boxes that overlap, or elements no box holds."""
    if len(boxes) == 1 and boxes[0][1] == global_shape and not any(boxes[0][0]):
        return None  # the whole tensor in one chunk (the common case, kept fast)
    for box in boxes:
        if not inside(box, global_shape):
            return f"chunk {describe(box)} lies outside the shape {list(global_shape)}"
    filled = [box for box in boxes if volume(box[1])]
    if len(global_shape) == 0:
        if len(filled) > 1:
            return "two chunks hold the same scalar"
    elif len(filled) > 1:
        overlap = _first_overlap(filled)
        if overlap is not None:
            return f"chunks {describe(overlap[0])} and {describe(overlap[1])} overlap"
    covered, total = sum(volume(box[1]) for box in filled), volume(global_shape)
    if covered != total:
        return f"the chunks hold {covered} of its {total} elements"
    return None


def _first_overlap(boxes: list[Box]) -> tuple[Box, Box] | None:
    """A pair of overlapping boxes, found by a sweep along the dimension with the most distinct
    starts (near-linear for the grid partitions sharding produces)."""
    dim = max(range(len(boxes[0][0])), key=lambda d: len({box[0][d] for box in boxes}))
    active: list[Box] = []
    for box in sorted(boxes, key=lambda b: b[0][dim]):
        start = box[0][dim]
        active = [a for a in active if a[0][dim] + a[1][dim] > start]
        for other in active:
            if intersect(box, other) is not None:
                return other, box
        active.append(box)
    return None
