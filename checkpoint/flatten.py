"""Nested state dicts as flat leaves: ``{"model": {"w": t}, "opt": [{"lr": 0.1}]}`` has the leaves
``model.w`` and ``opt.0.lr``. Dicts (str or int keys) and lists are containers; everything else
is a leaf, classified by kind."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from .errors import StateDictError
from .layout import Sharded, dtensor_module

#: leaf kinds: plain tensor, DTensor, hand-made shard, numpy array, JSON-able value, other object
KINDS = ("tensor", "dtensor", "sharded", "array", "value", "object")


class Leaf(NamedTuple):
    """A leaf of a state dict, and where it sits: ``parent[slot] is value``."""

    key: str
    kind: str
    value: Any
    parent: Any
    slot: str | int


def is_value(value: Any) -> bool:
    """JSON-able scalars and strings, and tuples of them (optimizers keep ``betas`` as one)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, tuple) and all(is_value(v) for v in value)


def kind_of(value: Any, dtensor_type: type | None = None) -> str:
    """The kind of a leaf (one of KINDS); ``dtensor_type`` is DTensor if it was imported."""
    if isinstance(value, torch.Tensor):
        return "dtensor" if dtensor_type is not None and isinstance(value, dtensor_type) else "tensor"
    if isinstance(value, Sharded):
        return "sharded"
    if isinstance(value, np.ndarray):
        return "array"
    return "value" if is_value(value) else "object"


def flatten(state_dict: Mapping[Any, Any]) -> list[Leaf]:
    """Every leaf of ``state_dict`` in traversal order; keys join with ``.``. Raises
    StateDictError for a key that is neither str nor int, or two paths with one flat key."""
    if not isinstance(state_dict, Mapping):
        raise StateDictError(f"a state dict must be a dict, got {type(state_dict).__name__}")
    leaves: list[Leaf] = []
    seen: set[str] = set()
    mod = dtensor_module()
    for leaf in _walk(state_dict, "", None if mod is None else mod.DTensor):
        if leaf.key in seen:
            raise StateDictError(f"two entries of the state dict flatten to the key {leaf.key!r} "
                                 "(a key containing '.' next to a nested one); rename one")
        seen.add(leaf.key)
        leaves.append(leaf)
    return leaves


def _walk(container: Any, prefix: str, dtensor_type: type | None) -> Iterator[Leaf]:
    items = container.items() if isinstance(container, Mapping) else enumerate(container)
    for slot, value in items:
        if isinstance(slot, bool) or not isinstance(slot, (str, int)):
            raise StateDictError(f"state dict key {slot!r} under {prefix or 'the top level'!r} is a "
                                 f"{type(slot).__name__}; keys must be str or int")
        key = f"{prefix}{slot}"
        if isinstance(value, (Mapping, list)):
            yield from _walk(value, key + ".", dtensor_type)
        else:
            yield Leaf(key, kind_of(value, dtensor_type), value, container, slot)
