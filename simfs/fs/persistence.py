"""Persistence models: what a crash can keep of what a filesystem acknowledged but did not make
durable, per filesystem, each rule with its source. The journal (journal.py) applies one.

- ``posix``: only what fsync(2) promises. An fsync of a file makes its data durable, an fsync of
  a directory its entries; nothing orders the rest. ALICE's abstract persistence model (Pillai et
  al., "All File Systems Are Not Created Equal", OSDI'14), bounded: unsynced operations persist
  as a prefix with at most one omitted, the last write torn at the sector size.
- ``ext4``: ext4 in its default ``data=ordered`` mode with ``auto_da_alloc``. Metadata operations
  (names, creations, truncations) are logged by jbd2 in transactions that commit in order, so a
  crash keeps a prefix of them; an fsync or fdatasync of anything commits the running
  transaction, so every earlier metadata operation is durable when it returns. File data is
  written back on its own (delayed allocation): unsynced writes may be lost, torn at 4 KiB or
  land after later metadata, but a file never shows bytes it was not given (ordered mode writes a
  block's data before committing the metadata that points to it). ``auto_da_alloc``: a rename
  over an existing file, and the close of a file truncated to zero, push that file's pending data
  ahead of every later metadata operation.
- ``xfs``: XFS's metadata log is ordered the same way and an fsync forces it, but XFS has no
  replace-by-rename heuristic; its flush on the close of a truncated file only starts writeback,
  which orders nothing. So: ``ext4`` without ``auto_da_alloc``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Persistence:
    """One model: whether metadata persists in order (and any fsync commits all of it), whether
    replace-by-rename and replace-by-truncate order a file's data before later metadata, and the
    rules in words with their sources (``simfs profiles NAME`` prints them)."""

    name: str
    ordered_metadata: bool
    auto_da_alloc: bool
    rules: tuple[tuple[str, str], ...]


_ALICE = "ALICE (Pillai et al., 'All File Systems Are Not Created Equal', OSDI'14), its abstract persistence model"
_EXT4_DOC = "Documentation/admin-guide/ext4.rst"

MODELS: dict[str, Persistence] = {
    "posix": Persistence("posix", ordered_metadata=False, auto_da_alloc=False, rules=(
        ("fsync of a file makes its data durable; nothing else does", "fsync(2)"),
        ("a new, renamed or removed name is durable only after an fsync of its directory",
         "fsync(2): 'Calling fsync() does not necessarily ensure that the entry in the directory containing the "
         "file has also reached disk. For that an explicit fsync() on a file descriptor for the directory is "
         "also needed.'"),
        ("unsynced operations persist as a prefix with at most one omitted; the last write may tear at the "
         "sector size", _ALICE + ", bounded to keep the states enumerable"),
    )),
    "ext4": Persistence("ext4", ordered_metadata=True, auto_da_alloc=True, rules=(
        ("metadata operations (names, creations, truncations) persist in order: a crash keeps a prefix of them",
         _EXT4_DOC + " data=ordered ('All data are forced directly out to the main file system prior to its "
         "metadata being committed to the journal'); jbd2 commits transactions in order (fs/jbd2/commit.c)"),
        ("an fsync or fdatasync of any file or directory makes every earlier metadata operation durable",
         "fs/ext4/fsync.c ext4_sync_file -> jbd2_complete_transaction: the running transaction, which holds "
         "every earlier metadata change of the filesystem, commits"),
        ("unsynced file data may be lost, torn at 4 KiB or land after later metadata, never as bytes it was "
         "not given", _EXT4_DOC + " delalloc (blocks are allocated at writeback) with data=ordered; ALICE "
         "OSDI'14 Table 1, ext4-ordered: appends and overwrites are not ordered before later operations"),
        ("a rename over an existing file, and the close of a file truncated to zero, make that file's pending "
         "data persist before any later metadata operation",
         _EXT4_DOC + " auto_da_alloc: 'ext4 will detect the replace-via-rename and replace-via-truncate patterns "
         "and force that any delayed allocation blocks are allocated such that at the next journal commit ... "
         "the data blocks of the new file are forced to disk before the rename() operation is committed' "
         "(fs/ext4/namei.c ext4_rename, fs/ext4/file.c ext4_release_file -> ext4_alloc_da_blocks)"),
    )),
    "xfs": Persistence("xfs", ordered_metadata=True, auto_da_alloc=False, rules=(
        ("metadata operations persist in order: a crash keeps a prefix of them",
         "XFS's log is written and recovered in order (Documentation/filesystems/xfs/xfs-delayed-logging-"
         "design.rst: checkpoints are committed to the log in sequence)"),
        ("an fsync or fdatasync of any file or directory makes every earlier metadata operation durable",
         "fs/xfs/xfs_file.c xfs_file_fsync -> xfs_log_force_seq: forcing the log writes every earlier "
         "checkpoint"),
        ("unsynced file data may be lost, torn at 4 KiB or land after later metadata; a rename over an "
         "existing file does not order it",
         "XFS delayed allocation; XFS has no replace-via-rename heuristic (its flush on the close of a "
         "truncated file, xfs_release, only starts writeback); ALICE OSDI'14 Table 1, xfs"),
    )),
}


def get(name: str) -> Persistence:
    return MODELS[name]
