"""How a mount makes, removes and renames names and uploads data, chosen by its profile: a
POSIX-like server (NFS, Lustre, a local disk) or an object store behind FUSE (gcsfuse, s3fs)."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..profiles import Profile
from .attrcache import AttrCache
from .dentries import DentryCache
from .inode import DIR, Attr, fs_error
from .server import Server
from .writeback import DirtyFile

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

_C_contra = TypeVar("_C_contra", contravariant=True)


class _Peers(Protocol[_C_contra]):
    def interleave(self) -> None: ...
    def mark_dirty(self, ino: int, client: _C_contra) -> None: ...


class Client(Protocol):
    """What a strategy uses of the node client it works for."""

    server: Server
    profile: Profile
    attrs: AttrCache
    dentries: DentryCache
    dirty: dict[int, DirtyFile]
    pending_create: dict[int, tuple[int, str]]
    opens: dict[int, int]
    clock: Callable[[], float]

    @property
    def peers(self) -> _Peers[Self]: ...  # the mount's, which takes this very client back

    def rpc(self, nbytes: int = 0) -> None: ...
    def local(self) -> None: ...
    def lookup(self, dir_ino: int, name: str) -> int: ...
    def getattr(self, ino: int, *, force: bool = False) -> Attr: ...
    def failed_create(self, dir_ino: int, name: str, exc: OSError) -> None: ...
    def silly_rename(self, dir_ino: int, name: str, ino: int) -> None: ...
    def flush(self, ino: int) -> None: ...
    def sent(self, ino: int, kind: str, offset: int, data: bytes) -> None: ...


class ServerCreate:
    """CREATE on the server; without exclusive-create support (``racy``), O_EXCL is a lookup
    then a create in a second request, and another node can create the name in between."""

    def __init__(self, racy: bool) -> None:
        self.racy = racy

    def create(self, c: Client, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool]:
        if exclusive and self.racy:
            try:
                c.lookup(dir_ino, name)
            except FileNotFoundError:
                c.peers.interleave()
                exclusive = False
            else:
                raise fs_error(errno.EEXIST)
        c.rpc()
        try:
            ino, created, change = c.server.create(dir_ino, name, mode, exclusive)
        except OSError as exc:
            c.failed_create(dir_ino, name, exc)
            raise
        c.attrs.after_change(change)
        c.dentries.put(dir_ino, name, ino)
        return ino, created


class DeferredCreate:
    """Object stores: a new object exists only on the creating node until it is closed."""

    def create(self, c: Client, dir_ino: int, name: str, mode: int, exclusive: bool) -> tuple[int, bool]:
        try:
            existing = c.lookup(dir_ino, name)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if exclusive:
                raise fs_error(errno.EEXIST)
            return existing, False
        c.local()
        ino = c.server.alloc(mode)
        c.pending_create[ino] = (dir_ino, name)
        c.dirty[ino] = DirtyFile(0, b"")
        c.dentries.entries.setdefault(dir_ino, {})[name] = (ino, c.clock())
        return ino, True


class ServerRename:
    """RENAME and RMDIR are single atomic server requests; a busy target of this node is
    silly-renamed first where the profile says so (NFS)."""

    def rename(self, c: Client, src_dir: int, src_name: str, dst_dir: int, dst_name: str, ino: int) -> None:
        if c.profile.silly_rename:
            try:
                target = c.lookup(dst_dir, dst_name)
            except FileNotFoundError:
                target = None
            if target is not None and target != ino and c.opens.get(target):
                c.silly_rename(dst_dir, dst_name, target)  # a busy target survives, hidden
        c.rpc()
        _, schange, dchange = c.server.rename(src_dir, src_name, dst_dir, dst_name)
        c.attrs.after_change(schange)
        c.attrs.after_change(dchange)
        c.dentries.put(src_dir, src_name, None)
        c.dentries.put(dst_dir, dst_name, ino)
        c.attrs.forget(ino)

    def rmdir(self, c: Client, dir_ino: int, name: str, ino: int) -> None:
        c.rpc()
        _, change = c.server.rmdir(dir_ino, name)
        c.attrs.after_change(change)


class CopyDelete:
    """Object stores: rename is a server-side copy then a delete (others and crashes fit in
    between); directories are prefixes, so rmdir lists, then deletes the marker. A directory
    with entries cannot be renamed unless ``dir_rename`` (gcsfuse rename-dir-limit=0: EMFILE,
    'too many objects to be renamed'); an empty one is renamed as one marker object."""

    def rename(self, c: Client, src_dir: int, src_name: str, dst_dir: int, dst_name: str, ino: int) -> None:
        if c.getattr(ino).kind == DIR:
            c.rpc()
            if c.server.readdir(ino) and not c.profile.dir_rename:
                raise OSError(errno.EMFILE, "Too many open files (too many objects to be renamed)")
            ServerRename().rename(c, src_dir, src_name, dst_dir, dst_name, ino)
            return
        c.rpc(c.getattr(ino).size)
        new_ino, change = c.server.copy(src_dir, src_name, dst_dir, dst_name)
        c.attrs.after_change(change)
        c.dentries.put(dst_dir, dst_name, new_ino)
        c.peers.interleave()
        c.rpc()
        _, change = c.server.unlink(src_dir, src_name)
        c.attrs.after_change(change)
        c.dentries.put(src_dir, src_name, None)

    def rmdir(self, c: Client, dir_ino: int, name: str, ino: int) -> None:
        c.rpc()
        if c.server.readdir(ino):
            raise fs_error(errno.ENOTEMPTY)
        c.peers.interleave()
        c.rpc()
        _, change = c.server.rmdir(dir_ino, name, orphan_children=True)
        c.attrs.after_change(change)


class ExtentUpload:
    """Dirty bytes go to the server as the extents written."""

    whole = False

    def dirty_base(self, c: Client, ino: int) -> bytes | None:
        return None

    def send(self, c: Client, ino: int, dirty: DirtyFile, pending: tuple[int, str] | None = None) -> None:
        """WRITE requests; one that does not fit is written as far as it fits, then ENOSPC (what
        was sent before stays on the server)."""
        c.rpc(dirty.nbytes())
        attr = None
        for extent in dirty.extents.items:
            for offset, data in extent.pieces():
                fit = c.server.room(ino, offset, len(data))
                if fit < len(data):
                    if fit:
                        c.server.write(ino, offset, data[:fit])
                        c.sent(ino, "write", offset, data[:fit])
                    raise fs_error(errno.ENOSPC)
                attr = c.server.write(ino, offset, data)
                c.sent(ino, "write", offset, data)
        if dirty.size > (attr.size if attr else c.server.getattr(ino).size):
            attr = c.server.truncate(ino, dirty.size)
            c.sent(ino, "truncate", dirty.size, b"")
        if attr is not None:
            c.attrs.store(attr, changed_by_us=True)

    def truncate(self, c: Client, ino: int, size: int) -> None:
        c.flush(ino)
        c.rpc()
        c.attrs.store(c.server.truncate(ino, size), changed_by_us=True)
        c.sent(ino, "truncate", size, b"")


class WholeUpload:
    """Object stores: a node edits its own copy of the object; close uploads all of it as a new
    generation, on the condition that the object is still the generation this node opened (or,
    for a new object, that none exists yet): the first flush wins and a later one gets ESTALE
    (gcsfuse docs/semantics.md; file-system.precondition-errors defaults to true)."""

    whole = True

    def dirty_base(self, c: Client, ino: int) -> bytes | None:
        base = c.server.content(ino)
        c.rpc(len(base))
        return base

    def send(self, c: Client, ino: int, dirty: DirtyFile, pending: tuple[int, str] | None = None) -> None:
        c.rpc()
        if pending is not None:
            if c.server.lookup(*pending) is not None:
                raise fs_error(errno.ESTALE)  # another node uploaded this name first
        elif dirty.generation is not None and c.server.getattr(ino).change != dirty.generation:
            raise fs_error(errno.ESTALE)  # the object changed since this node opened it
        content = dirty.content()
        c.rpc(len(content))
        attr = c.server.replace_content(ino, content)
        c.sent(ino, "truncate", 0, b"")
        c.sent(ino, "write", 0, content)
        c.attrs.store(attr, changed_by_us=True)

    def truncate(self, c: Client, ino: int, size: int) -> None:
        dirty = c.dirty.get(ino)
        if dirty is not None:
            content = dirty.content()
        elif size == 0:
            content = b""
        else:
            content = c.server.content(ino)
            c.rpc(len(content))
        generation = dirty.generation if dirty is not None else c.getattr(ino).change
        c.dirty[ino] = DirtyFile(size, content[:size] + bytes(max(0, size - len(content))), generation)
        c.peers.mark_dirty(ino, c)


class Strategy:
    """The per-mount choices, made once from the profile."""

    def __init__(self, profile: Profile) -> None:
        self.creation: ServerCreate | DeferredCreate = (
            DeferredCreate() if profile.create_visible == "close" else ServerCreate(profile.exclusive_create == "racy"))
        self.renaming: ServerRename | CopyDelete = CopyDelete() if profile.rename == "copy_delete" else ServerRename()
        self.upload: ExtentUpload | WholeUpload = WholeUpload() if profile.upload == "whole" else ExtentUpload()
