"""simfs: a deterministic simulated cluster whose shared filesystem behaves like NFS (or
Lustre, or an object store), running unmodified rank code in virtual time."""

from . import profiles
from .capture import RankOutput, RankWarning
from .choices import ChoiceSource, HypothesisChoices, ReplayChoices, SeededChoices
from .cluster import Cluster, replay
from .errors import (
    BypassError,
    CollectiveMismatch,
    ConfigError,
    Interrupted,
    OutsideSimulation,
    RankCannotStart,
    RankDied,
    RankError,
    RankKilled,
    RankOutOfMemory,
    SimfsError,
)
from .faults import CrashNode, CrashServer, EvictClient, InjectErrno, Pause, PowerLoss, SlowOps, SlowRank
from .plaindata import Foreign
from .profiles import Profile
from .report import CrashInfo, HangInfo, Result, ThreadError, TraceEvent
from .runtime.carrier.kept import zygote_kept
from .supervise import ChildFailed, Stalled, isolated

__all__ = [
    "BypassError",
    "ChildFailed",
    "ChoiceSource",
    "Cluster",
    "CollectiveMismatch",
    "ConfigError",
    "CrashInfo",
    "CrashNode",
    "CrashServer",
    "EvictClient",
    "Foreign",
    "HangInfo",
    "HypothesisChoices",
    "InjectErrno",
    "Interrupted",
    "OutsideSimulation",
    "Pause",
    "PowerLoss",
    "Profile",
    "RankCannotStart",
    "RankDied",
    "RankError",
    "RankKilled",
    "RankOutOfMemory",
    "RankOutput",
    "RankWarning",
    "ReplayChoices",
    "Result",
    "SeededChoices",
    "SimfsError",
    "SlowOps",
    "SlowRank",
    "Stalled",
    "ThreadError",
    "TraceEvent",
    "isolated",
    "profiles",
    "replay",
    "zygote_kept",
]
