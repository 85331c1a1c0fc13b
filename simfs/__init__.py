"""simfs: a deterministic simulated cluster whose shared filesystem behaves like NFS (or
Lustre, or an object store), running unmodified rank code in virtual time."""

from . import profiles
from .choices import ChoiceSource, HypothesisChoices, ReplayChoices, SeededChoices
from .cluster import Cluster, replay
from .errors import BypassError, CollectiveMismatch, OutsideSimulation, SimfsError
from .faults import CrashNode, CrashServer, EvictClient, InjectErrno, SlowOps, SlowRank
from .runtime.machine import TraceEvent
from .profiles import Profile
from .report import CrashInfo, HangInfo, Result

__all__ = [
    "BypassError", "ChoiceSource", "Cluster", "CollectiveMismatch", "CrashInfo", "CrashNode", "CrashServer",
    "EvictClient", "HangInfo", "HypothesisChoices", "InjectErrno", "OutsideSimulation", "Profile",
    "ReplayChoices", "Result", "SeededChoices", "SimfsError", "SlowOps", "SlowRank", "TraceEvent",
    "profiles", "replay",
]
