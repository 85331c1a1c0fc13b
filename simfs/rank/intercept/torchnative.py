"""torch's C++ entry points that open real paths or sockets themselves, below Python's file and
socket calls: inside a rank, TorchScript archives named by path are written and read through
simulated files; the archive writer and reader given a path, and c10d's C++ TCPStore and FileStore
(torch's names for them are simfs's stores inside ranks: simfs/rank/c10d/), are refused with a
BypassError naming the call. Outside ranks each behaves as the original."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...errors import BypassError
from ...tasks.task import Task
from .registry import patch_function, refusal


def _names_a_path(target: Any) -> bool:
    return isinstance(target, (str, bytes, os.PathLike))


def _path_refused(owner: type, call: str, instead: str) -> None:
    """``owner(path, ...)`` refused inside a rank; ``owner(file_object, ...)`` as the original."""
    real: Callable[..., None] = vars(owner)["__init__"]

    def sim(task: Task, self: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if _names_a_path(target):
            raise BypassError(f"{call}({target!r})", "torch's C++ opens the real file itself", instead)
        real(self, target, *args, **kwargs)

    patch_function(owner, "__init__", sim)


def _through_simulated_file(owner: Any, name: str, position: int, mode: str) -> None:
    """``owner.name(..., f, ...)`` with a path ``f`` (argument ``position``, or keyword ``f``) inside a
    rank: the same call on the simulated file at that path, opened with ``mode``."""
    real: Callable[..., Any] = getattr(owner, name)

    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        args_list = list(args)
        target: Any = args_list[position] if len(args_list) > position else kwargs.get("f")
        if not _names_a_path(target):
            return real(*args, **kwargs)
        with open(target, mode) as f:  # the rank's open(): its simulated machine
            if len(args_list) > position:
                args_list[position] = f
            else:
                kwargs["f"] = f
            return real(*args_list, **kwargs)

    patch_function(owner, name, sim)


def install() -> None:
    import torch
    import torch.jit

    _path_refused(torch._C.PyTorchFileWriter, "torch._C.PyTorchFileWriter",
                  "use torch.save, or give it an open file object")
    _path_refused(torch._C.PyTorchFileReader, "torch._C.PyTorchFileReader",
                  "use torch.load, or give it an open file object")
    _through_simulated_file(torch.jit, "save", 1, "wb")  # torch.jit.save(m, f, _extra_files)
    _through_simulated_file(torch.jit, "load", 0, "rb")  # torch.jit.load(f, map_location, ...)
    try:
        from torch._C import _distributed_c10d as c10d
    except ImportError:  # a torch built without distributed support
        return
    instead = "torch.distributed.TCPStore or FileStore (simulated inside ranks), or torch.distributed.HashStore"
    patch_function(c10d.TCPStore, "__init__", refusal("torch._C._distributed_c10d.TCPStore",
                                                      "it connects to or listens on a real TCP port", instead))
    patch_function(c10d.FileStore, "__init__", refusal("torch._C._distributed_c10d.FileStore",
                                                       "it creates and locks a real file in C++", instead))
