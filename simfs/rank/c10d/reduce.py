"""What a reduction of c10d (``ReduceOp``) makes of every rank's tensor: computed in each rank
process from the tensors the host gathered, in group-rank order, so every rank gets the same bits."""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
from torch.distributed import ReduceOp

_BITWISE = {ReduceOp.BAND: operator.and_, ReduceOp.BOR: operator.or_, ReduceOp.BXOR: operator.xor}
_BY_NAME = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "product": ReduceOp.PRODUCT, "min": ReduceOp.MIN,
            "max": ReduceOp.MAX, "band": ReduceOp.BAND, "bor": ReduceOp.BOR, "bxor": ReduceOp.BXOR}


def reduce(op: Any, tensors: list[torch.Tensor]) -> torch.Tensor:
    """``op`` (a ReduceOp, or its RedOpType) over ``tensors``, in the first one's dtype."""
    stacked = stack(tensors)
    if op == ReduceOp.SUM:
        return stacked.sum(0).to(tensors[0].dtype)
    if op == ReduceOp.PRODUCT:
        return stacked.prod(0).to(tensors[0].dtype)
    if op == ReduceOp.MIN:
        return stacked.amin(0)
    if op == ReduceOp.MAX:
        return stacked.amax(0)
    if op == ReduceOp.AVG:
        return (stacked.sum(0) / len(tensors)).to(tensors[0].dtype)
    for bitwise, combine in _BITWISE.items():
        if op == bitwise:
            return functools.reduce(combine, tensors)
    raise ValueError(f"simfs: unsupported ReduceOp {op}")


def stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(tensors)``, without a copy when they already lie one after another in one
    buffer (as a collective's tensors are read: runtime/carrier/outbox.py)."""
    first = tensors[0]
    step = first.numel()
    storage = first.untyped_storage().data_ptr()
    if first.is_contiguous() and all(
            t.is_contiguous() and t.dtype == first.dtype and t.shape == first.shape
            and t.untyped_storage().data_ptr() == storage and t.storage_offset() == first.storage_offset() + i * step
            for i, t in enumerate(tensors)):
        return first.as_strided((len(tensors), *first.shape), (step, *first.stride()))
    return torch.stack(tensors)


def op_named(name: str) -> Any:
    """The ReduceOp a functional collective names by string ("sum", "avg", ...)."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"simfs: unsupported reduce_op {name!r}") from None
