"""torch's functional collectives (``torch.ops._c10d_functional``, which DTensor, FSDP2 and
``torch.distributed._functional_collectives`` call) on the rank's simulated groups. Their C++ CPU
kernels look for a per-device backend, which a Python ProcessGroup does not have (c10d's ``Backend``
has no Python constructor), so each gets a CPU kernel here, in the rank process only, that calls
the group's collective: the result is ready when the op returns, and ``wait_tensor`` finds no
pending work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C._distributed_c10d import AllreduceOptions, BroadcastOptions, ReduceScatterOptions
from torch.distributed.distributed_c10d import _resolve_process_group  # type: ignore[attr-defined]

from .reduce import op_named

Tensors = list[torch.Tensor]


def _group(name: Any) -> Any:
    return _resolve_process_group(name)


def _reduce_opts(reduce_op: str, kind: type = AllreduceOptions) -> Any:
    opts = kind()
    opts.reduceOp = op_named(reduce_op)
    return opts


def all_reduce_(input: torch.Tensor, reduce_op: str, group_name: Any) -> torch.Tensor:
    _group(group_name).allreduce([input], _reduce_opts(reduce_op))
    return input


def all_reduce(input: torch.Tensor, reduce_op: str, group_name: Any) -> torch.Tensor:
    return all_reduce_(input.clone(memory_format=torch.contiguous_format), reduce_op, group_name)


def all_reduce_coalesced_(inputs: Tensors, reduce_op: str, group_name: Any) -> Tensors:
    _group(group_name).allreduce(list(inputs), _reduce_opts(reduce_op))
    return inputs


def all_reduce_coalesced(inputs: Tensors, reduce_op: str, group_name: Any) -> Tensors:
    return all_reduce_coalesced_([t.clone(memory_format=torch.contiguous_format) for t in inputs], reduce_op,
                                 group_name)


def _gathered(input: torch.Tensor, group_size: int) -> torch.Tensor:
    return input.new_empty((input.shape[0] * group_size, *input.shape[1:]))


def all_gather_into_tensor_coalesced(inputs: Tensors, group_size: int, group_name: Any) -> Tensors:
    outputs = [_gathered(t, group_size) for t in inputs]
    _group(group_name).allgather_into_tensor_coalesced(outputs, [t.contiguous() for t in inputs])
    return outputs


def all_gather_into_tensor(input: torch.Tensor, group_size: int, group_name: Any) -> torch.Tensor:
    return all_gather_into_tensor_coalesced([input], group_size, group_name)[0]


def all_gather_into_tensor_out(input: torch.Tensor, group_size: int, group_name: Any, *,
                               out: torch.Tensor) -> torch.Tensor:
    _group(group_name).allgather_into_tensor_coalesced([out], [input.contiguous()])
    return out


def _scattered(input: torch.Tensor, group_size: int) -> torch.Tensor:
    if input.shape[0] % group_size:
        raise ValueError(f"reduce_scatter_tensor: dim 0 of {tuple(input.shape)} is not a multiple of the group "
                         f"size {group_size}")
    return input.new_empty((input.shape[0] // group_size, *input.shape[1:]))


def reduce_scatter_tensor_coalesced(inputs: Tensors, reduce_op: str, group_size: int, group_name: Any) -> Tensors:
    outputs = [_scattered(t, group_size) for t in inputs]
    _group(group_name).reduce_scatter_tensor_coalesced(outputs, [t.contiguous() for t in inputs],
                                                       _reduce_opts(reduce_op, ReduceScatterOptions))
    return outputs


def reduce_scatter_tensor(input: torch.Tensor, reduce_op: str, group_size: int, group_name: Any) -> torch.Tensor:
    return reduce_scatter_tensor_coalesced([input], reduce_op, group_size, group_name)[0]


def reduce_scatter_tensor_out(input: torch.Tensor, reduce_op: str, group_size: int, group_name: Any, *,
                              out: torch.Tensor) -> torch.Tensor:
    _group(group_name).reduce_scatter_tensor_coalesced([out], [input.contiguous()],
                                                       _reduce_opts(reduce_op, ReduceScatterOptions))
    return out


def all_to_all_single(input: torch.Tensor, output_split_sizes: list[int], input_split_sizes: list[int],
                      group_name: Any) -> torch.Tensor:
    group = _group(group_name)
    rows = sum(output_split_sizes) if output_split_sizes else input.shape[0]
    output = input.new_empty((int(rows), *input.shape[1:]))
    group.alltoall_base(output, input.contiguous(), list(output_split_sizes), list(input_split_sizes))
    return output


def broadcast_(input: torch.Tensor, src: int, group_name: Any) -> torch.Tensor:
    opts = BroadcastOptions()
    opts.rootRank = src
    _group(group_name).broadcast([input], opts)
    return input


def broadcast(input: torch.Tensor, src: int, group_name: Any) -> torch.Tensor:
    return broadcast_(input.clone(memory_format=torch.contiguous_format), src, group_name)


KERNELS: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in (
    all_reduce, all_reduce_, all_reduce_coalesced, all_reduce_coalesced_, all_gather_into_tensor,
    all_gather_into_tensor_out, all_gather_into_tensor_coalesced, reduce_scatter_tensor, reduce_scatter_tensor_out,
    reduce_scatter_tensor_coalesced, all_to_all_single, broadcast, broadcast_)}
_libraries: list[torch.library.Library] = []  # kept alive: a Library's kernels go with it


def install() -> None:
    """Give every functional collective its CPU kernel in this process."""
    if _libraries:
        return
    library = torch.library.Library("_c10d_functional", "IMPL")  # type: ignore[no-untyped-call]
    for name, kernel in KERNELS.items():
        library.impl(name, kernel, "CPU")  # type: ignore[no-untyped-call]
    _libraries.append(library)
