"""(k) Replacing a config or tracker file by writing a temporary one and renaming it over the old,
without fsync: the pattern ext4's ``auto_da_alloc`` was made for. On ext4 (data=ordered) the
renamed file's data reaches the disk before the rename commits, so a crash leaves the old
content or the new; a filesystem that promises only what fsync does (``local-posix``: btrfs-like
logging, other kernels) may commit the rename first and leave an empty or torn file. NFS and the
object store make the data durable at close, before the rename; Lustre commits the rename on the
metadata server while unsynced data can die with its client. coord.atomic_write fsyncs the file
before the rename and the directory after it: correct on every model."""

from __future__ import annotations

import os

import torch.distributed as dist

import coord

from ._common import CRASH_PROFILES, BrokenCheckpoint, content, read_file, scenario

FAMILY = "replace"
CONF = "/shared/conf/settings"
READY = "/shared/conf/ready"  # made once the first version is durable
VERSIONS = (1, 2, 3)
SIZE = 6000  # more than a 4 KiB block: a crash can tear it


def _version(v: int) -> bytes:
    return content(f"settings v{v}", SIZE)


def _first_version() -> None:
    """Version 0, durably, then the marker that says so (rank 0)."""
    os.makedirs(os.path.dirname(CONF), exist_ok=True)
    coord.fsync_dir("/shared")
    with coord.atomic_write(CONF, "wb") as f:
        f.write(_version(0))
    with open(READY, "wb"):
        pass


def _replace_in_place_of(v: int) -> None:
    tmp = f"{CONF}.tmp"
    with open(tmp, "wb") as f:
        f.write(_version(v))
    os.replace(tmp, CONF)


def _replace_atomically(v: int) -> None:
    with coord.atomic_write(CONF, "wb") as f:
        f.write(_version(v))


def settings_whole() -> int:
    """The restarted job: once version 0 was durable, the file holds one version, whole."""
    if not os.path.exists(READY):
        return -1
    data = read_file(CONF)
    for v in (0, *VERSIONS):
        if data == _version(v):
            return v
    raise BrokenCheckpoint(f"{CONF} holds {len(data)} bytes that are no version of it (empty or torn by the crash)")


def _run(replace: object) -> None:
    if dist.get_rank() == 0:
        _first_version()
        for v in VERSIONS:
            replace(v)  # type: ignore[operator]
    dist.barrier()


@scenario("replace-by-rename-unsynced", recover=settings_whole, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=150, expect={"local": "pass", "local-posix": "fail", "nfs": "pass", "lustre": "fail",
                                    "objectstore": "pass"}, family=FAMILY, tags=("naive",))
def replace_by_rename_unsynced() -> None:
    """Write settings.tmp without fsync and rename it over settings (safe on ext4 only by auto_da_alloc).

    ext4 pushes the temporary file's data out before the rename commits (auto_da_alloc); under
    strict POSIX the rename may persist without the data, and on Lustre the rename is committed
    by the metadata server while the data can die with the client."""
    _run(_replace_in_place_of)


@scenario("replace-by-rename-fsynced", recover=settings_whole, crashes=True, nodes=2, ranks_per_node=1,
          max_examples=150, expect=dict.fromkeys(CRASH_PROFILES, "pass"), family=FAMILY, tags=("fixed",))
def replace_by_rename_fsynced() -> None:
    """Replace settings with coord.atomic_write: fsync the temporary file, rename, fsync the directory.

    The data is durable before the rename can be, on every persistence model."""
    _run(_replace_atomically)
