"""numpy and torch entry points that open files in C: routed through simulated files where
torch offers a Python-file path, refused by name where it does not."""

from __future__ import annotations

import builtins
import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from typing import Any

from ...tasks.task import Task
from . import arrow, mapping, tensorfiles
from .registry import current, patch, patch_function, refusal


def _atomic(fn: Any) -> Any:
    """Run ``fn`` without switching ranks (its C++ part calls back into Python file objects)."""

    def sim(task: Task, *args: Any, **kwargs: Any) -> Any:
        sched = task.context.sys.machine.sched
        sched.enter_atomic()
        try:
            return fn(*args, **kwargs)
        finally:
            sched.exit_atomic()
    return sim


def _install_numpy() -> None:
    import numpy as np

    try:
        from numpy.lib import _format_impl as fmt
    except ImportError:  # numpy < 2
        from numpy.lib import format as fmt  # type: ignore[no-redef]  # the same module, older name
    patch_function(fmt, "isfileobj", lambda task, f: False)
    try:  # np.savetxt/loadtxt/genfromtxt open files through a table that holds io.open
        from numpy.lib import _datasource

        openers = _datasource._file_openers  # type: ignore[attr-defined]  # private (AttributeError below)
        openers._load()
        openers._file_openers[None] = builtins.open
    except (ImportError, AttributeError):
        pass
    patch_function(np, "fromfile", refusal("numpy.fromfile", "it reads through the C library",
                                           "use numpy.frombuffer(f.read(), dtype)"))


def _install_torch() -> None:
    import torch
    import torch.serialization as ser

    base = ser._open_zipfile_writer_file

    class ZipWriter(base):  # type: ignore[misc, valid-type]
        """torch.save(obj, path): inside a rank, the archive is written through a simulated file."""

        def __init__(self, name: str) -> None:
            if current() is None:
                super().__init__(name)
                return
            self.name = name
            self.file_stream = open(name, mode="wb")  # noqa: SIM115 - the writer owns it (closed by its __exit__)
            try:
                writer = torch._C.PyTorchFileWriter(self.file_stream, ser.get_crc32_options(),
                                                    ser._get_storage_alignment())
            except (TypeError, AttributeError):
                writer = torch._C.PyTorchFileWriter(self.file_stream)
            ser._opener.__init__(self, writer)

    patch(ser, "_open_zipfile_writer_file", ZipWriter, scan=False)
    for name in ("save", "load"):
        sim = _atomic(getattr(ser, name))
        patch_function(ser, name, sim)
        patch_function(torch, name, sim)
    real_from_file = torch.UntypedStorage.from_file

    def from_file(*args: Any, **kwargs: Any) -> Any:
        task = current()
        if task is None:
            return real_from_file(*args, **kwargs)
        return mapping.storage_from_file(*args, **kwargs)

    patch(torch.UntypedStorage, "from_file", staticmethod(from_file), scan=False)
    patch_function(torch, "from_file", lambda task, *args, **kwargs: mapping.tensor_from_file(*args, **kwargs))
    from . import torchdist, torchnative

    torchdist.install()
    torchnative.install()


def _install_filelock(name: str) -> None:
    """filelock 4.x breaks a stale SoftFileLock (and replaces a FileLock's unfinished marker) with
    renameat2(RENAME_EXCHANGE) through ctypes, looked up by ``_rename_call`` in whichever module a
    release keeps it (4.0 filelock._util, 4.3 filelock._filesystem._exchange): inside a rank the
    exchange is the simulated one (EINVAL where the filesystem refuses it)."""
    module = sys.modules[name]
    if not hasattr(module, "_rename_call"):
        return  # filelock 3.x, or a module without the exchange

    def exchange(source: bytes, target: bytes, flags: int) -> int:
        task = current()
        assert task is not None, "the exchange a rank looked up is called inside that rank"
        try:
            task.context.sys.exchange(os.fsdecode(source), os.fsdecode(target))
        except OSError as exc:
            return exc.errno or 0
        return 0

    patch_function(module, "_rename_call", lambda task: (exchange, 2))  # RENAME_EXCHANGE in linux/fs.h


_INSTALLERS: dict[str, Callable[[], None]] = {"numpy": _install_numpy, "torch": _install_torch,
                                              "safetensors": tensorfiles.install, "pyarrow": arrow.install_io,
                                              "pyarrow.fs": arrow.install_filesystems}
# packages whose every module is looked at once imported (the installer gets the module's name)
_PACKAGE_INSTALLERS: dict[str, Callable[[str], None]] = {"filelock": _install_filelock}
_done: set[str] = set()
# modules patched or with nothing to patch: not looked at again (thousands once torch is imported)
_looked_at: set[str] = set()


def _installer(module: str) -> Callable[[], None] | None:
    """What patches ``module``: its own installer, or its package's."""
    if module in _INSTALLERS:
        return _INSTALLERS[module]
    each = _PACKAGE_INSTALLERS.get(module.partition(".")[0])
    return None if each is None else functools.partial(each, module)


def install() -> None:
    """Patch the libraries the process has imported, and patch the others the moment they are
    imported during the run (a job may import torch inside its ranks): simfs imports none of them
    itself, so a process that never uses them pays nothing."""
    if not sys.modules.keys() <= _looked_at:  # (a C-speed check: thousands of names once torch is imported)
        for module in [m for m in sys.modules if m not in _looked_at]:
            if sys.modules.get(module) is not None:
                _patch(module)
    # (type, not isinstance: an ABC's check may clear its stale cache, freeing objects a host froze)
    if not any(type(finder) is _PatchOnImport for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())  # the run's HostGuard takes it out again


def _patch(module: str) -> None:
    if module in _done:
        return
    installer = _installer(module)
    _looked_at.add(module)
    if installer is None:
        return
    _done.add(module)
    try:
        installer()
    except ImportError:  # a library it needs is blocked or broken (sys.modules[name] = None)
        _done.discard(module)
        _looked_at.discard(module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps the loader of a library simfs patches, so that the patches
    are installed as soon as the library's import finishes."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in _done or _installer(fullname) is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchAfterExec(spec.loader, fullname)
                return spec
        return None


class _PatchAfterExec(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _patch(self._name)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package... of the real loader
        return getattr(self._loader, name)
