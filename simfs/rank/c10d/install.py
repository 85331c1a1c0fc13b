"""torch.distributed in a rank process, as torch ships it: simfs's stand-in functions are taken out,
and c10d runs itself on simulated parts. Every process group c10d makes, whichever backend the job
names (``gloo``, ``nccl``, ``cpu:gloo,cuda:nccl``, none), is a SimProcessGroup (group.py) that
``get_backend`` reports under the name the job gave; ``TCPStore`` and ``FileStore`` are the
simulated stores (store.py), so the ``env://``, ``tcp://`` and ``file://`` rendezvous of c10d itself
meet in the simulation; the functional collectives get CPU kernels (functional.py). With the
cluster's ``dist_initialized``, the default group exists before the job runs (as simfs's stand-ins
made it), and the job's own ``init_process_group`` replaces it."""

from __future__ import annotations

import sys
from datetime import timedelta
from types import FunctionType, ModuleType
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.distributed.rendezvous  # noqa: F401 - loaded, so that its by-name TCPStore is replaced too
from torch._C import _distributed_c10d as native

from ...port import schema
from ..intercept import torchdist
from . import functional
from .group import SIMFS, SimProcessGroup
from .host import Host
from .store import HOST_STORE, FileStore, HostStore, tcp_store_class

WORLD_STORE = "simfs/world"  # the store of the default group simfs makes before the job runs


class _Rank:
    """What this process's c10d needs to know of its rank, told when the rank installs c10d (what
    every rank installs alike may be made before, in the zygote: ``prepare_process``)."""

    def __init__(self) -> None:
        self._host: Host | None = None
        self.rank = 0
        self.world_size = 1
        self.hostname = ""
        self.timeout = timedelta(0)  # the cluster's collective_timeout
        self.premade = False  # the default group is simfs's, made before the job ran

    @property
    def host(self) -> Host:
        assert self._host is not None, "c10d used in a process before its rank installed it"
        return self._host

    def tell(self, host: Host, rank: int, world_size: int, hostname: str, timeout: float) -> None:
        self._host, self.rank, self.world_size, self.hostname = host, rank, world_size, hostname
        self.timeout = timedelta(seconds=timeout)


_me = _Rank()  # this process's rank (a rank process is one rank)
_made = [False]  # prepare_process() ran in this process


def prepare_process() -> None:
    """What every rank process installs alike: torch.distributed's own functions back, the
    functional collectives' kernels, the "simfs" backend and the replaced names, all asking
    ``_me``. Made in the zygote before it forks rank processes of a run whose world is torch's
    (each rank spent ~2 ms and ~500 copied pages on it), else by the rank's ``install``."""
    if _made[0]:
        return
    torchdist.uninstall()
    functional.install()
    if SIMFS.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(SIMFS, lambda opts, _options: _create(_me, opts), extended_api=True,
                                      devices=["cpu", "cuda"])
    _replace({
        (c10d, "_new_process_group_helper"): _any_backend_is_simulated(c10d._new_process_group_helper),
        (c10d, "init_process_group"): _replacing_the_premade(_me, c10d.init_process_group),
        (c10d, "destroy_process_group"): _telling_the_host(_me, c10d.destroy_process_group),
        (native, "TCPStore"): tcp_store_class(lambda: (_me.host, _me.hostname)),
        (native, "FileStore"): FileStore,
    })
    _made[0] = True


def install(host: Host, rank: int, world_size: int, hostname: str, initialized: bool, timeout: float) -> None:
    """Make this rank process's torch.distributed run c10d on the simulation; a group made with
    torch's default timeout gets the cluster's ``timeout`` (its collective_timeout) instead."""
    prepare_process()
    _me.tell(host, rank, world_size, hostname, timeout)
    host.ask(schema.StoreShared(HOST_STORE))
    if initialized:
        host.ask(schema.StoreShared(WORLD_STORE))
        dist.init_process_group("gloo", store=HostStore(host, WORLD_STORE), rank=rank, world_size=world_size,
                                timeout=_me.timeout)
        _me.premade = True


def _create(me: _Rank, opts: Any) -> SimProcessGroup:
    """c10d's creator for a group of the "simfs" backend (the default group has no ranks listed)."""
    ranks = list(opts.global_ranks_in_group) or list(range(me.world_size))
    name = "WORLD" if not opts.global_ranks_in_group else str(opts.group_id)
    timeout: timedelta = me.timeout if opts.timeout == c10d.default_pg_timeout else opts.timeout
    me.host.ask(schema.DistGroup(name, ranks, timeout.total_seconds()))
    return SimProcessGroup(me.host, name, int(opts.group_rank), int(opts.group_size), ranks, timeout)


def _any_backend_is_simulated(real: Any) -> Any:
    def _new_process_group_helper(group_size: int, group_rank: int, global_ranks_in_group: list[int], backend: Any,
                                  store: Any, group_name: str, backend_options: Any = None, timeout: Any = None,
                                  pg_tag: Any = None, device_id: Any = None, group_desc: Any = None) -> Any:
        pg, prefix_store = real(group_size, group_rank, global_ranks_in_group, SIMFS, store, group_name,
                                backend_options=None, timeout=timeout, pg_tag=pg_tag, device_id=device_id,
                                group_desc=group_desc)
        if isinstance(pg, SimProcessGroup):  # get_backend names what the job asked for
            c10d._world.pg_map[pg] = (backend, prefix_store)
            c10d._world.pg_backend_config[pg] = str(c10d.BackendConfig(backend))
        return pg, prefix_store
    return _new_process_group_helper


def _replacing_the_premade(me: _Rank, real: Any) -> Any:
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if me.premade:
            me.premade = False
            c10d.destroy_process_group()
        real(*args, **kwargs)
    return init_process_group


def _telling_the_host(me: _Rank, real: Any) -> Any:
    def destroy_process_group(group: Any = None) -> None:
        default = group is None or group is c10d.GroupMember.WORLD
        real(group)
        if default:
            me.premade = False
            me.host.ask(schema.DistDestroy())
    return destroy_process_group


_REPLACED = ((c10d, "_new_process_group_helper"), (c10d, "init_process_group"), (c10d, "destroy_process_group"),
             (native, "TCPStore"), (native, "FileStore"))
# per _REPLACED entry, where modules hold it: [(namespace, key)]; the modules looked through (name
# -> id of the module object), and len(sys.modules) at the last look
_copies: list[list[tuple[dict[str, Any], str]]] = [[] for _ in _REPLACED]
_scanned: dict[str, int] = {}
_seen = [-1]


def _torchs(value: Any) -> Any:
    """torch's own object behind ``value`` (simfs's stand-ins, functions and the stores' classes,
    wrap it while they are installed)."""
    patched = (type(value) is FunctionType or issubclass(type(value), type)) and "__simfs_patched__" in vars(value)
    return value.__wrapped__ if patched else value


def prepare() -> None:
    """Find, in the host before it forks rank processes, where modules hold what a rank process
    replaces (torch's, and a job's ``from torch.distributed import TCPStore``): each rank would
    otherwise look through every module, one rank after another. Only modules imported since the
    last look are looked through (a search's child, forked from a process that looked, looks at
    the few it imported). torch._C keeps its own classes (the C++ stores, refused inside ranks by
    simfs/rank/intercept/torchnative.py)."""
    if _seen[0] == len(sys.modules):
        return
    _seen[0] = len(sys.modules)
    originals = {id(_torchs(getattr(owner, name))): i for i, (owner, name) in enumerate(_REPLACED)}
    for module_name, module in list(sys.modules.items()):
        if module is None or _scanned.get(module_name) == id(module):
            continue
        _scanned[module_name] = id(module)
        if module_name.startswith(("torch._C", "simfs")):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            i = originals.get(id(_torchs(value)), -1)
            if i >= 0:
                _copies[i].append((namespace, key))


def _replace(replacements: dict[tuple[ModuleType, str], Any]) -> None:
    """Every name a module holds ``owner.name`` under (its own module's included)."""
    prepare()
    for i, (owner, name) in enumerate(_REPLACED):
        if (owner, name) not in replacements:
            continue
        replacement, original = replacements[(owner, name)], _torchs(getattr(owner, name))
        for namespace, key in _copies[i]:
            if _torchs(namespace.get(key)) is original:
                namespace[key] = replacement


def replace_stores(tcp_store: Any, file_store: Any) -> None:
    """torch's names for its TCPStore and FileStore, in every module (a job's by-name imports
    too), given to these classes; given torch's own classes, the names are torch's again."""
    _replace({(native, "TCPStore"): tcp_store, (native, "FileStore"): file_store})
