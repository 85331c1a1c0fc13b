"""torch's stores on greenlet ranks, which share the host's interpreter: while a run lasts, the
names torch.distributed (and a job's by-name imports) give TCPStore and FileStore are classes that
make simfs's stores (store.py) inside a rank, asking the kernel directly (the greenlet carrier's
handler table), and torch's own outside; torch's classes take their names back when the run ends."""

from __future__ import annotations

from typing import Any

from torch._C import _distributed_c10d as native

from ..intercept.registry import current
from .install import replace_stores
from .store import FileStore, tcp_store_class


def _rank() -> tuple[Any, str]:
    """What the running rank's TCPStore asks (Process.c10d_host), and its hostname."""
    task = current()
    assert task is not None, "a simulated store made outside a rank"
    return task.context.c10d_host, task.context.hostname


def _in_ranks(real: type, simulated: type) -> type:
    """A subclass of ``simulated`` whose calls outside a rank make ``real``'s objects, which are
    instances of it too."""

    class Either(type(simulated)):  # type: ignore[misc]  # pybind11's metaclass
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, real) or super().__instancecheck__(instance)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real) or super().__subclasscheck__(subclass)

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if current() is None:
            return real(*args, **kwargs)
        return simulated.__new__(cls)  # type: ignore[call-overload]  # pybind11's, which takes no arguments

    return Either(real.__name__, (simulated,), {"__new__": __new__, "__module__": simulated.__module__,
                                                 "__qualname__": real.__name__, "__doc__": simulated.__doc__,
                                                 "__wrapped__": real, "__simfs_patched__": True})


_CLASSES = (_in_ranks(native.TCPStore, tcp_store_class(_rank)), _in_ranks(native.FileStore, FileStore))


def install() -> None:
    """For the run: torch's store names make simfs's stores inside greenlet ranks."""
    replace_stores(*_CLASSES)


def uninstall() -> None:
    """The run ended: the names are torch's classes again."""
    replace_stores(native.TCPStore, native.FileStore)
