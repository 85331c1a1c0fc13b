"""The carriers of a run's ranks (simfs/carriers.py names them): base.py what the run asks of
either; greenlet.py ranks in the host's interpreter; the process carrier (host.py, and what a
rank process runs: simfs/rank/) every rank a real OS process forked from a zygote, confined by the
kernel, whose intercepted calls are requests served by the host's one deterministic scheduler."""

from .base import Carrier
from .greenlet import GreenletCarrier
from .host import ProcessCarrier
from .preload import preload

__all__ = ["Carrier", "GreenletCarrier", "ProcessCarrier", "preload"]
