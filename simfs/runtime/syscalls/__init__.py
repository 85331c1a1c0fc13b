"""The os module as one simulated process sees it: every call is traced, may meet a fault,
and costs virtual time."""

from __future__ import annotations

from .files import FileCalls
from .metadata import MetadataCalls
from .namespace import NamespaceCalls


class Syscalls(MetadataCalls, NamespaceCalls, FileCalls):
    """The system calls of one simulated process."""


# what a process may ask of its Syscalls (a rank process by request): the public system calls
CALLS = frozenset(name for name in dir(Syscalls) if not name.startswith("_") and callable(getattr(Syscalls, name))
                  and name != "exit_process")
