"""What a process that forks rank processes imports first, so that every rank starts with it (a
fork shares its pages; importing torch in each rank takes a second or more), leaving the caller as
it was: importing torch._dynamo sets TORCHINDUCTOR_CACHE_DIR in os.environ and makes that directory
under the temporary directory, both put back here. In a confined process (simfs.isolated's child),
which may make no directory, the import is given one that exists."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator

from ... import _real
from ...checks import installed
from ...confinement.confine import confined_here
from ...confinement.confine import prepare as prepare_confinement

# what rank processes also start with where the caller imported the library itself (its root
# here): numpy imports numpy.random on first use (~17 ms); DDP, FSDP2, DTensor and torch.compile
# import torch._dynamo (about 1.5 s and 800 modules, sympy's among them), which rank processes would
# otherwise each pay one after another. A caller that never imported torch pays none of its memory
# (~250 MB of the host's): its ranks import what they use themselves (rank/libsetup.py), and once
# they did, its later runs preload it (ranks_imported), as does Cluster's preload naming it.
WITH = {"numpy": ("numpy", "numpy.random"), "torch": ("torch", "torch._dynamo")}
_ranks_imported: set[str] = set()  # the libraries of WITH that rank processes of this process imported
_imports = [0]  # modules preload() imported in this process: a zygote forked before lacks them
# torch/_inductor/runtime/cache_dir_utils.py: importing torch._dynamo sets it and makes the directory
CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"


def preload(extra: tuple[str, ...] = ()) -> None:
    """Import the cluster's ``extra`` modules (Cluster's ``preload``) and, where the caller or
    they imported numpy or torch, or an earlier run's ranks did, what comes WITH it; then make what
    rank processes need prepared once (c10d's, the kernel's confinement ruleset). The ranks' global
    generators are seeded from the run's seed in each rank, at its start or at its own import
    (rank/libsetup.py)."""
    for name in extra:
        _import(name)
    for root, group in WITH.items():
        if sys.modules.get(root) is not None or root in _ranks_imported:  # (transformers imports torch)
            for name in group:
                _import(name)
    prepare_c10d()
    prepare_confinement()


def _import(name: str) -> None:
    if name in sys.modules:
        return  # imported already, or blocked (sys.modules[name] = None)
    with kept():
        if confined_here():  # it may make no directory: torch._dynamo's cache names one that exists
            os.environ.setdefault(CACHE_DIR, "/")
        if installed(name):
            importlib.import_module(name)
            _imports[0] += 1


def ranks_imported(library: str) -> None:
    """A rank process of this process's run imported ``library`` (a root of WITH) itself: every
    later run preloads it. A search's runs would otherwise each import it in every rank (torch and
    torch._dynamo: ~2.5 s a rank on 2 cores), where the caller imports it only inside its job."""
    if library not in WITH:
        raise ValueError(f"{library!r} is not a library rank processes are forked with ({', '.join(WITH)})")
    _ranks_imported.add(library)


def imports() -> int:
    """How many modules preload() imported in this process so far."""
    return _imports[0]


def prepare_c10d() -> None:
    """Where modules hold what a rank running c10d replaces (simfs/rank/c10d/install.py), found
    now when torch.distributed is imported, so that the ranks forked after start from it."""
    if "torch.distributed" in sys.modules:
        importlib.import_module("simfs.rank.c10d.install").prepare()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Run the block (an import); then put os.environ back as it was, and remove each empty
    directory a variable the block set names, when the block made it."""
    environ = dict(os.environ)
    started = _real.time_time()
    try:
        yield
    finally:
        changed = {key: value for key, value in os.environ.items() if environ.get(key) != value}
        for key in changed:
            if key in environ:
                os.environ[key] = environ[key]
            else:
                del os.environ[key]
        for value in changed.values():
            _remove_if_made(value, started)


def _remove_if_made(path: str, since: float) -> None:
    """Remove ``path`` if it is an empty directory made at or after ``since`` (real seconds)."""
    if not os.path.isabs(path):
        return
    try:
        if os.stat(path).st_ctime >= since and not os.listdir(path):
            os.rmdir(path)
    except OSError:  # not a directory, not there, or not empty by now: left as it is
        pass
