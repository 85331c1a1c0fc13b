"""checkpoint: crash-consistent, checksummed, resharding sharded checkpoints.

``save(state_dict, path)`` and ``load(state_dict, path)`` are collectives over
``coord.get_comm()``; ``verify(path)`` checks every byte. Production code: plain os/open and
torch.distributed, no simulator."""

from .async_saver import SaveFuture, async_save
from .dcp_compat import DcpCheckpointWarning
from .errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpoint,
    LayoutError,
    LoadError,
    ManifestError,
    RanksFailed,
    SaveError,
    StateDictError,
)
from .files import MANIFEST_NAME, is_committed, read_manifest
from .layout import Broadcast, Placement, Sharded, Split
from .loader import load
from .manager import CheckpointManager
from .manifest import Manifest
from .read import ReadStats
from .saver import save, save_staged
from .staging import Staged, stage
from .verifier import VerifyReport, verify

__all__ = [
    "MANIFEST_NAME", "Broadcast", "CheckpointError", "CheckpointNotFound", "CorruptCheckpoint", "DcpCheckpointWarning",
    "LayoutError",
    "LoadError", "Manifest", "ManifestError", "Placement", "RanksFailed", "ReadStats", "SaveError", "Sharded", "Split",
    "Staged", "StateDictError", "VerifyReport", "is_committed", "load", "read_manifest", "save", "save_staged",
    "stage", "verify",
]
__all__ += ["CheckpointManager", "SaveFuture", "async_save"]
