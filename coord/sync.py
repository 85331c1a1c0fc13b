"""``sync_files``: leave every node's copy of some files exactly equal to the root's, sending
over torch.distributed only what differs (PARL's distributed_files, done right).

The root builds a manifest (relative path, size, mode, SHA-256) of the sources. Each node's
leader (local rank 0) compares it with its node-local destination; the files any node lacks
are streamed from the root to the node leaders in bounded chunks, small files batched, each
installed atomically once its hash checks out; stale files are removed. Every rank returns
only when every node's copy matches the manifest."""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from .atomic import unique_suffix
from .comm import Comm, get_comm
from .errors import CoordError

_HASH_BLOCK = 1 << 20
log = logging.getLogger("coord")


class Entry(NamedTuple):
    """One file of the manifest."""

    path: str  # relative, '/'-separated
    size: int
    mode: int
    sha256: str


@dataclass(frozen=True)
class SyncReport:
    """What a sync did. ``unchanged``/``removed`` are about this rank's node."""

    files: int
    sent: int
    unchanged: int
    removed: int
    bytes_sent: int
    nodes_updated: int


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _source_files(source: str) -> tuple[str, list[str]]:
    """(base directory, files) of one source: a file, a directory (recursively) or a glob."""
    if glob.has_magic(source):
        matches = sorted(p for p in glob.glob(source, recursive=True) if not os.path.isdir(p))
        if not matches:
            raise FileNotFoundError(f"sync_files: the pattern {source!r} matches no file")
        prefix = source[:min(i for i, c in enumerate(source) if c in "*?[")]
        return os.path.dirname(prefix) or ".", matches
    if os.path.isdir(source):
        files = []
        for top, dirs, names in os.walk(source, followlinks=False):
            dirs.sort()
            for name in sorted(names + [d for d in dirs if os.path.islink(os.path.join(top, d))]):
                files.append(os.path.join(top, name))
        return os.path.dirname(os.path.abspath(source).rstrip(os.sep)), files
    if os.path.lexists(source):
        return os.path.dirname(os.path.abspath(source)), [source]
    raise FileNotFoundError(f"sync_files: source {source!r} does not exist")


def build_manifest(sources: Iterable[str | os.PathLike[str]]) -> list[Entry]:
    """The manifest of ``sources``; relative paths are relative to each source's parent
    directory (a directory keeps its own name, a glob its matches' paths below the pattern's
    fixed prefix). Raises for missing or unreadable sources and for symbolic links that point
    outside their source."""
    return [entry for entry, _ in _scan(sources)]


def _scan(sources: Iterable[str | os.PathLike[str]]) -> list[tuple[Entry, str]]:
    """Manifest entries with the source path each came from, sorted by relative path."""
    entries: dict[str, tuple[Entry, str]] = {}
    for raw in sources:
        source = os.fspath(raw)
        base, files = _source_files(source)
        root = os.path.realpath(source if os.path.isdir(source) and not glob.has_magic(source) else base)
        for path in files:
            if os.path.islink(path):
                target = os.path.realpath(path)
                if os.path.commonpath([target, root]) != root:
                    raise ValueError(f"sync_files: {path} is a symbolic link to {target}, outside {root}")
                if os.path.isdir(target):
                    raise ValueError(f"sync_files: {path} is a symbolic link to a directory; list it as a source")
            rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base)).replace(os.sep, "/")
            if rel.startswith("../") or rel == "..":
                raise ValueError(f"sync_files: {path} is not below {base}")
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):  # checked first: reading a FIFO would block
                    raise ValueError(f"sync_files: {path} is not a regular file")
                digest = _digest(path)
            except OSError as exc:
                raise OSError(exc.errno, f"sync_files: cannot read source {path}: {exc.strerror}") from None
            entry = Entry(rel, st.st_size, stat.S_IMODE(st.st_mode), digest)
            if rel in entries and entries[rel][0] != entry:
                raise ValueError(f"sync_files: two sources give different files for {rel!r}")
            entries[rel] = (entry, path)
    return [entries[k] for k in sorted(entries)]


def _local_path(dest: str, rel: str) -> str:
    path = os.path.normpath(os.path.join(dest, *rel.split("/")))
    if os.path.commonpath([path, dest]) != dest:
        raise ValueError(f"sync_files: {rel!r} would escape the destination {dest}")
    return path


def _inside(dest: str, path: str) -> bool:
    """True if every directory between ``dest`` and ``path`` is a real directory (no symbolic
    link leads the copy elsewhere)."""
    current = dest
    for part in os.path.relpath(os.path.dirname(path), dest).split(os.sep):
        if part == ".":
            continue
        current = os.path.join(current, part)
        if os.path.islink(current) or not os.path.isdir(current):
            return False
    return True


def _clear_way(dest: str, path: str) -> None:
    """Make ``path`` installable: whatever stands in the way inside ``dest`` (a file or link
    where a directory belongs, a directory where the file belongs) is removed."""
    current = dest
    for part in os.path.relpath(os.path.dirname(path), dest).split(os.sep):
        if part == ".":
            continue
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.lexists(current) and not os.path.isdir(current)):
            os.unlink(current)
        if not os.path.exists(current):
            os.mkdir(current)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)


def _needed(dest: str, manifest: list[Entry]) -> tuple[list[int], int]:
    """Indices of manifest files this node lacks or has different; and how many match."""
    needed, same = [], 0
    for i, entry in enumerate(manifest):
        path = _local_path(dest, entry.path)
        try:
            st = os.lstat(path)
            matches = (stat.S_ISREG(st.st_mode) and st.st_size == entry.size and _inside(dest, path)
                       and _digest(path) == entry.sha256)
        except OSError:
            matches = False
        if matches:
            same += 1
            if stat.S_IMODE(st.st_mode) != entry.mode:
                os.chmod(path, entry.mode)
        else:
            needed.append(i)
    return needed, same


def _plan(manifest: list[Entry], files: list[int], chunk_size: int) -> Iterator[list[tuple[int, int, int]]]:
    """Batches of (file index, offset, length), each at most ``chunk_size`` bytes (an empty
    file is a zero-length piece)."""
    batch: list[tuple[int, int, int]] = []
    room = chunk_size
    for i in files:
        offset, size = 0, manifest[i].size
        while True:
            piece = min(size - offset, room)
            batch.append((i, offset, piece))
            offset += piece
            room -= piece
            if room == 0:
                yield batch
                batch, room = [], chunk_size
            if offset >= size:
                break
    if batch:
        yield batch


class _Receiver:
    """A node leader's half-written files, installed atomically once complete and verified
    (and, with ``durable``, fsynced before the rename)."""

    def __init__(self, dest: str, manifest: list[Entry], wanted: set[int], durable: bool) -> None:
        self.dest, self.manifest, self.wanted, self.durable = dest, manifest, wanted, durable
        self.open: dict[int, tuple[str, Any, Any]] = {}

    def take(self, index: int, offset: int, data: bytes) -> None:
        if index not in self.wanted:
            return
        entry = self.manifest[index]
        if offset == 0:
            final = _local_path(self.dest, entry.path)
            _clear_way(self.dest, final)
            tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.sync.{unique_suffix()}")
            self.open[index] = (tmp, open(tmp, "wb"), hashlib.sha256())  # noqa: SIM115 - closed by _install/abort
        tmp, f, digest = self.open[index]
        f.write(data)
        digest.update(data)
        if offset + len(data) == entry.size:
            self._install(index)

    def _install(self, index: int) -> None:
        entry = self.manifest[index]
        tmp, f, digest = self.open.pop(index)
        f.flush()
        if self.durable:
            os.fsync(f.fileno())
        f.close()
        if digest.hexdigest() != entry.sha256:
            os.unlink(tmp)
            raise CoordError(f"sync_files: {entry.path} arrived corrupted (hash mismatch)")
        os.chmod(tmp, entry.mode)
        os.replace(tmp, _local_path(self.dest, entry.path))

    def abort(self) -> None:
        for tmp, f, _ in self.open.values():
            f.close()
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        self.open.clear()


def _remove_stale(dest: str, manifest: list[Entry]) -> int:
    keep = {_local_path(dest, e.path) for e in manifest}
    keep_dirs = {os.path.dirname(p) for p in keep}
    removed = 0
    for top, _dirs, names in os.walk(dest, topdown=False):
        for name in names:
            path = os.path.join(top, name)
            if path not in keep:
                os.unlink(path)
                removed += 1
        if top != dest and not os.listdir(top) and not any(k == top or k.startswith(top + os.sep) for k in keep_dirs):
            os.rmdir(top)
    return removed


def _read_pieces(origin: list[str], batch: list[tuple[int, int, int]]) -> bytes:
    out = []
    for index, offset, length in batch:
        with open(origin[index], "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise CoordError(f"sync_files: {origin[index]} changed while being sent")
        out.append(data)
    return b"".join(out)


def _raise_everywhere(comm: Comm, error: str | None, what: str) -> None:
    errors = [e for e in comm.all_gather_object(error) if e]
    if errors:
        raise CoordError(f"sync_files failed {what}: {errors[0]}")


def sync_files(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], dest: str | os.PathLike[str], *,
               root: int = 0, comm: Comm | Any = None, delete: bool = True, chunk_size: int = 8 << 20,
               durable: bool = False) -> SyncReport:
    """Make every node's ``dest`` hold exactly the root's ``sources`` (see module doc). A
    collective: every rank calls it (``sources`` matters on the root only; ``dest`` is each
    node's own, usually node-local, directory). Files are installed by rename, so readers never
    see a partial file; ``durable`` also fsyncs each one first (without it, a crash can leave a
    file the next sync finds wrong by its hash and sends again)."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if chunk_size <= 0:
        raise ValueError(f"sync_files: chunk_size must be positive, got {chunk_size}")
    comm = get_comm(comm)
    dest = os.path.abspath(os.fspath(dest))
    leader = comm.local_rank == 0
    origin: list[str] = []
    manifest: list[Entry] | str = []
    if comm.rank == root:
        try:
            scanned = _scan(sources)
            manifest, origin = [e for e, _ in scanned], [p for _, p in scanned]
        except (OSError, ValueError) as exc:
            manifest = str(exc)
    manifest = comm.broadcast_object(manifest, root)
    if isinstance(manifest, str):
        raise CoordError(f"sync_files: the root could not list its sources: {manifest}")

    needed: list[int] = []
    unchanged = removed = 0
    error = None
    if leader:
        try:
            os.makedirs(dest, exist_ok=True)
            needed, unchanged = _needed(dest, manifest)
        except (OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
    status = comm.all_gather_object((leader, needed, error))
    errors = [e for _, _, e in status if e]
    if errors:
        raise CoordError(f"sync_files failed comparing a node's copy: {errors[0]}")
    union = sorted({i for is_leader, want, _ in status if is_leader for i in want})
    nodes_updated = sum(1 for is_leader, want, _ in status if is_leader and want)

    if union:
        members = sorted({root, *(r for r, (is_leader, want, _) in enumerate(status) if is_leader and want)})
        sub = comm.subgroup(members)
        if sub is not None:
            error = _transfer(sub, members.index(root), comm.rank == root, manifest, union,
                              _Receiver(dest, manifest, set(needed), durable), origin, chunk_size)
        _raise_everywhere(comm, error, "while sending files")

    if leader and delete:
        try:
            removed = _remove_stale(dest, manifest)
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
    if leader:
        missing = [e.path for e in manifest if not os.path.isfile(_local_path(dest, e.path))]
        if missing and error is None:
            error = f"{len(missing)} files missing after the sync, e.g. {missing[0]}"
    counts = comm.all_gather_object((comm.node, leader, unchanged, removed, error))
    errors = [e for *_, e in counts if e]
    if errors:
        raise CoordError(f"sync_files failed finishing a node's copy: {errors[0]}")
    mine = next(c for c in counts if c[0] == comm.node and c[1])
    report = SyncReport(files=len(manifest), sent=len(union), unchanged=mine[2], removed=mine[3],
                        bytes_sent=sum(manifest[i].size for i in union), nodes_updated=nodes_updated)
    log.debug("sync_files(%s) on rank %d: %s", dest, comm.rank, report)
    return report


def _transfer(sub: Comm, src: int, sending: bool, manifest: list[Entry], union: list[int], receiver: _Receiver,
              origin: list[str], chunk_size: int) -> str | None:
    """Stream the union of needed files from the root to the leaders that need them. Every
    batch is announced first, so a failure on the root stops everyone at the same point; a
    receiver that fails keeps receiving (the collectives must stay aligned) and reports after."""
    try:
        return _stream(sub, src, sending, manifest, union, receiver, origin, chunk_size)
    except BaseException:  # e.g. a peer died mid-stream: no half-written file stays behind
        receiver.abort()
        raise


def _stream(sub: Comm, src: int, sending: bool, manifest: list[Entry], union: list[int], receiver: _Receiver,
            origin: list[str], chunk_size: int) -> str | None:
    error: str | None = None
    announce: str | None
    for batch in _plan(manifest, union, chunk_size):
        payload, announce = None, None
        if sending:
            try:
                payload = _read_pieces(origin, batch)
            except (OSError, CoordError) as exc:
                announce = f"the root could not read a source: {exc}"
        announce = sub.broadcast_object(announce, src)
        if announce is not None:
            receiver.abort()
            return announce
        data = sub.broadcast_bytes(payload, src)
        if error is not None:
            continue
        try:
            at = 0
            for index, offset, length in batch:
                receiver.take(index, offset, data[at:at + length])
                at += length
        except (OSError, CoordError) as exc:
            receiver.abort()
            error = f"{type(exc).__name__}: {exc}"
    return error
