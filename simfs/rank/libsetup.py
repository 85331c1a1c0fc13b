"""What a rank process makes of numpy and torch: their global generators seeded from the run's seed
(a new process seeds them from the OS, so a run would not be a function of its seed), torch's one
intra-op thread, CUDA refused (nocuda.py) and c10d on the simulation (c10d/install.py). Done at
the rank's start for what it was forked with (the host imports them before the fork only where the
caller uses them: runtime/carrier/preload.py), and the moment the rank's own import of one
finishes otherwise; the host then preloads it for its later runs."""

from __future__ import annotations

import functools
import random
import sys

from ..choices import derive_seed
from ..tasks.process import Process
from .intercept.imports import after_import
from .nocuda import refuse_cuda


def start(proc: Process) -> None:
    """At the rank's start, before any rank code and before its first turn: Python's generator
    seeded, numpy's and torch's now if the process has them, once imported otherwise (c10d then
    too; for a torch it has now, ``install_c10d`` runs at its first turn)."""
    random.seed(_seed(proc, "process"))
    if sys.modules.get("numpy.random") is not None:
        _numpy(proc)
    else:
        after_import("numpy.random", functools.partial(_numpy_imported, proc))
    if sys.modules.get("torch") is not None:
        _torch(proc)
    else:
        after_import("torch", functools.partial(_torch_imported, proc))


def premake_c10d(native: bool) -> None:
    """In the zygote of ranks whose world is torch's (``native``) and that start with
    torch.distributed: what install_c10d makes alike in every rank, made once before the forks."""
    if native and "torch.distributed" in sys.modules:
        from .c10d.install import prepare_process

        prepare_process()


def install_c10d(proc: Process) -> None:
    """torch.distributed on the simulation, where the cluster's world is torch's (it asks the
    host: the rank has the turn)."""
    if proc.dist.native and "torch.distributed" in sys.modules:
        from .c10d.install import install

        world = proc.dist
        install(world, proc.rank, proc.world_size, proc.hostname, world.initialized.value, world.world.timeout)


def _numpy_imported(proc: Process) -> None:
    _numpy(proc)
    proc.sys.machine.imported("numpy")


def _seed(proc: Process, generator: str) -> int:
    """The seed of the rank's ``generator`` in this run, from the run's seed."""
    run_seed, run, rank = proc.seed_parts
    return derive_seed(run_seed, generator, run, rank)


def _numpy(proc: Process) -> None:
    sys.modules["numpy.random"].seed(_seed(proc, "process") % 2**32)


def _torch(proc: Process) -> None:
    torch = sys.modules["torch"]
    # the CPU generator alone: torch.manual_seed also imports every device backend (~35 ms)
    torch.default_generator.manual_seed(_seed(proc, "torch"))
    # one intra-op thread, as torchrun's OMP_NUM_THREADS=1 gives a worker: the host's OpenMP pool
    # does not survive the fork, and a parallel torch op would wait for it forever
    torch.set_num_threads(1)
    refuse_cuda()


def _torch_imported(proc: Process) -> None:
    _torch(proc)
    install_c10d(proc)
    proc.sys.machine.imported("torch")
