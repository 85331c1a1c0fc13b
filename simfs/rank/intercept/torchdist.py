"""torch.distributed inside a rank: the simulated process groups of simfs.dist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...tasks.groups import SimGroup, Work, copy_object
from ...tasks.kernel import World
from ...tasks.task import Task
from .registry import patch_function, unpatch

API: dict[str, Callable[..., Any]] = {}


def _api(fn: Callable[..., Any]) -> Callable[..., Any]:
    API[fn.__name__] = fn
    return fn


def _world(task: Task) -> World:
    world: World = task.context.dist  # the rank's Process (opaque to the scheduler)
    return world


def _rank(task: Task) -> int:
    rank: int = task.context.rank
    return rank


def _done(async_op: bool) -> Work | None:
    return Work() if async_op else None


def _group_rank(task: Task, group: Any, group_rank: int | None, global_rank: Any) -> int:
    """Translate ``group_src``/``group_dst`` (group ranks) or ``src``/``dst`` (global ranks)."""
    g = _world(task).group(group, _rank(task))
    if group_rank is not None:
        return group_rank
    index = g.group_rank(global_rank)
    if index < 0:
        raise ValueError(f"rank {global_rank} is not part of {g.name}")
    return index


def _tensor_bytes(tensor: Any) -> int:
    nbytes: int = tensor.numel() * tensor.element_size()
    return nbytes


@_api
def is_available(task: Task) -> bool:
    return True


@_api
def is_initialized(task: Task) -> bool:
    return bool(_world(task).initialized[_rank(task)])


@_api
def init_process_group(task: Task, backend: Any = None, init_method: Any = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, **kwargs: Any) -> None:
    proc = task.context
    if world_size not in (-1, proc.world_size) or rank not in (-1, proc.rank):
        raise ValueError(f"init_process_group(world_size={world_size}, rank={rank}) does not match the simulated "
                         f"rank {proc.rank} of {proc.world_size}")
    _world(task).init(proc.rank, timeout)


@_api
def destroy_process_group(task: Task, group: Any = None) -> None:
    if group is None:
        _world(task).destroy(_rank(task))


@_api
def get_rank(task: Task, group: Any = None) -> int:
    g = _world(task).group(group, _rank(task)) if not isinstance(group, SimGroup) else group
    return g.group_rank(_rank(task))


@_api
def get_world_size(task: Task, group: Any = None) -> int:
    g = _world(task).group(group, _rank(task)) if not isinstance(group, SimGroup) else group
    return len(g.ranks)


@_api
def get_backend(task: Task, group: Any = None) -> str:
    _world(task).group(group, _rank(task))
    return "gloo"


@_api
def get_global_rank(task: Task, group: Any, group_rank: int) -> int:
    return _world(task).group(group, _rank(task)).ranks[group_rank]


@_api
def get_group_rank(task: Task, group: Any, global_rank: int) -> int:
    return _world(task).group(group, _rank(task)).group_rank(global_rank)


@_api
def get_process_group_ranks(task: Task, group: Any) -> list[int]:
    return list(_world(task).group(group, _rank(task)).ranks)


@_api
def new_group(task: Task, ranks: Any = None, timeout: Any = None, backend: Any = None,
              *args: Any, **kwargs: Any) -> Any:
    return _world(task).new_group(_rank(task), None if ranks is None else list(ranks), timeout)


@_api
def barrier(task: Task, group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    _world(task).collective(_rank(task), group, "barrier", None)
    return _done(async_op)


@_api
def monitored_barrier(task: Task, group: Any = None, timeout: Any = None, wait_all_ranks: bool = False) -> None:
    limit = None if timeout is None else (
        timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout))
    _world(task).collective(_rank(task), group, "monitored_barrier", None, timeout=limit)


@_api
def broadcast_object_list(task: Task, object_list: list[Any], src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_src, 0 if src is None and group_src is None else src)
    payload, size = copy_object(list(object_list)) if me == root else (None, 0)
    everyone = _world(task).collective(_rank(task), group, "broadcast_object_list", payload, nbytes=size,
                                       root=root)
    if me != root:
        for i, obj in enumerate(everyone[root]):
            object_list[i] = copy_object(obj)[0]


@_api
def all_gather_object(task: Task, object_list: list[Any], obj: Any, group: Any = None) -> None:
    copy, size = copy_object(obj)
    everyone = _world(task).collective(_rank(task), group, "all_gather_object", copy, nbytes=size)
    for i, item in enumerate(everyone):
        object_list[i] = copy_object(item)[0]


@_api
def gather_object(task: Task, obj: Any, object_gather_list: list[Any] | None = None, dst: int | None = None,
                  group: Any = None, group_dst: int | None = None) -> None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_dst, 0 if dst is None and group_dst is None else dst)
    copy, size = copy_object(obj)
    everyone = _world(task).collective(_rank(task), group, "gather_object", copy, nbytes=size, root=root)
    if me == root:
        if object_gather_list is None:
            raise ValueError("gather_object: the destination rank must pass object_gather_list")
        for i, item in enumerate(everyone):
            object_gather_list[i] = copy_object(item)[0]


@_api
def scatter_object_list(task: Task, scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None, src: int | None = None,
                        group: Any = None, group_src: int | None = None) -> None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_src, 0 if src is None and group_src is None else src)
    payload = list(scatter_object_input_list) if me == root and scatter_object_input_list is not None else None
    everyone = _world(task).collective(_rank(task), group, "scatter_object_list", payload, root=root)
    inputs = everyone[root]
    if inputs is None:
        raise ValueError("scatter_object_list: the source rank must pass scatter_object_input_list")
    scatter_object_output_list[0] = copy_object(inputs[me])[0]


def _reduce(op: Any, tensors: list[Any]) -> Any:
    from ..c10d.reduce import reduce

    return reduce(op, tensors)


def _sum_op() -> Any:
    from torch.distributed import ReduceOp

    return ReduceOp.SUM


@_api
def broadcast(task: Task, tensor: Any, src: int | None = None, group: Any = None, async_op: bool = False,
              group_src: int | None = None) -> Work | None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_src, src)
    payload = tensor.detach().clone() if me == root else None
    everyone = _world(task).collective(_rank(task), group, "broadcast", payload, nbytes=_tensor_bytes(tensor),
                                       root=root)
    if me != root:
        tensor.copy_(everyone[root])
    return _done(async_op)


@_api
def all_reduce(task: Task, tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> Work | None:
    everyone = _world(task).collective(_rank(task), group, "all_reduce", tensor.detach().clone(),
                                       nbytes=_tensor_bytes(tensor))
    tensor.copy_(_reduce(_sum_op() if op is None else op, everyone))
    return _done(async_op)


@_api
def reduce(task: Task, tensor: Any, dst: int | None = None, op: Any = None, group: Any = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_dst, dst)
    everyone = _world(task).collective(_rank(task), group, "reduce", tensor.detach().clone(),
                                       nbytes=_tensor_bytes(tensor), root=root)
    if me == root:
        tensor.copy_(_reduce(_sum_op() if op is None else op, everyone))
    return _done(async_op)


@_api
def all_gather(task: Task, tensor_list: list[Any], tensor: Any, group: Any = None,
               async_op: bool = False) -> Work | None:
    everyone = _world(task).collective(_rank(task), group, "all_gather", tensor.detach().clone(),
                                       nbytes=_tensor_bytes(tensor))
    for out, item in zip(tensor_list, everyone):
        out.copy_(item)
    return _done(async_op)


@_api
def all_gather_into_tensor(task: Task, output_tensor: Any, input_tensor: Any, group: Any = None,
                           async_op: bool = False) -> Work | None:
    import torch

    everyone = _world(task).collective(_rank(task), group, "all_gather_into_tensor", input_tensor.detach().clone(),
                                       nbytes=_tensor_bytes(input_tensor))
    output_tensor.copy_(torch.cat(everyone).reshape(output_tensor.shape))
    return _done(async_op)


@_api
def reduce_scatter_tensor(task: Task, output: Any, input: Any, op: Any = None, group: Any = None,
                          async_op: bool = False) -> Work | None:
    me = _group_rank(task, group, None, _rank(task))
    everyone = _world(task).collective(_rank(task), group, "reduce_scatter_tensor", input.detach().clone(),
                                       nbytes=_tensor_bytes(input))
    reduced = _reduce(_sum_op() if op is None else op, everyone)
    output.copy_(reduced.reshape(len(everyone), -1)[me].reshape(output.shape))
    return _done(async_op)


@_api
def gather(task: Task, tensor: Any, gather_list: list[Any] | None = None, dst: int | None = None, group: Any = None,
           async_op: bool = False, group_dst: int | None = None) -> Work | None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_dst, 0 if dst is None and group_dst is None else dst)
    everyone = _world(task).collective(_rank(task), group, "gather", tensor.detach().clone(),
                                       nbytes=_tensor_bytes(tensor), root=root)
    if me == root:
        if gather_list is None:
            raise ValueError("gather: the destination rank must pass gather_list")
        for out, item in zip(gather_list, everyone):
            out.copy_(item)
    return _done(async_op)


@_api
def scatter(task: Task, tensor: Any, scatter_list: list[Any] | None = None, src: int | None = None, group: Any = None,
            async_op: bool = False, group_src: int | None = None) -> Work | None:
    me = _group_rank(task, group, None, _rank(task))
    root = _group_rank(task, group, group_src, 0 if src is None and group_src is None else src)
    payload = [t.detach().clone() for t in scatter_list] if me == root and scatter_list is not None else None
    everyone = _world(task).collective(_rank(task), group, "scatter", payload, nbytes=_tensor_bytes(tensor),
                                       root=root)
    if everyone[root] is None:
        raise ValueError("scatter: the source rank must pass scatter_list")
    tensor.copy_(everyone[root][me])
    return _done(async_op)


def install() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name, sim in API.items():
        for module in (dist, c10d):
            if hasattr(module, name):
                patch_function(module, name, sim)


def uninstall() -> None:
    """torch.distributed's own functions back, in a rank process that runs c10d itself (simfs/rank/c10d)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    unpatch([dist, c10d], list(API))
