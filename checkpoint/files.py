"""The files of a checkpoint directory: names, the manifest, and opening data files safely (only
plain names inside the directory, never through a symlink, size checked against the manifest)."""

from __future__ import annotations

import contextlib
import os
import re
from typing import BinaryIO

from coord import revalidate

from .errors import CheckpointNotFound, CorruptCheckpoint
from .manifest import FileEntry, Manifest, decode, is_safe_name

MANIFEST_NAME = "manifest.json"
DEFAULT_THREADS = max(1, min(4, os.cpu_count() or 1))  # threads a rank reads or writes its files with
_DATA = re.compile(r"(?P<save>[0-9a-f]+)-r(?P<rank>[0-9]+)-(?P<index>[0-9]+)\.bin")
_MANIFEST_TMP = re.compile(rf"\.{re.escape(MANIFEST_NAME)}\.tmp\..+")


def data_name(save_id: str, rank: int, index: int) -> str:
    return f"{save_id}-r{rank}-{index}.bin"


def is_ours(name: str, save_id: str | None = None, rank: int | None = None) -> bool:
    """Is ``name`` a data file or a manifest temporary file that a save here wrote (of that save
    and rank, if given)?"""
    match = _DATA.fullmatch(name)
    if match is None:
        return save_id is None and rank is None and _MANIFEST_TMP.fullmatch(name) is not None
    return (save_id is None or match["save"] == save_id) and (rank is None or int(match["rank"]) == rank)


def is_committed(path: str | os.PathLike[str]) -> bool:
    """Is there a committed checkpoint at ``path`` (its manifest exists)?"""
    return os.path.isfile(os.path.join(os.fspath(path), MANIFEST_NAME))


def read_manifest_bytes(path: str) -> bytes:
    """The manifest's bytes; CheckpointNotFound if there is none (a 'not found' a network
    filesystem cached is asked again first)."""
    target = os.path.join(path, MANIFEST_NAME)
    for attempt in range(2):
        try:
            with open(target, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if attempt == 0:
                revalidate(target)
    raise CheckpointNotFound(f"no committed checkpoint at {path}: {MANIFEST_NAME} is missing (never saved, or "
                             "the save failed or crashed before its commit)")


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The validated manifest of the checkpoint at ``path``."""
    directory = os.fspath(path)
    return decode(read_manifest_bytes(directory), os.path.join(directory, MANIFEST_NAME))


def open_data(directory: str, name: str, entry: FileEntry) -> BinaryIO:
    """Open a data file the manifest lists for reading; CorruptCheckpoint if it is missing or its
    size differs from the manifest's."""
    if not is_safe_name(name):  # validated with the manifest; checked again at the only open
        raise CorruptCheckpoint(f"{directory}: refusing to open {name!r}, not a plain name inside the directory")
    path = os.path.join(directory, name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{directory}: data file {name} listed in the manifest is missing") from None
    except OSError as exc:
        raise CorruptCheckpoint(f"{directory}: cannot open data file {name}: {exc}") from None
    f = os.fdopen(fd, "rb", buffering=0)
    size = os.fstat(fd).st_size
    if size != entry.size:
        f.close()
        raise CorruptCheckpoint(f"{directory}: data file {name} is {size} bytes, the manifest says {entry.size} "
                                "(truncated or modified)")
    return f


def read_into(f: BinaryIO, offset: int, view: memoryview) -> None:
    """Fill ``view`` from ``offset`` of ``f`` (the size was checked, so short reads are errors)."""
    f.seek(offset)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])  # type: ignore[attr-defined]
        if not n:
            raise CorruptCheckpoint(f"{getattr(f, 'name', f)}: ended at byte {offset + done} while reading")
        done += n


def remove_quietly(directory: str, names: list[str]) -> None:
    """Remove files that no manifest references (missing ones are fine)."""
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
