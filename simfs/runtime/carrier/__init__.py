"""The process carrier: every rank a real OS process forked from the host, confined by the kernel,
whose intercepted calls are requests served by the host's one deterministic scheduler."""

from .host import ProcessCarrier
from .preload import preload

__all__ = ["ProcessCarrier", "preload"]
