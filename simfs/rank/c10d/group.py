"""The process group c10d gets in a rank process: a ``torch.distributed.ProcessGroup`` subclass (as
torch's own multi_threaded_pg.py runs DDP and FSDP tests) whose every collective is one meeting
in the host's scheduler, in virtual time: each rank sends its tensors, the host hands every rank
all of them in group-rank order (runtime/dist.py), and each rank computes its result itself.
Every collective has completed when it returns: its ``Work`` is a finished one, as C++ callers
(DDP's Reducer, FSDP2) wait for it on the calling thread."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (  # type: ignore[attr-defined]  # _create_work_from_future: unstubbed
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
    _create_work_from_future,
)
from torch.futures import Future

from ...port import schema
from .host import Host
from .reduce import reduce

SIMFS = "simfs"  # the name the group's backend is registered under


def finished(result: Any) -> Any:
    """A completed ``Work`` whose future holds ``result``."""
    future: Future[Any] = Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class SimProcessGroup(dist.ProcessGroup):
    """One process group of one rank: ``host_name`` names it in the host's scheduler. (torch's
    stubs overload some methods with convenience forms that c10d itself never calls on a group.)"""

    def __init__(self, host: Host, host_name: str, rank: int, size: int, global_ranks: list[int],
                 timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the (rank, size) constructor, unstubbed
        self._host = host
        self._host_name = host_name
        self._rank = rank
        self._size = size
        self.global_ranks = global_ranks
        self._timeout = timeout
        self._p2p: dict[tuple[str, int, int], int] = {}  # (direction, peer, tag) -> messages so far

    # -- what c10d asks of every group -------------------------------------------------------------
    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank

    def getBackendName(self) -> str:
        return SIMFS

    @property
    def group_name(self) -> str:  # type: ignore[override]  # a property in C++ too
        """The name c10d registered the group under (functional collectives resolve it)."""
        name: str = dist.distributed_c10d._world.pg_names[self]
        return name

    @property
    def _device_types(self) -> list[torch.device]:
        """The devices it serves (c10d lists those of its registered backends; DCP's async_save and
        object collectives ask): CPU tensors, as gloo."""
        return [torch.device("cpu")]

    def __repr__(self) -> str:
        return f"<simfs ProcessGroup {self._host_name} rank {self._rank} of {self._size}>"

    # -- the meeting ---------------------------------------------------------------------------------
    def _meet(self, kind: str, payload: Any, nbytes: int = 0, timeout: float | None = None,
              root: int = -1) -> list[Any]:
        return self._host.collective_named(self._host_name, kind, payload, timeout=timeout, nbytes=nbytes,
                                           root=root)

    # -- collectives ---------------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        op = (opts or AllreduceOptions()).reduceOp
        everyone = self._meet("all_reduce", list(tensors), _nbytes(tensors))
        for i, tensor in enumerate(tensors):
            tensor.copy_(reduce(op, [theirs[i] for theirs in everyone]))
        return finished(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self.allreduce(tensors, opts or AllreduceCoalescedOptions())

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = opts or BroadcastOptions()
        root = opts.rootRank
        mine = list(tensors) if self._rank == root else None
        everyone = self._meet("broadcast", mine, _nbytes(tensors), root=root)
        if self._rank != root:
            for tensor, theirs in zip(tensors, everyone[root]):
                tensor.copy_(theirs)
        return finished(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = opts or ReduceOptions()
        everyone = self._meet("reduce", list(tensors), _nbytes(tensors), root=opts.rootRank)
        if self._rank == opts.rootRank:
            for i, tensor in enumerate(tensors):
                tensor.copy_(reduce(opts.reduceOp, [theirs[i] for theirs in everyone]))
        return finished(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        everyone = self._meet("all_gather", list(inputs), _nbytes(inputs))
        for i, outs in enumerate(outputs):
            for r, out in enumerate(outs):
                out.copy_(everyone[r][i])
        return finished(outputs)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> Any:
        return self.allgather(outputs, inputs, opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self.allgather_into_tensor_coalesced([output], [input], opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self.allgather_into_tensor_coalesced([output], [input], opts)

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> Any:
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        everyone = self._meet("all_gather_into_tensor", list(inputs), _nbytes(inputs))
        for i, output in enumerate(outputs):
            output.copy_(torch.cat([theirs[i].reshape(-1) for theirs in everyone]).reshape(output.shape))
        return finished(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        opts = opts or GatherOptions()
        everyone = self._meet("gather", list(inputs), _nbytes(inputs), root=opts.rootRank)
        if self._rank == opts.rootRank:
            for r, out in enumerate(outputs[0]):
                out.copy_(everyone[r][0])
        return finished(outputs)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:  # type: ignore[override]
        opts = opts or ScatterOptions()
        root = opts.rootRank
        mine = list(inputs[0]) if self._rank == root and inputs else None
        everyone = self._meet("scatter", mine, _nbytes(outputs), root=root)
        outputs[0].copy_(everyone[root][self._rank])
        return finished(outputs)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:  # type: ignore[override]
        op = (opts or ReduceScatterOptions()).reduceOp
        flat = [t for chunks in inputs for t in chunks]
        everyone = self._meet("reduce_scatter", flat, _nbytes(flat))
        for i, output in enumerate(outputs):
            mine = i * self._size + self._rank
            output.copy_(reduce(op, [theirs[mine] for theirs in everyone]))
        return finished(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self.reduce_scatter_tensor_coalesced([output], [input], opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self.reduce_scatter_tensor_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        op = (opts or ReduceScatterOptions()).reduceOp
        everyone = self._meet("reduce_scatter_tensor", list(inputs), _nbytes(inputs))
        for i, output in enumerate(outputs):
            reduced = reduce(op, [theirs[i].reshape(-1) for theirs in everyone])
            output.copy_(reduced.reshape(self._size, -1)[self._rank].reshape(output.shape))
        return finished(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                      input_splits: list[int], opts: Any = None) -> Any:
        chunks = _split(input, input_splits, self._size)
        everyone = self._meet("all_to_all_single", chunks, _nbytes([input]))
        output.copy_(torch.cat([theirs[self._rank] for theirs in everyone]).reshape(output.shape))
        return finished([output])

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                          input_splits: list[int], opts: Any = None) -> Any:
        return self.alltoall_base(output, input, output_splits, input_splits, opts or AllToAllOptions())

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        everyone = self._meet("all_to_all", [t.contiguous() for t in inputs], _nbytes(inputs))
        for r, output in enumerate(outputs):
            output.copy_(everyone[r][self._rank])
        return finished(outputs)

    def barrier(self, opts: Any = None) -> Any:
        self._meet("barrier", None)
        return finished(None)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        limit = None if timeout is None else float(timeout.total_seconds())
        self._meet("monitored_barrier", None, timeout=limit)

    # -- point to point: a message per (sender, receiver, tag), in order, through the host's store ---
    def _mailbox(self, direction: str, peer: int, tag: int) -> str:
        sender, receiver = (self._rank, peer) if direction == "send" else (peer, self._rank)
        key = (direction, peer, tag)
        count = self._p2p.get(key, 0)
        self._p2p[key] = count + 1
        return f"{self._host_name}/p2p/{sender}->{receiver}/{tag}/{count}"

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Any:
        from .store import HOST_STORE, encode_tensor

        self._host.ask(schema.StoreOp(HOST_STORE, "set", [self._mailbox("send", dst, tag), encode_tensor(tensors[0])]))
        return finished(tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Any:
        from .store import HOST_STORE, decode_tensor, encoded_size

        key = self._mailbox("recv", src, tag)
        data = self._host.ask(schema.StoreOp(HOST_STORE, "get", [key, self._timeout.total_seconds(),
                                                                 encoded_size(tensors[0])]))
        if data is None:
            raise dist.DistBackendError(f"[simfs] rank {self._rank} of {self._host_name}: recv from rank {src} "
                                        f"(tag {tag}) timed out after {self._timeout.total_seconds():g}s (virtual)")
        self._host.ask(schema.StoreOp(HOST_STORE, "delete_key", [key]))
        tensors[0].copy_(decode_tensor(data))
        return finished(tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> Any:
        raise RuntimeError("simfs: recv from any source is not simulated (a message's sender would be the "
                           "scheduler's choice); name the source rank")


def _split(tensor: torch.Tensor, splits: list[int], size: int) -> list[torch.Tensor]:
    """all_to_all_single's chunks along dim 0 (equal ones when no split sizes are given)."""
    if not splits:
        return [c.contiguous() for c in torch.chunk(tensor, size)]
    return [c.contiguous() for c in torch.split(tensor, list(splits))]
