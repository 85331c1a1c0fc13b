"""The os module as one simulated process sees it: every call is traced, may meet a fault,
and costs virtual time."""

from __future__ import annotations

from .files import FileCalls
from .metadata import MetadataCalls
from .namespace import NamespaceCalls


class Syscalls(MetadataCalls, NamespaceCalls, FileCalls):
    """The system calls of one simulated process."""
